"""Resize's interpolation along one axis, computed at import: for each output position, the
source coordinate its coordinate transformation gives, and the input positions it reads with
their weights (linear or cubic, antialiased or not), as ONNX's reference computes them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Axis:
    """One resized axis: `n` input positions to `size` outputs at `scale`; `roi` the (start,
    end) of the crop for tf_crop_and_resize, in [0, 1]."""

    n: int
    size: int
    scale: float
    roi: tuple[float, float] = (0.0, 1.0)


def source(transform: str, a: Axis) -> tuple[np.ndarray, np.ndarray | None]:
    """The source coordinate of each output position, and for tf_crop_and_resize which fall
    outside the input (those take the extrapolation value)."""
    out = np.arange(a.size, dtype=np.float64)
    length = a.n * a.scale  # the resized length as the scale makes it, unrounded
    if transform == "asymmetric":
        return out / a.scale, None
    if transform == "align_corners":
        return (np.zeros(a.size) if length == 1 else out * (a.n - 1) / (length - 1)), None
    if transform == "tf_crop_and_resize":
        lo, hi = a.roi
        if length == 1:
            at = np.full(a.size, (hi - lo) * (a.n - 1) / 2)
        else:
            at = out * (hi - lo) * (a.n - 1) / (length - 1)
        at = at + lo * (a.n - 1)
        return at, (at < 0) | (at > a.n - 1)
    if transform == "pytorch_half_pixel" and length == 1:
        return np.full(a.size, -0.5), None
    if transform == "half_pixel_symmetric":
        offset = a.n / 2 * (1 - a.size / length)
        return offset + (out + 0.5) / a.scale - 0.5, None
    return (out + 0.5) / a.scale - 0.5, None


def nearest(rounding: str, at: np.ndarray, n: int) -> np.ndarray:
    """The input position each source coordinate rounds to, by nearest_mode."""
    if rounding == "floor":
        ids = np.floor(at)
    elif rounding == "ceil":
        ids = np.ceil(at)
    elif rounding == "round_prefer_ceil":
        ids = np.floor(at + 0.5)
    else:
        ids = np.ceil(at - 0.5)
    return np.clip(ids, 0, n - 1).astype(np.int64)


@dataclass(frozen=True)
class Kernel:
    """linear or cubic (with its coefficient `a`), antialiased (widened by 1/scale when
    downsampling) or not, `exclude_outside` dropping the taps outside the input and scaling
    the others up."""

    cubic: bool
    a: float = -0.75
    antialias: bool = False
    exclude_outside: bool = False

    def weights(self, ratio: float, scale: float) -> np.ndarray:
        """The weights of the taps around a source coordinate `ratio` past its floor."""
        if not self.antialias:
            if not self.cubic:
                return np.array([1 - ratio, ratio])
            r = np.array([1 + ratio, ratio, 1 - ratio, 2 - ratio])
            return _cubic(r, self.a)
        scale = min(scale, 1.0)
        if self.cubic:
            start = int(np.floor(-2 / scale) + 1)
            w = _cubic(np.abs(scale * (np.arange(start, 2 - start) - ratio)), self.a)
        else:
            start = int(np.floor(-1 / scale) + 1)
            args = (np.arange(start, start + 2 - 2 * start) - ratio) * scale
            w = np.clip(1 - np.abs(args), 0, 1)
        return w / w.sum()  # type: ignore[no-any-return]

    def taps(self, at: np.ndarray, a: Axis) -> tuple[np.ndarray, np.ndarray]:
        """[size, taps] input positions (clamped into the input, as an edge padding) and
        their weights."""
        base = np.floor(at)
        ratios = np.where(at == base, 1.0, at - base)
        weights = np.stack([self.weights(float(r), a.scale) for r in ratios])
        k = weights.shape[1]
        pad = (k + 1) // 2
        padded = at + pad
        floor = np.floor(padded)
        frac = padded - floor
        if k % 2 == 0:
            offset = np.where(frac == 0, -(k // 2), -(k // 2) + 1)
        else:
            first = -((k - 1) // 2)
            offset = np.where(frac <= 0.5, first, first + 1)
        ids = (floor + offset).astype(np.int64)[:, None] + np.arange(k)[None, :] - pad
        if self.exclude_outside:
            weights = np.where((ids < 0) | (ids >= a.n), 0.0, weights)
            total = weights.sum(axis=1, keepdims=True)
            weights = weights / np.where(total == 0, 1.0, total)
        return np.clip(ids, 0, a.n - 1), weights


def _cubic(x: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel at distances |x|."""
    x = np.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x <= 1, near, np.where(x < 2, far, 0.0))  # type: ignore[no-any-return]
