"""conv_kernel_grad's product of a bf16 convolution in pairs of steps for `vdpbf16ps` (a CPU
with AVX-512 BF16, schedule `pairs 1`): the planes and G hold bf16 as they are copied, not
widened, and Bk holds pairs of steps next to each other,

    Bk[(pp · c_stride + o) · 2 + e] = G[o, p0 + 2 · pp + e]

G's rows as 32-bit pairs transposed by 16 × 16 blocks in vector registers (dlvm.codegen.
transposing), as the f32 product transposes G's elements. A's pair for row (c, t) and steps
p, p + 1 is one 32-bit load from the padded plane (the two steps are next to each other
there), broadcast to the 16 lanes. Each tile adds a slice's pairs to its f32 sums in C (zero
at the first channel's first slice), so that every output is summed in f32 over its whole
sum and copy_out rounds it once, as the widened product does. An odd slice's last pair reads
one element past the kernel's last position (G's zero there: 0 · x̂ adds nothing; the planes
have room for it). Slices are whole blocks of 32 steps."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from dlvm.codegen.bf16_pairs import LANES, dpbf16
from dlvm.codegen.conv_kernel_grad import KernelGradient
from dlvm.codegen.llvm_types import I32, I64
from dlvm.codegen.loops import counted_loop
from dlvm.codegen.transposing import transpose_square
from dlvm.ir.values import Instruction

if TYPE_CHECKING:
    from dlvm.codegen.kernel import KernelGen


def _c(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def kernel_gradient(kg: KernelGen, conv: Instruction, out: ir.Value, lanes: int) -> KernelGradient:
    """conv_kernel_grad's product for `conv` (conv_kernel_grad.suits): in pairs for a bf16
    convolution whose kernel's schedule has `pairs 1` and vectors of 16 f32 lanes, else the
    f32 one (bf16 widened to f32)."""
    sched = kg.fn.schedule
    wide = conv.type.dtype.bits == 16 and sched is not None and sched.get("pairs") == 1  # type: ignore[attr-defined]
    if wide and lanes // 2 == LANES:
        return KernelGradientPairs(kg, conv, out, lanes)
    return KernelGradient(kg, conv, out, lanes)


class KernelGradientPairs(KernelGradient):
    """The product of one bf16 convolve of kg's kernel into `out` in pairs (the module
    docstring); `lanes`: the schedule's, bf16 lanes."""

    def __init__(self, kg: KernelGen, conv: Instruction, out: ir.Value, lanes: int) -> None:
        super().__init__(kg, conv, out, lanes, pairs=True)
        assert self.tile.lanes == LANES and self.tile.depth % (2 * LANES) == 0

    def pack_kernel(self, p0: ir.Value, p1: ir.Value) -> None:
        """Bk's pairs of steps [p0, p1) (rounded up to whole blocks of 16 pairs): G's rows as
        32-bit pairs, transposed by blocks of 16 × 16."""
        b = self.b
        vt = ir.VectorType(I32, LANES)
        row = self.g_stride // 2  # G's row in pairs
        blocks = b.udiv(b.add(b.sub(p1, p0), _c(2 * LANES - 1)), _c(2 * LANES))
        first = b.udiv(p0, _c(2))

        def block(qb: ir.Value) -> None:
            q = b.add(first, b.mul(qb, _c(LANES)))

            def rows(ob: ir.Value) -> None:
                o = b.mul(ob, _c(LANES))
                vs = [
                    b.load(b.gep(self.grid, [b.add(b.mul(b.add(o, _c(i)), _c(row)), q)],
                                 source_etype=I32), typ=vt, align=4)
                    for i in range(LANES)
                ]  # fmt: skip
                for i, v in enumerate(transpose_square(b, vs)):
                    pp = b.add(b.mul(qb, _c(LANES)), _c(i))
                    at = b.gep(self.bk, [b.add(b.mul(pp, _c(self.c_stride)), o)],
                               source_etype=I32)  # fmt: skip
                    b.store(v, at, align=4)

            counted_loop(b, 0, self.c_stride // LANES, rows, name="kpob")

        counted_loop(b, 0, blocks, block, name="kpqb")

    def strip_product(
        self, lo: ir.Value, hi: ir.Value, j0: ir.Value, width: int, p0: ir.Value, p1: ir.Value,
        first: ir.Value,
    ) -> None:  # fmt: skip
        """C's columns [j0, j0 + width) of rows [lo, hi) plus the pairs of steps [p0, p1),
        16 columns a vector (C's and Bk's rows are whole strips long)."""
        b, kg = self.b, self.kg
        vectors = -(-width // LANES)
        acc_t = ir.VectorType(ir.FloatType(), LANES)
        pair_t = ir.VectorType(self.src_ty, 2 * LANES)
        splat_t = ir.VectorType(I32, LANES)
        fn = dpbf16(kg.module)
        pairs = b.udiv(b.add(b.sub(p1, p0), _c(1)), _c(2))

        def one_tile(i0: ir.Value, rows: int) -> None:
            starts = [b.add(s, p0) for s in self.row_starts(i0, rows)]
            sums = [
                [self.at(self.c_tile, b.add(b.mul(b.add(i0, _c(r)), _c(self.c_stride)),
                                            b.add(j0, _c(v * LANES)))) for v in range(vectors)]
                for r in range(rows)
            ]  # fmt: skip
            acc = [[kg.alloca(acc_t) for _ in range(vectors)] for _ in range(rows)]
            with b.if_else(first) as (zero, resume):
                with zero:
                    for row in acc:
                        for slot in row:
                            b.store(ir.Constant(acc_t, None), slot)
                with resume:
                    for row, ptrs in zip(acc, sums):
                        for slot, ptr in zip(row, ptrs):
                            b.store(b.load(ptr, typ=acc_t, align=4), slot)

            def step(pp: ir.Value) -> None:
                bv = [
                    b.load(b.gep(self.bk, [b.add(b.mul(pp, _c(self.c_stride)),
                                                 b.add(j0, _c(v * LANES)))], source_etype=I32),
                           typ=pair_t, align=4)
                    for v in range(vectors)
                ]  # fmt: skip
                undef = ir.Constant(splat_t, ir.Undefined)
                for r in range(rows):
                    at = b.gep(self.planes, [b.add(starts[r], b.mul(pp, _c(2)))],
                               source_etype=self.src_ty)  # fmt: skip
                    a = b.load(at, typ=I32, align=2)  # steps p and p + 1 of row r
                    one = b.insert_element(undef, a, ir.Constant(I32, 0))
                    av = b.bitcast(b.shuffle_vector(one, undef, ir.Constant(splat_t, [0] * LANES)),
                                   pair_t)  # fmt: skip
                    for slot, x in zip(acc[r], bv):
                        b.store(b.call(fn, [b.load(slot), av, x]), slot)

            counted_loop(b, 0, pairs, step, name="kpp")
            for row, ptrs in zip(acc, sums):
                for slot, ptr in zip(row, ptrs):
                    b.store(b.load(slot), ptr, align=4)

        self.tiles(lo, hi, one_tile)
