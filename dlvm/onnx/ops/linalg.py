"""Det of small static matrices by the Leibniz formula: the signed sum, over the permutations p
of the n columns, of the products of the elements (i, p(i)). Each product gathers its n
elements at once; exact for any matrix (no pivot to choose), and cheap for n ≤ 5 (120 terms)."""

from __future__ import annotations

import itertools
import math

import numpy as np

from dlvm.onnx.context import Lowering, LoweringError
from dlvm.onnx.dtypes import NUMPY_TYPES
from dlvm.onnx.graph import Node
from dlvm.onnx.ops.common import reduce, reshape, tensor
from dlvm.onnx.ops.registry import HANDLERS

# The largest matrices: n! products of n elements.
MAX_N = 5


def _sign(perm: tuple[int, ...]) -> int:
    inversions = sum(a > b for a, b in itertools.combinations(perm, 2))
    return -1 if inversions % 2 else 1


@HANDLERS.register("Det", since=11)
def det(cx: Lowering, node: Node) -> None:
    x = cx.value(node.input(0))
    t = tensor(x)
    *batch, rows, cols = t.shape
    if rows != cols or not 0 < rows <= MAX_N:
        raise LoweringError(f"the determinant of {rows} x {cols} matrices (square, n ≤ {MAX_N})")
    n = rows
    perms = list(itertools.permutations(range(n)))
    # [P, n·n] gathered at [perms, n] flat ids: [P, perms, n], multiplied along the last axis.
    ids = np.array([[i * n + p[i] for i in range(n)] for p in perms], np.int64)
    flat = reshape(cx, x, (math.prod(batch), n * n))
    terms = reduce(cx, cx.emit("gather", flat, cx.literal(ids), axis=1), "multiply", (2,), False)
    signs: np.ndarray = np.array([[_sign(p) for p in perms]], NUMPY_TYPES[t.dtype])
    total = reduce(cx, cx.emit("multiply", terms, cx.literal(signs)), "add", (1,), False)
    cx.define(node.out(0), reshape(cx, total, tuple(batch)))
