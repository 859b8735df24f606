"""The pieces of a transformer layer besides attention: RotaryEmbedding (opset 23) and SwiGLU
(opset 28), in the element type of their inputs as onnx's reference evaluator computes them."""

from __future__ import annotations

import numpy as np

from dlvm.onnx.context import Lowering, LoweringError
from dlvm.onnx.dtypes import NUMPY_TYPES
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops.common import reshape, tensor, to_rank
from dlvm.onnx.ops.registry import HANDLERS


def _check_rotary(node: Node, facts: Facts) -> list[str]:
    shape = facts.shapes.get(node.input(0))
    if shape is not None and len(shape) == 3 and not node.attr("num_heads"):
        return ["a 3-D input without num_heads"]
    return []


@HANDLERS.register("RotaryEmbedding", since=23, check=_check_rotary)
def rotary_embedding(cx: Lowering, node: Node) -> None:
    """The first `rotary_embedding_dim` features of each head rotated in pairs (its halves, or
    even and odd features when interleaved) by the angles whose cosines and sines the caches
    hold, per position (position_ids index the caches; without them the caches are
    [batch, sequence, dim / 2]). Written as x · C + x' · S: x' the features the rotation pairs
    each with (a known `gather`), C the cosines spread over the features (1 past the rotated
    ones) and S the sines with the rotation's signs (0 past them)."""
    x = cx.value(node.input(0))
    xs = tensor(x).shape
    if len(xs) == 4:  # [batch, heads, sequence, size]
        batch, _, seq, size = xs
        heads_axis = 1
    elif len(xs) == 3:  # [batch, sequence, heads · size]
        batch, seq, hidden = xs
        heads = node.attr("num_heads")
        if hidden % heads:
            raise LoweringError(f"a hidden size of {hidden} does not split into {heads} heads")
        size, heads_axis = hidden // heads, 2
        x = reshape(cx, x, (batch, seq, heads, size))
    else:
        raise LoweringError(f"RotaryEmbedding of rank {len(xs)} (3 or 4 only)")
    dim = node.attr("rotary_embedding_dim", 0) or size
    half = dim // 2
    if dim % 2 or dim > size:
        raise LoweringError(f"rotary_embedding_dim {dim} for heads of {size} features")
    pair, angle, sign = _rotation(dim, size, bool(node.attr("interleaved", 0)))

    cos, sin = cx.value(node.input(1)), cx.value(node.input(2))
    if tensor(cos).shape[-1] != half or tensor(sin).shape[-1] != half:
        raise LoweringError(
            f"caches of {tensor(cos).shape[-1]} and {tensor(sin).shape[-1]} angles for "
            f"rotary_embedding_dim {dim} (half of it is needed)"
        )
    dt = tensor(x).dtype
    rank = len(tensor(cos).shape)
    spread = cx.literal(angle)
    signs = to_rank(cx, cx.literal(sign.astype(NUMPY_TYPES[dt])), rank)
    c = cx.emit("gather", cos, spread, axis=rank - 1)  # [..., size]: a cosine per feature
    s = cx.emit("multiply", cx.emit("gather", sin, spread, axis=rank - 1), signs)
    if dim < size:  # the features past the rotated ones stay: cosine 1, sine 0
        kept = to_rank(cx, cx.literal(np.arange(size) >= dim), rank)
        c = cx.emit("select", cx.scalar(1, dt), c, kept)
    if node.input(3):
        ids = cx.value(node.input(3))
        c = cx.emit("gather", c, ids, axis=0)
        s = cx.emit("gather", s, ids, axis=0)
    per_position = (batch, 1, seq, size) if heads_axis == 1 else (batch, seq, 1, size)
    c, s = reshape(cx, c, per_position), reshape(cx, s, per_position)
    partner = cx.emit("gather", x, cx.literal(pair), axis=3)
    y = cx.emit("add", cx.emit("multiply", x, c), cx.emit("multiply", partner, s))
    cx.define(node.out(0), reshape(cx, y, xs))


def _rotation(dim: int, size: int, interleaved: bool) -> tuple[np.ndarray, ...]:
    """For each feature: the feature it is paired with, the angle it is rotated by (one of
    dim / 2) and the sign of its partner's term (−1 for the first of a pair, +1 for the
    second, 0 past `dim`)."""
    k = np.arange(size)
    half = dim // 2
    if interleaved:
        pair = np.where(k % 2 == 0, k + 1, k - 1)
        angle, first = k // 2, k % 2 == 0
    else:
        pair = np.where(k < half, k + half, k - half)
        angle, first = k % half, k < half
    rotated = k < dim
    pair = np.where(rotated, pair, k)
    angle = np.where(rotated, angle, 0)
    sign = np.where(rotated, np.where(first, -1.0, 1.0), 0.0)
    return pair.astype(np.int64), angle.astype(np.int64), sign


@HANDLERS.register("SwiGLU", since=28)
def swiglu(cx: Lowering, node: Node) -> None:
    """a · sigmoid(alpha · a) · b, the sigmoid as 1 / (1 + e^(−alpha · a)), the reference's
    formula (which never gives NaN: e^(−alpha · a) overflows to ∞, and 1 / ∞ is 0)."""
    a, b = cx.value(node.input(0)), cx.value(node.input(1))
    if tensor(a).shape != tensor(b).shape:
        raise LoweringError(f"SwiGLU of {tensor(a).shape} and {tensor(b).shape} (equal shapes)")
    dt = tensor(a).dtype
    scaled = cx.emit("multiply", a, cx.scalar(-node.attr("alpha", 1.0), dt))
    gate = cx.emit(
        "divide", cx.scalar(1, dt), cx.emit("add", cx.scalar(1, dt), cx.emit("exp", scaled))
    )
    cx.define(node.out(0), cx.emit("multiply", cx.emit("multiply", a, gate), b))
