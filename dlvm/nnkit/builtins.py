"""The built-in functions of staged code, named as in TEL (docs/tel.md): elementwise functions,
reductions, products and shapes of staged tensors (dlvm.nnkit.tensor)."""

from __future__ import annotations

from typing import Any

from dlvm.nnkit.tensor import Tensor, staging_error


def _tensor(x: Any, what: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise staging_error(f"{what}: expected a staged tensor, got {type(x).__name__}")
    return x


def _unary(op: str):
    def fn(x: Tensor) -> Tensor:
        return _tensor(x, op).emit(op, x)

    fn.__name__ = op
    fn.__doc__ = f"`{op}` of every element."
    return fn


tanh = _unary("tanh")
exp = _unary("exp")
log = _unary("log")
sqrt = _unary("sqrt")
sin = _unary("sin")
cos = _unary("cos")


def sigmoid(x: Tensor) -> Tensor:
    """1 / (1 + e^-x), as 0.5·tanh(0.5·x) + 0.5 (no overflow for any x)."""
    return _tensor(x, "sigmoid").emit("tanh", x * 0.5) * 0.5 + 0.5


def relu(x: Tensor) -> Tensor:
    """max(x, 0) elementwise."""
    return _tensor(x, "relu").emit("max", x, 0)


def maximum(x: Tensor, y: Any) -> Tensor:
    return _tensor(x, "maximum").emit("max", x, y)


def minimum(x: Tensor, y: Any) -> Tensor:
    return _tensor(x, "minimum").emit("min", x, y)


def dot(x: Tensor, y: Tensor) -> Tensor:
    """The matrix product x • y."""
    return _tensor(x, "dot").emit("dot", x, y)


def transpose(x: Tensor) -> Tensor:
    return _tensor(x, "transpose").emit("transpose", x)


def _reduce(x: Tensor, comb: str, init: float, axes: tuple[int, ...] | int | None,
            keep: bool) -> Tensor:  # fmt: skip
    t = _tensor(x, comb)
    dims = (
        tuple(range(len(t.shape))) if axes is None else (axes,) if isinstance(axes, int) else axes
    )
    r = t.emit("reduce", t, init, comb=comb, dims=tuple(sorted(dims)))
    if keep:
        for d in sorted(dims):
            r = r.emit("padShape", r, index=d)
    return r


def sum(x: Tensor, axes: tuple[int, ...] | int | None = None, keep: bool = False) -> Tensor:  # noqa: A001
    """The sum over `axes` (all by default); `keep` keeps them as dimensions of 1."""
    return _reduce(x, "add", 0.0, axes, keep)


def max(x: Tensor, axes: tuple[int, ...] | int | None = None, keep: bool = False) -> Tensor:  # noqa: A001
    return _reduce(x, "max", float("-inf"), axes, keep)


def mean(x: Tensor, axes: tuple[int, ...] | int | None = None, keep: bool = False) -> Tensor:
    t = _tensor(x, "mean")
    dims = range(len(t.shape)) if axes is None else (axes,) if isinstance(axes, int) else axes
    count = 1
    for d in dims:
        count *= t.shape[d]
    return sum(t, axes, keep) / float(count)


def softmax(x: Tensor) -> Tensor:
    """exp(x - max) / sum(exp(x - max)) along the last axis."""
    t = _tensor(x, "softmax")
    last = len(t.shape) - 1
    e = exp(t - max(t, last, keep=True))
    return e / sum(e, last, keep=True)
