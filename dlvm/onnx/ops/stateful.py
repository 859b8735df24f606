"""Operators that carry a state from one call to the next (opset 27): CausalConvWithState, a
depthwise causal 1-D convolution continuing the inputs of the previous call, and
LinearAttention, a recurrence over the sequence (unrolled, as the recurrent family is) whose
state is a matrix per key head. Both in float32 as onnx's reference evaluator computes them
where it does, rounded to the inputs' type at its points."""

from __future__ import annotations

import math

from dlvm.ir.compose import permute, slice_along
from dlvm.ir.types import DataType, TensorType
from dlvm.ir.values import Value
from dlvm.onnx.context import Lowering, LoweringError
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops.common import cast, reshape, tensor
from dlvm.onnx.ops.registry import HANDLERS
from dlvm.onnx.ops.shape import emitter

ACTIVATIONS = ("none", "silu", "swish")
UPDATE_RULES = ("linear", "gated", "delta", "gated_delta")


def _check_causal_conv(node: Node, facts: Facts) -> list[str]:
    found = []
    if node.attr("activation", "none") not in ACTIVATIONS:
        found.append(f"activation={node.attr('activation')} (none, silu or swish)")
    kernel = facts.shapes.get(node.input(1))
    if kernel is not None and len(kernel) == 3 and kernel[2] == 1:
        found.append("a kernel of length 1, whose present_state is empty (DLVM IR has none)")
    return found


@HANDLERS.register("CausalConvWithState", since=27, check=_check_causal_conv)
def causal_conv_with_state(cx: Lowering, node: Node) -> None:
    """The input [batch, channels, length] after past_state (the last k − 1 positions of the
    previous call's, zeros without it) convolved with a kernel [channels, 1, k] per channel,
    no padding; plus bias, then x · sigmoid(x) in float32 for `silu` (or `swish`). The new
    state is the last k − 1 positions of what was convolved."""
    x, w = cx.value(node.input(0)), cx.value(node.input(1))
    (batch, channels, length), k = tensor(x).shape, tensor(w).shape[-1]
    dt = tensor(x).dtype
    if tensor(w).shape != (channels, 1, k) or k < 2:
        raise LoweringError(f"a kernel {tensor(w).shape} for {channels} channels")
    if node.input(3):
        past = cx.value(node.input(3))
    else:
        past = cx.splat(0, TensorType((batch, channels, k - 1), dt))
    padded = cx.emit("concatenate", past, x, axis=2)
    wide = dt is DataType.F16  # summed in float32 and rounded once, as NumPy's reference
    image = reshape(cx, padded, (batch, channels, 1, length + k - 1))
    kernel = reshape(cx, w, (channels, 1, 1, k))
    if wide:
        image, kernel = cast(cx, image, DataType.F32), cast(cx, kernel, DataType.F32)
    y = cx.emit(
        "convolve",
        image,
        kernel,
        strides=(1, 1),
        padding=((0, 0), (0, 0)),
        leftDilation=(1, 1),
        rightDilation=(1, 1),
        groups=channels,
    )
    y = reshape(cx, y, (batch, channels, length))
    if node.input(2):
        bias = reshape(cx, cx.value(node.input(2)), (1, channels, 1))
        y = cx.emit("add", y, cast(cx, bias, DataType.F32) if wide else bias)
    y = cast(cx, y, dt)
    if node.attr("activation", "none") != "none":
        f = cast(cx, y, DataType.F32)
        y = cast(cx, cx.emit("multiply", f, _sigmoid(cx, f)), dt)
    cx.define(node.out(0), y)
    present = slice_along(emitter(cx), padded, 2, length, length + k - 2)
    cx.define(node.out(1), present)


def _sigmoid(cx: Lowering, x: Value) -> Value:
    """1 / (1 + e^−x), the reference's formula."""
    dt = tensor(x).dtype
    e = cx.emit("exp", cx.emit("negate", x))
    return cx.emit("divide", cx.scalar(1, dt), cx.emit("add", cx.scalar(1, dt), e))


def _check_linear_attention(node: Node, facts: Facts) -> list[str]:
    found = []
    rule = node.attr("update_rule", "gated_delta")
    if rule not in UPDATE_RULES:
        found.append(f"update_rule={rule} (one of {', '.join(UPDATE_RULES)})")
    heads = [a for a in ("q_num_heads", "kv_num_heads") if not node.attr(a)]
    if heads:
        found.append("no " + " and no ".join(heads))
    elif node.attr("q_num_heads") % node.attr("kv_num_heads"):
        found.append("q_num_heads not a multiple of kv_num_heads")
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gated != bool(node.input(4)):
        found.append(f"update_rule={rule} {'needs' if gated else 'forbids'} decay")
    if delta != bool(node.input(5)):
        found.append(f"update_rule={rule} {'needs' if delta else 'forbids'} beta")
    return found


@HANDLERS.register("LinearAttention", since=27, check=_check_linear_attention)
def linear_attention(cx: Lowering, node: Node) -> None:
    """Per step t, with S [batch, kv heads, d_k, d_v] in float32 (past_state, or zeros):
    S ← S · e^decay_t (gated); v_t ← beta_t · (v_t − Sᵀ k_t) (delta); S ← S + k_t ⊗ v_t; and
    the output o_t = scale · q_t S, the query heads that share a key head read its S. Inputs
    are [batch, sequence, heads · size]; the output too, and present_state is the final S."""
    q_heads, kv_heads = node.attr("q_num_heads"), node.attr("kv_num_heads")
    group = q_heads // kv_heads
    query = cx.value(node.input(0))
    dt = tensor(query).dtype
    batch, steps, _ = tensor(query).shape
    f32 = DataType.F32
    # Each per step, [steps, batch, heads, size], so that a step is a cut of the first axis.
    q = _steps(cx, query, q_heads)
    k = _steps(cx, cx.value(node.input(1)), kv_heads)
    v = _steps(cx, cx.value(node.input(2)), kv_heads)
    d_k, d_v = tensor(k).shape[3], tensor(v).shape[3]
    if tensor(q).shape[3] != d_k:
        raise LoweringError(f"queries of {tensor(q).shape[3]} features for keys of {d_k}")
    decay = beta = None
    if node.input(4):
        decay = _per_head(cx, cx.value(node.input(4)), kv_heads, d_k, "decay")
    if node.input(5):
        beta = _per_head(cx, cx.value(node.input(5)), kv_heads, 1, "beta")
    state_shape = (batch, kv_heads, d_k, d_v)
    if node.input(3):
        past = cx.value(node.input(3))
        if tensor(past).shape != state_shape:
            raise LoweringError(f"a past_state {tensor(past).shape}, not {state_shape}")
        state_dt = tensor(past).dtype
        state = cast(cx, past, f32)
    else:
        state_dt = dt
        state = cx.splat(0, TensorType(state_shape, f32))
    scale = node.attr("scale", 0.0) or 1 / math.sqrt(d_k)

    def step(x: Value, t: int, shape: tuple[int, ...]) -> Value:
        return reshape(cx, cx.emit("slice", x, lo=t, hi=t), shape)

    outputs = []
    for t in range(steps):
        k_t = step(k, t, (batch, kv_heads, d_k, 1))
        v_t = step(v, t, (batch, kv_heads, 1, d_v))
        if decay is not None:
            g = step(decay, t, (batch, kv_heads, tensor(decay).shape[3], 1))
            state = cx.emit("multiply", state, cx.emit("exp", g))
        if beta is not None:
            # Sᵀ k_t, as the row k_tᵀ S: [batch, heads, 1, d_v]
            retrieved = cx.emit("dot", reshape(cx, k_t, (batch, kv_heads, 1, d_k)), state)
            b_t = step(beta, t, (batch, tensor(beta).shape[2], 1, 1))
            v_t = cx.emit("multiply", b_t, cx.emit("subtract", v_t, retrieved))
        state = cx.emit("add", state, cx.emit("multiply", k_t, v_t))
        q_t = step(q, t, (batch, kv_heads, group, d_k))  # the query heads of each key head
        o_t = cx.emit("multiply", cx.emit("dot", q_t, state), cx.scalar(scale, f32))
        outputs.append(reshape(cx, o_t, (1, batch, q_heads * d_v)))
    out = outputs[0] if steps == 1 else cx.emit("concatenate", *outputs, axis=0)
    out = permute(emitter(cx), out, (1, 0, 2))
    cx.define(node.out(0), cast(cx, out, dt))
    cx.define(node.out(1), cast(cx, state, state_dt))


def _steps(cx: Lowering, x: Value, heads: int) -> Value:
    """[batch, steps, heads · size] as [steps, batch, heads, size] in float32."""
    batch, steps, hidden = tensor(x).shape
    if hidden % heads:
        raise LoweringError(f"a hidden size of {hidden} does not split into {heads} heads")
    x = permute(emitter(cx), cast(cx, x, DataType.F32), (1, 0, 2))
    return reshape(cx, x, (steps, batch, heads, hidden // heads))


def _per_head(cx: Lowering, x: Value, heads: int, size: int, what: str) -> Value:
    """decay [batch, steps, heads] or [batch, steps, heads · d_k], or beta [batch, steps,
    heads] or [batch, steps, 1], as [steps, batch, heads or 1, 1 or d_k] in float32."""
    batch, steps, last = tensor(x).shape
    if last in (heads, 1) and (last == heads or what == "beta"):
        return _steps(cx, x, last)
    if last == heads * size:
        return _steps(cx, x, heads)
    raise LoweringError(f"a {what} of {last} values per step for {heads} key heads")
