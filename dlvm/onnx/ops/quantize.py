"""Linear quantisation to and from signed integers (the IR has no unsigned ones): QuantizeLinear,
DequantizeLinear and QLinearMatMul, per tensor or, for the first two, per axis, computed as ONNX's
reference does (round halves to even, saturate to the integer's range)."""

from __future__ import annotations

import math

from dlvm.ir.types import DataType
from dlvm.ir.values import Value
from dlvm.onnx.context import Lowering
from dlvm.onnx.dtypes import ir_type_of
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops.common import axis_of, cast, reshape, tensor
from dlvm.onnx.ops.registry import HANDLERS


def _check_blocks(node: Node, facts: Facts) -> list[str]:
    found = []
    if node.attr("block_size", 0):
        found.append("block_size (blocked quantisation)")
    if node.attr("precision", 0):
        found.append("precision (a computation type of its own)")
    return found


def _per_axis(cx: Lowering, node: Node, name: str, shape: tuple[int, ...]) -> Value:
    """A scale or zero point ready to broadcast over a tensor of `shape`: a scalar where it has
    one element, else a vector along `axis` (default 1)."""
    v = cx.value(name)
    t = tensor(v)
    if math.prod(t.shape) == 1:
        return reshape(cx, v, ())
    axis = axis_of(int(node.attr("axis", 1)), len(shape))
    return reshape(cx, v, tuple(n if d == axis else 1 for d, n in enumerate(shape)))


def _saturate(cx: Lowering, q: Value, to: DataType) -> Value:
    """An i32 or i64 value clamped to the range of `to`, then converted to it."""
    dt = tensor(q).dtype
    half = 1 << (to.bits - 1)
    q = cx.emit("max", q, cx.scalar(-half, dt))
    return cast(cx, cx.emit("min", q, cx.scalar(half - 1, dt)), to)


@HANDLERS.register("QuantizeLinear", since=10, check=_check_blocks)
def quantize(cx: Lowering, node: Node) -> None:
    """saturate(rint(x / scale) + zero_point), in the output's integer type."""
    x = cx.value(node.input(0))
    shape = tensor(x).shape
    to = ir_type_of(cx.facts.elem_types.get(node.out(0), 0))
    assert to is not None and to.is_int  # support.py refused unsigned and float outputs
    scale = cast(cx, _per_axis(cx, node, node.input(1), shape), tensor(x).dtype)
    q = cast(cx, cx.emit("rint", cx.emit("divide", x, scale)), DataType.I64)
    if node.input(2):
        q = cx.emit("add", q, cast(cx, _per_axis(cx, node, node.input(2), shape), DataType.I64))
    cx.define(node.out(0), _saturate(cx, q, to))


@HANDLERS.register("DequantizeLinear", since=10, check=_check_blocks)
def dequantize(cx: Lowering, node: Node) -> None:
    """(x - zero_point) · scale, in f32 as the reference computes it, then the output's type."""
    x = cx.value(node.input(0))
    shape = tensor(x).shape
    y = cast(cx, x, DataType.F32)
    if node.input(2):
        y = cx.emit(
            "subtract", y, cast(cx, _per_axis(cx, node, node.input(2), shape), DataType.F32)
        )
    scale = _per_axis(cx, node, node.input(1), shape)
    y = cx.emit("multiply", y, cast(cx, scale, DataType.F32))
    to = ir_type_of(cx.facts.elem_types.get(node.out(0), 0)) or tensor(scale).dtype
    cx.define(node.out(0), cast(cx, y, to))


def _qlinear_check(node: Node, facts: Facts) -> list[str]:
    found = []
    for i in (1, 2, 4, 5, 6, 7):
        shape = facts.shapes.get(node.input(i))
        if shape is not None and math.prod(shape) != 1:
            found.append(f"input {i} ('{node.input(i)}') of shape {list(shape)}: only per-tensor "
                         "scales and zero points are supported")  # fmt: skip
    return found


@HANDLERS.register("QLinearMatMul", since=10, check=_qlinear_check)
def qlinear_matmul(cx: Lowering, node: Node) -> None:
    """The product of (a - a_zero) and (b - b_zero) in i32, scaled by a_scale · b_scale /
    y_scale in f64 (NumPy's type for i32 times a float array), plus y_zero, rounded half to
    even and saturated."""

    def centred(i: int) -> Value:
        v = cast(cx, cx.value(node.input(i)), DataType.I32)
        zero = cast(cx, reshape(cx, cx.value(node.input(i + 2)), ()), DataType.I32)
        return cx.emit("subtract", v, zero)

    def scalar(i: int) -> Value:
        return reshape(cx, cx.value(node.input(i)), ())

    # Equal ranks, as the IR's dot takes them (its type rule reports others).
    product = cx.emit("dot", centred(0), centred(3))
    scale = cx.emit("divide", cx.emit("multiply", scalar(1), scalar(4)), scalar(6))
    y = cx.emit("multiply", cast(cx, product, DataType.F64), cast(cx, scale, DataType.F64))
    y = cx.emit("add", y, cast(cx, scalar(7), DataType.F64))
    to = cx.dtype(node.input(7))
    cx.define(node.out(0), _saturate(cx, cast(cx, cx.emit("rint", y), DataType.I64), to))
