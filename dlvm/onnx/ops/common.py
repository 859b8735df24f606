"""Helpers the operator families share: NumPy broadcasting made explicit, axes, reductions with
kept dimensions, and checks of attributes and constant inputs."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from dlvm.ir.types import DataType, TensorType, canonical
from dlvm.ir.values import Value
from dlvm.onnx.context import Lowering, LoweringError
from dlvm.onnx.graph import Facts, Node


def tensor(v: Value) -> TensorType:
    t = canonical(v.type)
    assert isinstance(t, TensorType)
    return t


def reshape(cx: Lowering, v: Value, shape: Sequence[int]) -> Value:
    """v viewed as `shape` (nothing emitted when it has it)."""
    shape = tuple(shape)
    if tensor(v).shape == shape:
        return v
    return cx.emit("shapeCast", v, shape=shape)


def to_rank(cx: Lowering, v: Value, rank: int) -> Value:
    """v with leading unit dimensions up to `rank` (a scalar stays one: it broadcasts)."""
    shape = tensor(v).shape
    if not shape or len(shape) >= rank:
        return v
    return reshape(cx, v, (1,) * (rank - len(shape)) + shape)


def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise LoweringError("shapes " + ", ".join(map(str, shapes)) + " do not broadcast") from None


def operands(cx: Lowering, names: Sequence[str], dtype: DataType | None = None) -> list[Value]:
    """The inputs of an elementwise operation, ready for the IR's broadcasting: equal ranks, and
    a known input with one value and no dimension of its own to add as a scalar literal."""
    shapes = [cx.shape(n) for n in names]
    out = broadcast_shape(*shapes)
    values: list[Value] = []
    for i, name in enumerate(names):
        known = cx.facts.constants.get(name)  # never a parameter: those stay arguments
        others = [s for j, s in enumerate(shapes) if j != i]
        if known is not None and known.size == 1 and broadcast_shape(*others, ()) == out:
            values.append(cx.scalar(known.item(), dtype or cx.dtype(name)))
            continue
        v = cx.value(name)
        if dtype is not None and tensor(v).dtype is not dtype:
            v = cast(cx, v, dtype)
        values.append(to_rank(cx, v, len(out)))
    return values


def cast(cx: Lowering, v: Value, dtype: DataType) -> Value:
    """v as `dtype`: `dataTypeCast` within a base where it can, else `convert` (docs/ir.md):
    to an integer truncates toward zero, to bool is != 0."""
    have = tensor(v).dtype
    if have is dtype:
        return v
    if have.can_cast_to(dtype):
        return cx.emit("dataTypeCast", v, dtype=dtype)
    return cx.emit("convert", v, dtype=dtype)


def in_f32(cx: Lowering, values: Sequence[Value], f: Callable[..., Value]) -> Value:
    """f(*values), computed in f32 and rounded once to f16 when the values are f16, as NumPy
    (ONNX's reference) computes products, sums and float functions of f16 arrays: the compiled
    f16 kernels round every partial sum; f(*values) itself for other types."""
    if not values or tensor(values[0]).dtype is not DataType.F16:
        return f(*values)
    wide = f(*(cx.emit("dataTypeCast", v, dtype=DataType.F32) for v in values))
    return cx.emit("dataTypeCast", wide, dtype=DataType.F16)


def broadcast_to(cx: Lowering, v: Value, shape: tuple[int, ...]) -> Value:
    """v stretched to exactly `shape`."""
    t = tensor(v)
    if t.shape == shape:
        return v
    zero = cx.splat(0 if not t.dtype.is_bool else False, TensorType(shape, t.dtype))
    if t.dtype.is_bool:
        return cx.emit("or", zero, to_rank(cx, v, len(shape)))
    return cx.emit("add", zero, to_rank(cx, v, len(shape)))


def axis_of(axis: int, rank: int) -> int:
    """A possibly negative axis as an index in [0, rank)."""
    a = axis + rank if axis < 0 else axis
    if not 0 <= a < max(rank, 1):
        raise LoweringError(f"axis {axis} is out of range for rank {rank}")
    return a


def axes_of(axes: Sequence[int], rank: int) -> tuple[int, ...]:
    return tuple(sorted({axis_of(int(a), rank) for a in axes}))


def reduce(cx: Lowering, v: Value, comb: str, dims: tuple[int, ...], keep: bool) -> Value:
    """`reduce` along dims, the dims kept as ones when `keep`."""
    t = tensor(v)
    if not dims:
        return v
    init = identity(comb, t.dtype)
    r = cx.emit("reduce", v, cx.scalar(init, t.dtype), comb=comb, dims=dims)
    if keep:
        r = reshape(cx, r, tuple(1 if i in dims else n for i, n in enumerate(t.shape)))
    return r


def mean(cx: Lowering, v: Value, dims: tuple[int, ...], keep: bool) -> Value:
    t = tensor(v)
    count = math.prod(t.shape[d] for d in dims)
    return cx.emit("divide", reduce(cx, v, "add", dims, keep), cx.scalar(count, t.dtype))


def identity(comb: str, dtype: DataType) -> int | float | bool:
    """The value `comb` (add, multiply, max, min) leaves the other operand unchanged by."""
    if comb == "add":
        return 0
    if comb == "multiply":
        return 1
    if dtype.is_float:
        return -math.inf if comb == "max" else math.inf
    if dtype.is_bool:
        return comb in ("min", "and")
    half = 1 << (dtype.bits - 1)
    return -half if comb == "max" else half - 1


class NeedsValue(str):
    """A reason that a node needs the value of `tensor` at import: the importer tells which
    graph inputs a model needs fixed (dlvm/onnx/fixed.py) from these."""

    tensor: str

    def __new__(cls, text: str, tensor: str) -> NeedsValue:
        reason = super().__new__(cls, text)
        reason.tensor = tensor
        return reason


def require_constant(node: Node, facts: Facts, *slots: int) -> list[str]:
    """A reason for each given input (when present) whose value is not known at import."""
    return [
        NeedsValue(
            f"input {i} ('{node.input(i)}') must be known at import time (a constant or an "
            "initializer), not computed by the graph",
            node.input(i),
        )
        for i in slots
        if node.input(i) and not facts.is_constant(node.input(i))
    ]


def ints(value: np.ndarray | None) -> list[int]:
    return [] if value is None else [int(x) for x in np.asarray(value).ravel()]
