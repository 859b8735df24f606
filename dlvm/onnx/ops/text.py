"""TfIdfVectorizer over integer tokens: each n-gram of the pool counted in each row, at every
skip distance (unigrams once), by comparing shifted slices of the rows with the pool's n-grams
all at once; the counts are mapped to the output's columns by a product with a 0/1 matrix, then
weighted as the mode says."""

from __future__ import annotations

import numpy as np

from dlvm.ir.compose import slice_along
from dlvm.ir.types import DataType, TensorType
from dlvm.ir.values import Value
from dlvm.onnx.context import Lowering, LoweringError
from dlvm.onnx.dtypes import NUMPY_TYPES
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops.common import reduce, reshape, tensor
from dlvm.onnx.ops.registry import HANDLERS
from dlvm.onnx.ops.shape import emitter

MODES = ("TF", "IDF", "TFIDF")


def _check(node: Node, facts: Facts) -> list[str]:
    reasons = []
    if node.attr("pool_strings"):
        reasons.append("a pool of strings (DLVM IR has no strings)")
    if node.attr("mode") not in MODES:
        reasons.append(f"mode '{node.attr('mode')}' (one of {', '.join(MODES)})")
    return reasons


def pool_grams(node: Node) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """The pool's n-grams of each length n: [count, n] tokens and each one's output column."""
    pool = np.asarray(node.attr("pool_int64s", []), np.int64)
    starts = list(node.attr("ngram_counts", []))
    columns = np.asarray(node.attr("ngram_indexes", []), np.int64)
    grams: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    seen = 0
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(pool)
        n = i + 1
        tokens = pool[start:end].reshape(-1, n)
        grams[n] = (tokens, columns[seen : seen + len(tokens)])
        seen += len(tokens)
    if seen != len(columns):
        raise LoweringError(f"{len(columns)} ngram_indexes for {seen} n-grams in the pool")
    return grams


@HANDLERS.register("TfIdfVectorizer", since=9, check=_check)
def tfidf(cx: Lowering, node: Node) -> None:
    x = cx.value(node.input(0))
    shape = tensor(x).shape
    if len(shape) not in (1, 2):
        raise LoweringError(f"an input of shape {list(shape)} (only [C] or [B, C])")
    rows = reshape(cx, x, (1, *shape) if len(shape) == 1 else shape)
    batch, width = tensor(rows).shape
    lo, hi = node.attr("min_gram_length"), node.attr("max_gram_length")
    skips = node.attr("max_skip_count", 0)
    grams = pool_grams(node)
    size = max(node.attr("ngram_indexes", [0])) + 1  # the output's columns
    total: Value | None = None
    for n in range(lo, hi + 1):
        if n not in grams or not len(grams[n][0]):
            continue
        tokens, columns = grams[n]
        distances = [1] if n == 1 else range(1, skips + 2)
        counts: Value | None = None
        for d in distances:
            found = _matches(cx, rows, tokens, d)
            if found is None:
                continue
            counts = found if counts is None else cx.emit("add", counts, found)
        if counts is None:
            continue
        onto = np.zeros((len(tokens), size), np.float32)
        onto[np.arange(len(tokens)), columns] = 1
        placed = cx.emit("dot", counts, cx.literal(onto))
        total = placed if total is None else cx.emit("add", total, placed)
    if total is None:
        total = cx.splat(0, TensorType((batch, size), DataType.F32))
    y = _weighted(cx, node, total, size)
    cx.define(node.out(0), reshape(cx, y, (size,) if len(shape) == 1 else (batch, size)))


def _matches(cx: Lowering, rows: Value, tokens: np.ndarray, d: int) -> Value | None:
    """How often each n-gram of tokens ([G, n]) occurs in each row with its tokens d apart:
    [B, G] f32, None where no n-gram that long fits in a row."""
    batch, width = tensor(rows).shape
    count, n = tokens.shape
    span = width - (n - 1) * d  # the starts that fit
    if span <= 0:
        return None
    dt = tensor(rows).dtype
    hit: Value | None = None
    for j in range(n):
        part = slice_along(emitter(cx), rows, 1, j * d, j * d + span - 1)
        wanted = cx.literal(tokens[:, j].astype(NUMPY_TYPES[dt]).reshape(1, 1, count))
        same = cx.emit("equal", reshape(cx, part, (batch, span, 1)), wanted)
        hit = same if hit is None else cx.emit("and", hit, same)
    assert hit is not None
    one, zero = cx.scalar(1, DataType.F32), cx.scalar(0, DataType.F32)
    return reduce(cx, cx.emit("select", one, zero, hit), "add", (1,), keep=False)


def _weighted(cx: Lowering, node: Node, counts: Value, size: int) -> Value:
    """TF: the counts; IDF: the weight (1 without weights) where a count is not zero; TFIDF:
    the counts times the weights."""
    mode = node.attr("mode")
    given = node.attr("weights")
    weights = cx.literal(np.asarray(given, np.float32).reshape(1, size)) if given else None
    if mode == "TF":
        return counts
    if mode == "IDF":
        present = cx.emit("greaterThan", counts, cx.scalar(0, DataType.F32))
        one = weights if weights is not None else cx.scalar(1, DataType.F32)
        return cx.emit("select", one, cx.scalar(0, DataType.F32), present)
    return counts if weights is None else cx.emit("multiply", counts, weights)
