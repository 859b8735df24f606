"""Copies of a transposed matrix that read it along its rows in memory: square blocks of
lanes × lanes elements loaded as vectors, transposed through shuffles and stored as vectors.
The products' packings use them for a `b` that is Wᵀ read in place (an nn.Linear's weight),
whose columns an element-by-element copy would read a row of W apart each."""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from dlvm.codegen.llvm_types import I32, I64
from dlvm.codegen.loops import counted_loop
from dlvm.ir.strided import view_strides
from dlvm.ir.types import TensorType
from dlvm.ir.values import Argument, Value

Address = Callable[[ir.Value, ir.Value], ir.Value]


def _c(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def columns_in_place(
    v: Value, ptrs: dict[Value, ir.Value]
) -> tuple[ir.Value, tuple[int, ...]] | None:
    """The pointer of the kernel argument that the matrix v views in place, and v's strides
    over it, when consecutive elements down v's columns lie next to each other and along its
    rows do not (v is the transpose of a matrix in memory); None otherwise."""
    t = v.type
    assert isinstance(t, TensorType)
    found = view_strides(v)
    if len(t.shape) != 2 or found is None:
        return None
    base, strides = found
    if not isinstance(base, Argument) or base not in ptrs:
        return None
    if strides[-2] != 1 and t.shape[-2] != 1:
        return None
    if strides[-1] == 1 and t.shape[-1] != 1:
        return None  # rows contiguous too (one column, say): read it as it lies
    return ptrs[base], strides


def transpose_square(b: ir.IRBuilder, rows: list[ir.Value]) -> list[ir.Value]:
    """The columns of the square matrix whose rows are the vectors `rows` (a power of two of
    them): halves, then quarters, … of the off-diagonal blocks exchanged, one shuffle per
    vector and step."""
    n = len(rows)
    rows = list(rows)
    h = n // 2
    while h:
        low = [c if not c & h else n + c - h for c in range(n)]
        high = [c + h if not c & h else n + c for c in range(n)]
        for i in range(n):
            if not i & h:
                x, y = rows[i], rows[i + h]
                rows[i] = b.shuffle_vector(x, y, ir.Constant(ir.VectorType(I32, n), low))
                rows[i + h] = b.shuffle_vector(x, y, ir.Constant(ir.VectorType(I32, n), high))
        h //= 2
    return rows


def copy_transposed(
    b: ir.IRBuilder, elem_ty: ir.Type, size: int, lanes: int, source: Address,
    target: Address, columns: ir.Value, p0: ir.Value, p1: ir.Value,
    convert: Callable[[ir.Value], ir.Value] | None = None,
) -> None:  # fmt: skip
    """*target(p, c) = *source(c, p) for c in [0, columns) and p in [p0, p1), where source(c, ·)
    is contiguous in p and target(p, ·) in c; elements of `size` bytes. Blocks of lanes × lanes
    (a power of two) through vector shuffles, the columns and steps left over one element at a
    time. `convert` (of an element or a vector) turns what is read into what is stored (bf16
    widened to f32: the target's elements are then of the converted type)."""
    convert = convert or (lambda v: v)
    vt = ir.VectorType(elem_ty, lanes)
    full_c = b.mul(b.udiv(columns, _c(lanes)), _c(lanes))
    full_p = b.add(p0, b.mul(b.udiv(b.sub(p1, p0), _c(lanes)), _c(lanes)))

    def block(cb: ir.Value) -> None:
        c = b.mul(cb, _c(lanes))

        def steps(pb: ir.Value) -> None:
            p = b.add(p0, b.mul(pb, _c(lanes)))
            rows = [b.load(source(b.add(c, _c(i)), p), typ=vt, align=size) for i in range(lanes)]
            for t, v in enumerate(transpose_square(b, rows)):
                v = convert(v)
                b.store(v, _typed(b, target(b.add(p, _c(t)), c), v.type), align=size)

        counted_loop(b, 0, b.udiv(b.sub(p1, p0), _c(lanes)), steps, name="tpb")

    counted_loop(b, 0, b.udiv(columns, _c(lanes)), block, name="tcb")

    def one(c: ir.Value, p: ir.Value) -> None:
        b.store(convert(b.load(source(c, p), typ=elem_ty)), target(p, c))

    # The steps left over in the whole blocks' columns, then the columns left over.
    counted_loop(b, 0, full_c, lambda c: counted_loop(
        b, full_p, p1, lambda p: one(c, p), name="tpr"), name="tcr")  # fmt: skip
    counted_loop(b, full_c, columns, lambda c: counted_loop(
        b, p0, p1, lambda p: one(c, p), name="tpr"), name="tcr")  # fmt: skip


def _typed(b: ir.IRBuilder, ptr: ir.Value, ty: ir.Type) -> ir.Value:
    """ptr, to store a `ty` through: cast when it is a typed pointer (one into a stack array)."""
    pt = ptr.type
    assert isinstance(pt, ir.PointerType)
    return ptr if pt.is_opaque else b.bitcast(ptr, ty.as_pointer())
