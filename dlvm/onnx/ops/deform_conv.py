"""DeformConv (2-D): a convolution whose every tap reads the input at its place moved by the
offsets the graph computes, bilinearly (zeros outside), scaled by the optional mask. The
samples are GridSample's taps (ops/sampling.py) read by one `gather` from the input viewed as
rows [N·offset groups·H·W, channels per offset group]; the convolution is then a `dot` per
group of the weights [out, in·taps] with the samples [in·taps, N·outputs]."""

from __future__ import annotations

import numpy as np

from dlvm.ir.compose import permute
from dlvm.ir.types import DataType
from dlvm.ir.values import Value
from dlvm.onnx.context import Lowering, LoweringError
from dlvm.onnx.graph import Node
from dlvm.onnx.ops.common import reduce, reshape, tensor
from dlvm.onnx.ops.registry import HANDLERS
from dlvm.onnx.ops.sampling import emitter, numpy_type, outer, taps


@HANDLERS.register("DeformConv", since=19)
def deform_conv(cx: Lowering, node: Node) -> None:
    x, w, offset = (cx.value(node.input(i)) for i in range(3))
    xs, ws, dt = tensor(x).shape, tensor(w).shape, tensor(x).dtype
    if len(xs) != 4 or len(ws) != 4:
        raise LoweringError(f"DeformConv of {xs} by {ws} (only 2-D)")
    n, c, h, wd = xs
    out_c = ws[0]
    kh, kw = node.attr("kernel_shape", ws[2:])
    groups, offset_groups = node.attr("group", 1), node.attr("offset_group", 1)
    sh, sw = node.attr("strides", [1, 1])
    dh, dw = node.attr("dilations", [1, 1])
    top, left, bottom, right = node.attr("pads", [0, 0, 0, 0])
    oh = (h + top + bottom - ((kh - 1) * dh + 1)) // sh + 1
    ow = (wd + left + right - ((kw - 1) * dw + 1)) // sw + 1
    if (
        c != ws[1] * groups
        or out_c % groups
        or c % offset_groups
        or tensor(offset).shape != (n, offset_groups * kh * kw * 2, oh, ow)
    ):
        raise LoweringError(
            f"DeformConv of {xs} by {ws} with offsets {tensor(offset).shape}, "
            f"group={groups}, offset_group={offset_groups}"
        )
    moved = reshape(cx, offset, (n, offset_groups, kh, kw, 2, oh, ow))
    # Each tap's place before its offset, along y [1, 1, kh, 1, oh, 1] and x.
    base_y = (np.arange(oh)[None, :] * sh - top + np.arange(kh)[:, None] * dh).reshape(
        1, 1, kh, 1, oh, 1
    )
    base_x = (np.arange(ow)[None, :] * sw - left + np.arange(kw)[:, None] * dw).reshape(
        1, 1, 1, kw, 1, ow
    )
    index: Value | None = None
    weight: Value | None = None
    for axis, (base, d, stride) in enumerate(((base_y, h, wd), (base_x, wd, 1))):
        along = cx.emit("gather", moved, cx.scalar(axis, DataType.I64), axis=4)
        at = cx.emit("add", along, cx.literal(base.astype(numpy_type(dt))))
        pos, wt = taps(cx, at, d, "linear", "zeros", True)
        ids = cx.emit(
            "multiply", cx.emit("convert", pos, dtype=DataType.I64), cx.scalar(stride, DataType.I64)
        )
        index, weight = outer(cx, index, ids, "add"), outer(cx, weight, wt, "multiply")
    assert index is not None and weight is not None
    per = c // offset_groups
    blocks = np.arange(n * offset_groups, dtype=np.int64).reshape(
        n, offset_groups, 1, 1, 1, 1, 1, 1
    )
    index = cx.emit("add", index, cx.literal(blocks * h * wd))
    table = reshape(cx, x, (n, offset_groups, per, h * wd))
    table = reshape(
        cx, permute(emitter(cx), table, (0, 1, 3, 2)), (n * offset_groups * h * wd, per)
    )
    picked = cx.emit("gather", table, index, axis=0)  # [N, og, kh, kw, oh, ow, 2, 2, per]
    if node.input(4):
        mask = reshape(cx, cx.value(node.input(4)), (n, offset_groups, kh, kw, oh, ow, 1, 1))
        weight = cx.emit("multiply", weight, mask)
    weighted = cx.emit("multiply", picked, reshape(cx, weight, tensor(weight).shape + (1,)))
    samples = reduce(cx, weighted, "add", (6, 7), keep=False)  # [N, og, kh, kw, oh, ow, per]
    samples = permute(emitter(cx), samples, (0, 1, 6, 2, 3, 4, 5))
    samples = reshape(cx, samples, (n, c, kh * kw, oh * ow))
    y = _grouped_product(cx, w, samples, groups)  # [N, out_c, oh·ow]
    if node.input(3):
        y = cx.emit("add", y, reshape(cx, cx.value(node.input(3)), (1, out_c, 1)))
    cx.define(node.out(0), reshape(cx, y, (n, out_c, oh, ow)))


def _grouped_product(cx: Lowering, w: Value, samples: Value, groups: int) -> Value:
    """Σ over each group's input channels and taps of weights × samples: [N, out, outputs]."""
    out_c, per, kh, kw = tensor(w).shape
    n, c, taps_, points = tensor(samples).shape
    rows = per * taps_
    parts = []
    for g in range(groups):
        ws = reshape(cx, w, (out_c, rows))
        if groups > 1:
            chosen = np.arange(g * (out_c // groups), (g + 1) * (out_c // groups))
            ws = cx.emit("gather", ws, cx.literal(chosen), axis=0)
            block = cx.emit(
                "gather", samples, cx.literal(np.arange(g * per, (g + 1) * per)), axis=1
            )
        else:
            block = samples
        columns = permute(emitter(cx), reshape(cx, block, (n, rows, points)), (1, 0, 2))
        parts.append(cx.emit("dot", ws, reshape(cx, columns, (rows, n * points))))
    y = parts[0] if len(parts) == 1 else cx.emit("concatenate", *parts, axis=0)
    y = reshape(cx, y, (out_c, n, points))
    return permute(emitter(cx), y, (1, 0, 2))
