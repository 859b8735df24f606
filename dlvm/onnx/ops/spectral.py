"""Spectral operators: DFT and STFT as products with a DFT matrix (a literal computed at import
for the static length, its real and imaginary parts apart, since DLVM IR has no complex
numbers), and the Hann, Hamming and Blackman windows of a size known at import."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from dlvm.ir.compose import permute, slice_along
from dlvm.ir.values import Value
from dlvm.onnx.context import Lowering, LoweringError
from dlvm.onnx.dtypes import NUMPY_TYPES, ir_type_of
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops.common import axis_of, cast, ints, require_constant, reshape, tensor
from dlvm.onnx.ops.registry import HANDLERS
from dlvm.onnx.ops.shape import emitter

Transform = Callable[[np.ndarray], np.ndarray]


def matrices(transform: Transform, length: int) -> tuple[np.ndarray, np.ndarray]:
    """The linear map `transform` (complex vectors of `length` to complex vectors) as the
    matrices of its response to each real and each imaginary unit: [length, out] each, complex,
    so that y = x_re @ A + x_im @ B."""
    eye = np.eye(length)
    real = np.stack([transform(row) for row in eye])
    imaginary = np.stack([transform(1j * row) for row in eye])
    return real, imaginary


def transform_of(n: int, inverse: bool, onesided: bool) -> Transform:
    """NumPy's transform the DFT of length n, inverse or one-sided, is (the reference's)."""
    if inverse and onesided:
        return lambda v: np.fft.irfft(v, n=n).astype(complex)
    if inverse:
        return lambda v: np.fft.ifft(v, n=n)
    if onesided:
        return lambda v: np.fft.fft(v, n=n)[: n // 2 + 1]
    return lambda v: np.fft.fft(v, n=n)


def spectrum(cx: Lowering, x: Value, axis: int, n: int, inverse: bool, onesided: bool) -> Value:
    """The DFT of x ([…, signal…, 1 or 2]: real, or real and imaginary parts) along `axis`:
    [… with axis of the transform's length …, 2], or 1 for an inverse one-sided one (a real
    signal)."""
    t = tensor(x)
    rank = len(t.shape)
    parts = t.shape[-1]
    if parts not in (1, 2):
        raise LoweringError(f"a last dimension of {parts} (1 for real signals, 2 for complex)")
    if axis == rank - 1:
        raise LoweringError("the transform's axis is the last one, of the real and imaginary parts")
    length = t.shape[axis]
    real_map, imaginary_map = matrices(transform_of(n, inverse, onesided), length)
    out = real_map.shape[1]
    dtype = NUMPY_TYPES[t.dtype]
    signal = t.shape[:-1]
    # The signal axis last, the others flattened: [P, length] by [length, out].
    order = tuple(d for d in range(rank - 1) if d != axis) + (axis,)
    moved = tuple(signal[d] for d in order[:-1])
    rows = math.prod(moved)

    def part(k: int) -> Value:
        v = reshape(cx, slice_along(emitter(cx), x, rank - 1, k, k), signal)
        if order != tuple(range(rank - 1)):
            v = permute(emitter(cx), v, order)
        return reshape(cx, v, (rows, length))

    inputs = [part(k) for k in range(parts)]
    maps = (real_map, imaginary_map)[:parts]
    results = []
    for take in (np.real, np.imag) if not (inverse and onesided) else (np.real,):
        acc: Value | None = None
        for v, m in zip(inputs, maps):
            w: np.ndarray = take(m).astype(dtype)
            if not w.any():
                continue
            term = cx.emit("dot", v, cx.literal(w))
            acc = term if acc is None else cx.emit("add", acc, term)
        if acc is None:
            acc = cx.splat(0, t.with_shape((rows, out)))
        y = reshape(cx, acc, (*moved, out))
        back = tuple(order.index(d) for d in range(rank - 1))
        if back != tuple(range(rank - 1)):
            y = permute(emitter(cx), y, back)
        shape = tensor(y).shape
        results.append(reshape(cx, y, (*shape, 1)))
    if len(results) == 1:
        return results[0]
    return cx.emit("concatenate", *results, axis=rank - 1)


def _check_dft(node: Node, facts: Facts) -> list[str]:
    return require_constant(node, facts, 1, 2)


def _signal_axis(cx: Lowering, node: Node, rank: int) -> int:
    if node.opset < 20:
        return axis_of(node.attr("axis", 1), rank)
    given = ints(cx.const(node.input(2)))
    return axis_of(given[0] if given else -2, rank)


@HANDLERS.register("DFT", since=17, check=_check_dft)
def dft(cx: Lowering, node: Node) -> None:
    x = cx.value(node.input(0))
    shape = tensor(x).shape
    axis = _signal_axis(cx, node, len(shape))
    inverse, onesided = bool(node.attr("inverse", 0)), bool(node.attr("onesided", 0))
    given = ints(cx.const(node.input(1)))
    if given:
        n = given[0]
    else:
        n = 2 * (shape[axis] - 1) if inverse and onesided else shape[axis]
    if n <= 0:
        raise LoweringError(f"a transform of length {n}")
    cx.define(node.out(0), spectrum(cx, x, axis, n, inverse, onesided))


def _check_stft(node: Node, facts: Facts) -> list[str]:
    reasons = require_constant(node, facts, 1, 3)
    if not node.input(2) and not node.input(3):
        reasons.append("neither a window nor a frame length")
    return reasons


@HANDLERS.register("STFT", since=17, check=_check_stft)
def stft(cx: Lowering, node: Node) -> None:
    """The frames of the signal ([batch, length, 1 or 2]) gathered as [batch, frames, frame
    length, …], weighted by the window, each transformed."""
    x = cx.value(node.input(0))
    length = tensor(x).shape[1]
    step = ints(cx.const(node.input(1)))[0]
    size = ints(cx.const(node.input(3)))[0] if node.input(3) else cx.shape(node.input(2))[0]
    if step <= 0 or size <= 0 or size > length:
        raise LoweringError(f"frames of {size} every {step} of a signal of {length}")
    frames = (length - size) // step + 1
    ids = np.arange(frames)[:, None] * step + np.arange(size)[None, :]
    framed = cx.emit("gather", x, cx.literal(ids.astype(np.int64)), axis=1)
    if node.input(2):
        window = reshape(cx, cx.value(node.input(2)), (1, 1, size, 1))
        framed = cx.emit("multiply", framed, cast(cx, window, tensor(framed).dtype))
    onesided = bool(node.attr("onesided", 1))
    cx.define(node.out(0), spectrum(cx, framed, 2, size, False, onesided))


WINDOWS = {
    "HannWindow": lambda k, n: 0.5 - 0.5 * np.cos(2 * np.pi * k / n),
    "HammingWindow": lambda k, n: 25 / 46 - 21 / 46 * np.cos(2 * np.pi * k / n),
    "BlackmanWindow": lambda k, n: (
        0.42 - 0.5 * np.cos(2 * np.pi * k / n) + 0.08 * np.cos(4 * np.pi * k / n)
    ),
}


def _check_window(node: Node, facts: Facts) -> list[str]:
    reasons = require_constant(node, facts, 0)
    if ir_type_of(node.attr("output_datatype", 1)) is None:
        reasons.append(f"output_datatype={node.attr('output_datatype')}")
    return reasons


@HANDLERS.register(list(WINDOWS), since=17, check=_check_window)
def window(cx: Lowering, node: Node) -> None:
    """A window of a size known at import: a literal (periodic: of the size plus one, its last
    value dropped)."""
    size = ints(cx.const(node.input(0)))[0]
    if size <= 0:
        raise LoweringError(f"a window of size {size}")
    period = size if node.attr("periodic", 1) else size - 1
    values = WINDOWS[node.op_type](np.arange(size), max(period, 1))
    dtype = ir_type_of(node.attr("output_datatype", 1))
    assert dtype is not None
    cx.define(node.out(0), cx.literal(values.astype(NUMPY_TYPES[dtype])))


def _check_mel(node: Node, facts: Facts) -> list[str]:
    reasons = require_constant(node, facts, 0, 1, 2, 3, 4)
    if ir_type_of(node.attr("output_datatype", 1)) is None:
        reasons.append(f"output_datatype={node.attr('output_datatype')}")
    return reasons


@HANDLERS.register("MelWeightMatrix", since=17, check=_check_mel)
def mel_weight_matrix(cx: Lowering, node: Node) -> None:
    """The matrix of triangular filters, [dft_length // 2 + 1, num_mel_bins], of inputs known at
    import (a literal; where they are all constants, folding computed it already)."""
    bins, length, rate = (ints(cx.const(node.input(i)))[0] for i in range(3))
    low, high = (float(np.asarray(cx.const(node.input(i))).item()) for i in (3, 4))
    if bins <= 0 or length <= 0 or rate <= 0:
        raise LoweringError(f"{bins} mel bins of a DFT of {length} at a rate of {rate}")
    cx.define(node.out(0), cx.literal(mel_filters(bins, length, rate, low, high, node)))


def mel_filters(bins: int, length: int, rate: int, low: float, high: float, node: Node) -> Any:
    """The filters as the spec computes them: edges evenly spaced in mels, each filter rising
    from its left edge to 1 at its centre and falling to its right edge, in DFT bins."""
    mel = [2595 * np.log1p(f / 700) / np.log(10) for f in (low, high)]
    step = (mel[1] - mel[0]) / (bins + 2)
    edges = np.arange(bins + 2) * step + mel[0]
    hertz = 700 * np.expm1(edges / 2595 * np.log(10))
    points = (((length + 1) * hertz) // rate).astype(int)
    out = np.zeros((length // 2 + 1, bins))
    for i in range(bins):
        left, centre, right = points[i], points[i + 1], points[i + 2]
        if centre == left:
            out[centre, i] = 1
        else:
            for j in range(left, centre + 1):
                out[j, i] = (j - left) / (centre - left)
        for j in range(centre, right):
            out[j, i] = (right - j) / (right - centre)
    dtype = ir_type_of(node.attr("output_datatype", 1))
    assert dtype is not None
    return out.astype(NUMPY_TYPES[dtype])
