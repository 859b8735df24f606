"""Reductions: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceSumSquare,
ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp, and ArgMax/ArgMin. Their axes are an
attribute before opset 13 (ReduceSum) or 18 (the others) and an input, known at import time,
from then on."""

from __future__ import annotations

import math

from dlvm.ir.types import DataType, TensorType
from dlvm.ir.values import Value
from dlvm.onnx.context import Lowering
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops.common import axes_of, axis_of, ints, reduce, require_constant, reshape, tensor
from dlvm.onnx.ops.registry import HANDLERS

COMBS = {
    "ReduceSum": "add",
    "ReduceMean": "add",
    "ReduceMax": "max",
    "ReduceMin": "min",
    "ReduceProd": "multiply",
    "ReduceSumSquare": "add",
    "ReduceL1": "add",
    "ReduceL2": "add",
    "ReduceLogSumExp": "add",
    "ReduceLogSum": "add",
}


def _check(node: Node, facts: Facts) -> list[str]:
    return require_constant(node, facts, 1)


def _dims(cx: Lowering, node: Node, rank: int) -> tuple[int, ...]:
    if "axes" in node.attrs:
        return axes_of(node.attrs["axes"], rank)
    given = ints(cx.const(node.input(1)))
    if given:
        return axes_of(given, rank)
    return () if node.attr("noop_with_empty_axes", 0) else tuple(range(rank))


def lower_reduce(cx: Lowering, node: Node) -> None:
    x = cx.value(node.input(0))
    xs, dt = tensor(x).shape, tensor(x).dtype
    dims = _dims(cx, node, len(xs))
    keep = bool(node.attr("keepdims", 1))
    op = node.op_type
    if op in ("ReduceSumSquare", "ReduceL2"):
        x = cx.emit("multiply", x, x)
    elif op == "ReduceL1":
        x = cx.emit("multiply", x, cx.emit("sign", x))
    elif op == "ReduceLogSumExp":
        top = reduce(cx, x, "max", dims, keep=True)
        shifted = cx.emit("exp", cx.emit("subtract", x, top))
        total = cx.emit("log", reduce(cx, shifted, "add", dims, keep=keep))
        top = top if keep else reshape(cx, top, tensor(total).shape)
        cx.define(node.out(0), cx.emit("add", total, top))
        return
    comb = COMBS[op]
    if dt.is_bool:  # the IR's min and max are numeric: on bools they are and and or
        comb = {"min": "and", "max": "or"}.get(comb, comb)
    y = reduce(cx, x, comb, dims, keep)
    if op == "ReduceMean" and dims:
        y = cx.emit("divide", y, cx.scalar(math.prod(xs[d] for d in dims), dt))
    elif op == "ReduceL2":
        y = cx.emit("sqrt", y)
    elif op == "ReduceLogSum":
        y = cx.emit("log", y)
    cx.define(node.out(0), y)


HANDLERS.register(list(COMBS), since=1, check=_check)(lower_reduce)


@HANDLERS.register(("ArgMax", "ArgMin"), since=1)
def arg_extremum(cx: Lowering, node: Node) -> None:
    """The first (or, select_last_index=1, the last) index of the extremum along axis, an i64
    tensor, as TEL's argmax finds it."""
    x = cx.value(node.input(0))
    axis = axis_of(node.attr("axis", 0), len(tensor(x).shape))
    comb = "max" if node.op_type == "ArgMax" else "min"
    index, _ = first_index(cx, x, axis, comb, last=bool(node.attr("select_last_index", 0)))
    if not node.attr("keepdims", 1):
        index = reshape(cx, index, tensor(index).shape[:axis] + tensor(index).shape[axis + 1 :])
    cx.define(node.out(0), index)


def first_index(
    cx: Lowering, x: Value, axis: int, comb: str, last: bool = False
) -> tuple[Value, Value]:
    """The index along axis of the first (or last) extremum, its axis kept as 1, and the ramp
    of indices [0, n) shaped to broadcast along axis: the extremum found, the ramp selected where
    it is hit, the smallest (largest) such index kept."""
    xs = tensor(x).shape
    top = reduce(cx, x, comb, (axis,), keep=True)
    hit = cx.emit("equal", x, top)
    n = xs[axis]
    ones = cx.splat(1, TensorType((n,), DataType.I64))
    ramp = cx.emit("scan", ones, comb="add", dims=(0,))
    ramp = cx.emit("subtract", ramp, cx.scalar(1, DataType.I64))
    ramp = reshape(cx, ramp, tuple(n if d == axis else 1 for d in range(len(xs))))
    miss = cx.scalar(-1 if last else n, DataType.I64)
    candidates = cx.emit("select", ramp, miss, hit)
    index = reduce(cx, candidates, "max" if last else "min", (axis,), keep=True)
    return index, ramp
