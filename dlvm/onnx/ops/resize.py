"""Resize (and Upsample, its form before opset 10): each resized axis in turn, its weights and
indices computed at import (ops/resize_taps.py). nearest is one `gather` of the source indices;
linear and cubic gather each output's taps as an axis after it ([…, size, taps, …]), weigh them
and sum them away. tf_crop_and_resize's outputs outside the input take extrapolation_value."""

from __future__ import annotations

import math

import numpy as np

from dlvm.ir.values import Value
from dlvm.onnx.context import Lowering, LoweringError
from dlvm.onnx.dtypes import NUMPY_TYPES
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops.common import axis_of, reduce, require_constant, reshape, tensor
from dlvm.onnx.ops.registry import HANDLERS
from dlvm.onnx.ops.resize_taps import Axis, Kernel, nearest, source

TRANSFORMS = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_crop_and_resize",
)
NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
POLICIES = ("stretch", "not_larger", "not_smaller")


def _legacy(node: Node) -> bool:
    """Upsample, and Resize of opset 10: (X, scales), the transformation asymmetric."""
    return node.op_type == "Upsample" or node.opset < 11


def _check(node: Node, facts: Facts) -> list[str]:
    reasons = []
    mode = node.attr("mode", "nearest")
    if mode not in ("nearest", "linear", "bilinear", "cubic"):
        reasons.append(f"mode={mode} (nearest, linear or cubic)")
    transform = node.attr("coordinate_transformation_mode", "half_pixel")
    if node.op_type == "Resize" and transform not in TRANSFORMS:
        reasons.append(f"coordinate_transformation_mode={transform}")
    if node.attr("nearest_mode", "round_prefer_floor") not in NEAREST:
        reasons.append(f"nearest_mode={node.attr('nearest_mode')}")
    if node.attr("antialias", 0) and mode == "nearest":
        reasons.append("antialias=1 with mode=nearest (only linear and cubic are antialiased)")
    if node.attr("keep_aspect_ratio_policy", "stretch") not in POLICIES:
        reasons.append(f"keep_aspect_ratio_policy={node.attr('keep_aspect_ratio_policy')}")
    if _legacy(node):
        slots: tuple[int, ...] = (1,)
    elif transform == "tf_crop_and_resize":
        slots = (1, 2, 3)
    else:
        slots = (2, 3)
    return reasons + require_constant(node, facts, *slots)


@HANDLERS.register("Upsample", since=7, until=9, check=_check)
@HANDLERS.register("Resize", since=10, check=_check)
def resize(cx: Lowering, node: Node) -> None:
    x = cx.value(node.input(0))
    xs = tensor(x).shape
    transform = (
        "asymmetric" if _legacy(node) else node.attr("coordinate_transformation_mode", "half_pixel")
    )
    mode = node.attr("mode", "nearest")
    kernel = Kernel(
        cubic=mode == "cubic",
        a=node.attr("cubic_coeff_a", -0.75),
        antialias=bool(node.attr("antialias", 0)),
        exclude_outside=bool(node.attr("exclude_outside", 0)),
    )
    if mode != "nearest" and not tensor(x).dtype.is_float:
        raise LoweringError(f"mode={mode} of {tensor(x).dtype} (only of floats)")
    outside = None
    for axis, a in _axes(cx, node, xs, transform):
        at, beyond = source(transform, a)
        if mode == "nearest":
            # Before opset 11 (no nearest_mode yet), the nearest index rounded down.
            rounding = "floor" if _legacy(node) else node.attr("nearest_mode", "round_prefer_floor")
            x = cx.emit("gather", x, cx.literal(nearest(rounding, at, a.n)), axis=axis)
        else:
            x = _interpolated(cx, x, axis, *kernel.taps(at, a))
        if beyond is not None and beyond.any():
            spread = beyond.reshape(tuple(a.size if d == axis else 1 for d in range(len(xs))))
            outside = spread if outside is None else outside | spread
    if outside is not None:
        dt = tensor(x).dtype
        fill = cx.scalar(node.attr("extrapolation_value", 0.0), dt)
        x = cx.emit("select", fill, x, cx.literal(outside))
    cx.define(node.out(0), x)


def _axes(cx: Lowering, node: Node, xs: tuple[int, ...], transform: str) -> list[tuple[int, Axis]]:
    """Each axis that changes, with its input and output lengths, scale and crop."""
    rank = len(xs)
    axes = [axis_of(a, rank) for a in node.attr("axes", range(rank))]
    legacy = _legacy(node)
    scales_known = cx.const(node.input(1) if legacy else node.input(2))
    sizes_known = None if legacy else cx.const(node.input(3))
    if node.op_type == "Upsample" and node.opset < 9:
        scales_known = np.array(node.attr("scales"), np.float32)
    if sizes_known is not None and sizes_known.size:
        sizes = [int(n) for n in sizes_known]
        scales = [s / xs[a] for s, a in zip(sizes, axes)]
        policy = node.attr("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            # One scale for every axis, the one that fits (not_larger) or covers (not_smaller)
            # the sizes asked for; the sizes rounded half up from it.
            scale = min(scales) if policy == "not_larger" else max(scales)
            scales = [scale] * len(axes)
            sizes = [int(scale * xs[a] + 0.5) for a in axes]
    elif scales_known is not None and scales_known.size:
        scales = [float(s) for s in scales_known]
        sizes = [int(math.floor(xs[a] * s)) for a, s in zip(axes, scales)]
    else:
        raise LoweringError("neither scales nor sizes are given")
    if len(scales) != len(axes):
        raise LoweringError(f"{len(scales)} scales or sizes for {len(axes)} axes")
    rois = _rois(cx, node, axes, rank) if transform == "tf_crop_and_resize" else {}
    out = []
    for axis, size, scale in zip(axes, sizes, scales):
        roi = rois.get(axis, (0.0, 1.0))
        if size == xs[axis] and math.isclose(scale, 1.0) and roi == (0.0, 1.0):
            continue
        out.append((axis, Axis(xs[axis], size, scale, roi)))
    return out


def _rois(cx: Lowering, node: Node, axes: list[int], rank: int) -> dict[int, tuple[float, float]]:
    """tf_crop_and_resize's crop of each axis: roi is [starts…, ends…] over `axes` (or every
    axis), as fractions of the input."""
    known = cx.const(node.input(1))
    roi = [] if known is None else [float(v) for v in known.ravel()]
    if not roi:
        raise LoweringError("coordinate_transformation_mode=tf_crop_and_resize without a roi")
    named = axes if len(roi) == 2 * len(axes) else list(range(rank))
    if len(roi) != 2 * len(named):
        raise LoweringError(f"a roi of {len(roi)} values for {len(named)} axes")
    return {axis: (roi[i], roi[i + len(named)]) for i, axis in enumerate(named)}


def _interpolated(cx: Lowering, x: Value, axis: int, ids: np.ndarray, weights: np.ndarray) -> Value:
    """Σ over taps of x[…, ids[i, t], …] · weights[i, t]: one gather of every tap, weighed."""
    t = tensor(x)
    rank = len(t.shape)
    gathered = cx.emit("gather", x, cx.literal(ids), axis=axis)
    shape = tuple(weights.shape[d - axis] if axis <= d <= axis + 1 else 1 for d in range(rank + 1))
    w = reshape(cx, cx.literal(weights.astype(NUMPY_TYPES[t.dtype])), shape)
    return reduce(cx, cx.emit("multiply", gathered, w), "add", (axis + 1,), keep=False)
