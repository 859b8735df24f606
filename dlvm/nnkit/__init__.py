"""NNKit for Python: functions over tensors, written in Python, staged into DLVM IR,
differentiated and compiled (the DLVM paper's embedded DSL; dlvm.nnkit.staging).

    import dlvm
    from dlvm.nnkit import Tensor, f32, tanh

    @dlvm.stage
    def layer(x: Tensor[f32, 1, 784], w: Tensor[f32, 784, 10], b: Tensor[f32, 1, 10]):
        return tanh(x @ w + b)

    layer(x, w, b)                                  # NumPy arrays in, a NumPy array out
    grad = dlvm.gradient(layer, wrt=(1, 2))         # d layer / d w, d layer / d b
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from dlvm.nnkit.builtins import (
    cos,
    dot,
    exp,
    log,
    max,
    maximum,
    mean,
    minimum,
    relu,
    sigmoid,
    sin,
    softmax,
    sqrt,
    sum,
    tanh,
    transpose,
)
from dlvm.nnkit.control import cond, loop
from dlvm.nnkit.external import functions
from dlvm.nnkit.jit import Compiled, wait_optimised
from dlvm.nnkit.staging import Gradient, Staged
from dlvm.nnkit.tensor import (
    StagingError,
    TensorSpec,
    bf16,
    bool_,
    f16,
    f32,
    f64,
    i8,
    i16,
    i32,
    i64,
)

if TYPE_CHECKING:
    # To a static type checker `Tensor[f32, 1, 784]` is `Annotated[f32, 1, 784]`: the type f32
    # (a staged tensor of 32-bit floats, whose operators keep f32) with its shape as metadata,
    # which only staging checks. At run time it is the TensorSpec that staging reads.
    from typing import Annotated as Tensor
else:
    from dlvm.nnkit.tensor import Tensor


def stage(fn: Callable[..., Any]) -> Staged:
    """Stages `fn` (a function of tensors) into DLVM IR on its first call per signature of
    shapes and element types, and compiles it; calls of it from another staged function are
    IR calls."""
    return Staged(fn)


function = stage


def gradient(
    of: Staged,
    wrt: Sequence[int] | None = None,
    seedable: bool = False,
    keeping: Sequence[int] = (),
    from_: int | None = None,
) -> Gradient:
    """The gradient of staged function `of` as the IR declares one (`[gradient @of from S wrt
    … keeping … seedable]`): of its result `from_` (for a function returning a tuple), with
    respect to the arguments `wrt` (all by default), returning also the results `keeping`, and
    taking a seed (the derivative of a caller's result with respect to `of`'s) as its last
    argument when `seedable`. It returns a tuple: the derivatives, then the kept results."""
    if not isinstance(of, Staged):
        raise TypeError(f"gradient() needs a staged function (@dlvm.stage), got {of!r}")
    return Gradient(of, wrt, seedable, keeping, from_)


__all__ = [
    "Compiled", "Gradient", "Staged", "StagingError", "Tensor", "TensorSpec", "bf16", "bool_",
    "cond",
    "cos", "functions", "loop",
    "dot", "exp", "f16", "f32", "f64", "function", "gradient", "i8", "i16", "i32", "i64", "log",
    "max", "maximum", "mean", "minimum", "relu", "sigmoid", "sin", "softmax", "sqrt", "stage",
    "sum", "tanh", "transpose", "wait_optimised",
]  # fmt: skip
