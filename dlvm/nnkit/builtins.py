"""The built-in functions of staged code, named as in TEL (docs/tel.md): elementwise functions,
reductions, products and shapes of staged tensors (dlvm.nnkit.tensor)."""

from __future__ import annotations

from typing import Protocol, TypeVar

from dlvm.nnkit.tensor import Tensor, staging_error

# Each built-in gives a tensor of its argument's element type: a static type checker sees `T`.
T = TypeVar("T", bound=Tensor)


class Elementwise(Protocol):
    def __call__(self, x: T, /) -> T: ...


def _tensor(x: T, what: str) -> T:
    if not isinstance(x, Tensor):
        raise staging_error(f"{what}: expected a staged tensor, got {type(x).__name__}")
    return x


def _unary(op: str) -> Elementwise:
    def fn(x: T) -> T:
        return _tensor(x, op).same(op, x)

    fn.__name__ = op
    fn.__doc__ = f"`{op}` of every element."
    return fn


tanh = _unary("tanh")
exp = _unary("exp")
log = _unary("log")
sqrt = _unary("sqrt")
sin = _unary("sin")
cos = _unary("cos")


def sigmoid(x: T) -> T:
    """1 / (1 + e^-x), as 0.5·tanh(0.5·x) + 0.5 (no overflow for any x)."""
    return _tensor(x, "sigmoid").same("tanh", x * 0.5) * 0.5 + 0.5


def relu(x: T) -> T:
    """max(x, 0) elementwise."""
    return _tensor(x, "relu").same("max", x, 0)


def maximum(x: T, y: T | float) -> T:
    return _tensor(x, "maximum").same("max", x, y)


def minimum(x: T, y: T | float) -> T:
    return _tensor(x, "minimum").same("min", x, y)


def dot(x: T, y: T) -> T:
    """The matrix product x • y."""
    return _tensor(x, "dot").same("dot", x, y)


def transpose(x: T) -> T:
    return _tensor(x, "transpose").same("transpose", x)


def _reduce(x: T, comb: str, init: float, axes: tuple[int, ...] | int | None, keep: bool) -> T:
    t = _tensor(x, comb)
    dims = (
        tuple(range(len(t.shape))) if axes is None else (axes,) if isinstance(axes, int) else axes
    )
    r = t.same("reduce", t, init, comb=comb, dims=tuple(sorted(dims)))
    if keep:
        for d in sorted(dims):
            r = r.same("padShape", r, index=d)
    return r


def sum(x: T, axes: tuple[int, ...] | int | None = None, keep: bool = False) -> T:  # noqa: A001
    """The sum over `axes` (all by default); `keep` keeps them as dimensions of 1."""
    return _reduce(x, "add", 0.0, axes, keep)


def max(x: T, axes: tuple[int, ...] | int | None = None, keep: bool = False) -> T:  # noqa: A001
    return _reduce(x, "max", float("-inf"), axes, keep)


def mean(x: T, axes: tuple[int, ...] | int | None = None, keep: bool = False) -> T:
    t = _tensor(x, "mean")
    dims = range(len(t.shape)) if axes is None else (axes,) if isinstance(axes, int) else axes
    count = 1
    for d in dims:
        count *= t.shape[d]
    return sum(t, axes, keep) / float(count)


def softmax(x: T) -> T:
    """exp(x - max) / sum(exp(x - max)) along the last axis."""
    t = _tensor(x, "softmax")
    last = len(t.shape) - 1
    e = exp(t - max(t, last, keep=True))
    return e / sum(e, last, keep=True)
