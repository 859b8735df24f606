"""Element-wise indexing: GatherElements, GatherND, ReverseSequence and Compress, and the index
arithmetic the scatters (ops/scatter.py) share. Each is one IR `gather` along axis 0 of the
tensor seen flat (or as rows), at positions computed from the indices with NumPy's row-major
strides; indices the graph computes may be negative (counted from the end) and are wrapped
with a `select` first, since the IR's ids must lie in [0, n)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dlvm.ir.types import DataType
from dlvm.ir.values import Value
from dlvm.onnx.context import Lowering, LoweringError
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops.common import (
    NeedsValue,
    axis_of,
    cast,
    require_constant,
    reshape,
    tensor,
)
from dlvm.onnx.ops.registry import HANDLERS

# Positions are computed in i64 whatever the indices' type: a flat position can exceed i32.
POSITION = DataType.I64


def strides(shape: Sequence[int]) -> list[int]:
    """Row-major strides, in elements."""
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return out[::-1]


def wrap(cx: Lowering, ids: Value, n: int) -> Value:
    """ids as i64 in [0, n) where they were in [-n, n): a negative id counts from the end."""
    ids = cast(cx, ids, POSITION)
    negative = cx.emit("lessThan", ids, cx.scalar(0, POSITION))
    return cx.emit("select", cx.emit("add", ids, cx.scalar(n, POSITION)), ids, negative)


def ramp(cx: Lowering, rank: int, axis: int, n: int) -> Value:
    """0, 1, …, n−1 along `axis` of a tensor of `rank` whose other dimensions are 1."""
    shape = [1] * rank
    shape[axis] = n
    return cx.literal(np.arange(n, dtype=np.int64).reshape(shape))


def flat_positions(
    cx: Lowering, shape: Sequence[int], out_shape: Sequence[int], axis: int, ids: Value
) -> Value:
    """For each position p of `out_shape`, the flat position in a tensor of `shape` of p with
    its coordinate along `axis` replaced by ids[p] (ids i64 in range, of equal rank, broadcast
    to out_shape). The other coordinates must fit `shape`."""
    step = strides(shape)
    acc = ids if step[axis] == 1 else cx.emit("multiply", ids, cx.scalar(step[axis], POSITION))
    for d, n in enumerate(out_shape):
        if d == axis or n == 1:  # a coordinate that is always 0 adds nothing
            continue
        coord = ramp(cx, len(out_shape), d, n)
        if step[d] != 1:
            coord = cx.emit("multiply", coord, cx.scalar(step[d], POSITION))
        acc = cx.emit("add", acc, coord)
    if tensor(acc).shape != tuple(out_shape):  # ids broadcast along every other dimension
        acc = cx.emit("add", acc, cx.splat(0, tensor(acc).with_shape(tuple(out_shape))))
    return acc


def take_elements(cx: Lowering, x: Value, axis: int, ids: Value, out_shape: Sequence[int]) -> Value:
    """out[p] = x[p with its coordinate along axis replaced by ids[p]]: a gather from x seen
    flat."""
    xs = tensor(x).shape
    flat = reshape(cx, x, (math.prod(xs),))
    return cx.emit("gather", flat, flat_positions(cx, xs, out_shape, axis, ids), axis=0)


def row_ids(cx: Lowering, indices: Value, dims: Sequence[int]) -> Value:
    """The last axis of `indices` as coordinates into the leading `dims` of a tensor, made one
    row number of those dims seen flat: shape indices.shape[:-1]."""
    t = tensor(indices)
    k = len(dims)
    if not t.shape or t.shape[-1] != k:
        raise LoweringError(f"indices {t.shape} do not end in {k} coordinates")
    rank = len(t.shape)
    sizes = cx.literal(np.array(dims, np.int64).reshape((1,) * (rank - 1) + (k,)))
    ids = cast(cx, indices, POSITION)
    negative = cx.emit("lessThan", ids, cx.scalar(0, POSITION))
    ids = cx.emit("select", cx.emit("add", ids, sizes), ids, negative)
    if k > 1:
        scale = np.array(strides(dims), np.int64).reshape((1,) * (rank - 1) + (k,))
        ids = cx.emit("multiply", ids, cx.literal(scale))
    zero = cx.scalar(0, POSITION)
    return cx.emit("reduce", ids, zero, comb="add", dims=(rank - 1,))


@HANDLERS.register("GatherElements", since=11)
def gather_elements(cx: Lowering, node: Node) -> None:
    x = cx.value(node.input(0))
    ids = cx.value(node.input(1))
    xs, out = tensor(x).shape, tensor(ids).shape
    axis = axis_of(node.attr("axis", 0), len(xs))
    if len(out) != len(xs) or any(o > n for d, (o, n) in enumerate(zip(out, xs)) if d != axis):
        raise LoweringError(f"GatherElements of {xs} at indices {out}")
    y = take_elements(cx, x, axis, wrap(cx, ids, xs[axis]), out)
    cx.define(node.out(0), y)


@HANDLERS.register("GatherND", since=11)
def gather_nd(cx: Lowering, node: Node) -> None:
    """data[batch…, indices[batch…, j…, :], …]: data seen as rows of its first batch_dims + k
    dimensions, gathered at the row each index names within its batch."""
    x = cx.value(node.input(0))
    ids = cx.value(node.input(1))
    xs, ish = tensor(x).shape, tensor(ids).shape
    b = node.attr("batch_dims", 0)
    k = ish[-1] if ish else 0
    if not 0 < k <= len(xs) - b or xs[:b] != ish[:b]:
        raise LoweringError(f"GatherND of {xs} at indices {ish} with batch_dims={b}")
    rows = row_ids(cx, ids, xs[b : b + k])  # within a batch: shape ish[:-1]
    per_batch = math.prod(xs[b : b + k])
    for d in range(b):  # the batch's own rows come first
        step = per_batch * math.prod(xs[d + 1 : b])
        coord = ramp(cx, len(ish) - 1, d, ish[d])
        rows = cx.emit("add", rows, cx.emit("multiply", coord, cx.scalar(step, POSITION)))
    table = reshape(cx, x, (math.prod(xs[: b + k]),) + xs[b + k :])
    cx.define(node.out(0), cx.emit("gather", table, rows, axis=0))


@HANDLERS.register("ReverseSequence", since=10)
def reverse_sequence(cx: Lowering, node: Node) -> None:
    """Along time_axis, the first sequence_lens[b] elements of each batch b reversed and the
    rest kept: x gathered at time lens − 1 − t where t < lens, t elsewhere."""
    x = cx.value(node.input(0))
    xs = tensor(x).shape
    time = axis_of(node.attr("time_axis", 0), len(xs))
    batch = axis_of(node.attr("batch_axis", 1), len(xs))
    lens_shape = [1] * len(xs)
    lens_shape[batch] = xs[batch]
    lens = reshape(cx, cast(cx, cx.value(node.input(1)), POSITION), lens_shape)
    t = ramp(cx, len(xs), time, xs[time])
    back = cx.emit("subtract", cx.emit("subtract", lens, cx.scalar(1, POSITION)), t)
    src = cx.emit("select", back, t, cx.emit("lessThan", t, lens))
    cx.define(node.out(0), take_elements(cx, x, time, src, xs))


def _check_compress(node: Node, facts: Facts) -> list[str]:
    reasons = require_constant(node, facts, 1)
    if reasons:
        why = " (the condition decides the result's shape, which DLVM IR fixes)"
        reasons[0] = NeedsValue(reasons[0] + why, node.input(1))  # still a value to fix
    return reasons


@HANDLERS.register("Compress", since=9, check=_check_compress)
def compress(cx: Lowering, node: Node) -> None:
    """The slices along axis (of x flat without one) whose condition is true; a condition
    shorter than the axis leaves out the rest."""
    x = cx.value(node.input(0))
    xs = tensor(x).shape
    keep = np.asarray(cx.const(node.input(1))).astype(bool).ravel()
    if "axis" in node.attrs:
        axis = axis_of(node.attr("axis"), len(xs))
    else:
        x, axis = reshape(cx, x, (math.prod(xs),)), 0
    n = tensor(x).shape[axis]
    if keep.size > n:
        raise LoweringError(f"Compress: a condition of {keep.size} for an axis of {n}")
    taken = np.flatnonzero(keep)
    if taken.size == 0:
        raise LoweringError("Compress keeps nothing (DLVM IR has no empty tensors)")
    if taken.size < n:
        x = cx.emit("gather", x, cx.literal(taken.astype(np.int64)), axis=axis)
    cx.define(node.out(0), x)
