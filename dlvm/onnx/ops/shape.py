"""Layout and shape: Flatten, Reshape, Transpose, Squeeze, Unsqueeze, Concat, Split, Slice,
Expand, Pad, Tile and Gather. Shapes, axes and slice bounds must be known at import time
(constants, or folded: docs/onnx.md, "Folding")."""

from __future__ import annotations

import math

import numpy as np

from dlvm.ir.compose import permute, slice_along
from dlvm.ir.types import TensorType
from dlvm.ir.values import Value
from dlvm.onnx.context import Lowering, LoweringError
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops.common import (
    axes_of,
    axis_of,
    broadcast_shape,
    broadcast_to,
    ints,
    require_constant,
    reshape,
    tensor,
)
from dlvm.onnx.ops.registry import HANDLERS


def emitter(cx: Lowering):
    """cx's emit in the form dlvm.ir.compose takes."""
    return lambda name, *vs, **attrs: cx.emit(name, *vs, **attrs)


@HANDLERS.register("Flatten", since=1)
def flatten(cx: Lowering, node: Node) -> None:
    x = cx.value(node.input(0))
    xs = tensor(x).shape
    axis = node.attr("axis", 1)
    axis = axis + len(xs) if axis < 0 else axis
    cx.define(node.out(0), reshape(cx, x, (math.prod(xs[:axis]), math.prod(xs[axis:]))))


def _shape_input(node: Node, facts: Facts) -> list[str]:
    return require_constant(node, facts, 1)


@HANDLERS.register("Reshape", since=5, check=_shape_input)
def reshape_op(cx: Lowering, node: Node) -> None:
    x = cx.value(node.input(0))
    xs = tensor(x).shape
    target = ints(cx.const(node.input(1)))
    allow_zero = node.attr("allowzero", 0)
    shape = [xs[i] if n == 0 and not allow_zero else n for i, n in enumerate(target)]
    if shape.count(-1) == 1:
        known = math.prod(n for n in shape if n != -1)
        shape[shape.index(-1)] = math.prod(xs) // known if known else 0
    if math.prod(shape) != math.prod(xs) or any(n <= 0 for n in shape):
        raise LoweringError(f"cannot reshape {xs} to {target}")
    cx.define(node.out(0), reshape(cx, x, shape))


@HANDLERS.register("Transpose", since=1)
def transpose(cx: Lowering, node: Node) -> None:
    x = cx.value(node.input(0))
    rank = len(tensor(x).shape)
    perm = tuple(node.attr("perm", range(rank - 1, -1, -1)))
    if perm == tuple(range(rank)) or rank < 2:
        y = x
    elif perm == tuple(range(rank - 1, -1, -1)):
        y = cx.emit("transpose", x)
    else:
        y = permute(emitter(cx), x, perm)
    cx.define(node.out(0), y)


def _axes(cx: Lowering, node: Node, rank: int) -> tuple[int, ...] | None:
    """The axes of Squeeze, Unsqueeze or a reduction: the attribute before the opset that made
    them an input (13, or 18 for the reductions other than ReduceSum), the input after."""
    if "axes" in node.attrs:
        return axes_of(node.attrs["axes"], rank)
    if node.input(1):
        return axes_of(ints(cx.const(node.input(1))), rank)
    return None


@HANDLERS.register("Squeeze", since=1, check=_shape_input)
def squeeze(cx: Lowering, node: Node) -> None:
    x = cx.value(node.input(0))
    xs = tensor(x).shape
    axes = _axes(cx, node, len(xs))
    if axes is None:
        axes = tuple(i for i, n in enumerate(xs) if n == 1)
    if any(xs[a] != 1 for a in axes):
        raise LoweringError(f"Squeeze of axes {list(axes)} of {xs}, not all of size 1")
    cx.define(node.out(0), reshape(cx, x, tuple(n for i, n in enumerate(xs) if i not in axes)))


@HANDLERS.register("Unsqueeze", since=1, check=_shape_input)
def unsqueeze(cx: Lowering, node: Node) -> None:
    x = cx.value(node.input(0))
    xs = tensor(x).shape
    rank = len(xs) + len(node.attrs.get("axes", ())) + len(ints(cx.const(node.input(1))))
    axes = _axes(cx, node, rank) or ()
    shape, rest = [], iter(xs)
    for i in range(rank):
        shape.append(1 if i in axes else next(rest))
    cx.define(node.out(0), reshape(cx, x, shape))


@HANDLERS.register("Concat", since=4)
def concat(cx: Lowering, node: Node) -> None:
    """Concat of the inputs, an empty one left out."""
    names = [n for n in node.inputs if n and n not in cx.empty]
    if not names:
        raise LoweringError("Concat of empty tensors only (DLVM IR has no empty tensors)")
    values = [cx.value(n) for n in names]
    rank = len(tensor(values[0]).shape)
    if rank == 0:
        raise LoweringError("Concat of scalars")
    axis = axis_of(node.attr("axis"), rank)
    y = values[0] if len(values) == 1 else cx.emit("concatenate", *values, axis=axis)
    cx.define(node.out(0), y)


@HANDLERS.register("Split", since=2, check=_shape_input)
def split(cx: Lowering, node: Node) -> None:
    x = cx.value(node.input(0))
    xs = tensor(x).shape
    axis = axis_of(node.attr("axis", 0), len(xs))
    sizes = list(node.attr("split", ())) or ints(cx.const(node.input(1)))
    outputs = len(node.outputs)
    if not sizes:
        count = node.attr("num_outputs", outputs)
        each = -(-xs[axis] // count)
        sizes = [min(each, xs[axis] - i * each) for i in range(count)]
    if sum(sizes) != xs[axis] or len(sizes) != outputs or min(sizes) < 0:
        raise LoweringError(f"Split of {xs[axis]} along axis {axis} into {sizes}")
    start = 0
    for name, size in zip(node.outputs, sizes):
        if size == 0:  # a piece of nothing: empty, for a Concat to leave out
            cx.empty[name] = xs[:axis] + (0,) + xs[axis + 1 :]
            continue
        cx.define(name, _cut(cx, x, axis, start, start + size - 1))
        start += size


def _cut(cx: Lowering, x: Value, axis: int, lo: int, hi: int) -> Value:
    """x[…, lo..hi (closed), …] along axis; x itself when that is all of it."""
    if lo == 0 and hi == tensor(x).shape[axis] - 1:
        return x
    return slice_along(emitter(cx), x, axis, lo, hi)


def _check_slice(node: Node, facts: Facts) -> list[str]:
    return require_constant(node, facts, 1, 2, 3, 4) if node.opset >= 10 else []


@HANDLERS.register("Slice", since=1, check=_check_slice)
def slice_op(cx: Lowering, node: Node) -> None:
    """Slices with step 1 are cut with `slice` (on any axis, compose.slice_along); others, and
    reversed ones, gather the indices NumPy's slice would take."""
    x = cx.value(node.input(0))
    xs = tensor(x).shape
    if node.opset >= 10:
        starts, ends = ints(cx.const(node.input(1))), ints(cx.const(node.input(2)))
        axes = ints(cx.const(node.input(3))) or list(range(len(starts)))
        steps = ints(cx.const(node.input(4))) or [1] * len(starts)
    else:
        starts, ends = list(node.attr("starts")), list(node.attr("ends"))
        axes = list(node.attr("axes", range(len(starts))))
        steps = [1] * len(starts)
    y = x
    for start, end, axis, step in zip(starts, ends, axes, steps):
        a = axis_of(axis, len(xs))
        taken = range(xs[a])[slice(start, end, step)]
        if len(taken) == 0:
            raise LoweringError(
                f"Slice of axis {a} of {xs} is empty (DLVM IR has no empty tensors)"
            )
        if step == 1:
            y = _cut(cx, y, a, taken.start, taken.stop - 1)
        else:
            ids = cx.literal(np.array(list(taken), dtype=np.int64))
            y = cx.emit("gather", y, ids, axis=a)
    cx.define(node.out(0), y)


@HANDLERS.register("Expand", since=8, check=_shape_input)
def expand(cx: Lowering, node: Node) -> None:
    x = cx.value(node.input(0))
    shape = broadcast_shape(tensor(x).shape, tuple(ints(cx.const(node.input(1)))))
    cx.define(node.out(0), broadcast_to(cx, x, shape))


@HANDLERS.register("Tile", since=6, check=_shape_input)
def tile(cx: Lowering, node: Node) -> None:
    x = cx.value(node.input(0))
    for axis, count in enumerate(ints(cx.const(node.input(1)))):
        if count > 1:
            x = cx.emit("concatenate", *([x] * count), axis=axis)
    cx.define(node.out(0), x)


PAD_MODES = ("constant", "edge", "reflect", "wrap")


def _check_pad(node: Node, facts: Facts) -> list[str]:
    reasons = []
    if node.attr("mode", "constant") not in PAD_MODES:
        reasons.append(f"mode={node.attr('mode')} (one of {', '.join(PAD_MODES)})")
    if node.opset >= 11:
        reasons += require_constant(node, facts, 1, 2, 3)
    return reasons


@HANDLERS.register("Pad", since=2, check=_check_pad)
def pad(cx: Lowering, node: Node) -> None:
    """`constant` padding concatenates splats; `edge`, `reflect` and `wrap` gather, along each
    padded axis, the source index of each output position (as NumPy's pad takes it)."""
    x = cx.value(node.input(0))
    t = tensor(x)
    rank = len(t.shape)
    if node.opset >= 11:
        pads = ints(cx.const(node.input(1)))
        fill = cx.const(node.input(2))
        value = 0 if fill is None or fill.size == 0 else fill.item()
        given = ints(cx.const(node.input(3)))
    else:
        pads, value, given = list(node.attr("pads")), node.attr("value", 0.0), []
    axes = [axis_of(a, rank) for a in given] or list(range(rank))
    count = len(axes)
    mode = node.attr("mode", "constant")
    for i, axis in enumerate(axes):
        lo, hi = pads[i], pads[i + count]
        if lo < 0 or hi < 0:
            raise LoweringError("negative pads (cropping) are not supported")
        if mode != "constant":
            if lo or hi:
                ids = _pad_sources(mode, tensor(x).shape[axis], lo, hi)
                x = cx.emit("gather", x, cx.literal(ids), axis=axis)
            continue
        parts: list[Value] = []
        for n in (lo, None, hi):
            if n is None:
                parts.append(x)
            elif n:
                shape = tensor(x).shape
                parts.append(
                    cx.splat(value, TensorType(shape[:axis] + (n,) + shape[axis + 1 :], t.dtype))
                )
        if len(parts) > 1:
            x = cx.emit("concatenate", *parts, axis=axis)
    cx.define(node.out(0), x)


def _pad_sources(mode: str, n: int, lo: int, hi: int) -> np.ndarray:
    """The index along the axis each element of the padded axis copies (NumPy's pad modes):
    the nearest end (edge), the mirror image without repeating the end (reflect), or the
    other end of the axis (wrap)."""
    at = np.arange(-lo, n + hi)
    if mode == "edge":
        return np.clip(at, 0, n - 1)
    if mode == "wrap":
        return at % n
    if n == 1:  # reflect: nothing to mirror
        return np.zeros_like(at)
    period = 2 * (n - 1)
    folded = at % period
    return np.where(folded < n, folded, period - folded)


@HANDLERS.register("Gather", since=1)
def gather(cx: Lowering, node: Node) -> None:
    """NumPy's take along `axis`; known indices may be negative (counted from the end), indices
    the graph computes must be in [0, n) (the IR checks them when the function runs)."""
    x = cx.value(node.input(0))
    xs = tensor(x).shape
    axis = axis_of(node.attr("axis", 0), len(xs))
    known = cx.facts.constants.get(node.input(1))
    if known is not None:
        if ((known < -xs[axis]) | (known >= xs[axis])).any():
            raise LoweringError(f"Gather: an index out of range [-{xs[axis]}, {xs[axis]})")
        ids = cx.literal(np.where(known < 0, known + xs[axis], known).astype(known.dtype))
    else:  # a negative index counts from the end
        ids = cx.value(node.input(1))
        dt = tensor(ids).dtype
        negative = cx.emit("lessThan", ids, cx.scalar(0, dt))
        ids = cx.emit("select", cx.emit("add", ids, cx.scalar(xs[axis], dt)), ids, negative)
    cx.define(node.out(0), cx.emit("gather", x, ids, axis=axis))


@HANDLERS.register(("Shape", "Size"), since=1)
def shape_query(cx: Lowering, node: Node) -> None:
    """What folding could not answer (a shape inference did not find): the IR knows it."""
    xs = cx.shape(node.input(0))
    if node.op_type == "Size":
        cx.define(node.out(0), cx.literal(np.array(math.prod(xs), np.int64)))
        return
    start, end = node.attr("start", 0), node.attr("end", len(xs))
    known = np.array(xs[slice(start, end)], np.int64)
    if known.size == 0:
        raise LoweringError("Shape of a scalar (DLVM IR has no empty tensors)")
    cx.define(node.out(0), cx.literal(known))


@HANDLERS.register("Trilu", since=14, check=lambda n, f: require_constant(n, f, 1))
def trilu(cx: Lowering, node: Node) -> None:
    """The lower (upper=0) or upper triangle of each matrix, from diagonal k on, zeros
    elsewhere: a mask made of two index ramps."""
    x = cx.value(node.input(0))
    t = tensor(x)
    k = ints(cx.const(node.input(1)))[0] if node.input(1) else 0
    rows, cols = t.shape[-2:]
    i = np.arange(rows).reshape(rows, 1)
    j = np.arange(cols).reshape(1, cols)
    keep = (j - i >= k) if node.attr("upper", 1) else (j - i <= k)
    mask = cx.literal(keep.reshape((1,) * (len(t.shape) - 2) + keep.shape))
    zero = cx.scalar(0 if not t.dtype.is_bool else False, t.dtype)
    cx.define(node.out(0), cx.emit("select", x, zero, mask))
