"""Normalisations: BatchNormalization (the running statistics in inference, the batch's in
training), LayerNormalization, Softmax and LogSoftmax, composed as stdlib/nn.tel composes
batch_norm2d, layer_norm, softmax and log_softmax."""

from __future__ import annotations

import math

from dlvm.ir.values import Value
from dlvm.onnx.context import Lowering, LoweringError
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops.common import (
    axes_of,
    axis_of,
    in_f32,
    mean,
    reduce,
    reshape,
    tensor,
    to_rank,
)
from dlvm.onnx.ops.reduce import first_index
from dlvm.onnx.ops.registry import HANDLERS


def _check_batch_norm(node: Node, facts: Facts) -> list[str]:
    if node.opset < 9 and not node.attr("spatial", 1):
        return ["spatial=0 (statistics per element rather than per channel)"]
    return []


@HANDLERS.register("BatchNormalization", since=7, check=_check_batch_norm)
def batch_norm(cx: Lowering, node: Node) -> None:
    """(x − mean) · rsqrt(var + ε) · scale + B, each statistic per channel (axis 1). In training
    (the importer's `training`, or training_mode=1) the mean and the biased variance are the
    batch's, and the running statistics' next values are the optional outputs 1 and 2:
    running · momentum + batch · (1 − momentum), ONNX's convention."""
    x = cx.value(node.input(0))
    xs, dt = tensor(x).shape, tensor(x).dtype
    if len(xs) < 2:
        raise LoweringError(f"BatchNormalization of {xs}: an input [N, C, …] is needed")
    per_channel = (1, xs[1]) + (1,) * (len(xs) - 2)
    scale, bias, run_mean, run_var = (
        reshape(cx, cx.value(node.input(i)), per_channel) for i in (1, 2, 3, 4)
    )
    training = cx.training or bool(node.attr("training_mode", 0))
    eps = node.attr("epsilon", 1e-5)
    if training:
        dims = (0,) + tuple(range(2, len(xs)))
        mu = mean(cx, x, dims, keep=True)
        d = cx.emit("subtract", x, mu)
        variance = mean(cx, cx.emit("multiply", d, d), dims, keep=True)
    else:
        mu, variance = run_mean, run_var
        d = cx.emit("subtract", x, mu)
    inv = cx.emit("rsqrt", cx.emit("add", variance, cx.scalar(eps, dt)))
    y = cx.emit("add", cx.emit("multiply", cx.emit("multiply", d, inv), scale), bias)
    cx.define(node.out(0), y)
    if cx.training:
        _update_running(cx, node, mu, variance, math.prod(xs) // xs[1])
    if training and (node.out(1) or node.out(2)):
        momentum = node.attr("momentum", 0.9)
        channels = (xs[1],)
        for slot, run, batch in ((1, run_mean, mu), (2, run_var, variance)):
            kept = cx.emit("multiply", run, cx.scalar(momentum, dt))
            new = cx.emit("add", kept, cx.emit("multiply", batch, cx.scalar(1 - momentum, dt)))
            cx.define(node.out(slot), reshape(cx, new, channels))


def _update_running(cx: Lowering, node: Node, mu: Value, variance: Value, count: int) -> None:
    """A graph imported for training updates its running statistics as the PyTorch module it
    was exported from does: running · momentum + batch · (1 − momentum), with the batch's
    unbiased variance (× count / (count − 1), count the elements per channel)."""
    momentum = node.attr("momentum", 0.9)
    correction = count / (count - 1) if count > 1 else 1.0
    for i, batch, scale in ((3, mu, 1.0), (4, variance, correction)):
        name = node.input(i)
        if cx.param_kinds.get(name) != "buffer":
            continue  # a statistic that is not an initializer: nothing to keep
        run = cx.value(name)
        dt = tensor(run).dtype
        kept = cx.emit("multiply", run, cx.scalar(momentum, dt))
        step = cx.emit("multiply", batch, cx.scalar((1 - momentum) * scale, dt))
        cx.updates[name] = cx.emit("add", kept, reshape(cx, step, tensor(run).shape))


@HANDLERS.register("LayerNormalization", since=17)
def layer_norm(cx: Lowering, node: Node) -> None:
    """Over the axes from `axis` on: (x − mean) · rsqrt(var + ε) · Scale + B (stdlib/nn.tel's
    layer_norm, which normalises the last axis only; here any trailing run of axes)."""
    x = cx.value(node.input(0))
    xs, dt = tensor(x).shape, tensor(x).dtype
    first = axis_of(node.attr("axis", -1), len(xs))
    dims = tuple(range(first, len(xs)))
    mu = mean(cx, x, dims, keep=True)
    d = cx.emit("subtract", x, mu)
    variance = mean(cx, cx.emit("multiply", d, d), dims, keep=True)
    inv = cx.emit("rsqrt", cx.emit("add", variance, cx.scalar(node.attr("epsilon", 1e-5), dt)))
    y = cx.emit(
        "multiply", cx.emit("multiply", d, inv), to_rank(cx, cx.value(node.input(1)), len(xs))
    )
    if node.input(2):
        y = cx.emit("add", y, to_rank(cx, cx.value(node.input(2)), len(xs)))
    cx.define(node.out(0), y)
    cx.define(node.out(1), mu)  # the statistics, their axes kept as ones
    cx.define(node.out(2), inv)


@HANDLERS.register("RMSNormalization", since=23)
def rms_norm(cx: Lowering, node: Node) -> None:
    """x · rsqrt(mean(x²) + ε) · scale over the axes from `axis` on (stdlib/nn.tel's rms_norm)."""
    x = cx.value(node.input(0))
    xs, dt = tensor(x).shape, tensor(x).dtype
    dims = tuple(range(axis_of(node.attr("axis", -1), len(xs)), len(xs)))
    square = mean(cx, cx.emit("multiply", x, x), dims, keep=True)
    inv = cx.emit("rsqrt", cx.emit("add", square, cx.scalar(node.attr("epsilon", 1e-5), dt)))
    scale = to_rank(cx, cx.value(node.input(1)), len(xs))
    cx.define(node.out(0), cx.emit("multiply", cx.emit("multiply", x, inv), scale))


def _check_lp(node: Node, facts: Facts) -> list[str]:
    return [] if node.attr("p", 2) in (1, 2) else [f"p={node.attr('p')} (only 1 and 2)"]


@HANDLERS.register("LpNormalization", since=1, check=_check_lp)
def lp_norm(cx: Lowering, node: Node) -> None:
    """x divided by its L1 or L2 norm along axis."""
    x = cx.value(node.input(0))
    dims = (axis_of(node.attr("axis", -1), len(tensor(x).shape)),)
    if node.attr("p", 2) == 1:
        norm = reduce(cx, cx.emit("multiply", x, cx.emit("sign", x)), "add", dims, keep=True)
    else:
        norm = cx.emit("sqrt", reduce(cx, cx.emit("multiply", x, x), "add", dims, keep=True))
    zero = cx.scalar(0, tensor(x).dtype)
    empty = cx.emit("equal", norm, zero)  # a zero norm gives zeros, as ONNX's reference does
    cx.define(node.out(0), cx.emit("select", zero, cx.emit("divide", x, norm), empty))


def softmax_along(cx: Lowering, x: Value, dims: tuple[int, ...], log: bool) -> Value:
    """exp(x − max) / Σ exp(x − max), or its log, x − max − log Σ exp(x − max), along dims.
    For f16, exp, log and the sum are computed in f32 and rounded, as NumPy (ONNX's
    reference) computes them: the compiled f16 functions and sums are less exact."""
    s = cx.emit("subtract", x, reduce(cx, x, "max", dims, keep=True))
    e = in_f32(cx, [s], lambda v: cx.emit("exp", v))
    total = in_f32(cx, [e], lambda v: reduce(cx, v, "add", dims, keep=True))
    if log:
        return cx.emit("subtract", s, in_f32(cx, [total], lambda v: cx.emit("log", v)))
    return cx.emit("divide", e, total)


@HANDLERS.register("LRN", since=1)
def local_response_norm(cx: Lowering, node: Node) -> None:
    """x / (bias + alpha / size · Σ x²)^beta, the sum over `size` neighbouring channels (fewer
    at the edges): a `reduceWindow` along the channels, zeros padded around them."""
    x = cx.value(node.input(0))
    t = tensor(x)
    size = node.attr("size")
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    square = cx.emit("multiply", x, x)
    parts = []
    for count in (before, None, after):
        if count is None:
            parts.append(square)
        elif count:
            shape = t.shape[:1] + (count,) + t.shape[2:]
            parts.append(cx.splat(0, t.with_shape(shape)))
    padded = parts[0] if len(parts) == 1 else cx.emit("concatenate", *parts, axis=1)
    window = (1, size) + (1,) * (len(t.shape) - 2)
    total = cx.emit(
        "reduceWindow",
        padded,
        cx.scalar(0, t.dtype),
        comb="add",
        dims=window,
        strides=(1,) * len(t.shape),
        padding="none",
    )
    alpha, beta = node.attr("alpha", 1e-4), node.attr("beta", 0.75)
    scaled = cx.emit("multiply", total, cx.scalar(alpha / size, t.dtype))
    base = cx.emit("add", scaled, cx.scalar(node.attr("bias", 1.0), t.dtype))
    cx.define(node.out(0), cx.emit("divide", x, cx.emit("power", base, cx.scalar(beta, t.dtype))))


@HANDLERS.register("Hardmax", since=13)
def hardmax(cx: Lowering, node: Node) -> None:
    """1 at the first maximum along axis, 0 elsewhere."""
    x = cx.value(node.input(0))
    xs, dt = tensor(x).shape, tensor(x).dtype
    axis = axis_of(node.attr("axis", -1), len(xs))
    index, ramp = first_index(cx, x, axis, "max")
    hit = cx.emit("equal", ramp, index)
    cx.define(node.out(0), cx.emit("select", cx.scalar(1, dt), cx.scalar(0, dt), hit))


@HANDLERS.register(("Softmax", "LogSoftmax"), since=13)
def softmax(cx: Lowering, node: Node) -> None:
    x = cx.value(node.input(0))
    rank = len(tensor(x).shape)
    if rank == 0:
        raise LoweringError(f"{node.op_type} of a scalar")
    axis = axis_of(node.attr("axis", -1), rank)
    cx.define(node.out(0), softmax_along(cx, x, (axis,), node.op_type == "LogSoftmax"))


@HANDLERS.register(("Softmax", "LogSoftmax"), since=1, until=12)
def softmax_2d(cx: Lowering, node: Node) -> None:
    """Before opset 13: the input seen as a matrix [prod(dims before axis), prod(the rest)],
    normalised along its rows."""
    x = cx.value(node.input(0))
    xs = tensor(x).shape
    if not xs:
        raise LoweringError(f"{node.op_type} of a scalar")
    axis = axis_of(node.attr("axis", 1), len(xs))
    dims = tuple(range(axis, len(xs)))
    if math.prod(xs[axis:]) == 0:
        raise LoweringError(f"{node.op_type} of an empty tensor")
    cx.define(node.out(0), softmax_along(cx, x, dims, node.op_type == "LogSoftmax"))


def _normalised(cx: Lowering, x: Value, dims: tuple[int, ...], eps: float) -> Value:
    """(x − mean) · rsqrt(var + ε), the statistics over dims (the biased variance)."""
    dt = tensor(x).dtype
    d = cx.emit("subtract", x, mean(cx, x, dims, keep=True))
    variance = mean(cx, cx.emit("multiply", d, d), dims, keep=True)
    return cx.emit("multiply", d, cx.emit("rsqrt", cx.emit("add", variance, cx.scalar(eps, dt))))


def _per_channel(cx: Lowering, name: str, rank: int) -> Value:
    """A [C] input viewed as [1, C, 1, …] against an input [N, C, spatial…]."""
    v = cx.value(name)
    return reshape(cx, v, (1, tensor(v).shape[0]) + (1,) * (rank - 2))


@HANDLERS.register("InstanceNormalization", since=6)
def instance_norm(cx: Lowering, node: Node) -> None:
    """Each (sample, channel) plane normalised over its spatial axes, then · scale + B per
    channel."""
    x = cx.value(node.input(0))
    rank = len(tensor(x).shape)
    if rank < 3:
        raise LoweringError(f"InstanceNormalization of {tensor(x).shape}: [N, C, spatial…]")
    y = _normalised(cx, x, tuple(range(2, rank)), node.attr("epsilon", 1e-5))
    y = cx.emit("multiply", y, _per_channel(cx, node.input(1), rank))
    cx.define(node.out(0), cx.emit("add", y, _per_channel(cx, node.input(2), rank)))


@HANDLERS.register("GroupNormalization", since=21)
def group_norm(cx: Lowering, node: Node) -> None:
    """The channels split into num_groups groups, each (sample, group) normalised over its
    channels and spatial axes, then · scale + bias per channel. (Opset 18's form, scale and
    bias per group, is deprecated: onnx's checker refuses a model of it.)"""
    x = cx.value(node.input(0))
    xs = tensor(x).shape
    groups = node.attr("num_groups")
    if len(xs) < 3 or xs[1] % groups:
        raise LoweringError(f"GroupNormalization of {xs} in {groups} groups")
    grouped = reshape(cx, x, (xs[0], groups, xs[1] // groups) + xs[2:])
    y = _normalised(cx, grouped, tuple(range(2, len(xs) + 1)), node.attr("epsilon", 1e-5))
    y = cx.emit("multiply", reshape(cx, y, xs), _per_channel(cx, node.input(1), len(xs)))
    cx.define(node.out(0), cx.emit("add", y, _per_channel(cx, node.input(2), len(xs))))


@HANDLERS.register("MeanVarianceNormalization", since=9)
def mean_variance_norm(cx: Lowering, node: Node) -> None:
    """(x − E[x]) / (sqrt(E[x²] − E[x]²) + 1e-9) over axes (default 0, 2, 3), ONNX's function
    body for it."""
    x = cx.value(node.input(0))
    xs, dt = tensor(x).shape, tensor(x).dtype
    dims = axes_of(node.attr("axes", [0, 2, 3]), len(xs))
    mu = mean(cx, x, dims, keep=True)
    variance = cx.emit(
        "subtract",
        mean(cx, cx.emit("multiply", x, x), dims, keep=True),
        cx.emit("multiply", mu, mu),
    )
    spread = cx.emit("add", cx.emit("sqrt", variance), cx.scalar(1e-9, dt))
    cx.define(node.out(0), cx.emit("divide", cx.emit("subtract", x, mu), spread))
