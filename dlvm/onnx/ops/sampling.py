"""Sampling an input at coordinates the graph computes: GridSample, and AffineGrid, which makes
its grids. Each spatial axis's coordinate gives the taps of the interpolation (one for nearest,
two for linear, four for cubic) and their weights; the taps of every axis combine into flat
indices, which `convert` makes integers, into the input viewed as rows [N·spatial, C], read by
one `gather` and weighed."""

from __future__ import annotations

import math

import numpy as np

from dlvm.ir.compose import permute
from dlvm.ir.types import DataType, TensorType
from dlvm.ir.values import Value
from dlvm.onnx.context import Lowering, LoweringError
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops.common import ints, reduce, require_constant, reshape, tensor
from dlvm.onnx.ops.registry import HANDLERS

MODES = {"nearest": "nearest", "linear": "linear", "bilinear": "linear", "cubic": "cubic"}
MODES["bicubic"] = "cubic"
PADDINGS = ("zeros", "border", "reflection")
# The taps of each interpolation along an axis, as offsets from the floor of the coordinate.
OFFSETS = {"nearest": (0,), "linear": (0, 1), "cubic": (-1, 0, 1, 2)}
CUBIC_A = -0.75  # Keys' coefficient, as GridSample fixes it


def emitter(cx: Lowering):
    """cx's emit in the form dlvm.ir.compose takes."""
    return lambda name, *vs, **attrs: cx.emit(name, *vs, **attrs)


def _check_grid_sample(node: Node, facts: Facts) -> list[str]:
    reasons = []
    if node.attr("mode", "linear") not in MODES:
        reasons.append(f"mode={node.attr('mode')} (nearest, linear or cubic)")
    if node.attr("padding_mode", "zeros") not in PADDINGS:
        reasons.append(f"padding_mode={node.attr('padding_mode')}")
    return reasons


@HANDLERS.register("GridSample", since=16, check=_check_grid_sample)
def grid_sample(cx: Lowering, node: Node) -> None:
    """X [N, C, spatial…] sampled at grid [N, out…, r]: the last axis of the grid holds the
    coordinates from -1 to 1, the innermost spatial axis (x) first."""
    x, grid = cx.value(node.input(0)), cx.value(node.input(1))
    xs, gs = tensor(x).shape, tensor(grid).shape
    r = len(xs) - 2
    if r < 1 or len(gs) != r + 2 or gs[0] != xs[0] or gs[-1] != r:
        raise LoweringError(f"GridSample of {xs} at a grid {gs}")
    if not tensor(x).dtype.is_float or not tensor(grid).dtype.is_float:
        raise LoweringError("GridSample of integers (only of floats)")
    mode = MODES[node.attr("mode", "linear")]
    padding = node.attr("padding_mode", "zeros")
    aligned = bool(node.attr("align_corners", 0))
    grid = _cast(cx, grid, tensor(x).dtype)
    spatial = xs[2:]
    out = gs[:-1]  # [N, out…]
    # The taps of each axis: flat offsets into the spatial axes, and weights, [N, out…, k].
    index: Value | None = None
    weight: Value | None = None
    for i, d in enumerate(spatial):
        g = cx.emit("gather", grid, cx.scalar(r - 1 - i, DataType.I64), axis=len(gs) - 1)
        at = _bounded(cx, _denormalised(cx, g, d, aligned), d, mode, padding, aligned)
        pos, w = taps(cx, at, d, mode, padding, aligned)
        stride = math.prod(spatial[i + 1 :])
        ids = cx.emit("convert", pos, dtype=DataType.I64)
        ids = cx.emit("multiply", ids, cx.scalar(stride, DataType.I64))
        index, weight = outer(cx, index, ids, "add"), outer(cx, weight, w, "multiply")
    assert index is not None and weight is not None
    tap_shape = tensor(index).shape[len(out) :]
    count = math.prod(tap_shape)
    # Each sample's rows: its batch's block of the input.
    rows_per = math.prod(spatial)
    batch = np.arange(xs[0], dtype=np.int64).reshape(
        (xs[0],) + (1,) * (len(out) - 1 + len(tap_shape))
    )
    ids = reshape(cx, cx.emit("add", index, cx.literal(batch * rows_per)), out + (count,))
    table = reshape(cx, x, (xs[0], xs[1], rows_per))
    table = reshape(cx, permute(emitter(cx), table, (0, 2, 1)), (xs[0] * rows_per, xs[1]))
    picked = cx.emit("gather", table, ids, axis=0)  # [N, out…, taps, C]
    w = reshape(cx, weight, out + (count, 1))
    y = reduce(cx, cx.emit("multiply", picked, w), "add", (len(out),), keep=False)
    rank = len(out) + 1
    cx.define(node.out(0), permute(emitter(cx), y, (0, rank - 1, *range(1, rank - 1))))


def numpy_type(dt: DataType) -> type:
    """The NumPy type of a float data type, for literals of weights and coordinates."""
    return {16: np.float16, 32: np.float32, 64: np.float64}[dt.bits]


def _cast(cx: Lowering, v: Value, dt: DataType) -> Value:
    return v if tensor(v).dtype is dt else cx.emit("dataTypeCast", v, dtype=dt)


def _denormalised(cx: Lowering, g: Value, d: int, aligned: bool) -> Value:
    """From [-1, 1] to the axis's pixel coordinates: corner pixels' centres at ±1 when
    aligned, else the corners of the corner pixels."""
    dt = tensor(g).dtype
    one = cx.emit("add", g, cx.scalar(1, dt))
    if aligned:
        return cx.emit("multiply", one, cx.scalar((d - 1) / 2, dt))
    return cx.emit("subtract", cx.emit("multiply", one, cx.scalar(d / 2, dt)), cx.scalar(0.5, dt))


def _limits(d: int, aligned: bool) -> tuple[float, float]:
    return (0.0, d - 1.0) if aligned else (-0.5, d - 0.5)


def _bounded(cx: Lowering, at: Value, d: int, mode: str, padding: str, aligned: bool) -> Value:
    """The coordinate (rounded, half to even, for nearest) brought inside the input as the
    padding says: clamped for border, mirrored for reflection, once it is past the limits."""
    dt = tensor(at).dtype
    if mode == "nearest":
        at = cx.emit("rint", at)
    lo, hi = _limits(d, aligned)
    if padding == "border":
        outside = cx.emit(
            "or",
            cx.emit("lessThan", at, cx.scalar(lo, dt)),
            cx.emit("greaterThan", at, cx.scalar(hi, dt)),
        )
        clamped = cx.emit("min", cx.emit("max", at, cx.scalar(0, dt)), cx.scalar(d - 1, dt))
        return cx.emit("select", clamped, at, outside)
    if padding == "reflection":
        return _reflected(cx, at, lo, hi)
    return at


def _reflected(cx: Lowering, at: Value, lo: float, hi: float) -> Value:
    """at mirrored at lo and hi until it is between them (ONNX's reference reflection)."""
    dt = tensor(at).dtype
    span = hi - lo
    if span <= 0:
        return cx.splat(lo, tensor(at))

    def fold(past: Value) -> tuple[Value, Value]:
        """How far past a limit, folded into [0, span), and whether an even number of spans
        were crossed."""
        turns = cx.emit("floor", cx.emit("divide", past, cx.scalar(span, dt)))
        rest = cx.emit("subtract", past, cx.emit("multiply", turns, cx.scalar(span, dt)))
        half = cx.emit("floor", cx.emit("multiply", turns, cx.scalar(0.5, dt)))
        even = cx.emit("equal", turns, cx.emit("multiply", half, cx.scalar(2, dt)))
        return rest, even

    rest, even = fold(cx.emit("subtract", cx.scalar(lo, dt), at))
    below = cx.emit(
        "select",
        cx.emit("add", rest, cx.scalar(lo, dt)),
        cx.emit("subtract", cx.scalar(hi, dt), rest),
        even,
    )
    rest, even = fold(cx.emit("subtract", at, cx.scalar(hi, dt)))
    above = cx.emit(
        "select",
        cx.emit("subtract", cx.scalar(hi, dt), rest),
        cx.emit("add", rest, cx.scalar(lo, dt)),
        even,
    )
    at_or_above = cx.emit("select", above, at, cx.emit("greaterThan", at, cx.scalar(hi, dt)))
    return cx.emit("select", below, at_or_above, cx.emit("lessThan", at, cx.scalar(lo, dt)))


def taps(
    cx: Lowering, at: Value, d: int, mode: str, padding: str, aligned: bool
) -> tuple[Value, Value]:
    """[…, k] positions along the axis (floats holding integers, inside it) and weights:
    a tap outside the input weighs 0 with zeros padding, reads the edge with border, its
    mirror image with reflection."""
    t = tensor(at)
    dt = t.dtype
    offsets = OFFSETS[mode]
    k = len(offsets)
    spread = t.shape + (1,)
    lit: np.ndarray = np.array(offsets, numpy_type(dt)).reshape((1,) * len(t.shape) + (k,))
    if mode == "nearest":
        base = _truncated(cx, at)
        weights: Value = cx.splat(1, TensorType(t.shape + (1,), dt))
    else:
        base = cx.emit("floor", at)
        frac = reshape(cx, cx.emit("subtract", at, base), spread)
        distance = cx.emit("subtract", frac, cx.literal(lit))
        weights = _kernel(cx, mode, distance)
    pos = cx.emit(
        "add", reshape(cx, base, spread), cx.literal(lit) if k > 1 else cx.scalar(offsets[0], dt)
    )
    lo, hi = _limits(d, aligned)
    if padding == "reflection":
        pos = _truncated(cx, _reflected(cx, pos, lo, hi))
    inside = cx.emit(
        "and",
        cx.emit("greaterThanOrEqual", pos, cx.scalar(0, dt)),
        cx.emit("lessThanOrEqual", pos, cx.scalar(d - 1, dt)),
    )
    if padding == "zeros":
        weights = cx.emit("select", weights, cx.scalar(0, dt), inside)
    clamped = cx.emit("min", cx.emit("max", pos, cx.scalar(0, dt)), cx.scalar(d - 1, dt))
    return clamped, weights


def _truncated(cx: Lowering, v: Value) -> Value:
    """v rounded toward zero, as a float."""
    dt = tensor(v).dtype
    negative = cx.emit("lessThan", v, cx.scalar(0, dt))
    return cx.emit("select", cx.emit("ceil", v), cx.emit("floor", v), negative)


def _kernel(cx: Lowering, mode: str, distance: Value) -> Value:
    """The interpolation's weight at each signed distance from the coordinate: the tent
    1 − |x| for linear, Keys' cubic with a = −0.75 for cubic."""
    dt = tensor(distance).dtype
    x = cx.emit("multiply", distance, cx.emit("sign", distance))
    if mode == "linear":
        return cx.emit("subtract", cx.scalar(1, dt), x)
    a = CUBIC_A

    def s(v: float) -> Value:
        return cx.scalar(v, dt)

    x2 = cx.emit("multiply", x, x)
    x3 = cx.emit("multiply", x2, x)
    near = cx.emit(
        "add",
        cx.emit("subtract", cx.emit("multiply", x3, s(a + 2)), cx.emit("multiply", x2, s(a + 3))),
        s(1),
    )
    far = cx.emit(
        "subtract",
        cx.emit(
            "add",
            cx.emit("subtract", cx.emit("multiply", x3, s(a)), cx.emit("multiply", x2, s(5 * a))),
            cx.emit("multiply", x, s(8 * a)),
        ),
        s(4 * a),
    )
    return cx.emit("select", near, far, cx.emit("lessThanOrEqual", x, s(1)))


def outer(cx: Lowering, acc: Value | None, v: Value, comb: str) -> Value:
    """acc [q…, k₁…] combined with v [q…, k] into [q…, k₁…, k]: every pair of taps."""
    if acc is None:
        return v
    a, b = tensor(acc).shape, tensor(v).shape
    q = len(b) - 1
    left = reshape(cx, acc, a + (1,))
    right = reshape(cx, v, b[:q] + (1,) * (len(a) - q) + b[q:])
    return cx.emit(comb, left, right)


@HANDLERS.register("AffineGrid", since=20, check=lambda n, f: require_constant(n, f, 1))
def affine_grid(cx: Lowering, node: Node) -> None:
    """theta [N, r, r+1] applied to the pixel centres of size [N, C, spatial…] in [-1, 1]
    (with align_corners, to the corners' centres at ±1): [N, spatial…, r], x first."""
    theta = cx.value(node.input(0))
    size = ints(cx.const(node.input(1)))
    spatial = size[2:]
    r = len(spatial)
    ts, dt = tensor(theta).shape, tensor(theta).dtype
    if r not in (2, 3) or ts != (size[0], r, r + 1):
        raise LoweringError(f"AffineGrid of theta {ts} for the size {size}")
    aligned = bool(node.attr("align_corners", 0))
    axes = []
    for d in spatial:
        if aligned:
            axes.append(np.linspace(-1, 1, d) if d > 1 else np.zeros(1))
        else:
            axes.append((2 * np.arange(d) + 1) / d - 1)
    mesh = np.meshgrid(*axes, indexing="ij")  # per spatial axis, outermost first
    points = math.prod(spatial)
    # [points, r+1]: x (innermost) first, then y (and z), then 1.
    base = np.stack([m.ravel() for m in reversed(mesh)] + [np.ones(points)], axis=1)
    base_lit = cx.literal(base.astype(numpy_type(dt)).reshape(1, points, 1, r + 1))
    product = cx.emit("multiply", base_lit, reshape(cx, theta, (ts[0], 1, r, r + 1)))
    grid = reduce(cx, product, "add", (3,), keep=False)
    cx.define(node.out(0), reshape(cx, grid, (ts[0], *spatial, r)))
