"""The classification losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (its log
softmax, then the same loss). Each picks the input of the target class with a one-hot mask
(target == class, a `select` and a sum over the classes) rather than a gather, so that a target
equal to ignore_index, which may lie outside the classes, is never used as an index, and so
that the loss differentiates as any composition does."""

from __future__ import annotations

import math

import numpy as np

from dlvm.ir.values import Value
from dlvm.onnx.context import Lowering, LoweringError
from dlvm.onnx.dtypes import NUMPY_TYPES
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops.common import reduce, reshape, tensor
from dlvm.onnx.ops.norm import softmax_along
from dlvm.onnx.ops.registry import HANDLERS

REDUCTIONS = ("none", "sum", "mean")


def _check_loss(node: Node, facts: Facts) -> list[str]:
    reduction = node.attr("reduction", "mean")
    if reduction not in REDUCTIONS:
        return [f"reduction='{reduction}' (one of {', '.join(REDUCTIONS)} is supported)"]
    return []


def negative_log_likelihood(cx: Lowering, node: Node, x: Value) -> Value:
    """−x[n, target[n, d…], d…] · weight[target], 0 where the target is ignore_index; summed,
    or averaged over the weights of the targets (their count without weights), or neither."""
    xs, dt = tensor(x).shape, tensor(x).dtype
    if len(xs) < 2:
        raise LoweringError(f"{node.op_type} of an input {xs}: it needs [N, C, …]")
    target = cx.value(node.input(1))
    ts, tt = tensor(target).shape, tensor(target).dtype
    if ts != xs[:1] + xs[2:]:
        raise LoweringError(f"{node.op_type} of an input {xs} with a target {ts}")
    classes = xs[1]
    per_class = (1, classes) + (1,) * (len(xs) - 2)
    target1 = reshape(cx, target, xs[:1] + (1,) + xs[2:])
    each: np.ndarray = np.arange(classes, dtype=NUMPY_TYPES[tt]).reshape(per_class)
    hit = cx.emit("equal", target1, cx.literal(each))
    ignore = node.attr("ignore_index")
    kept: Value | None = None
    half = 1 << (tt.bits - 1)
    if ignore is not None and -half <= ignore < half:  # else no target can equal it
        kept = cx.emit("notEqual", target1, cx.scalar(ignore, tt))
        if 0 <= ignore < classes:  # else no class is hit where the target is ignored
            hit = cx.emit("and", hit, kept)
    zero = cx.scalar(0, dt)
    loss = cx.emit("negate", reduce(cx, cx.emit("select", x, zero, hit), "add", (1,), keep=False))
    # Each element's weight, for the loss and the mean's divisor: weight[target], 0 where no
    # class is hit; without weights 0 where the target is ignored, 1 elsewhere (the loss is 0
    # there already); None for all ones.
    weights: Value | None = None
    if node.input(2):
        weight = reshape(cx, cx.value(node.input(2)), per_class)
        weights = reduce(cx, cx.emit("select", weight, zero, hit), "add", (1,), keep=False)
        loss = cx.emit("multiply", loss, weights)
    elif kept is not None:
        weights = reshape(cx, cx.emit("select", cx.scalar(1, dt), zero, kept), ts)
    reduction = node.attr("reduction", "mean")
    if reduction == "none":
        return loss
    every = tuple(range(len(ts)))
    total = reduce(cx, loss, "add", every, keep=False)
    if reduction == "sum":
        return total
    if weights is None:
        return cx.emit("divide", total, cx.scalar(math.prod(ts), dt))
    return cx.emit("divide", total, reduce(cx, weights, "add", every, keep=False))


@HANDLERS.register("NegativeLogLikelihoodLoss", since=12, check=_check_loss)
def nll_loss(cx: Lowering, node: Node) -> None:
    cx.define(node.out(0), negative_log_likelihood(cx, node, cx.value(node.input(0))))


@HANDLERS.register("SoftmaxCrossEntropyLoss", since=12, check=_check_loss)
def softmax_cross_entropy_loss(cx: Lowering, node: Node) -> None:
    """The negative log likelihood of the log softmax over the classes (axis 1), which is the
    optional second output."""
    scores = cx.value(node.input(0))
    if len(tensor(scores).shape) < 2:
        raise LoweringError(f"SoftmaxCrossEntropyLoss of scores {tensor(scores).shape}")
    log_prob = softmax_along(cx, scores, (1,), log=True)
    cx.define(node.out(0), negative_log_likelihood(cx, node, log_prob))
    cx.define(node.out(1), log_prob)
