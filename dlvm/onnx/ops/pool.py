"""Pooling: MaxPool, AveragePool and LpPool as TEL's maxpool2d and avgpool2d emit them (padding
concatenated around the input, -inf for max, zeros otherwise, then `reduceWindow`), and the
global poolings as reductions over the spatial axes.

`reduceWindow` has no dilation: a dilated window gathers its taps instead, one spatial axis at
a time (a `gather` of known ids [outputs, taps], which adds the taps as an axis after the
outputs, reduced away). MaxPool's Indices output gathers every tap of every axis at once and
finds the first maximum among them."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dlvm.ir.types import DataType, TensorType
from dlvm.ir.values import Value
from dlvm.onnx.context import Lowering, LoweringError
from dlvm.onnx.dtypes import NUMPY_TYPES
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops.common import reduce, reshape, tensor
from dlvm.onnx.ops.conv import check_auto_pad, padding
from dlvm.onnx.ops.registry import HANDLERS


@dataclass(frozen=True)
class Window:
    """A pooling window along the spatial axes: `pads` are the padding concatenated (the
    node's, plus what ceil_mode adds after), `given` the node's own."""

    sizes: tuple[int, ...]
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: list[tuple[int, int]]
    given: list[tuple[int, int]]

    def span(self, axis: int) -> int:
        return (self.kernel[axis] - 1) * self.dilations[axis] + 1

    def outputs(self, axis: int) -> int:
        lo, hi = self.pads[axis]
        return (self.sizes[axis] + lo + hi - self.span(axis)) // self.strides[axis] + 1

    def taps(self, axis: int) -> np.ndarray:
        """[outputs, kernel]: the position of each tap of each window in the padded input."""
        starts = np.arange(self.outputs(axis)) * self.strides[axis]
        return starts[:, None] + np.arange(self.kernel[axis])[None, :] * self.dilations[axis]


def _check(node: Node, facts: Facts) -> list[str]:
    reasons = check_auto_pad(node, facts)
    if node.op_type == "LpPool" and node.attr("p", 2) < 1:
        reasons.append(f"p={node.attr('p')} (a power of at least 1 is needed)")
    return reasons


def _window(node: Node, xs: tuple[int, ...]) -> Window:
    n = len(xs) - 2
    kernel = tuple(node.attr("kernel_shape"))
    strides = tuple(node.attr("strides", [1] * n))
    dilations = tuple(node.attr("dilations", [1] * n))
    given = padding(node, xs[2:], kernel, strides, dilations)
    pads = given
    if node.attr("ceil_mode", 0):
        pads = _ceil_pads(xs[2:], kernel, strides, dilations, given)
    return Window(xs[2:], kernel, strides, dilations, pads, given)


def _ceil_pads(
    sizes: tuple[int, ...],
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    dilations: tuple[int, ...],
    pads: list[tuple[int, int]],
) -> list[tuple[int, int]]:
    """Padding after each axis so that a window that starts inside the input or its padding
    before it gives an output (ceil_mode=1, as ONNX and PyTorch count them)."""
    out = []
    for size, k, s, d, (lo, hi) in zip(sizes, kernel, strides, dilations, pads):
        span = (k - 1) * d + 1
        count = math.ceil((size + lo + hi - span) / s) + 1
        if (count - 1) * s >= size + lo:  # the last window would start in the padding after
            count -= 1
        extra = max((count - 1) * s + span - (size + lo + hi), 0)
        out.append((lo, hi + extra))
    return out


def _padded(cx: Lowering, x: Value, pads: list[tuple[int, int]], fill: float) -> Value:
    for axis, (lo, hi) in enumerate(pads, start=2):
        t = tensor(x)
        parts = []
        for count in (lo, None, hi):
            if count is None:
                parts.append(x)
            elif count > 0:
                side = TensorType(t.shape[:axis] + (count,) + t.shape[axis + 1 :], t.dtype)
                parts.append(cx.splat(fill, side))
        if len(parts) > 1:
            x = cx.emit("concatenate", *parts, axis=axis)
    return x


def _gathered(cx: Lowering, padded: Value, w: Window) -> Value:
    """[N, C, out₁, taps₁, out₂, taps₂, …]: every tap of every window."""
    for i in range(len(w.kernel)):
        padded = cx.emit("gather", padded, cx.literal(w.taps(i)), axis=2 + 2 * i)
    return padded


def _tap_dims(w: Window) -> tuple[int, ...]:
    return tuple(3 + 2 * i for i in range(len(w.kernel)))


def _pooled(cx: Lowering, x: Value, w: Window, comb: str, fill: float) -> Value:
    """comb (max or add) over each window of x padded with fill."""
    padded = _padded(cx, x, w.pads, fill)
    if any(d != 1 for d in w.dilations):
        # max and add are separable: one axis at a time, its taps gathered and reduced away.
        for i in range(len(w.kernel)):
            taps = cx.emit("gather", padded, cx.literal(w.taps(i)), axis=2 + i)
            padded = reduce(cx, taps, comb, (3 + i,), keep=False)
        return padded
    return cx.emit(
        "reduceWindow",
        padded,
        cx.scalar(fill, tensor(x).dtype),
        comb=comb,
        dims=(1, 1, *w.kernel),
        strides=(1, 1, *w.strides),
        padding="none",
    )


@HANDLERS.register(("MaxPool", "AveragePool"), since=7, check=_check)
def pool(cx: Lowering, node: Node) -> None:
    x = cx.value(node.input(0))
    xs = tensor(x).shape
    if len(xs) < 3:
        raise LoweringError(f"{node.op_type} of {xs}: an input [N, C, spatial…] is needed")
    w = _window(node, xs)
    if node.op_type == "AveragePool":
        y = _pooled(cx, x, w, "add", 0.0)
        include = bool(node.attr("count_include_pad", 0))
        cx.define(node.out(0), cx.emit("divide", y, _divisor(cx, w, tensor(y), include)))
    elif node.out(1):
        _max_with_indices(cx, node, x, w)
    else:
        cx.define(node.out(0), _pooled(cx, x, w, "max", -math.inf))


@HANDLERS.register("LpPool", since=2, check=_check)
def lp_pool(cx: Lowering, node: Node) -> None:
    """(Σ |x|^p)^(1/p) over each window, the padding zeros (as ONNX's reference computes it)."""
    x = cx.value(node.input(0))
    xs, dt = tensor(x).shape, tensor(x).dtype
    if len(xs) < 3:
        raise LoweringError(f"LpPool of {xs}: an input [N, C, spatial…] is needed")
    p = node.attr("p", 2)
    if p == 2:
        powered = cx.emit("multiply", x, x)
    else:
        size = cx.emit("multiply", x, cx.emit("sign", x))  # |x|, as Abs lowers it
        powered = size if p == 1 else cx.emit("power", size, cx.scalar(p, dt))
    total = _pooled(cx, powered, _window(node, xs), "add", 0.0)
    if p == 2:
        y = cx.emit("sqrt", total)
    elif p == 1:
        y = total
    else:
        y = cx.emit("power", total, cx.scalar(1.0 / p, dt))
    cx.define(node.out(0), y)


def _divisor(cx: Lowering, w: Window, out: TensorType, include: bool) -> Value:
    """What each window's sum is divided by: the number of its taps inside the input, or with
    count_include_pad=1 inside the input and the node's own padding (never what ceil_mode
    adds)."""
    counts: np.ndarray = np.ones((), dtype=np.int64)
    for i, size in enumerate(w.sizes):
        lo, hi = w.given[i]
        at = w.taps(i) - w.pads[i][0]  # positions in the unpadded input
        low, high = (-lo, size + hi) if include else (0, size)
        counts = np.multiply.outer(counts, ((at >= low) & (at < high)).sum(axis=1))
    if (counts == counts.flat[0]).all():
        return cx.scalar(int(counts.flat[0]), out.dtype)
    divisor: np.ndarray = counts.astype(NUMPY_TYPES[out.dtype])
    return cx.literal(divisor.reshape((1, 1) + divisor.shape))


def _max_with_indices(cx: Lowering, node: Node, x: Value, w: Window) -> None:
    """The maxima and, as output 1, where each is: its index in the flattened input (spatial
    axes row-major, or with storage_order=1 column-major), the first in row-major order among
    equal maxima, as ONNX's reference picks it."""
    xs = tensor(x).shape
    taps = _gathered(cx, _padded(cx, x, w.pads, -math.inf), w)
    dims = _tap_dims(w)
    top = reduce(cx, taps, "max", dims, keep=True)
    out_shape = xs[:2] + tuple(w.outputs(i) for i in range(len(w.kernel)))
    cx.define(node.out(0), reshape(cx, top, out_shape))
    row, valid = _flat_positions(w, column_major=False)
    last = np.iinfo(np.int64).max
    row = np.where(valid, row, last)  # a tap in the padding is never the first maximum
    hit = cx.emit("equal", taps, top)
    row_lit = cx.literal(row)
    first = reduce(
        cx, cx.emit("select", row_lit, cx.scalar(last, DataType.I64), hit), "min", dims, keep=True
    )
    if node.attr("storage_order", 0):
        col, _ = _flat_positions(w, column_major=True)
        chosen = cx.emit("equal", row_lit, first)
        index = reduce(
            cx,
            cx.emit("select", cx.literal(col), cx.scalar(-1, DataType.I64), chosen),
            "max",
            dims,
            keep=False,
        )
    else:
        index = reshape(cx, first, out_shape)
    planes = np.arange(xs[0] * xs[1], dtype=np.int64).reshape(xs[:2] + (1,) * len(w.kernel))
    offset = cx.literal(planes * math.prod(w.sizes))
    cx.define(node.out(1), cx.emit("add", index, offset))


def _flat_positions(w: Window, column_major: bool) -> tuple[np.ndarray, np.ndarray]:
    """[1, 1, out₁, taps₁, out₂, taps₂, …]: each tap's index in the flattened spatial axes of
    the input, and whether the tap is inside the input (not in its padding)."""
    rank = len(w.kernel)
    shape = (1, 1) + tuple(n for i in range(rank) for n in (w.outputs(i), w.kernel[i]))
    flat = np.zeros(shape, np.int64)
    valid = np.ones(shape, bool)
    for i in range(rank):
        at = w.taps(i) - w.pads[i][0]
        sizes = w.sizes[:i] if column_major else w.sizes[i + 1 :]
        spread = [1] * len(shape)
        spread[2 + 2 * i : 4 + 2 * i] = at.shape
        at = at.reshape(spread)
        flat = flat + at * math.prod(sizes)
        valid = valid & (at >= 0) & (at < w.sizes[i])
    return flat, valid


@HANDLERS.register(("GlobalAveragePool", "GlobalMaxPool"), since=1)
def global_pool(cx: Lowering, node: Node) -> None:
    x = cx.value(node.input(0))
    xs = tensor(x).shape
    dims = tuple(range(2, len(xs)))
    if node.op_type == "GlobalMaxPool":
        y = reduce(cx, x, "max", dims, keep=False)
    else:
        y = reduce(cx, x, "add", dims, keep=False)
        y = cx.emit("divide", y, cx.scalar(math.prod(xs[2:]), tensor(x).dtype))
    cx.define(node.out(0), reshape(cx, y, xs[:2] + (1,) * len(dims)))
