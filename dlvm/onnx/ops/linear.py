"""Products: MatMul (NumPy's matmul: vectors, matrices, batches that broadcast) and Gemm, emitted
as TEL's `.` emits them (telc/lower/tensor_ops.py, `matmul`), so that the packed product and its
epilogue fusion see the same IR."""

from __future__ import annotations

import math

import numpy as np

from dlvm.ir.values import Value
from dlvm.onnx.context import Lowering, LoweringError
from dlvm.onnx.graph import Node
from dlvm.onnx.ops.common import broadcast_to, in_f32, reshape, tensor, to_rank
from dlvm.onnx.ops.registry import HANDLERS


def dot(cx: Lowering, x: Value, y: Value) -> Value:
    """The IR's `dot`; of float16 operands, summed in float32 and rounded once (common.in_f32),
    as NumPy's matmul (ONNX's reference) sums them, where the compiled f16 product sums in f16.
    Every product of the importer (MatMul, Gemm, Attention) is made here."""
    return in_f32(cx, [x, y], lambda a, b: cx.emit("dot", a, b))


def matmul(cx: Lowering, x: Value, y: Value) -> Value:
    """x · y with NumPy's rules for vectors and batch dimensions."""
    sa, sb = tensor(x).shape, tensor(y).shape
    if not sa or not sb:
        raise LoweringError("MatMul of a scalar")
    if len(sa) == 1 and len(sb) == 1:
        return dot(cx, x, y)
    ma = (1,) + sa if len(sa) == 1 else sa
    mb = sb + (1,) if len(sb) == 1 else sb
    if ma[-1] != mb[-2]:
        raise LoweringError(f"MatMul of {sa} and {sb}: the inner dimensions differ")
    try:
        batch = tuple(np.broadcast_shapes(ma[:-2], mb[:-2]))
    except ValueError:
        raise LoweringError(f"MatMul of {sa} and {sb}: the batch dimensions differ") from None
    m, k, n = ma[-2], ma[-1], mb[-1]
    if ma[:-2] == mb[:-2]:  # the IR's dot: one matrix, or a batch of equal batches
        x, y = reshape(cx, x, ma), reshape(cx, y, mb)
    elif math.prod(mb[:-2]) == 1:
        # One matrix on the right: the left's matrices stacked into one taller matrix make a
        # single product (the packed kernel's best case) instead of a batch of small ones.
        x = reshape(cx, x, (math.prod(ma[:-2]) * m, k))
        y = reshape(cx, y, (k, n))
    else:  # batches that broadcast: both stretched to the common batch
        rank = len(batch) + 2
        x = broadcast_to(cx, to_rank(cx, reshape(cx, x, ma), rank), batch + (m, k))
        y = broadcast_to(cx, to_rank(cx, reshape(cx, y, mb), rank), batch + (k, n))
    product = dot(cx, x, y)
    shape = batch + ((m,) if len(sa) > 1 else ()) + ((n,) if len(sb) > 1 else ())
    return reshape(cx, product, shape)


@HANDLERS.register("MatMul", since=1)
def matmul_op(cx: Lowering, node: Node) -> None:
    x, y = cx.value(node.input(0)), cx.value(node.input(1))
    cx.define(node.out(0), matmul(cx, x, y))


@HANDLERS.register("Gemm", since=7)
def gemm(cx: Lowering, node: Node) -> None:
    """alpha · A' · B' + beta · C, A' and B' transposed where transA and transB say."""
    a, b = cx.value(node.input(0)), cx.value(node.input(1))
    if node.attr("transA", 0):
        a = cx.emit("transpose", a)
    if node.attr("transB", 0):
        b = cx.emit("transpose", b)
    y = dot(cx, a, b)
    dt = tensor(y).dtype
    alpha, beta = node.attr("alpha", 1.0), node.attr("beta", 1.0)
    if alpha != 1.0:
        y = cx.emit("multiply", y, cx.scalar(alpha, dt))
    if node.input(2) and beta != 0.0:
        c = to_rank(cx, cx.value(node.input(2)), 2)
        if beta != 1.0:
            c = cx.emit("multiply", c, cx.scalar(beta, dt))
        y = cx.emit("add", y, c)
    cx.define(node.out(0), y)
