"""Dropout: the identity in inference; in training (the importer's `training`) inverted dropout,
as stdlib/nn.tel's dropout: each element zeroed with probability `ratio` (a uniform draw of the
IR's `random` below it), the survivors scaled by 1 / (1 − ratio). The optional mask output is
where elements were kept."""

from __future__ import annotations

from dlvm.ir.types import DataType
from dlvm.onnx.context import Lowering
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops.common import require_constant, tensor
from dlvm.onnx.ops.registry import HANDLERS


def _check(node: Node, facts: Facts) -> list[str]:
    return require_constant(node, facts, 1, 2)


@HANDLERS.register("Dropout", since=7, check=_check)
def dropout(cx: Lowering, node: Node) -> None:
    x = cx.value(node.input(0))
    ratio = float(node.attr("ratio", 0.5))
    known = cx.const(node.input(1))
    if known is not None:
        ratio = float(known)
    mode = cx.const(node.input(2))
    training = cx.training or (mode is not None and bool(mode))
    t = tensor(x)
    if not training or ratio == 0.0:
        cx.define(node.out(0), x)
        if node.out(1):  # the mask: every element kept
            cx.define(node.out(1), cx.splat(True, t.with_dtype(DataType.BOOL)))
        return
    draw = cx.emit("random", cx.scalar(0.0, t.dtype), cx.scalar(1.0, t.dtype), shape=t.shape)
    keep = cx.emit("greaterThanOrEqual", draw, cx.scalar(ratio, t.dtype))
    scaled = cx.emit("divide", x, cx.scalar(1.0 - ratio, t.dtype))
    cx.define(node.out(0), cx.emit("select", scaled, cx.scalar(0.0, t.dtype), keep))
    cx.define(node.out(1), keep)
