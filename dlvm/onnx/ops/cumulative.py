"""Running combinations: CumSum and CumProd, a `scan` along an axis known at import."""

from __future__ import annotations

from dlvm.ir.compose import slice_along
from dlvm.ir.values import Value
from dlvm.onnx.context import Lowering
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops.common import axis_of, identity, ints, require_constant, tensor
from dlvm.onnx.ops.registry import HANDLERS


def _check_cumulative(node: Node, facts: Facts) -> list[str]:
    return require_constant(node, facts, 1)


@HANDLERS.register("CumSum", since=11, check=_check_cumulative)
def cumsum(cx: Lowering, node: Node) -> None:
    cx.define(node.out(0), cumulative(cx, node, "add"))


@HANDLERS.register("CumProd", since=26, check=_check_cumulative)
def cumprod(cx: Lowering, node: Node) -> None:
    cx.define(node.out(0), cumulative(cx, node, "multiply"))


def cumulative(cx: Lowering, node: Node, comb: str) -> Value:
    """A running combination (`scan`) along the axis known at import (CumSum, CumProd);
    `reverse` runs it from the end, `exclusive` starts each at the one before it: the input
    shifted by one along the axis, the combination's identity first."""
    x = cx.value(node.input(0))
    t = tensor(x)
    axis = axis_of(ints(cx.const(node.input(1)))[0], len(t.shape))
    reverse = bool(node.attr("reverse", 0))
    if reverse:
        x = cx.emit("reverse", x, dims=(axis,))
    if node.attr("exclusive", 0):
        n = t.shape[axis]
        first = cx.splat(
            identity(comb, t.dtype), t.with_shape(t.shape[:axis] + (1,) + t.shape[axis + 1 :])
        )
        if n == 1:
            return first
        rest = slice_along(lambda op, *vs, **a: cx.emit(op, *vs, **a), x, axis, 0, n - 2)
        x = cx.emit("concatenate", first, rest, axis=axis)
    y = cx.emit("scan", x, comb=comb, dims=(axis,))
    if reverse:
        y = cx.emit("reverse", y, dims=(axis,))
    return y
