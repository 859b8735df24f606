"""The CPU `convolve` of bf16 images and kernels as conv_gemm's product, with f32 sums over the
whole sum of each output (the group's input channels × taps) and one rounding to bf16.

The sum is one slice (conv_gemm slices sums of more than DEPTH steps and accumulates the slices
in the output, which in bf16 would round between them): the block of X̂ holds every step for a
panel of output rows, as many as fit BLOCK_BYTES. With `pairs 1` in the kernel's schedule
(AVX-512 BF16, dlvm.codegen.bf16_pairs) the block holds X̂ in pairs of steps, each of its rows
a pair of X̂'s, the two steps of a column next to each other:

    block[(pp · row_stride + j) · 2 + e] = X̂[2 · pp + e, j]

so that the micro-kernel reads 16 columns' pairs as one vector for `vdpbf16ps`. A row of pairs
is made from X̂'s rows 2·pp and 2·pp + 1, each first copied as conv_gemm copies a row (runs
LLVM vectorises) into two rows behind the block, then interleaved 16 columns at a time in
vector registers (stored element by element, the copy took as long as the product). The
kernel (the row-major [cout × cin_g·taps] matrix a) is copied by each thread, once per call,
into rows of ⌈k / 2⌉ 32-bit pairs behind the block, an odd k's last pair ending in a zero (as
the block's last row of pairs does: 0 · 0 adds nothing, and nothing is read past the kernel).
Without AVX-512 BF16 the block holds X̂ widened to f32 as it is copied, the kernel is copied
widened to f32 once per call, and the f32 micro-kernel (MatMul.micro) runs.

Which convolutions take this path (dlvm.codegen.bf16_products.kernel_takes, before compute
generation): sums of at most bf16_products.LONGEST_SUM steps, at least two output channels
per group and more than one input channel per group (not depthwise: conv_depthwise's loop),
an output at least as long as the kernel along the last axis (not a kernel's gradient:
conv_kernel_grad, conv_folded), at least MIN_POSITIONS output positions per image (not
conv_rows' or conv_folded's few positions) and a block of one output row within ROW_BYTES
(row_fits). A convolution taken that the product cannot run after all (`suits`: an operand
not in memory, a kernel whose columns are not one run) and a thread without its scratch
buffer compute it element by element with f32 sums (KernelGen.convolve_element), slower but
as exact."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from llvmlite import ir

from dlvm.codegen import bf16_pairs
from dlvm.codegen.bf16_pairs import LANES, half
from dlvm.codegen.conv_gemm import CACHE_LINE, L1_BYTES, ConvGemm, in_memory, kernel_runs
from dlvm.codegen.llvm_types import I32, I64
from dlvm.codegen.loops import counted_loop
from dlvm.codegen.matmul import Tiling, tiling
from dlvm.ir.types import DataType, TensorType
from dlvm.ir.values import Instruction

if TYPE_CHECKING:
    from dlvm.codegen.kernel import KernelGen

MIN_POSITIONS = 64  # output positions per image: fewer go to conv_rows' or conv_folded's loops
BLOCK_BYTES = 256 * 1024  # a panel's block of X̂, every step of the sum: in L2
ROW_BYTES = 4 << 20  # at most, the block of one output row (a panel has one at least)


def _c(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def row_fits(steps: int, width: int) -> bool:
    """Whether the block of one output row `width` long, a sum of `steps`, fits ROW_BYTES
    widened to f32 (in pairs it takes half that): not a 1-D signal of a million positions
    with long sums, whose block would ask the scratch buffer for gigabytes."""
    return steps * width * 4 <= ROW_BYTES


def suits(conv: Instruction, lanes: int) -> bool:
    """Whether a bf16 convolution runs as this product: both operands in memory (perhaps
    strided views), the kernel's columns one contiguous run, an output at least as long as
    the kernel along its last axis (X̂'s runs go along output rows), vectors of f32."""
    x, k = conv.operands
    t, kt = conv.type, k.type
    assert isinstance(t, TensorType) and isinstance(kt, TensorType)
    xv, kv = in_memory(x), in_memory(k)
    return (
        t.dtype is DataType.BF16
        and lanes >= 4
        and xv is not None
        and kv is not None
        and kernel_runs(kt.shape[1:], kv[1][1:])[0] == math.prod(kt.shape[1:])
        and t.shape[-1] >= kt.shape[-1]
        and row_fits(math.prod(kt.shape[1:]), t.shape[-1])
    )


class Bf16Conv(ConvGemm):
    """The product of one bf16 convolve of kg's kernel into `out` (the module docstring);
    `lanes`: the schedule's, bf16 lanes (twice the f32 accumulators')."""

    def __init__(
        self, kg: KernelGen, conv: Instruction, out: ir.Value, lanes: int, split: int = 1
    ) -> None:
        super().__init__(kg, conv, out, lanes, split)
        lanes = max(1, lanes // 2)  # f32 accumulators
        self.wide = True
        sched = kg.fn.schedule
        self.converts = sched is not None and sched.get("pairs") == 1  # AVX-512 BF16
        self.pairs = self.converts and lanes == LANES
        shape = tiling(self.m, self.k, lanes, self.n, 4)
        self.tile = Tiling(shape.rows, shape.vectors, lanes, self.k, 1)
        self.steps = half(self.k) if self.pairs else self.k  # rows of the block
        unit = 4  # bytes of an element of the block: a pair of bf16, or an f32
        width = self.positions[-1]
        columns = max(1, BLOCK_BYTES // (self.steps * unit))
        self.panel_rows = max(1, min(columns // width, self.block_rows))
        line = CACHE_LINE // unit
        lines = -(-self.panel_rows * width // line)
        if self.steps * lines * CACHE_LINE > L1_BYTES:
            lines += 1 - lines % 2  # an odd number of cache lines apart: rows in other sets
        self.row_stride = lines * line  # in units; whole vectors of 16 read past a panel's end
        self.block_bytes = self.steps * self.row_stride * unit
        self.kernel_pairs = half(self.k)  # a packed row of the kernel, in pairs
        # The kernel, packed: rows of pairs, or of f32.
        self.pack_bytes = self.t.shape[1] * (self.kernel_pairs if self.pairs else self.k) * 4
        rows_bytes = 2 * self.row_stride * 2 if self.pairs else 0  # two rows of X̂ in bf16
        self.scratch_bytes = self.block_bytes + self.pack_bytes + rows_bytes
        self.a_pack: ir.Value | None = None
        self.two_rows: ir.Value | None = None

    # The block ---------------------------------------------------------------------------

    @property
    def block_ty(self) -> ir.Type:
        return self.elem_ty if self.pairs else ir.FloatType()

    def to_block(self, v: ir.Value) -> ir.Value:
        return v if self.pairs else self.b.fpext(v, ir.FloatType())

    def prepare(self, scratch: ir.Value) -> None:
        """The kernel packed behind the block (in pairs, or widened to f32), and with pairs,
        where the two rows of X̂ that make a row of pairs are copied first."""
        b, bf = self.b, self.elem_ty
        self.a_pack = b.gep(scratch, [_c(self.block_bytes)], source_etype=ir.IntType(8))
        ptr, rows = self.kg.ptrs[self.k_base], self.k_strides[0]
        if not self.pairs:

            def wide(o: ir.Value) -> None:
                def column(p: ir.Value) -> None:
                    v = b.load(b.gep(ptr, [b.add(b.mul(o, _c(rows)), p)], source_etype=bf),
                               typ=bf)  # fmt: skip
                    at = b.gep(self.a_pack, [b.add(b.mul(o, _c(self.k)), p)],
                               source_etype=ir.FloatType())  # fmt: skip
                    b.store(b.fpext(v, ir.FloatType()), at)

                counted_loop(b, 0, self.k, column, name="kw")

            counted_loop(b, 0, self.t.shape[1], wide, name="ko")
            return
        self.two_rows = b.gep(scratch, [_c(self.block_bytes + self.pack_bytes)],
                              source_etype=ir.IntType(8))  # fmt: skip
        h = self.kernel_pairs

        def row(o: ir.Value) -> None:
            start = b.mul(o, _c(rows))
            dst = b.mul(o, _c(h))

            def pair(pp: ir.Value) -> None:
                src = b.gep(ptr, [b.add(start, b.mul(pp, _c(2)))], source_etype=bf)
                b.store(b.load(src, typ=I32, align=2),
                        b.gep(self.a_pack, [b.add(dst, pp)], source_etype=I32))  # fmt: skip

            counted_loop(b, 0, self.k // 2, pair, name="kp")
            if self.k % 2:  # the last pair: the kernel's last column and a zero
                last = b.load(b.gep(ptr, [b.add(start, _c(self.k - 1))], source_etype=bf),
                              typ=ir.IntType(16))  # fmt: skip
                b.store(b.zext(last, I32),
                        b.gep(self.a_pack, [b.add(dst, _c(h - 1))], source_etype=I32))  # fmt: skip

        counted_loop(b, 0, self.t.shape[1], row, name="ko")

    def im2col(
        self, buf: ir.Value, n: ir.Value, g: ir.Value, p0: ir.Value, p1: ir.Value, r0: ir.Value,
        rows: int,
    ) -> None:  # fmt: skip
        """The block for the whole sum (p0 = 0, p1 = k); with pairs, each row of pairs from
        X̂'s rows 2·pp and 2·pp + 1 copied as conv_gemm copies them (runs LLVM vectorises),
        then interleaved 16 columns at a time in vector registers; an odd k's last row of
        pairs with zeros for the missing step."""
        if not self.pairs:
            super().im2col(buf, n, g, p0, p1, r0, rows)
            return
        b, bf = self.b, self.elem_ty
        columns = rows * self.positions[-1]
        vectors = -(-columns // LANES)
        first = self.two_rows
        assert first is not None, "prepare"
        second = b.gep(first, [_c(self.row_stride)], source_etype=bf)
        half_t = ir.VectorType(bf, LANES)
        mix = ir.Constant(ir.VectorType(I32, 2 * LANES),
                          [x for c in range(LANES) for x in (c, LANES + c)])  # fmt: skip

        def interleave(pp: ir.Value) -> None:
            row = b.mul(pp, _c(self.row_stride))

            def vector(v: ir.Value) -> None:
                c = b.mul(v, _c(LANES))
                lo = b.load(b.gep(first, [c], source_etype=bf), typ=half_t, align=2)
                hi = b.load(b.gep(second, [c], source_etype=bf), typ=half_t, align=2)
                at = b.gep(buf, [b.add(row, c)], source_etype=I32)
                b.store(b.shuffle_vector(lo, hi, mix), at, align=4)

            counted_loop(b, 0, vectors, vector, name="mix")

        def pair(pp: ir.Value) -> None:
            q = b.mul(pp, _c(2))
            self.block_step(first, n, g, q, r0, rows)
            self.block_step(second, n, g, b.add(q, _c(1)), r0, rows)
            interleave(pp)

        counted_loop(b, 0, self.k // 2, pair, name="pairs")
        if self.k % 2:
            self.block_step(first, n, g, _c(self.k - 1), r0, rows)
            counted_loop(b, 0, vectors * LANES, lambda c: b.store(
                ir.Constant(bf, 0), b.gep(second, [c], source_etype=bf)), name="zk")  # fmt: skip
            interleave(_c(self.k // 2))

    def a_at(
        self, batch: list[ir.Value], i0: ir.Value, p0: ir.Value
    ) -> Callable[[int, ir.Value], ir.Value]:
        """Without pairs: the kernel's element for row i0 + r, step p, from its f32 copy."""
        b, a_pack = self.b, self.a_pack
        assert a_pack is not None, "prepare"
        base = b.mul(b.add(b.mul(batch[1], _c(self.cout_g)), i0), _c(self.k))

        def at(r: int, p: ir.Value) -> ir.Value:
            off = b.add(b.add(base, _c(r * self.k)), p)
            return b.load(b.gep(a_pack, [off], source_etype=ir.FloatType()), typ=ir.FloatType())

        return at

    # The product -------------------------------------------------------------------------

    def strip_product(
        self, buf: ir.Value, batch: list[ir.Value], jc: ir.Value, j0: ir.Value, count: int,
        bounds: tuple[ir.Value, ir.Value, ir.Value, ir.Value],
    ) -> None:  # fmt: skip
        if not self.pairs:
            super().strip_product(buf, batch, jc, j0, count, bounds)
            return
        b, h, a_pack = self.b, self.kernel_pairs, self.a_pack
        assert a_pack is not None, "prepare"
        rel = b.sub(j0, jc)
        row0 = b.mul(batch[1], _c(self.cout_g))

        def b_pair(pp: ir.Value, v: int) -> ir.Value:
            off = b.add(b.mul(pp, _c(self.row_stride)), b.add(rel, _c(v * LANES)))
            return b.gep(buf, [off], source_etype=I32)

        def tile(i0: ir.Value, rows: int) -> None:
            base = b.mul(b.add(row0, i0), _c(h))

            def a_pair(r: int, pp: ir.Value) -> ir.Value:
                at = b.gep(a_pack, [b.add(base, b.add(_c(r * h), pp))], source_etype=I32)
                return b.load(at, typ=I32)

            bf16_pairs.micro(self, batch, i0, rows, j0, count, a_pair, b_pair)

        self.tiles(_c(0), _c(self.m), tile)
