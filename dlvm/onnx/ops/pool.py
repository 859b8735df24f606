"""Pooling: MaxPool and AveragePool as TEL's maxpool2d and avgpool2d emit them (padding
concatenated around the input, -inf for max, zeros for the average, then `reduceWindow`), and
the global poolings as reductions over the spatial axes."""

from __future__ import annotations

import math

import numpy as np

from dlvm.ir.types import TensorType
from dlvm.ir.values import Value
from dlvm.onnx.context import Lowering, LoweringError
from dlvm.onnx.dtypes import NUMPY_TYPES
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops.common import reduce, reshape, tensor
from dlvm.onnx.ops.conv import check_auto_pad, padding
from dlvm.onnx.ops.registry import HANDLERS


def _check(node: Node, facts: Facts) -> list[str]:
    reasons = check_auto_pad(node, facts)
    if any(d != 1 for d in node.attr("dilations", ())):
        reasons.append(f"dilations {list(node.attr('dilations'))} (only 1 is supported)")
    if node.out(1):
        reasons.append("the Indices output (only the pooled values are supported)")
    if node.op_type == "AveragePool" and node.attr("ceil_mode", 0):
        reasons.append("ceil_mode=1 (only 0 is supported for AveragePool)")
    return reasons


def _window(
    node: Node, xs: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...], list[tuple[int, int]]]:
    n = len(xs) - 2
    kernel = tuple(node.attr("kernel_shape"))
    strides = tuple(node.attr("strides", [1] * n))
    pads = padding(node, xs[2:], kernel, strides, (1,) * n)
    if node.attr("ceil_mode", 0):
        pads = _ceil_pads(xs[2:], kernel, strides, pads)
    return kernel, strides, pads


def _ceil_pads(
    sizes: tuple[int, ...],
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    pads: list[tuple[int, int]],
) -> list[tuple[int, int]]:
    """Padding after each axis so that a window that starts inside the input or its padding
    before it gives an output (ceil_mode=1, as ONNX and PyTorch count them)."""
    out = []
    for size, k, s, (lo, hi) in zip(sizes, kernel, strides, pads):
        count = math.ceil((size + lo + hi - k) / s) + 1
        if (count - 1) * s >= size + lo:  # the last window would start in the padding after
            count -= 1
        extra = max((count - 1) * s + k - (size + lo + hi), 0)
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


@HANDLERS.register(("MaxPool", "AveragePool"), since=7, check=_check)
def pool(cx: Lowering, node: Node) -> None:
    x = cx.value(node.input(0))
    xs, dt = tensor(x).shape, tensor(x).dtype
    if len(xs) < 3:
        raise LoweringError(f"{node.op_type} of {xs}: an input [N, C, spatial…] is needed")
    kernel, strides, pads = _window(node, xs)
    is_max = node.op_type == "MaxPool"
    fill = -math.inf if is_max else 0.0
    y = cx.emit(
        "reduceWindow",
        _padded(cx, x, pads, fill),
        cx.scalar(fill, dt),
        comb="max" if is_max else "add",
        dims=(1, 1, *kernel),
        strides=(1, 1, *strides),
        padding="none",
    )
    if not is_max:
        y = _average(cx, node, y, xs[2:], kernel, strides, pads)
    cx.define(node.out(0), y)


def _average(
    cx: Lowering,
    node: Node,
    y: Value,
    sizes: tuple[int, ...],
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    pads: list[tuple[int, int]],
) -> Value:
    """The sums of the windows divided by the window's area (count_include_pad=1, or no
    padding), or by the number of the input's elements each window covers."""
    dt = tensor(y).dtype
    if node.attr("count_include_pad", 0) or not any(lo or hi for lo, hi in pads):
        return cx.emit("divide", y, cx.scalar(math.prod(kernel), dt))
    # The divisor of each output is the number of the input's elements its window covers.
    counts: np.ndarray = np.ones((), dtype=np.int64)
    for size, k, s, (lo, hi) in zip(sizes, kernel, strides, pads):
        n = (size + lo + hi - k) // s + 1
        starts = np.arange(n) * s - lo
        along = np.minimum(starts + k, size) - np.maximum(starts, 0)
        counts = np.multiply.outer(counts, along)
    divisor: np.ndarray = counts.astype(NUMPY_TYPES[dt])
    lit = cx.literal(divisor.reshape((1, 1) + divisor.shape))
    return cx.emit("divide", y, lit)


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
