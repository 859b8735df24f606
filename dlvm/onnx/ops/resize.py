"""Resize (and Upsample, its form before opset 10) in modes nearest and linear: each resized axis
is a `gather` of the source indices its coordinate transformation picks (computed at import),
linear blending two gathers by weights known at import, axis after axis."""

from __future__ import annotations

import math

import numpy as np

from dlvm.ir.values import Value
from dlvm.onnx.context import Lowering, LoweringError
from dlvm.onnx.dtypes import NUMPY_TYPES
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops.common import axis_of, require_constant, reshape, tensor
from dlvm.onnx.ops.registry import HANDLERS

TRANSFORMS = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")
NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _check(node: Node, facts: Facts) -> list[str]:
    reasons = []
    mode = node.attr("mode", "nearest")
    if mode not in ("nearest", "linear", "bilinear"):
        reasons.append(f"mode={mode} (only nearest and linear)")
    transform = node.attr("coordinate_transformation_mode", "half_pixel")
    if node.op_type == "Resize" and transform not in TRANSFORMS:
        reasons.append(f"coordinate_transformation_mode={transform}")
    if node.attr("nearest_mode", "round_prefer_floor") not in NEAREST:
        reasons.append(f"nearest_mode={node.attr('nearest_mode')}")
    if node.attr("antialias", 0):
        reasons.append("antialias=1")
    if node.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
        reasons.append(f"keep_aspect_ratio_policy={node.attr('keep_aspect_ratio_policy')}")
    slots = (1,) if node.op_type == "Upsample" or node.opset < 11 else (2, 3)
    return reasons + require_constant(node, facts, *slots)


@HANDLERS.register("Upsample", since=7, until=9, check=_check)
@HANDLERS.register("Resize", since=10, check=_check)
def resize(cx: Lowering, node: Node) -> None:
    x = cx.value(node.input(0))
    xs = tensor(x).shape
    rank = len(xs)
    axes = [axis_of(a, rank) for a in node.attr("axes", range(rank))]
    legacy = node.op_type == "Upsample" or node.opset < 11
    scales_known = cx.const(node.input(1) if legacy else node.input(2))
    sizes_known = None if legacy else cx.const(node.input(3))
    if node.op_type == "Upsample" and node.opset < 9:
        scales_known = np.array(node.attr("scales"), np.float32)
    if sizes_known is not None and sizes_known.size:
        sizes = [int(n) for n in sizes_known]
        scales = [s / xs[a] for s, a in zip(sizes, axes)]
    elif scales_known is not None and scales_known.size:
        scales = [float(s) for s in scales_known]
        sizes = [int(math.floor(xs[a] * s)) for a, s in zip(axes, scales)]
    else:
        raise LoweringError("neither scales nor sizes are given")
    transform = (
        "asymmetric" if legacy else node.attr("coordinate_transformation_mode", "half_pixel")
    )
    linear = node.attr("mode", "nearest") in ("linear", "bilinear")
    for axis, size, scale in zip(axes, sizes, scales):
        if size == xs[axis] and scale == 1.0:
            continue
        source = _source(transform, xs[axis], size, scale)
        if linear:
            x = _linear(cx, x, axis, source, xs[axis])
        else:
            # Before opset 11 (no nearest_mode yet), the nearest index rounded down.
            rounding = "floor" if legacy else node.attr("nearest_mode", "round_prefer_floor")
            ids = _nearest(rounding, source, xs[axis])
            x = cx.emit("gather", x, cx.literal(ids), axis=axis)
    cx.define(node.out(0), x)


def _source(transform: str, n: int, size: int, scale: float) -> np.ndarray:
    """The source coordinate of each output index along one axis."""
    out = np.arange(size, dtype=np.float64)
    if transform == "asymmetric":
        return out / scale
    if transform == "align_corners":  # the resized length as the scale makes it, unrounded
        length = n * scale
        return np.zeros(size) if length <= 1 else out * (n - 1) / (length - 1)
    if transform == "pytorch_half_pixel" and size == 1:
        return np.zeros(size)
    return (out + 0.5) / scale - 0.5


def _nearest(mode: str, source: np.ndarray, n: int) -> np.ndarray:
    if mode == "floor":
        ids = np.floor(source)
    elif mode == "ceil":
        ids = np.ceil(source)
    elif mode == "round_prefer_ceil":
        ids = np.floor(source + 0.5)
    else:
        ids = np.ceil(source - 0.5)
    return np.clip(ids, 0, n - 1).astype(np.int64)


def _linear(cx: Lowering, x: Value, axis: int, source: np.ndarray, n: int) -> Value:
    """x along axis at fractional `source` positions: the two neighbours, weighted."""
    t = tensor(x)
    clamped = np.clip(source, 0, n - 1)
    low = np.floor(clamped).astype(np.int64)
    high = np.minimum(low + 1, n - 1)
    weight = (clamped - low).astype(NUMPY_TYPES[t.dtype])
    shape = tuple(len(source) if d == axis else 1 for d in range(len(t.shape)))
    w = reshape(cx, cx.literal(weight), shape) if weight.any() else None
    below = cx.emit("gather", x, cx.literal(low), axis=axis)
    if w is None:
        return below
    above = cx.emit("gather", x, cx.literal(high), axis=axis)
    return cx.emit("add", below, cx.emit("multiply", cx.emit("subtract", above, below), w))
