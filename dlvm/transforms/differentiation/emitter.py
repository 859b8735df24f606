"""Where adjoint code is written: a builder position plus the helpers adjoint rules share
(constants, zeros, broadcasting, un-broadcasting, slicing along any axis, accumulation)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from dlvm.analysis.differentiability import carries_gradient
from dlvm.ir.builder import Builder
from dlvm.ir.compose import permute, slice_along
from dlvm.ir.literals import ZERO, AggregateLiteral, Literal, ScalarLiteral, StructLiteral
from dlvm.ir.types import (
    ArrayType,
    StructType,
    TensorType,
    TupleType,
    Type,
    canonical,
)
from dlvm.ir.values import ElementKey, LiteralValue, Value


class Emitter:
    """Builds adjoint code at a builder position.

    `primal(v)` gives the primal value v where the code runs; `wants(v)` says whether v needs
    an adjoint (it is active)."""

    def __init__(
        self,
        builder: Builder,
        primal: Callable[[Value], Value],
        wants: Callable[[Value], bool],
    ) -> None:
        self.builder = builder
        self.primal = primal
        self.wants = wants

    def op(self, name: str, *operands: Value, **attrs: Any) -> Value:
        return self.builder.build(name, list(operands), **attrs)

    # Constants -------------------------------------------------------------------------------

    def scalar(self, value: int | float, like: Value | Type) -> LiteralValue:
        """The scalar `value` in the data type of `like`, such as `1: f32`."""
        ty = like.type if isinstance(like, Value) else like
        t = canonical(ty)
        assert isinstance(t, TensorType), ty
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return LiteralValue(ScalarLiteral(value), TensorType((), t.dtype))

    def constant(self, value: int, ty: Type) -> Value:
        """`value` of type ty: a bare `1: f32` for a scalar, else a `literal 1: <…>` instruction."""
        t = canonical(ty)
        if isinstance(t, TensorType):
            lit = LiteralValue(ScalarLiteral(value), ty)
            return lit if not t.shape else self.op("literal", lit)
        assert value == 0, "only zero exists for aggregates"
        return self.op("literal", LiteralValue(ZERO, ty))

    def zeros(self, ty: Type) -> Value:
        return self.constant(0, ty)

    # Shapes ----------------------------------------------------------------------------------

    def broadcast(self, v: Value, ty: Type) -> Value:
        """v broadcast to ty's shape (adding zeros is the IR's way to broadcast)."""
        if canonical(v.type) == canonical(ty):
            return v
        return self.op("add", v, self.zeros(ty))

    def unreduce(self, d: Value, xt: TensorType, dims: tuple[int, ...]) -> Value:
        """d, the result of reducing a tensor of type xt along dims, with those dims put back
        as 1s so that it broadcasts against xt."""
        shape = tuple(1 if i in dims else n for i, n in enumerate(xt.shape))
        dt = canonical(d.type)
        assert isinstance(dt, TensorType)
        if dt.shape == shape:
            return d
        return self.op("shapeCast", d, shape=shape)

    def unbroadcast(self, c: Value, ty: Type) -> Value:
        """A contribution at a broadcast shape summed down to the shape of ty."""
        ct, t = canonical(c.type), canonical(ty)
        if not (isinstance(ct, TensorType) and isinstance(t, TensorType)) or ct.shape == t.shape:
            return c
        if not t.shape:
            axes = tuple(range(ct.rank - 1, -1, -1))
        else:
            axes = tuple(i for i in range(ct.rank - 1, -1, -1) if t.shape[i] != ct.shape[i])
        r = self.op("reduce", c, self.scalar(0, ct), comb="add", dims=axes)
        rt = canonical(r.type)
        assert isinstance(rt, TensorType)
        return r if rt.shape == t.shape else self.op("shapeCast", r, shape=t.shape)

    def slice_along(self, v: Value, axis: int, lo: int, hi: int) -> Value:
        """v[…, lo..hi (closed), …] along any axis (dlvm.ir.compose.slice_along)."""
        return slice_along(self.op, v, axis, lo, hi)

    def dot_transposed(self, a: Value, b: Value, transpose_left: bool) -> Value:
        """`dot a, bᵀ` (or `dot aᵀ, b`), transposing only the last two dimensions: `transpose`
        for matrices; for batches, the batched `dot` of a swap of the last two dimensions (a
        few views and transposes, which the product's kernel reads as its operand)."""
        r = canonical(a.type).rank  # type: ignore[attr-defined]
        if r == 2:
            if transpose_left:
                return self.op("dot", self.op("transpose", a), b)
            return self.op("dot", a, self.op("transpose", b))
        if transpose_left:  # [P, m, k]ᵀ · [P, m, n] -> [P, k, n]
            return self.op("dot", self.swap_last(a), b)
        return self.op("dot", a, self.swap_last(b))  # [P, m, n] · [P, k, n]ᵀ -> [P, m, k]

    def swap_last(self, v: Value) -> Value:
        """v [B…, m, k] as [B…, k, m]: the batch dimensions merged into one for the swap."""
        t = canonical(v.type)
        assert isinstance(t, TensorType)
        batch, (m, k) = t.shape[:-2], t.shape[-2:]
        if len(batch) != 1:
            v = self.op("shapeCast", v, shape=(math.prod(batch), m, k))
        v = permute(self.op, v, (0, 2, 1))
        if len(batch) != 1:
            v = self.op("shapeCast", v, shape=(*batch, k, m))
        return v

    # Aggregates ------------------------------------------------------------------------------

    def element(self, d: Value, i: int, aggregate: Type) -> Value:
        """Element i of the aggregate adjoint d (a field, for a struct)."""
        t = canonical(aggregate)
        key = ElementKey(field=t.fields[i][0]) if isinstance(t, StructType) else ElementKey(i)
        return self.op("extract", d, keys=(key,))

    def one_hot(self, d: Value, ty: Type, keys: tuple[ElementKey, ...]) -> Value:
        """An adjoint of type ty that is d at `keys` and zero elsewhere."""
        return self.op("insert", d, self.zeros(ty), keys=keys)

    def accumulate(self, old: Value | None, new: Value) -> Value:
        """old + new, element by element for aggregates."""
        if old is None:
            return new
        t = canonical(old.type)
        if isinstance(t, TensorType):
            return self.op("add", old, new)
        lit: Literal
        if isinstance(t, TupleType):
            lit = AggregateLiteral(
                "tuple",
                tuple(
                    self._sum_elements(old, new, ElementKey(i), et)
                    for i, et in enumerate(t.elements)
                ),
            )
        elif isinstance(t, StructType):
            lit = StructLiteral(
                tuple(
                    (f, self._sum_elements(old, new, ElementKey(field=f), ft)) for f, ft in t.fields
                )
            )
        else:
            assert isinstance(t, ArrayType), old.type  # carries_gradient admits nothing else
            lit = AggregateLiteral(
                "array",
                tuple(
                    self._sum_elements(old, new, ElementKey(i), t.element) for i in range(t.count)
                ),
            )
        return self.op("literal", LiteralValue(lit, old.type))

    def _sum_elements(self, a: Value, b: Value, key: ElementKey, ty: Type) -> Value:
        x = self.op("extract", a, keys=(key,))
        if not carries_gradient(ty):
            return x
        return self.accumulate(x, self.op("extract", b, keys=(key,)))


def _product(dims: tuple[int, ...]) -> int:
    out = 1
    for d in dims:
        out *= d
    return out
