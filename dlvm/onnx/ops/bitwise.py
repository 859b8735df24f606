"""Bit operators on integers: BitwiseAnd, BitwiseOr, BitwiseXor, BitwiseNot and BitShift as the
IR's bitwise `and`, `or`, `xor`, `not` and shifts, and BitCast as `bitCast` (docs/ir.md)."""

from __future__ import annotations

from dlvm.ir.types import TensorType
from dlvm.onnx.context import Lowering
from dlvm.onnx.dtypes import ir_type_of, onnx_type_name
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops.common import operands, tensor
from dlvm.onnx.ops.registry import HANDLERS

BITWISE = {"BitwiseAnd": "and", "BitwiseOr": "or", "BitwiseXor": "xor"}


@HANDLERS.register(tuple(BITWISE), since=18)
def bitwise(cx: Lowering, node: Node) -> None:
    a, b = operands(cx, node.inputs[:2])
    cx.define(node.out(0), cx.emit(BITWISE[node.op_type], a, b))


@HANDLERS.register("BitwiseNot", since=18)
def bitwise_not(cx: Lowering, node: Node) -> None:
    cx.define(node.out(0), cx.emit("not", cx.value(node.input(0))))


def _shift_check(node: Node, facts: Facts) -> list[str]:
    if node.attr("direction") not in ("LEFT", "RIGHT"):
        return [f"direction={node.attr('direction')!r} is not 'LEFT' or 'RIGHT'"]
    return []


@HANDLERS.register("BitShift", since=11, check=_shift_check)
def bit_shift(cx: Lowering, node: Node) -> None:
    """Signed integers (the IR has no unsigned ones): RIGHT copies the sign in; an amount that
    is negative or not below the width gives 0 (LEFT) or the sign (RIGHT), as ONNX's reference."""
    x, amount = operands(cx, node.inputs[:2])
    op = "shiftLeft" if node.attr("direction") == "LEFT" else "shiftRight"
    cx.define(node.out(0), cx.emit(op, x, amount))


def _bit_cast_check(node: Node, facts: Facts) -> list[str]:
    to = ir_type_of(int(node.attr("to", 0)))
    have = ir_type_of(facts.elem_types.get(node.input(0), 0))
    if to is None:
        return [
            f"a bit cast to {onnx_type_name(int(node.attr('to', 0)))}: DLVM IR has no such type"
        ]
    if have is not None and have.bits != to.bits:
        return [f"a bit cast from {have} to {to}, of another width"]
    return []


@HANDLERS.register("BitCast", since=26, check=_bit_cast_check)
def bit_cast(cx: Lowering, node: Node) -> None:
    to = ir_type_of(int(node.attr("to")))
    assert to is not None
    x = cx.value(node.input(0))
    cx.define(node.out(0), cx.emit("bitCast", x, type=TensorType(tensor(x).shape, to)))
