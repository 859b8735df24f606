"""Writes at indices: ScatterElements (and Scatter, its name before opset 11), ScatterND and
TensorScatter. The data is seen as rows (flat for ScatterElements, its first k dimensions for
ScatterND) and every update lands on a row:

- reduction `add` is the IR's `scatterAdd` into the data;
- `none` is a `scatterAdd` of the updates into zeros, selected where a row is written (a
  `scatterAdd` of ones counts the writes). ONNX leaves repeated indices undefined there; they
  add up here;
- `mul`, `max` and `min` compare every update's row with every row (the IR has no scatter
  that multiplies or takes extremes), up to SCATTER_COMPARE_LIMIT elements.

TensorScatter, whose writes never repeat, reads instead: each row of the cache gathers the
update that lands on it."""

from __future__ import annotations

import math

from dlvm.ir.types import TensorType
from dlvm.ir.values import Value
from dlvm.onnx.context import Lowering, LoweringError
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops.common import axis_of, cast, identity, reshape, tensor
from dlvm.onnx.ops.gather import POSITION, flat_positions, ramp, row_ids, take_elements, wrap
from dlvm.onnx.ops.registry import HANDLERS

REDUCTIONS = ("none", "add", "mul", "max", "min")

# The most elements (rows × updates × row length) the comparison of every update with every row
# may make for reduction mul, max or min: 16M, 64 MiB of f32.
SCATTER_COMPARE_LIMIT = 1 << 24

COMB = {"mul": "multiply", "max": "max", "min": "min"}


def _check_scatter(node: Node, facts: Facts) -> list[str]:
    reduction = node.attr("reduction", "none")
    if reduction not in REDUCTIONS:
        return [f"reduction='{reduction}' (one of {', '.join(REDUCTIONS)} is supported)"]
    return []


def scatter_rows(
    cx: Lowering, data: Value, ids: Value, updates: Value, reduction: str, op: str
) -> Value:
    """data [R, …] with updates [U, …] written at rows ids [U] (i64 in [0, R)), combined with
    what is there by `reduction`."""
    t = tensor(data)
    if t.dtype.is_bool:
        raise LoweringError(f"{op} of bool data (DLVM IR's scatterAdd adds numbers)")
    rows = t.shape[0]
    if reduction == "add":
        return cx.emit("scatterAdd", updates, ids, data, axis=0)
    if reduction == "none":
        count_type = TensorType((rows,), POSITION)
        ones = cx.splat(1, TensorType(tensor(ids).shape, POSITION))
        writes = cx.emit("scatterAdd", ones, ids, cx.splat(0, count_type), axis=0)
        written = cx.emit("greaterThan", writes, cx.scalar(0, POSITION))
        written = reshape(cx, written, (rows,) + (1,) * (len(t.shape) - 1))
        new = cx.emit("scatterAdd", updates, ids, cx.splat(0, t), axis=0)
        return cx.emit("select", new, data, written)
    # mul, max, min: M[r, u] = ids[u] == r, then each row combines the updates that hit it.
    count = tensor(ids).shape[0]
    size = rows * count * math.prod(t.shape[1:])
    if size > SCATTER_COMPARE_LIMIT:
        raise LoweringError(
            f"{op} with reduction='{reduction}' of {count} updates into {rows} rows would "
            f"compare {size} elements (at most {SCATTER_COMPARE_LIMIT})"
        )
    rest = (1,) * (len(t.shape) - 1)
    hit = cx.emit("equal", reshape(cx, ids, (1, count) + rest), ramp(cx, 2 + len(rest), 0, rows))
    comb = COMB[reduction]
    neutral = cx.scalar(identity(comb, t.dtype), t.dtype)
    spread = reshape(cx, updates, (1,) + tensor(updates).shape)
    picked = cx.emit("select", spread, neutral, hit)
    total = cx.emit("reduce", picked, neutral, comb=comb, dims=(1,))
    return cx.emit(comb, data, total)


@HANDLERS.register("ScatterElements", since=11, check=_check_scatter)
@HANDLERS.register("Scatter", since=9, until=10)
def scatter_elements(cx: Lowering, node: Node) -> None:
    """data with updates[p] written at p with its coordinate along axis replaced by
    indices[p]."""
    x = cx.value(node.input(0))
    ids = cx.value(node.input(1))
    updates = cx.value(node.input(2))
    xs, ish = tensor(x).shape, tensor(ids).shape
    axis = axis_of(node.attr("axis", 0), len(xs))
    if tensor(updates).shape != ish or len(ish) != len(xs):
        raise LoweringError(
            f"{node.op_type} of {xs} at indices {ish} with updates {tensor(updates).shape}"
        )
    flat = flat_positions(cx, xs, ish, axis, wrap(cx, ids, xs[axis]))
    count = math.prod(ish)
    y = scatter_rows(
        cx,
        reshape(cx, x, (math.prod(xs),)),
        reshape(cx, flat, (count,)),
        reshape(cx, updates, (count,)),
        node.attr("reduction", "none"),
        node.op_type,
    )
    cx.define(node.out(0), reshape(cx, y, xs))


@HANDLERS.register("ScatterND", since=11, check=_check_scatter)
def scatter_nd(cx: Lowering, node: Node) -> None:
    """data with updates[j…] written at data[indices[j…, :]] (a row of data's last
    dimensions, or one element)."""
    x = cx.value(node.input(0))
    ids = cx.value(node.input(1))
    updates = cx.value(node.input(2))
    xs, ish, us = tensor(x).shape, tensor(ids).shape, tensor(updates).shape
    k = ish[-1] if ish else 0
    if not 0 < k <= len(xs) or us != ish[:-1] + xs[k:]:
        raise LoweringError(f"ScatterND of {xs} at indices {ish} with updates {us}")
    count = math.prod(ish[:-1])
    rows = reshape(cx, row_ids(cx, ids, xs[:k]), (count,))
    y = scatter_rows(
        cx,
        reshape(cx, x, (math.prod(xs[:k]),) + xs[k:]),
        rows,
        reshape(cx, updates, (count,) + xs[k:]),
        node.attr("reduction", "none"),
        "ScatterND",
    )
    cx.define(node.out(0), reshape(cx, y, xs))


def _check_tensor_scatter(node: Node, facts: Facts) -> list[str]:
    mode = node.attr("mode", "linear")
    return [] if mode in ("linear", "circular") else [f"mode='{mode}'"]


@HANDLERS.register("TensorScatter", since=24, check=_check_tensor_scatter)
def tensor_scatter(cx: Lowering, node: Node) -> None:
    """The cache with each batch b's update written along axis from write_indices[b] on
    (modulo the axis in circular mode): position p of the cache reads the update at
    p − write_indices[b] where that is in range, and keeps its value elsewhere."""
    cache = cx.value(node.input(0))
    update = cx.value(node.input(1))
    cs, us = tensor(cache).shape, tensor(update).shape
    axis = axis_of(node.attr("axis", -2), len(cs))
    rank = len(cs)
    if axis == 0 or len(us) != rank or us[axis] > cs[axis]:
        raise LoweringError(f"TensorScatter of {us} into {cs} along axis {axis}")
    if any(u != c for d, (u, c) in enumerate(zip(us, cs)) if d != axis):
        raise LoweringError(f"TensorScatter of {us} into {cs}: shapes differ off axis {axis}")
    length, written = cs[axis], us[axis]
    p = ramp(cx, rank, axis, length)
    if node.input(2):
        start = cast(cx, cx.value(node.input(2)), POSITION)
        start = reshape(cx, start, (cs[0],) + (1,) * (rank - 1))
        src = cx.emit("subtract", p, start)
    else:
        src = p
    if node.attr("mode", "linear") == "circular":
        n = cx.scalar(length, POSITION)
        src = cx.emit("modulo", cx.emit("add", cx.emit("modulo", src, n), n), n)
    inside = cx.emit(
        "and",
        cx.emit("greaterThanOrEqual", src, cx.scalar(0, POSITION)),
        cx.emit("lessThan", src, cx.scalar(written, POSITION)),
    )
    safe = cx.emit("select", src, cx.scalar(0, POSITION), inside)
    read = take_elements(cx, update, axis, safe, cs)
    cx.define(node.out(0), cx.emit("select", read, cache, inside))
