"""Adjoint rules: how the gradient flows back through each differentiable instruction.

A rule is declared with its instruction in ops.py (`adjoint=`). It receives an emitter `e` (see
dlvm.transforms.differentiation.emitter), the primal instruction and `d`, the adjoint of its
result, and returns `(operand, contribution)` pairs: the gradient each operand receives, at the
instruction's result shape for elementwise operations (the differentiation pass un-broadcasts
it to the operand's shape and accumulates it). A rule reads primal values only through
`e.primal(value)`, which makes them available where the adjoint code runs. An empty list means
the derivative is zero (`floor`, `sign`…). `AdjointError` says why a derivative does not exist.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cached_property
from typing import Any

from dlvm.ir.types import TensorType, canonical
from dlvm.ir.values import ElementKey, Instruction, LiteralValue, Value


class AdjointError(Exception):
    """The instruction has no derivative in this use; the message says why."""


Pairs = list[tuple[Value, Value]]
AdjointRule = Callable[[Any, Instruction, Value], Pairs]


def _x(inst: Instruction) -> Value:
    return inst.operands[0]


# Unary elementwise: d · f'(x) -----------------------------------------------------------------


class Primals:
    """The primal operands `x`, `y` and result `f` of an instruction, fetched through
    `e.primal` only when a rule reads them (the reverse sweep may have to record each one)."""

    def __init__(self, e: Any, inst: Instruction) -> None:
        self._e, self._inst = e, inst

    @cached_property
    def x(self) -> Value:
        return self._e.primal(self._inst.operands[0])

    @cached_property
    def y(self) -> Value:
        return self._e.primal(self._inst.operands[1])

    @cached_property
    def f(self) -> Value:
        return self._e.primal(self._inst)


def _unary(derivative: Callable[[Any, Value, Primals], Value]) -> AdjointRule:
    """A rule from `derivative(e, d, p)`: the contribution to the only operand."""

    def rule(e: Any, inst: Instruction, d: Value) -> Pairs:
        return [(_x(inst), derivative(e, d, Primals(e, inst)))]

    return rule


def _one_minus(e: Any, v: Value) -> Value:
    return e.op("subtract", e.scalar(1, v), v)


def _one_plus(e: Any, v: Value) -> Value:
    return e.op("add", e.scalar(1, v), v)


def _sq(e: Any, v: Value) -> Value:
    return e.op("multiply", v, v)


UNARY: dict[str, AdjointRule] = {
    "negate": _unary(lambda e, d, p: e.op("negate", d)),
    "log": _unary(lambda e, d, p: e.op("divide", d, p.x)),
    "exp": _unary(lambda e, d, p: e.op("multiply", d, p.f)),
    "tanh": _unary(lambda e, d, p: e.op("multiply", d, _one_minus(e, _sq(e, p.f)))),
    "sqrt": _unary(lambda e, d, p: e.op("divide", d, e.op("multiply", e.scalar(2, p.f), p.f))),
    # rsqrt x = x^-1/2, so the derivative is -f³/2.
    "rsqrt": _unary(
        lambda e, d, p: e.op(
            "multiply", d, e.op("multiply", e.scalar(-0.5, p.f), e.op("multiply", _sq(e, p.f), p.f))
        )
    ),
    "square": _unary(lambda e, d, p: e.op("multiply", d, e.op("multiply", e.scalar(2, p.x), p.x))),
    "sin": _unary(lambda e, d, p: e.op("multiply", d, e.op("cos", p.x))),
    "cos": _unary(lambda e, d, p: e.op("multiply", e.op("negate", d), e.op("sin", p.x))),
    "tan": _unary(lambda e, d, p: e.op("divide", d, _sq(e, e.op("cos", p.x)))),
    "sinh": _unary(lambda e, d, p: e.op("multiply", d, e.op("cosh", p.x))),
    "cosh": _unary(lambda e, d, p: e.op("multiply", d, e.op("sinh", p.x))),
    "asin": _unary(lambda e, d, p: e.op("divide", d, e.op("sqrt", _one_minus(e, _sq(e, p.x))))),
    "acos": _unary(
        lambda e, d, p: e.op("divide", e.op("negate", d), e.op("sqrt", _one_minus(e, _sq(e, p.x))))
    ),
    "atan": _unary(lambda e, d, p: e.op("divide", d, _one_plus(e, _sq(e, p.x)))),
    "lgamma": _unary(lambda e, d, p: e.op("multiply", d, e.op("digamma", p.x))),
    # erf' x = 2/√π · e^(−x²); erfc = 1 − erf.
    "erf": _unary(lambda e, d, p: _erf_derivative(e, d, p.x, 1.0)),
    "erfc": _unary(lambda e, d, p: _erf_derivative(e, d, p.x, -1.0)),
    "softplus": _unary(lambda e, d, p: e.op("multiply", d, _sigmoid(e, p.x))),
}


def _erf_derivative(e: Any, d: Value, x: Value, sign: float) -> Value:
    gauss = e.op("exp", e.op("negate", _sq(e, x)))
    scaled = e.op("multiply", e.scalar(sign * 2 / math.sqrt(math.pi), x), gauss)
    return e.op("multiply", d, scaled)


def _sigmoid(e: Any, x: Value) -> Value:
    """softplus' x = 1 / (1 + e^-x), from z = e^-|x| ≤ 1 so that nothing overflows and neither
    tail loses its relative accuracy: 1 / (1 + z) where x ≥ 0, z / (1 + z) elsewhere."""
    z = e.op("exp", e.op("min", x, e.op("negate", x)))
    r = e.op("divide", e.scalar(1, z), _one_plus(e, z))
    return e.op("select", r, e.op("multiply", z, r), e.op("greaterThanOrEqual", x, e.scalar(0, x)))


def zero(e: Any, inst: Instruction, d: Value) -> Pairs:
    """Piecewise constant (`sign`, `floor`…): the derivative is zero wherever it exists."""
    return []


# Binary elementwise ---------------------------------------------------------------------------


def _binary(
    left: Callable[[Any, Value, Primals], Value], right: Callable[[Any, Value, Primals], Value]
) -> AdjointRule:
    """A rule from `left(e, d, p)` and `right(e, d, p)`, the contributions to x and y."""

    def rule(e: Any, inst: Instruction, d: Value) -> Pairs:
        x0, y0 = inst.operands
        p = Primals(e, inst)
        return [(v, part(e, d, p)) for v, part in ((x0, left), (y0, right)) if e.wants(v)]

    return rule


def _power_base(e: Any, d: Value, p: Primals) -> Value:
    exponent = e.op("subtract", p.y, e.scalar(1, p.y))
    return e.op("multiply", d, e.op("multiply", p.y, e.op("power", p.x, exponent)))


def _power_exponent(e: Any, d: Value, p: Primals) -> Value:
    return e.op("multiply", d, e.op("multiply", e.op("log", p.x), p.f))


def _chooser(compare: str, first: bool) -> Callable[..., Value]:
    """min/max: the gradient goes to the operand that was chosen (ties: the left one)."""

    def part(e: Any, d: Value, p: Primals) -> Value:
        chose_x = e.op(compare, p.x, p.y)
        zero = e.scalar(0, d)
        return e.op("select", d, zero, chose_x) if first else e.op("select", zero, d, chose_x)

    return part


BINARY: dict[str, AdjointRule] = {
    "add": _binary(lambda e, d, p: d, lambda e, d, p: d),
    "subtract": _binary(lambda e, d, p: d, lambda e, d, p: e.op("negate", d)),
    "multiply": _binary(
        lambda e, d, p: e.op("multiply", d, p.y), lambda e, d, p: e.op("multiply", d, p.x)
    ),
    "divide": _binary(
        lambda e, d, p: e.op("divide", d, p.y),
        lambda e, d, p: e.op("negate", e.op("divide", e.op("multiply", d, p.x), _sq(e, p.y))),
    ),
    "power": _binary(_power_base, _power_exponent),
    "max": _binary(_chooser("greaterThanOrEqual", True), _chooser("greaterThanOrEqual", False)),
    "min": _binary(_chooser("lessThanOrEqual", True), _chooser("lessThanOrEqual", False)),
}


# Everything else ------------------------------------------------------------------------------


def select(e: Any, inst: Instruction, d: Value) -> Pairs:
    a, b, flags = inst.operands
    zero = e.scalar(0, d)
    pf = e.primal(flags)
    out: Pairs = []
    if e.wants(a):
        out.append((a, e.op("select", d, zero, pf)))
    if e.wants(b):
        out.append((b, e.op("select", zero, d, pf)))
    return out


def literal(e: Any, inst: Instruction, d: Value) -> Pairs:
    """An aggregate literal passes each element its part of the adjoint."""
    lit = inst.operands[0]
    assert isinstance(lit, LiteralValue)
    elements = lit.literal.elements()
    out: Pairs = []
    for i, v in enumerate(elements):
        if e.wants(v):
            out.append((v, e.element(d, i, inst.type)))
    return out


def data_type_cast(e: Any, inst: Instruction, d: Value) -> Pairs:
    x = _x(inst)
    t = canonical(x.type)
    assert isinstance(t, TensorType)
    return [(x, e.op("dataTypeCast", d, dtype=t.dtype))]


def convert(e: Any, inst: Instruction, d: Value) -> Pairs:
    """Between floats, the cast back; from or to an integer or bool, no derivative flows (an
    integer carries none, and the result of rounding to one is piecewise constant)."""
    x = _x(inst)
    src, dst = canonical(x.type), canonical(inst.type)
    assert isinstance(src, TensorType) and isinstance(dst, TensorType)
    if src.dtype.is_float and dst.dtype.is_float:
        return [(x, e.op("dataTypeCast", d, dtype=src.dtype))]
    return []


def dot(e: Any, inst: Instruction, d: Value) -> Pairs:
    x0, y0 = inst.operands
    x, y = e.primal(x0), e.primal(y0)
    rank = canonical(x.type).rank  # type: ignore[attr-defined]
    out: Pairs = []
    if rank == 1:  # a scalar from two vectors
        if e.wants(x0):
            out.append((x0, e.op("multiply", d, y)))
        if e.wants(y0):
            out.append((y0, e.op("multiply", d, x)))
        return out
    if e.wants(x0):
        out.append((x0, e.dot_transposed(d, y, transpose_left=False)))
    if e.wants(y0):
        out.append((y0, e.dot_transposed(x, d, transpose_left=True)))
    return out


def transpose(e: Any, inst: Instruction, d: Value) -> Pairs:
    return [(_x(inst), e.op("transpose", d))]


def reverse(e: Any, inst: Instruction, d: Value) -> Pairs:
    return [(_x(inst), e.op("reverse", d, dims=inst.attrs["dims"]))]


def concatenate(e: Any, inst: Instruction, d: Value) -> Pairs:
    axis = inst.attrs["axis"]
    out: Pairs = []
    start = 0
    for v in inst.operands:
        n = canonical(v.type).shape[axis]  # type: ignore[attr-defined]
        if e.wants(v):
            out.append((v, e.slice_along(d, axis, start, start + n - 1)))
        start += n
    return out


def slice_(e: Any, inst: Instruction, d: Value) -> Pairs:
    """The slice's adjoint in place, zeros around it (along the first dimension)."""
    x = _x(inst)
    t = canonical(x.type)
    assert isinstance(t, TensorType)
    lo, hi = inst.attrs["lo"], inst.attrs["hi"]
    parts = []
    if lo > 0:
        parts.append(e.zeros(t.with_shape((lo,) + t.shape[1:])))
    parts.append(d)
    if hi < t.shape[0] - 1:
        parts.append(e.zeros(t.with_shape((t.shape[0] - 1 - hi,) + t.shape[1:])))
    if len(parts) == 1:
        return [(x, d)]
    return [(x, e.op("concatenate", *parts, axis=0))]


def gather(e: Any, inst: Instruction, d: Value) -> Pairs:
    """The adjoint scattered back into zeros of the table's type (repeated ids accumulate);
    the ids are integers: no gradient."""
    table, ids = inst.operands
    axis = inst.attrs["axis"]
    return [(table, e.op("scatterAdd", d, e.primal(ids), e.zeros(table.type), axis=axis))]


def scatter_add(e: Any, inst: Instruction, d: Value) -> Pairs:
    """The updates receive the adjoint at their ids, the base all of it."""
    updates, ids, base = inst.operands
    out: Pairs = []
    if e.wants(updates):
        out.append((updates, e.op("gather", d, e.primal(ids), axis=inst.attrs["axis"])))
    if e.wants(base):
        out.append((base, d))
    return out


def pad_shape(e: Any, inst: Instruction, d: Value) -> Pairs:
    return [(_x(inst), e.op("squeezeShape", d, index=inst.attrs["index"]))]


def squeeze_shape(e: Any, inst: Instruction, d: Value) -> Pairs:
    return [(_x(inst), e.op("padShape", d, index=inst.attrs["index"]))]


def shape_cast(e: Any, inst: Instruction, d: Value) -> Pairs:
    x = _x(inst)
    return [(x, e.op("shapeCast", d, shape=canonical(x.type).shape))]  # type: ignore[attr-defined]


def reduce(e: Any, inst: Instruction, d: Value) -> Pairs:
    x0 = _x(inst)
    comb, dims = inst.attrs["comb"], inst.attrs["dims"]
    if e.wants(inst.operands[1]):
        raise AdjointError("cannot differentiate with respect to a reduce's initial value")
    if not isinstance(comb, str):
        raise AdjointError(
            "cannot differentiate a reduce by a function; use add, multiply, max or min"
        )
    xt = canonical(x0.type)
    assert isinstance(xt, TensorType)
    spread = e.broadcast(e.unreduce(d, xt, dims), xt)
    if comb == "add":
        return [(x0, spread)]
    x, f = e.primal(x0), e.primal(inst)
    if comb == "multiply":  # d·∏x / x: the product of the other elements
        full = e.broadcast(e.unreduce(f, xt, dims), xt)
        return [(x0, e.op("divide", e.op("multiply", spread, full), x))]
    if comb in ("max", "min"):
        # Every element equal to the extreme shares the gradient equally.
        full = e.broadcast(e.unreduce(f, xt, dims), xt)
        hit = e.op("equal", x, full)
        ones = e.op("select", e.scalar(1, x), e.scalar(0, x), hit)
        count = e.broadcast(
            e.unreduce(e.op("reduce", ones, e.scalar(0, x), comb="add", dims=dims), xt, dims), xt
        )
        share = e.op("divide", spread, count)
        return [(x0, e.op("select", share, e.scalar(0, x), hit))]
    raise AdjointError(f"cannot differentiate a reduce by '{comb}'")


def scan(e: Any, inst: Instruction, d: Value) -> Pairs:
    comb, dims = inst.attrs["comb"], inst.attrs["dims"]
    if comb not in ("add", "multiply"):
        shown = f"'{comb}'" if isinstance(comb, str) else "a function"
        raise AdjointError(f"cannot differentiate a scan by {shown}; only by add or multiply")
    x0 = _x(inst)
    if comb == "multiply":  # f_j = ∏_{i ≤ j} x_i, so x̄_i = Σ_{j ≥ i} d_j·f_j / x_i
        p = Primals(e, inst)
        d = e.op("multiply", d, p.f)
    # The adjoint of a running sum is the running sum from the other end.
    back = e.op("reverse", d, dims=dims)
    summed = e.op("reverse", e.op("scan", back, comb="add", dims=dims), dims=dims)
    if comb == "multiply":
        summed = e.op("divide", summed, p.x)
    return [(x0, summed)]


def _keys(e: Any, inst: Instruction) -> tuple[ElementKey, ...]:
    """The instruction's keys, a value key read as the primal value it had."""
    return tuple(
        ElementKey(value=e.primal(k.value)) if k.value is not None else k
        for k in inst.attrs["keys"]
    )


def extract(e: Any, inst: Instruction, d: Value) -> Pairs:
    src = _x(inst)
    return [(src, e.one_hot(d, src.type, _keys(e, inst)))]


def insert(e: Any, inst: Instruction, d: Value) -> Pairs:
    v, dest = inst.operands
    keys = _keys(e, inst)
    out: Pairs = []
    if e.wants(v):
        out.append((v, e.op("extract", d, keys=keys)))
    if e.wants(dest):
        out.append((dest, e.op("insert", e.zeros(v.type), d, keys=keys)))
    return out


def apply(e: Any, inst: Instruction, d: Value) -> Pairs:
    """Calls are differentiated by the pass itself, through generated gradient functions."""
    raise AssertionError("the differentiation pass handles apply")


from dlvm.ir.adjoints_window import convolve, reduce_window  # noqa: E402

__all__ = ["BINARY", "UNARY", "AdjointError", "AdjointRule", "convolve", "reduce_window"]
