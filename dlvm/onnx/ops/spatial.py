"""Rearranging the spatial axes: SpaceToDepth and DepthToSpace (a reshape, a permutation and a
reshape), CenterCropPad, Col2Im and MaxUnpool (`scatterAdd` of the values at indices known at
import, or for MaxUnpool computed by the graph)."""

from __future__ import annotations

import math

import numpy as np

from dlvm.ir.compose import permute
from dlvm.ir.types import TensorType
from dlvm.ir.values import Value
from dlvm.onnx.context import Lowering, LoweringError
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops.common import axis_of, ints, require_constant, reshape, tensor
from dlvm.onnx.ops.registry import HANDLERS


def _emitter(cx: Lowering):
    return lambda name, *vs, **attrs: cx.emit(name, *vs, **attrs)


def _check_blocks(node: Node, facts: Facts) -> list[str]:
    mode = node.attr("mode", "DCR")
    return [] if mode in ("DCR", "CRD") else [f"mode={mode} (DCR or CRD)"]


@HANDLERS.register("SpaceToDepth", since=1, check=_check_blocks)
def space_to_depth(cx: Lowering, node: Node) -> None:
    """[N, C, H, W] to [N, C·b², H/b, W/b]: each b×b block becomes channels, the block's
    position outermost (DCR) or the channel outermost (CRD)."""
    x = cx.value(node.input(0))
    n, c, h, w = _nchw(node, tensor(x).shape)
    b = node.attr("blocksize")
    if h % b or w % b:
        raise LoweringError(f"SpaceToDepth of {(n, c, h, w)} in blocks of {b}")
    blocks = reshape(cx, x, (n, c, h // b, b, w // b, b))
    perm = (0, 3, 5, 1, 2, 4) if node.attr("mode", "DCR") == "DCR" else (0, 1, 3, 5, 2, 4)
    y = permute(_emitter(cx), blocks, perm)
    cx.define(node.out(0), reshape(cx, y, (n, c * b * b, h // b, w // b)))


@HANDLERS.register("DepthToSpace", since=1, check=_check_blocks)
def depth_to_space(cx: Lowering, node: Node) -> None:
    """SpaceToDepth's inverse: [N, C, H, W] to [N, C/b², H·b, W·b]."""
    x = cx.value(node.input(0))
    n, c, h, w = _nchw(node, tensor(x).shape)
    b = node.attr("blocksize")
    if c % (b * b):
        raise LoweringError(f"DepthToSpace of {(n, c, h, w)} in blocks of {b}")
    if node.attr("mode", "DCR") == "DCR":
        split, perm = (n, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2)
    else:
        split, perm = (n, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3)
    y = permute(_emitter(cx), reshape(cx, x, split), perm)
    cx.define(node.out(0), reshape(cx, y, (n, c // (b * b), h * b, w * b)))


def _nchw(node: Node, shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    if len(shape) != 4:
        raise LoweringError(f"{node.op_type} of {shape}: an input [N, C, H, W] is needed")
    n, c, h, w = shape
    return n, c, h, w


@HANDLERS.register(
    "CenterCropPad", since=18, check=lambda node, facts: require_constant(node, facts, 1)
)
def center_crop_pad(cx: Lowering, node: Node) -> None:
    """Each of `axes` cut to its centre or padded with zeros around it to the length `shape`
    gives (the odd element after the centre, as ONNX's reference places it)."""
    x = cx.value(node.input(0))
    t = tensor(x)
    rank = len(t.shape)
    lengths = ints(cx.const(node.input(1)))
    axes = [axis_of(a, rank) for a in node.attr("axes", range(rank))]
    if len(axes) != len(lengths):
        raise LoweringError(f"shape has {len(lengths)} lengths for {len(axes)} axes")
    for axis, length in zip(axes, lengths):
        size = tensor(x).shape[axis]
        if length < size:
            start = (size - length) // 2
            x = cx.emit("gather", x, cx.literal(np.arange(start, start + length)), axis=axis)
        elif length > size:
            before = (length - size) // 2
            x = _zeros_around(cx, x, axis, before, length - size - before)
    cx.define(node.out(0), x)


def _zeros_around(cx: Lowering, x: Value, axis: int, before: int, after: int) -> Value:
    t = tensor(x)
    parts = []
    for count in (before, None, after):
        if count is None:
            parts.append(x)
        elif count:
            shape = t.shape[:axis] + (count,) + t.shape[axis + 1 :]
            parts.append(cx.splat(0, TensorType(shape, t.dtype)))
    return cx.emit("concatenate", *parts, axis=axis) if len(parts) > 1 else x


@HANDLERS.register(
    "Col2Im", since=18, check=lambda node, facts: require_constant(node, facts, 1, 2)
)
def col2im(cx: Lowering, node: Node) -> None:
    """[N, C·∏block, L] columns added back into images [N, C, image…] (im2col's adjoint): one
    `scatterAdd` of every column element at its position in the padded image, known at import,
    then the padding cut off."""
    x = cx.value(node.input(0))
    n, rows, count = tensor(x).shape
    image = tuple(ints(cx.const(node.input(1))))
    block = tuple(ints(cx.const(node.input(2))))
    dims = len(image)
    strides = tuple(node.attr("strides", [1] * dims))
    dilations = tuple(node.attr("dilations", [1] * dims))
    pads = list(node.attr("pads", [0] * (2 * dims)))
    padded = tuple(size + pads[i] + pads[i + dims] for i, size in enumerate(image))
    blocks = [
        (padded[i] - dilations[i] * (block[i] - 1) - 1) // strides[i] + 1 for i in range(dims)
    ]
    kernel = math.prod(block)
    if rows % kernel or count != math.prod(blocks):
        raise LoweringError(f"Col2Im of {tensor(x).shape} into {image} by blocks {block}")
    # The position in the padded image of each (kernel offset, block) element, per axis then
    # combined row-major: [∏block, L].
    at = np.zeros((kernel, count), np.int64)
    offsets = np.indices(block).reshape(dims, kernel)
    starts = np.indices(blocks).reshape(dims, count)
    for i in range(dims):
        along = starts[i][None, :] * strides[i] + offsets[i][:, None] * dilations[i]
        at = at * padded[i] + along
    channels = rows // kernel
    columns = reshape(cx, x, (n, channels, kernel * count))
    zeros = cx.splat(0, TensorType((n, channels, math.prod(padded)), tensor(x).dtype))
    y = cx.emit("scatterAdd", columns, cx.literal(at.reshape(-1)), zeros, axis=2)
    y = reshape(cx, y, (n, channels) + padded)
    for i in range(dims):
        lo = pads[i]
        if lo or pads[i + dims]:
            ids = cx.literal(np.arange(lo, lo + image[i]))
            y = cx.emit("gather", y, ids, axis=2 + i)
    cx.define(node.out(0), y)


def _check_unpool(node: Node, facts: Facts) -> list[str]:
    return require_constant(node, facts, 2)


@HANDLERS.register("MaxUnpool", since=9, check=_check_unpool)
def max_unpool(cx: Lowering, node: Node) -> None:
    """Each value put at its index into the flattened output, zeros elsewhere: a `scatterAdd`,
    divided by how many values each place receives, so that an index repeated (windows that
    overlap share a maximum) gives the value once, as ONNX's reference writes it. The indices
    are into the shape the pooling inverted gives; a larger output_shape adds zeros after."""
    x, ids = cx.value(node.input(0)), cx.value(node.input(1))
    xs, dt = tensor(x).shape, tensor(x).dtype
    spatial = len(xs) - 2
    kernel = node.attr("kernel_shape")
    strides = node.attr("strides", [1] * spatial)
    pads = node.attr("pads", [0] * (2 * spatial))
    inferred = xs[:2] + tuple(
        (xs[2 + i] - 1) * strides[i] - pads[i] - pads[i + spatial] + kernel[i]
        for i in range(spatial)
    )
    out = tuple(ints(cx.const(node.input(2)))) if node.input(2) else inferred
    if len(out) != len(xs) or out[:2] != xs[:2] or any(o < i for o, i in zip(out, inferred)):
        raise LoweringError(f"output_shape {list(out)} does not hold {list(inferred)}")
    size = math.prod(inferred)
    flat_ids = reshape(cx, ids, (math.prod(xs),))
    values = reshape(cx, x, (math.prod(xs),))
    zeros = cx.splat(0, TensorType((size,), dt))
    total = cx.emit("scatterAdd", values, flat_ids, zeros, axis=0)
    ones = cx.splat(1, TensorType((math.prod(xs),), dt))
    hits = cx.emit("scatterAdd", ones, flat_ids, zeros, axis=0)
    times = cx.emit("max", hits, cx.scalar(1, dt))
    y = reshape(cx, cx.emit("divide", total, times), inferred)
    for axis in range(2, len(xs)):
        y = _zeros_around(cx, y, axis, 0, out[axis] - inferred[axis])
    cx.define(node.out(0), y)
