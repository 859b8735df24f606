"""RoiAlign: each region of interest (rois the graph computes) divided into output_height ×
output_width bins, each bin the average (or max) of sampling_ratio² bilinear samples. The
samples' coordinates become indices at run time (`convert`), read by one `gather` from the
input viewed as rows [N·H·W, C]."""

from __future__ import annotations

import numpy as np

from dlvm.ir.compose import permute
from dlvm.ir.types import DataType
from dlvm.ir.values import Value
from dlvm.onnx.context import Lowering, LoweringError
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops.common import cast, reduce, reshape, tensor
from dlvm.onnx.ops.registry import HANDLERS
from dlvm.onnx.ops.sampling import emitter, numpy_type


def _check(node: Node, facts: Facts) -> list[str]:
    reasons = []
    if node.attr("sampling_ratio", 0) <= 0:
        reasons.append(
            "sampling_ratio=0 (adaptive: the number of samples would depend on each roi's size; "
            "give a fixed sampling_ratio)"
        )
    if node.attr("mode", "avg") not in ("avg", "max"):
        reasons.append(f"mode={node.attr('mode')} (avg or max)")
    transform = node.attr("coordinate_transformation_mode", "half_pixel")
    if transform not in ("half_pixel", "output_half_pixel"):
        reasons.append(f"coordinate_transformation_mode={transform}")
    return reasons


@HANDLERS.register("RoiAlign", since=10, check=_check)
def roi_align(cx: Lowering, node: Node) -> None:
    x, rois = cx.value(node.input(0)), cx.value(node.input(1))
    xs, dt = tensor(x).shape, tensor(x).dtype
    if len(xs) != 4 or tensor(rois).shape[1:] != (4,):
        raise LoweringError(f"RoiAlign of {xs} with rois {tensor(rois).shape}")
    n, c, h, w = xs
    count = tensor(rois).shape[0]
    rois = cast(cx, rois, dt)
    # Before opset 16 there was no attribute: the regions were output_half_pixel's.
    default = "half_pixel" if node.opset >= 16 else "output_half_pixel"
    half = node.attr("coordinate_transformation_mode", default) == "half_pixel"
    ratio = node.attr("sampling_ratio")
    scale = node.attr("spatial_scale", 1.0)
    out_h, out_w = node.attr("output_height", 1), node.attr("output_width", 1)

    def corner(i: int) -> Value:
        v = cx.emit("gather", rois, cx.scalar(i, DataType.I64), axis=1)  # [R]
        v = cx.emit("multiply", v, cx.scalar(scale, dt))
        return cx.emit("subtract", v, cx.scalar(0.5, dt)) if half else v

    # Sample positions along each axis, [R, bins, ratio]: start + bin · (b + (s + ½) / ratio).
    ys, y_valid = _axis(cx, corner(1), corner(3), out_h, ratio, h, half)
    xs_, x_valid = _axis(cx, corner(0), corner(2), out_w, ratio, w, half)
    ypos, yw = ys
    xpos, xw = xs_
    # [R, out_h, ratio, 2, out_w, ratio, 2]: every sample's four neighbours.
    ypos, yw, y_valid = (reshape(cx, v, _spread(v, count, 0)) for v in (ypos, yw, y_valid))
    xpos, xw, x_valid = (reshape(cx, v, _spread(v, count, 1)) for v in (xpos, xw, x_valid))
    valid = cx.emit("and", y_valid, x_valid)
    weight = cx.emit("multiply", yw, xw)
    weight = cx.emit("select", weight, cx.scalar(0, dt), valid)
    batch = cast(cx, cx.value(node.input(2)), DataType.I64)
    batch = reshape(
        cx, cx.emit("multiply", batch, cx.scalar(h * w, DataType.I64)), (count,) + (1,) * 6
    )
    index = cx.emit("add", cx.emit("multiply", ypos, cx.scalar(w, DataType.I64)), xpos)
    index = cx.emit("add", index, batch)
    table = reshape(
        cx, permute(emitter(cx), reshape(cx, x, (n, c, h * w)), (0, 2, 1)), (n * h * w, c)
    )
    picked = cx.emit("gather", table, index, axis=0)  # [R, out_h, ratio, 2, out_w, ratio, 2, C]
    values = cx.emit("multiply", picked, reshape(cx, weight, tensor(weight).shape + (1,)))
    if node.attr("mode", "avg") == "avg":
        # The average of the samples: each sample the sum of its four weighted neighbours.
        y = reduce(cx, values, "add", (2, 3, 5, 6), keep=False)
        y = cx.emit("divide", y, cx.scalar(ratio * ratio, dt))
    else:  # the max over the samples of the max of the four weighted neighbours (ONNX's)
        y = reduce(cx, values, "max", (2, 3, 5, 6), keep=False)
    cx.define(node.out(0), permute(emitter(cx), y, (0, 3, 1, 2)))


def _spread(v: Value, count: int, which: int) -> tuple[int, ...]:
    """[R, bins, ratio, 2] (or [R, bins, ratio]) placed as the y (0) or x (1) half of
    [R, out_h, ratio, 2, out_w, ratio, 2]."""
    shape = tensor(v).shape[1:]
    if len(shape) == 2:
        shape = shape + (1,)
    ones = (1, 1, 1)
    return (count,) + (shape + ones if which == 0 else ones + shape)


def _axis(
    cx: Lowering, start: Value, end: Value, bins: int, ratio: int, d: int, half: bool
) -> tuple[tuple[Value, Value], Value]:
    """Along one axis: the two neighbours of each sample ([R, bins, ratio, 2] integer
    positions and weights) and whether the sample is inside (not past -1 or d)."""
    dt = tensor(start).dtype
    count = tensor(start).shape[0]
    size = cx.emit("subtract", end, start)
    if not half:
        size = cx.emit("max", size, cx.scalar(1, dt))
    step = cx.emit("divide", size, cx.scalar(bins, dt))
    frac = (np.arange(bins)[:, None] + (np.arange(ratio)[None, :] + 0.5) / ratio).astype(np.float64)
    lit = cx.literal(frac.astype(numpy_type(dt)).reshape(1, bins, ratio))
    at = cx.emit(
        "add",
        reshape(cx, start, (count, 1, 1)),
        cx.emit("multiply", reshape(cx, step, (count, 1, 1)), lit),
    )
    valid = cx.emit(
        "and",
        cx.emit("greaterThanOrEqual", at, cx.scalar(-1, dt)),
        cx.emit("lessThanOrEqual", at, cx.scalar(d, dt)),
    )
    clamped = cx.emit("min", cx.emit("max", at, cx.scalar(0, dt)), cx.scalar(d - 1, dt))
    low = cx.emit("floor", clamped)
    frac_v = reshape(cx, cx.emit("subtract", clamped, low), (count, bins, ratio, 1))
    weights = cx.emit(
        "add",
        cx.emit(
            "multiply", frac_v, cx.literal(np.array([-1, 1], numpy_type(dt)).reshape(1, 1, 1, 2))
        ),
        cx.literal(np.array([1, 0], numpy_type(dt)).reshape(1, 1, 1, 2)),
    )
    low_i = reshape(cx, cx.emit("convert", low, dtype=DataType.I64), (count, bins, ratio, 1))
    pos = cx.emit("add", low_i, cx.literal(np.array([0, 1], np.int64).reshape(1, 1, 1, 2)))
    pos = cx.emit("min", pos, cx.scalar(d - 1, DataType.I64))
    return (pos, weights), valid
