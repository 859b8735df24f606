"""TopK with k known at import, without sorting (DLVM IR has no sort): k rounds, each taking
the extremum of what is left along the axis and the lowest index where it is, as the spec breaks
ties, then leaving that index out of the next rounds."""

from __future__ import annotations

import numpy as np

from dlvm.ir.types import DataType
from dlvm.onnx.context import Lowering, LoweringError
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops.common import axis_of, identity, ints, reduce, require_constant, tensor
from dlvm.onnx.ops.registry import HANDLERS

# The most rounds unrolled: each is a few passes over the input.
MAX_K = 256


def _check(node: Node, facts: Facts) -> list[str]:
    return require_constant(node, facts, 1) if node.opset >= 10 else []


@HANDLERS.register("TopK", since=1, check=_check)
def top_k(cx: Lowering, node: Node) -> None:
    """Values and i64 indices of the k largest (largest=1) or smallest elements along axis,
    in order (`sorted` is honoured by always sorting: the spec leaves the order free otherwise)."""
    x = cx.value(node.input(0))
    t = tensor(x)
    rank = len(t.shape)
    axis = axis_of(node.attr("axis", -1), rank)
    k = node.attr("k") if node.opset < 10 else ints(cx.const(node.input(1)))[0]
    n = t.shape[axis]
    if not 0 < k <= min(n, MAX_K):
        raise LoweringError(f"k={k} along an axis of {n} (1 to {min(n, MAX_K)} are supported)")
    comb = "max" if node.attr("largest", 1) else "min"
    # Left out of a round: the sentinel, which no element beats, where `taken` is set.
    sentinel = cx.scalar(identity(comb, t.dtype), t.dtype)
    shape = [n if d == axis else 1 for d in range(rank)]
    ramp = cx.literal(np.arange(n, dtype=np.int64).reshape(shape))
    past = cx.scalar(n, DataType.I64)
    taken = None
    values, indices = [], []
    for _ in range(k):
        left = x if taken is None else cx.emit("select", sentinel, x, taken)
        top = reduce(cx, left, comb, (axis,), keep=True)
        hit = cx.emit("equal", left, top)
        if taken is not None:
            hit = cx.emit("and", hit, cx.emit("not", taken))
        index = reduce(cx, cx.emit("select", ramp, past, hit), "min", (axis,), keep=True)
        chosen = cx.emit("equal", ramp, index)
        taken = chosen if taken is None else cx.emit("or", taken, chosen)
        values.append(top)
        indices.append(index)
    for name, parts in zip(node.outputs, (values, indices)):
        whole = parts[0] if k == 1 else cx.emit("concatenate", *parts, axis=axis)
        cx.define(name, whole)
