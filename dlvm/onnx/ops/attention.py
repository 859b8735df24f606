"""Attention (opsets 23 to 25): softmax(Q·Kᵀ · scale + bias) · V over heads, with the key and
value cache (past and present), grouped key and value heads, the causal, sliding-window and
padding masks, softcap and the optional output of the scores; and ai.onnx.preview's
FlexAttention, whose graphs modify the scores and the probabilities. Composed of `dot`,
`select` and the reductions as onnx's reference evaluator computes them, step by step."""

from __future__ import annotations

import math

import numpy as np

from dlvm.ir.compose import permute
from dlvm.ir.types import DataType, TensorType
from dlvm.ir.values import Value
from dlvm.onnx.context import Lowering, LoweringError
from dlvm.onnx.dtypes import NUMPY_TYPES, ir_type_of, onnx_type_name
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops import subgraph
from dlvm.onnx.ops.common import cast, reduce, reshape, tensor, to_rank
from dlvm.onnx.ops.linear import dot
from dlvm.onnx.ops.registry import HANDLERS
from dlvm.onnx.ops.shape import emitter

# Inputs and outputs by position (the operator's signature).
Q, K, V, MASK, PAST_KEY, PAST_VALUE, NONPAD = range(7)
Y, PRESENT_KEY, PRESENT_VALUE, QK = range(4)
# qk_matmul_output_mode: the scores with the mask added, or the probabilities after softmax;
# 0 and 1 give the scores after softcap (the reference's).
WITH_BIAS, AFTER_SOFTMAX = 2, 3


def _check(node: Node, facts: Facts) -> list[str]:
    found = []
    mode = node.attr("qk_matmul_output_mode", 0)
    if mode not in (0, 1, 2, 3):
        found.append(f"qk_matmul_output_mode={mode} (only 0 to 3)")
    precision = node.attr("softmax_precision")
    if precision is not None:
        dt = ir_type_of(precision)
        if dt is None or not dt.is_float:
            found.append(f"softmax_precision={onnx_type_name(precision)} (a float type only)")
    for side in ("left_window_size", "right_window_size"):
        if node.attr(side, -1) < -1:
            found.append(f"{side}={node.attr(side)} (-1 or at least 0)")
    if bool(node.input(PAST_KEY)) != bool(node.input(PAST_VALUE)):
        found.append("past_key without past_value, or past_value without past_key")
    if node.input(NONPAD) and node.input(PAST_KEY):
        found.append("nonpad_kv_seqlen together with past_key and past_value")
    rank = len(facts.shapes.get(node.input(Q), (0, 0, 0, 0)))
    heads = [a for a in ("q_num_heads", "kv_num_heads") if a not in node.attrs]
    if rank == 3 and heads:
        found.append("3-D inputs without " + " and ".join(heads))
    return found


@HANDLERS.register("Attention", since=23, check=_check)
def attention(cx: Lowering, node: Node) -> None:
    """Inputs of rank 3, [batch, sequence, heads · size], are split into heads first and the
    result joined back. Q·Kᵀ is two `dot`s of Q and K each scaled by √scale; with fewer key
    heads than query heads, the query heads that share a key head are stacked into one matrix
    per key head instead of the keys being repeated."""
    q, k, v = (cx.value(node.input(i)) for i in (Q, K, V))
    dt = tensor(q).dtype
    three_d = len(tensor(q).shape) == 3
    if three_d:
        q = _split_heads(cx, q, node.attr("q_num_heads"))
        k = _split_heads(cx, k, node.attr("kv_num_heads"))
        v = _split_heads(cx, v, node.attr("kv_num_heads"))
    for x in (q, k, v):
        if len(tensor(x).shape) != 4:
            raise LoweringError(f"Attention of rank {len(tensor(x).shape)} (3 or 4 only)")
    past = 0
    if node.input(PAST_KEY):
        past = tensor(cx.value(node.input(PAST_KEY))).shape[2]
        k = cx.emit("concatenate", cx.value(node.input(PAST_KEY)), k, axis=2)
        v = cx.emit("concatenate", cx.value(node.input(PAST_VALUE)), v, axis=2)
    cx.define(node.out(PRESENT_KEY), k)
    cx.define(node.out(PRESENT_VALUE), v)

    batch, heads, rows, size = tensor(q).shape
    cols = tensor(k).shape[2]
    groups = _groups(q, k, v)
    scores_shape = (batch, heads, rows, cols)
    scale = node.attr("scale")
    root = NUMPY_TYPES[dt](math.sqrt(scale if scale is not None else 1 / math.sqrt(size)))
    scores = reshape(cx, _scores(cx, q, k, float(root), groups), scores_shape)
    cap = node.attr("softcap", 0.0)
    if cap > 0:
        capped = cx.emit("tanh", cx.emit("divide", scores, cx.scalar(cap, dt)))
        scores = cx.emit("multiply", capped, cx.scalar(cap, dt))
    mode = node.attr("qk_matmul_output_mode", 0)
    scores_out = scores

    bias, masked_rows = _bias(cx, node, dt, scores_shape, past)
    if bias is not None:
        scores = cx.emit("add", scores, bias)
    if mode == WITH_BIAS:
        scores_out = scores
    precision = node.attr("softmax_precision")
    if precision is not None:
        scores = cast(cx, scores, ir_type_of(precision) or dt)
    probs = _softmax(cx, scores) if bias is not None else _plain_softmax(cx, scores)
    if masked_rows is not None:  # rows with no key to attend are zeros
        zero = cx.scalar(0, tensor(probs).dtype)
        probs = cx.emit("select", zero, probs, masked_rows)
    probs = cast(cx, probs, dt)
    if mode == AFTER_SOFTMAX:
        scores_out = probs
    cx.define(node.out(QK), scores_out)

    y = dot(cx, reshape(cx, probs, groups + (cols,)), v)
    y = reshape(cx, y, (batch, heads, rows, tensor(v).shape[3]))
    if three_d:
        y = permute(emitter(cx), y, (0, 2, 1, 3))
        y = reshape(cx, y, (batch, rows, heads * tensor(v).shape[3]))
    cx.define(node.out(Y), y)


def _split_heads(cx: Lowering, x: Value, heads: int) -> Value:
    """[batch, sequence, heads · size] as [batch, heads, sequence, size]."""
    batch, seq, hidden = tensor(x).shape
    if hidden % heads:
        raise LoweringError(f"a hidden size of {hidden} does not split into {heads} heads")
    return permute(emitter(cx), reshape(cx, x, (batch, seq, heads, hidden // heads)), (0, 2, 1, 3))


def _groups(q: Value, k: Value, v: Value) -> tuple[int, int, int]:
    """[batch, key heads, query heads per key head · query rows]: the query heads that share a
    key head stacked into one matrix, which multiplies that head's keys and values (rather than
    the keys and values repeated per query head)."""
    batch, heads, rows, _ = tensor(q).shape
    kv_heads = tensor(k).shape[1]
    if heads % kv_heads or tensor(v).shape[1] != kv_heads:
        raise LoweringError(
            f"{heads} query heads, {kv_heads} key and {tensor(v).shape[1]} value heads: "
            "the query heads must be a multiple of the key heads, which the value heads equal"
        )
    return (batch, kv_heads, heads // kv_heads * rows)


def _scores(cx: Lowering, q: Value, k: Value, root: float, groups: tuple[int, ...]) -> Value:
    """(Q · root)·(K · root)ᵀ, the query heads stacked as `groups` says."""
    dt, size = tensor(q).dtype, tensor(q).shape[3]
    qs = cx.emit("multiply", q, cx.scalar(root, dt))
    ks = cx.emit("multiply", k, cx.scalar(root, dt))
    kt = permute(emitter(cx), ks, (0, 1, 3, 2))
    return dot(cx, reshape(cx, qs, groups + (size,)), kt)


def _plain_softmax(cx: Lowering, x: Value) -> Value:
    """Softmax along the last axis: exp(x − max) / Σ exp(x − max)."""
    e = cx.emit("exp", cx.emit("subtract", x, reduce(cx, x, "max", (3,), keep=True)))
    return cx.emit("divide", e, reduce(cx, e, "add", (3,), keep=True))


def _softmax(cx: Lowering, x: Value) -> Value:
    """Softmax along the last axis where a row may be all −∞: such a row is zeros, not NaNs
    (its maximum taken as 0 and its sum as 1)."""
    dt = tensor(x).dtype
    top = reduce(cx, x, "max", (3,), keep=True)
    zero, one = cx.scalar(0, dt), cx.scalar(1, dt)
    none = cx.emit("equal", top, cx.scalar(-math.inf, dt))
    e = cx.emit("exp", cx.emit("subtract", x, cx.emit("select", zero, top, none)))
    total = reduce(cx, e, "add", (3,), keep=True)
    total = cx.emit("select", one, total, cx.emit("equal", total, zero))
    return cx.emit("divide", e, total)


def _bias(
    cx: Lowering, node: Node, dt: DataType, shape: tuple[int, ...], past: int
) -> tuple[Value | None, Value | None]:
    """The additive mask, 0 where a query attends a key and −∞ elsewhere (plus attn_mask's own
    values when it is a float), of a shape that broadcasts to the scores' [batch, heads, q,
    kv]; and the rows it masks entirely (flags [·, ·, q, 1]), None when there are none. The
    causal and window masks are aligned to the bottom right: a query's position is its index
    plus the keys before its block (past_key's length, or per batch nonpad_kv_seqlen − q)."""
    batch, _, rows, cols = shape
    causal = bool(node.attr("is_causal", 0))
    left, right = node.attr("left_window_size", -1), node.attr("right_window_size", -1)
    i = np.arange(rows).reshape(rows, 1)
    j = np.arange(cols).reshape(1, cols)
    allowed_known = np.ones((rows, cols), dtype=bool)  # the masks with a known offset
    allowed: Value | None = None  # or those that depend on nonpad_kv_seqlen
    if node.input(NONPAD):
        # Per batch, the keys before the block are n − rows, n = nonpad_kv_seqlen[b]: each
        # condition on j ≤ i + n − rows is written as a known ramp compared with n.
        n = reshape(cx, cx.value(node.input(NONPAD)), (batch, 1, 1, 1))
        n_dt = tensor(n).dtype
        conditions = [(np.broadcast_to(j, (rows, cols)), "lessThan")]  # j < n: not padding
        if causal:
            conditions.append((j - i + rows, "lessThanOrEqual"))
        if left >= 0:  # i + n − rows − j ≤ left
            conditions.append((j - i + rows + left, "greaterThanOrEqual"))
        if right >= 0:  # j − (i + n − rows) ≤ right
            conditions.append((j - i + rows - right, "lessThanOrEqual"))
        for ramp, compare in conditions:
            known = cx.literal(ramp.astype(NUMPY_TYPES[n_dt]).reshape(1, 1, rows, cols))
            flags = cx.emit(compare, known, n)
            allowed = flags if allowed is None else cx.emit("and", allowed, flags)
    else:
        if causal:
            allowed_known &= j <= i + past
        if left >= 0:
            allowed_known &= i + past - j <= left
        if right >= 0:
            allowed_known &= j - i - past <= right
    mask: Value | None = None
    if node.input(MASK):
        mask = _mask(cx, cx.value(node.input(MASK)), dt, cols)
    bias: Value | None = None
    if allowed is not None:
        bias = cx.emit("select", cx.scalar(0, dt), cx.scalar(-math.inf, dt), allowed)
    elif not allowed_known.all():
        fill: np.ndarray = np.where(allowed_known, 0, -np.inf).astype(NUMPY_TYPES[dt])
        bias = reshape(cx, cx.literal(fill), (1, 1, rows, cols))
        if mask is None:  # known: so are the rows it masks
            rows_masked = ~allowed_known.any(axis=1)
            if not rows_masked.any():
                return bias, None
            return bias, cx.literal(rows_masked.reshape(1, 1, rows, 1))
    if mask is not None:
        bias = mask if bias is None else cx.emit("add", mask, bias)
    if bias is None:
        return None, None
    top = reduce(cx, bias, "max", (3,), keep=True)
    return bias, cx.emit("equal", top, cx.scalar(-math.inf, dt))


def _mask(cx: Lowering, mask: Value, dt: DataType, cols: int) -> Value:
    """attn_mask as rank 4 in the scores' type (a bool: 0 where true, −∞ where false), padded
    to `cols` keys with −∞ when it has fewer."""
    t = tensor(mask)
    if not t.shape:
        raise LoweringError("a scalar attn_mask (rank 1 or more is needed)")
    if t.dtype.is_bool:
        mask = cx.emit("select", cx.scalar(0, dt), cx.scalar(-math.inf, dt), mask)
    elif t.dtype is not dt:
        raise LoweringError(f"an attn_mask of {t.dtype} for inputs of {dt}")
    have = t.shape[-1]
    if have > cols:
        raise LoweringError(f"an attn_mask of {have} keys for {cols} keys")
    if have < cols:
        pad = cx.splat(-math.inf, TensorType(t.shape[:-1] + (cols - have,), dt))
        mask = cx.emit("concatenate", mask, pad, axis=len(t.shape) - 1)
    return to_rank(cx, mask, 4)


def _flex_precision(node: Node, dt: DataType) -> DataType:
    """The type FlexAttention's softmax and its product by V are computed in:
    softmax_precision, else float32 for float16 inputs, else the inputs'."""
    precision = node.attr("softmax_precision")
    if precision is not None and ir_type_of(precision) is not None:
        return ir_type_of(precision)  # type: ignore[return-value]
    return DataType.F32 if dt is DataType.F16 else dt


MODS = (("score_mod", "scores"), ("prob_mod", "probabilities"))


def _check_flex(node: Node, facts: Facts) -> list[str]:
    found = []
    precision = node.attr("softmax_precision")
    if precision is not None:
        dt = ir_type_of(precision)
        if dt is None or not dt.is_float:
            found.append(f"softmax_precision={onnx_type_name(precision)} (a float type only)")
    q, k = facts.shapes.get(node.input(Q)), facts.shapes.get(node.input(K))
    elem = ir_type_of(facts.elem_types.get(node.input(Q), 0))
    if q is None or k is None or elem is None or len(q) != 4 or len(k) != 4 or found:
        return found
    shape = (q[0], q[1], q[2], k[2])
    for attribute, _ in MODS:
        if attribute in node.attrs:
            graph = node.attrs[attribute]
            wide = _flex_precision(node, elem)
            found += subgraph.prepare(graph, attribute, shape, wide, facts.opsets).reasons
    return found


@HANDLERS.register("ai.onnx.preview.FlexAttention", since=1, until=1, check=_check_flex)
def flex_attention(cx: Lowering, node: Node) -> None:
    """softmax(mod(Q·Kᵀ · scale)) · V over 4-D inputs with grouped key and value heads, as
    Attention, but: √scale rounded in float32 first, score_mod applied to the scores and
    prob_mod to the probabilities (graphs lowered in place), and the softmax and the product by
    V in float32 for float16 inputs (or in softmax_precision), as the reference computes them."""
    q, k, v = (cx.value(node.input(i)) for i in (Q, K, V))
    dt = tensor(q).dtype
    for x in (q, k, v):
        if len(tensor(x).shape) != 4:
            raise LoweringError(f"FlexAttention of rank {len(tensor(x).shape)} (4 only)")
    batch, heads, rows, size = tensor(q).shape
    cols, dv = tensor(k).shape[2], tensor(v).shape[3]
    groups = _groups(q, k, v)
    shape = (batch, heads, rows, cols)
    scale = node.attr("scale")
    root = np.sqrt(np.float32(scale if scale is not None else 1 / math.sqrt(size)))
    scores = _scores(cx, q, k, float(NUMPY_TYPES[dt](root)), groups)
    wide = _flex_precision(node, dt)
    mods = {
        attribute: subgraph.prepare(node.attrs[attribute], attribute, shape, wide, cx.facts.opsets)
        for attribute, _ in MODS
        if attribute in node.attrs
    }
    scores = reshape(cx, cast(cx, scores, wide), shape)
    if "score_mod" in mods:
        scores = cast(cx, subgraph.apply(cx, mods["score_mod"], scores), wide)
    probs = _plain_softmax(cx, scores)
    if "prob_mod" in mods:
        probs = cast(cx, subgraph.apply(cx, mods["prob_mod"], probs), wide)
    y = dot(cx, reshape(cx, probs, groups + (cols,)), cast(cx, v, wide))
    cx.define(node.out(0), cast(cx, reshape(cx, y, (batch, heads, rows, dv)), dt))
