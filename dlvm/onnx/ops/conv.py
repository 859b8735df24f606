"""Convolution: Conv in 1, 2 or more spatial dimensions, as TEL's conv2d emits it (`convolve`
with explicit padding, strides as `strides`, dilations as `rightDilation`); a 1-D convolution is
a 2-D one over a height of 1, which runs on the same kernels."""

from __future__ import annotations

import math

from dlvm.ir.compose import permute
from dlvm.onnx.context import Lowering, LoweringError
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops.common import in_f32, reshape, tensor
from dlvm.onnx.ops.registry import HANDLERS

AUTO_PADS = ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER")


def check_auto_pad(node: Node, facts: Facts) -> list[str]:
    pad = node.attr("auto_pad", "NOTSET")
    return [] if pad in AUTO_PADS else [f"auto_pad={pad} is not one of {', '.join(AUTO_PADS)}"]


def padding(
    node: Node,
    sizes: tuple[int, ...],
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    dilations: tuple[int, ...],
) -> list[tuple[int, int]]:
    """(before, after) per spatial axis from `pads` or `auto_pad`."""
    n = len(sizes)
    auto = node.attr("auto_pad", "NOTSET")
    if auto == "VALID":
        return [(0, 0)] * n
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        out: list[tuple[int, int]] = []
        for size, k, s, d in zip(sizes, kernel, strides, dilations):
            total = max((math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size, 0)
            small, large = total // 2, total - total // 2
            out.append((small, large) if auto == "SAME_UPPER" else (large, small))
        return out
    pads = list(node.attr("pads", [0] * (2 * n)))
    if len(pads) != 2 * n:
        raise LoweringError(f"pads has {len(pads)} values for {n} spatial axes")
    return list(zip(pads[:n], pads[n:]))


@HANDLERS.register("Conv", since=1, check=check_auto_pad)
def conv(cx: Lowering, node: Node) -> None:
    x, w = cx.value(node.input(0)), cx.value(node.input(1))
    xs, ws = tensor(x).shape, tensor(w).shape
    if len(xs) < 3 or len(ws) != len(xs):
        raise LoweringError(f"Conv of an input {xs} and a kernel {ws}")
    n = len(xs) - 2
    kernel = tuple(node.attr("kernel_shape", ws[2:]))
    strides = tuple(node.attr("strides", [1] * n))
    dilations = tuple(node.attr("dilations", [1] * n))
    groups = node.attr("group", 1)
    pads = padding(node, xs[2:], kernel, strides, dilations)
    if n == 1:  # [N, C, L] as [N, C, 1, L]
        x = reshape(cx, x, xs[:2] + (1,) + xs[2:])
        w = reshape(cx, w, ws[:2] + (1,) + ws[2:])
        strides, dilations, pads = (1, *strides), (1, *dilations), [(0, 0), *pads]
    y = in_f32(
        cx,
        [x, w],
        lambda a, k: cx.emit(
            "convolve",
            a,
            k,
            strides=strides,
            padding=tuple(pads),
            leftDilation=(1,) * len(strides),
            rightDilation=dilations,
            groups=groups,
        ),
    )  # f16 summed in f32 (common.in_f32)
    if node.input(2):
        b = cx.value(node.input(2))
        y = cx.emit("add", y, reshape(cx, b, (1, tensor(b).shape[0]) + (1,) * len(strides)))
    if n == 1:
        ys = tensor(y).shape
        y = reshape(cx, y, ys[:2] + ys[3:])
    cx.define(node.out(0), y)


def _check_transpose(node: Node, facts: Facts) -> list[str]:
    return check_auto_pad(node, facts)


@HANDLERS.register("ConvTranspose", since=1, check=_check_transpose)
def conv_transpose(cx: Lowering, node: Node) -> None:
    """The adjoint of a convolution, as a convolution: the input dilated by the strides
    (`leftDilation`), the kernel's channels swapped per group and its taps reversed, padded by
    (k − 1)·d less the given padding (and output_padding after)."""
    x, w = cx.value(node.input(0)), cx.value(node.input(1))
    xs, ws = tensor(x).shape, tensor(w).shape
    if len(xs) < 3 or len(ws) != len(xs):
        raise LoweringError(f"ConvTranspose of an input {xs} and a kernel {ws}")
    n, g = len(xs) - 2, node.attr("group", 1)
    kernel = tuple(node.attr("kernel_shape", ws[2:]))
    strides = tuple(node.attr("strides", [1] * n))
    dilations = tuple(node.attr("dilations", [1] * n))
    extra = tuple(node.attr("output_padding", [0] * n))
    pads = _transpose_padding(node, xs[2:], kernel, strides, dilations, extra)
    padding = []
    for k, d, (lo, hi), e in zip(kernel, dilations, pads, extra):
        span = (k - 1) * d
        if lo > span or hi > span + e:
            raise LoweringError("pads larger than the kernel's span are not supported")
        padding.append((span - lo, span - hi + e))
    # [C, M/g, k…] → [g, C/g, M/g, k…] → [g, M/g, C/g, k…] → [M, C/g, k…], taps reversed.
    c, m = ws[0], ws[1] * g
    per_group = reshape(cx, w, (g, c // g, ws[1]) + ws[2:])
    swapped = permute(
        lambda name, *vs, **attrs: cx.emit(name, *vs, **attrs),
        per_group,
        (0, 2, 1, *range(3, 3 + n)),
    )
    k = reshape(cx, swapped, (m, c // g) + ws[2:])
    k = cx.emit("reverse", k, dims=tuple(range(2, 2 + n)))
    if n == 1:  # [N, C, L] as [N, C, 1, L]
        x = reshape(cx, x, xs[:2] + (1,) + xs[2:])
        k = reshape(cx, k, (m, c // g, 1) + ws[2:])
        strides, dilations, padding = (1, *strides), (1, *dilations), [(0, 0), *padding]
    y = cx.emit(
        "convolve",
        x,
        k,
        strides=(1,) * len(strides),
        padding=tuple(padding),
        leftDilation=strides,
        rightDilation=dilations,
        groups=g,
    )
    if node.input(2):
        b = cx.value(node.input(2))
        y = cx.emit("add", y, reshape(cx, b, (1, m) + (1,) * len(strides)))
    if n == 1:
        ys = tensor(y).shape
        y = reshape(cx, y, ys[:2] + ys[3:])
    cx.define(node.out(0), y)


def _transpose_padding(
    node: Node,
    sizes: tuple[int, ...],
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    dilations: tuple[int, ...],
    extra: tuple[int, ...],
) -> list[tuple[int, int]]:
    """(before, after) cropped from the full transposed output: `pads`, or what output_shape or
    SAME auto_pad (an output `stride` times the input) leave over."""
    auto = node.attr("auto_pad", "NOTSET")
    shape = node.attr("output_shape")
    if shape is None and auto not in ("SAME_UPPER", "SAME_LOWER"):
        if auto == "VALID":
            return [(0, 0)] * len(sizes)
        pads = list(node.attr("pads", [0] * (2 * len(sizes))))
        return list(zip(pads[: len(sizes)], pads[len(sizes) :]))
    wanted = (
        list(shape)[-len(sizes) :] if shape is not None else [n * s for n, s in zip(sizes, strides)]
    )
    out = []
    for n, k, s, d, e, want in zip(sizes, kernel, strides, dilations, extra, wanted):
        total = s * (n - 1) + e + (k - 1) * d + 1 - want
        if total < 0:  # an output longer than the full one: zeros after it
            out.append((0, total))
            continue
        small, large = total // 2, total - total // 2
        out.append((large, small) if auto == "SAME_LOWER" else (small, large))
    return out
