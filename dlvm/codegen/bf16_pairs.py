"""bf16 matrix products through AVX-512 BF16: the packed operands of a bf16 `dot` (a kernel
scheduled `pairs 1`, dlvm.codegen.panels) laid out in pairs of steps of p, and the micro-kernel
that takes them with `vdpbf16ps`.

Each `vdpbf16ps` adds to 16 f32 lanes the products of 16 pairs of bf16: lane c gets
a0 · b0[c] + a1 · b1[c], where (a0, a1) is a pair of a's steps of p (one 32-bit element,
broadcast) and (b0[c], b1[c]) the same steps of b's column c, next to each other. So a packed
tile of a holds, for each pair of steps pp, its rows' pairs, and a packed strip of b holds, for
each pair, its columns' pairs:

    a_pack[((t · half + pp) · rows + r) · 2 + e] = a[…, ic + t · rows + r, 2 · pp + e]
    b_pack[((q · half + pp) · width + c) · 2 + e] = b[…, 2 · pp + e, jc + q · width + c]

half = ⌈k / 2⌉; an odd k's last pair ends in zeros in both (0 · 0: no NaN from what lies
beyond). The products of two bf16 are exact in f32, and the sums are f32 sums, in another order
than the interpreter's (docs/ir.md, "bf16"); `vdpbf16ps` treats subnormal inputs and results as
zero. The tile's f32 sums are rounded once to bf16 as they are stored (MatMul.store_vector;
widened back to f32 where an f32 epilogue holds the tile in its result).

Operands read in place are copied by pairs rather than by elements: a's rows hold its pairs
next to each other (one 32-bit load each); b's rows p and p + 1 are loaded 16 columns at a time
and interleaved into 16 pairs; b = Wᵀ (an nn.Linear's weight) has its pairs next to each other
in W's rows, so its strip is W's rows as 32-bit elements, transposed by square blocks in vector
registers (dlvm.codegen.transposing), as an f32 Wᵀ is. b = `convert` of an f32 matrix in place
(`--precision bf16`'s weight) is loaded as f32 rows and rounded 16 columns at a time; a = Xᵀ
with X in place (a weight gradient's activations) is two runs of a tile's rows along X's rows
2·pp and 2·pp + 1, interleaved. Anything else (a prologue computes it) goes element by element
through KernelGen.elem."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from llvmlite import ir

from dlvm.codegen.llvm_types import BFLOAT, I32, I64, constant, narrow
from dlvm.codegen.loops import counted_loop
from dlvm.codegen.matmul_rows import rows_in_place
from dlvm.codegen.transposing import columns_in_place, copy_transposed
from dlvm.ir.types import DataType, TensorType
from dlvm.ir.values import Instruction

if TYPE_CHECKING:
    from dlvm.codegen.kernel import KernelGen
    from dlvm.codegen.matmul import MatMul

LANES = 16  # f32 lanes of one vdpbf16ps (512 bits)
DPBF16 = "llvm.x86.avx512bf16.dpbf16ps.512"


def _c(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def half(k: int) -> int:
    """Pairs of steps in a sum of k steps."""
    return -(-k // 2)


def dpbf16(module: ir.Module) -> ir.Function:
    """The intrinsic acc + Σ pairs of a · b: (<16 x float>, <32 x bfloat>, <32 x bfloat>)."""
    fn = module.globals.get(DPBF16)
    if fn is None:
        pairs = ir.VectorType(BFLOAT, 2 * LANES)
        acc = ir.VectorType(ir.FloatType(), LANES)
        fn = ir.Function(module, ir.FunctionType(acc, [acc, pairs, pairs]), DPBF16)
    assert isinstance(fn, ir.Function)
    return fn


def micro(
    mm: MatMul, batch: list[ir.Value], i0: ir.Value, rows: int, j0: ir.Value, width: int,
    a_pair: Callable[[int, ir.Value], ir.Value], b_pair: Callable[[ir.Value, int], ir.Value],
) -> None:  # fmt: skip
    """One tile of rows × width outputs over the whole sum: a_pair(r, pp) is the 32-bit pair of
    row i0 + r, b_pair(pp, v) the address of vector v's 16 column pairs (32 bf16, read whole
    even past `width`: the strip's pack has room). Stored to out rounded to bf16, then the
    kernel's epilogue."""
    b, kg = mm.b, mm.kg
    vectors = -(-width // LANES)
    acc_t = ir.VectorType(ir.FloatType(), LANES)
    pair_t = ir.VectorType(mm.elem_ty, 2 * LANES)
    splat_t = ir.VectorType(I32, LANES)
    acc = [[kg.alloca(acc_t) for _ in range(vectors)] for _ in range(rows)]
    for row in acc:
        for slot in row:
            b.store(ir.Constant(acc_t, None), slot)
    fn = dpbf16(kg.module)

    def step(pp: ir.Value) -> None:
        bv = [b.load(b_pair(pp, v), typ=pair_t, align=2) for v in range(vectors)]
        for r in range(rows):
            one = b.insert_element(ir.Constant(splat_t, ir.Undefined), a_pair(r, pp),
                                   ir.Constant(I32, 0))  # fmt: skip
            av = b.bitcast(b.shuffle_vector(one, ir.Constant(splat_t, ir.Undefined),
                                            ir.Constant(splat_t, [0] * LANES)), pair_t)  # fmt: skip
            for slot, x in zip(acc[r], bv):
                b.store(b.call(fn, [b.load(slot), av, x]), slot)

    counted_loop(b, 0, half(mm.k), step, name="pp")
    for r in range(rows):
        i = b.add(i0, _c(r))
        for v, slot in enumerate(acc[r]):
            count = min(LANES, width - v * LANES)
            sums = b.load(slot)
            if count < LANES:
                sums = b.shuffle_vector(sums, ir.Constant(acc_t, None), ir.Constant(
                    ir.VectorType(I32, count), list(range(count))))  # fmt: skip
            mm.store_vector(sums, mm.out_address(batch, i, j0, v * LANES))
    if kg.root is not mm.dot:
        mm.epilogue(batch, i0, rows, j0, width)


def _offset(b: ir.IRBuilder, strides: tuple[int, ...], idx: list[ir.Value]) -> ir.Value:
    total: ir.Value = _c(0)
    for i, st in zip(idx, strides):
        if st:
            total = b.add(total, b.mul(i, _c(st)))
    return total


def _converted_rows(mm: MatMul, kg: KernelGen) -> tuple[ir.Value, tuple[int, ...]] | None:
    """Where b is an f32 matrix in place converted to bf16 (`--precision bf16`'s weight, read
    through its conversion): that matrix's pointer and strides, its rows loaded as f32 vectors
    and rounded (as `convert` rounds: to nearest even) while they are packed."""
    v = mm.bm
    if not isinstance(v, Instruction) or v.opcode != "convert":
        return None
    src = v.operands[0]
    t = src.type
    if not isinstance(t, TensorType) or t.dtype is not DataType.F32:
        return None
    return rows_in_place(src, kg.ptrs)


def pack_a(
    mm: MatMul, rows: int, batch: list[ir.Value], ic: ir.Value, ic_end: ir.Value,
    a_pack: ir.Value, down_columns: bool,
) -> None:  # fmt: skip
    """a_pack as above for rows [ic, ic_end) of a: by pairs when a's rows lie in place, else
    element by element through any prologue, down a's columns with `down_columns` (a
    transpose: along rows in memory, dlvm.codegen.panels.transposed)."""
    b, kg, bf = mm.b, mm.kg, mm.elem_ty
    h = half(mm.k)

    def unit(i: ir.Value, pp: ir.Value) -> ir.Value:
        rel = b.sub(i, ic)
        t, r = b.udiv(rel, _c(rows)), b.urem(rel, _c(rows))
        return b.add(b.mul(b.add(b.mul(t, _c(h)), pp), _c(rows)), r)

    def at(i: ir.Value, p: ir.Value) -> ir.Value:
        off = b.add(b.mul(unit(i, b.lshr(p, _c(1))), _c(2)), b.and_(p, _c(1)))
        return b.gep(a_pack, [off], source_etype=bf)

    found = rows_in_place(mm.a, kg.ptrs)

    def element(i: ir.Value, p: ir.Value) -> None:
        kg.memo.clear()
        b.store(kg.elem(mm.a, [*batch, i, p]), at(i, p))

    columns = columns_in_place(mm.a, kg.ptrs) if found is None and down_columns else None
    if columns is not None:
        _pack_a_columns(mm, rows, ic, ic_end, a_pack, columns, element)
        if mm.k % 2:
            counted_loop(b, ic, ic_end, lambda i: b.store(
                constant(DataType.BF16, 0), at(i, _c(mm.k))), name="rz")  # fmt: skip
        return
    if found is None and down_columns:
        counted_loop(b, 0, mm.k, lambda p: counted_loop(
            b, ic, ic_end, lambda i: element(i, p), name="ra"), name="pa")  # fmt: skip
        if mm.k % 2:
            counted_loop(b, ic, ic_end, lambda i: b.store(
                constant(DataType.BF16, 0), at(i, _c(mm.k))), name="rz")  # fmt: skip
        return

    def row(i: ir.Value) -> None:
        if found is not None:
            ptr, strides = found
            start = b.gep(ptr, [_offset(b, strides, [*batch, i, _c(0)])], source_etype=bf)

            def pair(pp: ir.Value) -> None:
                v = b.load(b.gep(start, [b.mul(pp, _c(2))], source_etype=bf), typ=I32, align=2)
                b.store(v, b.gep(a_pack, [unit(i, pp)], source_etype=I32))

            counted_loop(b, 0, mm.k // 2, pair, name="pa")
            if mm.k % 2:
                last = b.load(b.gep(start, [_c(mm.k - 1)], source_etype=bf), typ=bf)
                b.store(last, at(i, _c(mm.k - 1)))
        else:
            counted_loop(b, 0, mm.k, lambda p: element(i, p), name="pa")
        if mm.k % 2:
            b.store(constant(DataType.BF16, 0), at(i, _c(mm.k)))

    counted_loop(b, ic, ic_end, row, name="ra")


def _pack_a_columns(
    mm: MatMul, rows: int, ic: ir.Value, ic_end: ir.Value, a_pack: ir.Value,
    columns: tuple[ir.Value, tuple[int, ...]], element: Callable[[ir.Value, ir.Value], None],
) -> None:  # fmt: skip
    """pack_a for a = Xᵀ, X in memory (a weight gradient's activations): a whole tile's
    pair of steps is two runs of `rows` elements along X's rows 2·pp and 2·pp + 1,
    interleaved in registers; a last, shorter tile and an odd k's last step element by
    element."""
    b, bf = mm.b, mm.elem_ty
    ptr, (_, row) = columns
    h = half(mm.k)
    run_t = ir.VectorType(bf, rows)
    mix = ir.Constant(ir.VectorType(I32, 2 * rows),
                      [x for r in range(rows) for x in (r, rows + r)])  # fmt: skip
    whole = b.udiv(b.sub(ic_end, ic), _c(rows))

    def tile(t: ir.Value) -> None:
        i0 = b.add(ic, b.mul(t, _c(rows)))

        def pair(pp: ir.Value) -> None:
            p = b.mul(pp, _c(2))
            lo = b.load(b.gep(ptr, [b.add(b.mul(p, _c(row)), i0)], source_etype=bf),
                        typ=run_t, align=2)  # fmt: skip
            hi = b.load(b.gep(ptr, [b.add(b.mul(b.add(p, _c(1)), _c(row)), i0)],
                              source_etype=bf), typ=run_t, align=2)  # fmt: skip
            unit = b.mul(b.add(b.mul(t, _c(h)), pp), _c(rows))
            target = b.gep(a_pack, [b.mul(unit, _c(2))], source_etype=bf)
            b.store(b.shuffle_vector(lo, hi, mix), target, align=2)

        counted_loop(b, 0, mm.k // 2, pair, name="pa")
        if mm.k % 2:
            counted_loop(b, i0, b.add(i0, _c(rows)), lambda i: element(i, _c(mm.k - 1)),
                         name="ra")  # fmt: skip

    counted_loop(b, 0, whole, tile, name="ta")
    rest = b.add(ic, b.mul(whole, _c(rows)))
    counted_loop(b, 0, mm.k, lambda p: counted_loop(
        b, rest, ic_end, lambda i: element(i, p), name="ra"), name="pa")  # fmt: skip


def pack_b(
    mm: MatMul, width: int, batch: list[ir.Value], jc: ir.Value, jc_end: ir.Value,
    b_pack: ir.Value, down_columns: bool,
) -> None:  # fmt: skip
    """b_pack as above for columns [jc, jc_end) of b: Wᵀ in place by blocks of W's rows, b in
    place by rows interleaved 16 columns at a time, or element by element through any
    prologue (down b's columns with `down_columns`)."""
    b, kg, bf = mm.b, mm.kg, mm.elem_ty
    h = half(mm.k)
    strips = b.udiv(b.add(b.sub(jc_end, jc), _c(width - 1)), _c(width))
    found = None if mm.b_columns is not None else rows_in_place(mm.bm, kg.ptrs)
    source_t = ir.VectorType(bf, LANES)  # what a row's 16 columns load as
    if found is None and mm.b_columns is None and (wide := _converted_rows(mm, kg)) is not None:
        found, source_t = wide, ir.VectorType(ir.FloatType(), LANES)

    def strip(q: ir.Value) -> None:
        j0 = b.add(jc, b.mul(q, _c(width)))
        diff = b.sub(jc_end, j0)
        count = b.select(b.icmp_signed("<", diff, _c(width)), diff, _c(width))
        base = b.mul(q, _c(h * width))

        def unit(pp: ir.Value, c: ir.Value) -> ir.Value:
            return b.add(base, b.add(b.mul(pp, _c(width)), c))

        def at(p: ir.Value, c: ir.Value) -> ir.Value:
            off = b.add(b.mul(unit(b.lshr(p, _c(1)), c), _c(2)), b.and_(p, _c(1)))
            return b.gep(b_pack, [off], source_etype=bf)

        def zero(c: ir.Value) -> None:  # an odd k's last pair ends in a zero
            b.store(constant(DataType.BF16, 0), at(_c(mm.k), c))

        def element(p: ir.Value, c: ir.Value) -> None:
            kg.memo.clear()
            b.store(kg.elem(mm.bm, [*batch, p, b.add(j0, c)]), at(p, c))

        if mm.b_columns is not None:  # W's rows as 32-bit pairs, transposed by blocks
            ptr, (_, row) = mm.b_columns

            def source(c: ir.Value, pp: ir.Value) -> ir.Value:
                off = b.add(b.mul(b.add(j0, c), _c(row)), b.mul(pp, _c(2)))
                return b.gep(ptr, [off], source_etype=bf)

            def target(pp: ir.Value, c: ir.Value) -> ir.Value:
                return b.gep(b_pack, [unit(pp, c)], source_etype=I32)

            copy_transposed(b, I32, 2, LANES, source, target, count, _c(0), _c(mm.k // 2))
            if mm.k % 2:
                last = _c(mm.k - 1)

                def odd(c: ir.Value) -> None:
                    off = b.add(b.mul(b.add(j0, c), _c(row)), last)
                    b.store(b.load(b.gep(ptr, [off], source_etype=bf), typ=bf), at(last, c))

                counted_loop(b, 0, count, odd, name="cl")
        elif found is not None:  # rows p and p + 1 interleaved, 16 columns at a time
            ptr, strides = found
            vecs = b.udiv(count, _c(LANES))
            half_t = ir.VectorType(bf, LANES)
            size = 4 if source_t.element == ir.FloatType() else 2
            mix = ir.Constant(ir.VectorType(I32, 2 * LANES),
                              [x for c in range(LANES) for x in (c, LANES + c)])  # fmt: skip

            def row_at(p: ir.Value, c: ir.Value) -> ir.Value:
                off = _offset(b, strides, [*batch, p, b.add(j0, c)])
                return b.gep(ptr, [off], source_etype=source_t.element)

            def load_row(p: ir.Value, c: ir.Value) -> ir.Value:
                v = b.load(row_at(p, c), typ=source_t, align=size)
                return v if size == 2 else narrow(b, v, half_t)  # vcvtneps2bf16

            def pair_row(pp: ir.Value) -> None:
                p = b.mul(pp, _c(2))

                def vector(v: ir.Value) -> None:
                    c = b.mul(v, _c(LANES))
                    lo = load_row(p, c)
                    hi = load_row(b.add(p, _c(1)), c)
                    b.store(b.shuffle_vector(lo, hi, mix), at(p, c), align=2)

                def both(c: ir.Value) -> None:  # the columns past the whole vectors
                    element(p, c)
                    element(b.add(p, _c(1)), c)

                counted_loop(b, 0, vecs, vector, name="vb")
                counted_loop(b, b.mul(vecs, _c(LANES)), count, both, name="cb")

            counted_loop(b, 0, mm.k // 2, pair_row, name="pb")
            if mm.k % 2:
                counted_loop(b, 0, count, lambda c: element(_c(mm.k - 1), c), name="cl")
        elif down_columns:  # a transpose: along rows in memory
            counted_loop(b, 0, count, lambda c: counted_loop(
                b, 0, mm.k, lambda p: element(p, c), name="pb"), name="cb")  # fmt: skip
        else:
            counted_loop(b, 0, mm.k, lambda p: counted_loop(
                b, 0, count, lambda c: element(p, c), name="cb"), name="pb")  # fmt: skip
        if mm.k % 2:
            counted_loop(b, 0, count, zero, name="cz")

    counted_loop(b, 0, strips, strip, name="qb")
