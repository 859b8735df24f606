"""The CPU `convolve` of a depthwise convolution with few output positions and long sums: a
depthwise kernel's gradient (adjoints_window._depthwise_kernel_adjoint), whose outputs are the
primal's taps and whose kernel is the primal's output adjoint, one input channel per group.

Each output element is a sum over the whole kernel plane, so the kernel's last axis lies in
vector lanes: for each output channel, the outputs of the thread's block of output rows are
vector accumulators (held in registers), and along each kernel row each vector of kernel
elements is loaded once and multiplied by, for every output, the input elements its lanes meet
there (one load each, deinterleaved for strides up to MAX_DEINTERLEAVE as in conv_depthwise).
The lanes are summed only at the end. A product would have a single row (the kernel plane
against each output's patch); conv_depthwise's loop would unroll every tap of the kernel plane.

A kernel row is cut into vectors from its first element: those whose every load stays inside
the input row (the interior) run in a loop, `COPIES` of them at once when there are few outputs
(independent sets of accumulators, so the multiply-adds do not wait on each other); the others,
partly in the padding or past the row's end, read through constant masks (a masked load: no
lane outside the row is touched). Rows of the outer axes that fall in the padding read zeros
through a select on the whole vector. Threads share images and blocks of output rows as in
conv_gemm (compute-scheduling's `split`); a fused elementwise epilogue rewrites each output
after the block is stored."""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

from llvmlite import ir

from dlvm.codegen.conv_depthwise import MAX_DEINTERLEAVE, MAX_TAPS, DirectConv, direct
from dlvm.codegen.llvm_types import I1, I32, I64, PTR
from dlvm.codegen.loops import counted_loop, unravel
from dlvm.ir.types import TensorType
from dlvm.ir.values import Instruction

if TYPE_CHECKING:
    pass

MAX_OUTPUTS = 64  # output positions per channel, each a register of accumulators
CHAINS = 8  # independent multiply-add chains that keep the FMA units busy
MAX_COPIES = 4  # sets of accumulators at most


def _c(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def suits(conv: Instruction, lanes: int) -> bool:
    """Whether the convolution runs as this loop: floats held in registers as in memory, in
    vectors, operands in memory, one input channel per group, no left dilation, at most
    MAX_OUTPUTS output positions and more than conv_depthwise's MAX_TAPS taps (what that
    loop unrolls)."""
    k = conv.operands[1]
    t = conv.type
    assert isinstance(t, TensorType) and isinstance(k.type, TensorType)
    return (
        direct(conv, lanes)
        and math.prod(t.shape[2:]) <= MAX_OUTPUTS
        and math.prod(k.type.shape[2:]) > MAX_TAPS
    )


class LongSums(DirectConv):
    """The loop of one such convolve of kg's kernel into `out`."""

    # Geometry of the last axis --------------------------------------------------------------

    def span(self) -> int:
        """Input elements a vector's load covers: a wide load and a shuffle, or lane loads."""
        r = self.rd[-1]
        return self.lanes * r if r <= MAX_DEINTERLEAVE else (self.lanes - 1) * r + 1

    def interior(self, p0: int) -> bool:
        """Whether the vector of kernel elements from p0 is whole and every output's load of
        it stays inside the input row."""
        s, r, lo, width = self.strides[-1], self.rd[-1], self.lows[-1], self.in_shape[-1]
        first = p0 * r - lo
        last = (self.out_shape[-1] - 1) * s + first + self.span()
        return p0 + self.lanes <= self.taps[-1] and first >= 0 and last <= width

    def lane_mask(self, p0: int, o: int) -> list[bool]:
        """For each lane of the vector from p0, whether output o reads an input element of
        the row there (and the lane is inside the kernel row)."""
        s, r, lo, width = self.strides[-1], self.rd[-1], self.lows[-1], self.in_shape[-1]
        return [
            p0 + u < self.taps[-1] and 0 <= o * s + (p0 + u) * r - lo < width
            for u in range(self.lanes)
        ]

    # Emission -------------------------------------------------------------------------------

    def channel(self, n: ir.Value, oc: ir.Value, r0: ir.Value, rows: int) -> None:
        """Output rows [r0, r0 + rows) of channel oc of image n."""
        b, kg = self.b, self.kg
        width = self.out_shape[-1]
        outputs = rows * width
        copies = max(1, min(MAX_COPIES, -(-CHAINS // outputs)))
        zero = ir.Constant(self.vt, None)
        accs = [[kg.alloca(self.vt) for _ in range(outputs)] for _ in range(copies)]
        for slot in itertools.chain(*accs):
            b.store(zero, slot)
        c = b.udiv(oc, _c(self.cout_g))
        plane = b.mul(b.add(b.mul(n, _c(self.xt.shape[1])), c), _c(math.prod(self.in_shape)))
        kplane = b.mul(oc, _c(math.prod(self.taps)))
        out_rows = [unravel(b, b.add(r0, _c(i)), self.out_shape[:-1]) for i in range(rows)]

        def kernel_row(j: ir.Value) -> None:
            p = unravel(b, j, self.taps[:-1]) if self.taps[:-1] else []
            krow = b.add(kplane, b.mul(j, _c(self.taps[-1])))
            reads = [self.input_row(plane, r, p) for r in out_rows]
            self.row(krow, reads, accs)

        counted_loop(b, 0, math.prod(self.taps[:-1]), kernel_row, name="lsrow")
        for i, r in enumerate(out_rows):
            for o in range(width):
                total = b.load(accs[0][i * width + o])
                for more in accs[1:]:
                    total = b.fadd(total, b.load(more[i * width + o]))
                kg.store(self.out, [n, oc, *r, _c(o)], self.t, self.lane_sum(total))
        if kg.root is not self.conv:
            for r in out_rows:
                for o in range(width):
                    kg.memo.clear()
                    idx = [n, oc, *r, _c(o)]
                    kg.store(self.out, idx, self.t, kg.elem(kg.root, idx))

    def input_row(
        self, plane: ir.Value, r: list[ir.Value], p: list[ir.Value]
    ) -> tuple[ir.Value, ir.Value]:
        """The offset of the input row that output row r meets at kernel row p (clamped inside
        the input) and whether that row is inside."""
        b = self.b
        inside: ir.Value = ir.Constant(I1, 1)
        at = plane
        for d, (o, t) in enumerate(zip(r, p)):
            q = b.add(b.mul(o, _c(self.strides[d])), b.mul(t, _c(self.rd[d])))
            q = b.sub(q, _c(self.lows[d]))
            ok = b.icmp_unsigned("<", q, _c(self.in_shape[d]))
            inside = b.and_(inside, ok)
            at = b.add(at, b.mul(b.select(ok, q, _c(0)), _c(math.prod(self.in_shape[d + 1 :]))))
        return at, inside

    def row(
        self, krow: ir.Value, reads: list[tuple[ir.Value, ir.Value]], accs: list[list[ir.Value]]
    ) -> None:
        """One kernel row into the accumulators: the interior vectors in a loop, `copies` at a
        time, the others one by one with their masks."""
        b, lanes = self.b, self.lanes
        starts = range(0, self.taps[-1], lanes)
        inner = [p0 for p0 in starts if self.interior(p0)]
        border = [p0 for p0 in starts if not self.interior(p0)]
        copies = len(accs)
        if inner:
            i0, count = inner[0] // lanes, len(inner)
            chunks, rest = divmod(count, copies)

            def chunk(q: ir.Value) -> None:
                for k in range(copies):
                    v = b.add(_c(i0 + k), b.mul(q, _c(copies)))
                    self.vector(krow, reads, accs[k], b.mul(v, _c(lanes)), None)

            counted_loop(b, 0, chunks, chunk, name="lsv")
            for k in range(rest):
                p0 = (i0 + chunks * copies + k) * lanes
                self.vector(krow, reads, accs[k], _c(p0), None)
        for k, p0 in enumerate(border):
            self.vector(krow, reads, accs[k % copies], _c(p0), p0)

    def vector(
        self, krow: ir.Value, reads: list[tuple[ir.Value, ir.Value]], accs: list[ir.Value],
        p0: ir.Value, border: int | None,
    ) -> None:  # fmt: skip
        """The kernel vector from p0 of the row times every output's input vector. `border`:
        p0 as a constant, for a vector whose loads are masked."""
        b, width = self.b, self.out_shape[-1]
        s, r, lo = self.strides[-1], self.rd[-1], self.lows[-1]
        kmask = None if border is None else [border + u < self.taps[-1] for u in range(self.lanes)]
        k = self.load(self.kg.ptrs[self.kernel], b.add(krow, p0), 1, kmask)
        zero = ir.Constant(self.vt, None)
        for i, (row, inside) in enumerate(reads):
            for o in range(width):
                mask = None if border is None else self.lane_mask(border, o)
                if mask is not None and not any(mask):
                    continue
                src = b.add(row, b.add(b.mul(p0, _c(r)), _c(o * s - lo)))
                v = self.load(self.kg.ptrs[self.x], src, r, mask)
                v = b.select(inside, v, zero)
                slot = accs[i * width + o]
                b.store(self.multiply_add(k, v, b.load(slot)), slot)

    def load(self, base: ir.Value, src: ir.Value, stride: int, mask: list[bool] | None) -> ir.Value:
        """The lanes' elements from offset src of base, `stride` apart; lanes off in the mask
        read zeros without touching memory."""
        b, lanes, ety = self.b, self.lanes, self.elem_ty
        if mask is not None and all(mask):
            mask = None
        if stride > MAX_DEINTERLEAVE:
            v: ir.Value = ir.Constant(self.vt, None)
            for u in range(lanes):
                if mask is None or mask[u]:
                    at = b.gep(base, [b.add(src, _c(stride * u))], source_etype=ety)
                    v = b.insert_element(v, b.load(at, typ=ety), ir.Constant(I32, u))
            return v
        wide = lanes * stride
        wt = ir.VectorType(ety, wide)
        ptr = b.gep(base, [src], source_etype=ety)
        if mask is None:
            loaded = b.load(ptr, typ=wt, align=self.dt.size)
        else:
            bits = [mask[j // stride] and j % stride == 0 for j in range(wide)]
            loaded = self.masked_load(ptr, wt, bits)
        if stride == 1:
            return loaded
        picks = ir.Constant(ir.VectorType(I32, lanes), [stride * u for u in range(lanes)])
        return b.shuffle_vector(loaded, ir.Constant(wt, ir.Undefined), picks)

    def masked_load(self, ptr: ir.Value, ty: ir.VectorType, bits: list[bool]) -> ir.Value:
        suffix = {16: "f16", 32: "f32", 64: "f64"}[self.dt.bits]
        name = f"llvm.masked.load.v{ty.count}{suffix}.p0"
        mt = ir.VectorType(I1, ty.count)
        fn = self.intrinsic(name, ir.FunctionType(ty, [PTR, I32, mt, ty]))
        mask = ir.Constant(mt, [int(m) for m in bits])
        return self.b.call(fn, [ptr, ir.Constant(I32, self.dt.size), mask, ir.Constant(ty, None)])

    def lane_sum(self, v: ir.Value) -> ir.Value:
        """The lanes of v added in order."""
        b = self.b
        total = b.extract_element(v, ir.Constant(I32, 0))
        for u in range(1, self.lanes):
            total = b.fadd(total, b.extract_element(v, ir.Constant(I32, u)))
        return total

    def multiply_add(self, w: ir.Value, v: ir.Value, acc: ir.Value) -> ir.Value:
        """acc + w · v, fused where the CPU can."""
        suffix = {16: "f16", 32: "f32", 64: "f64"}[self.dt.bits]
        ty = self.vt
        fn = self.intrinsic(f"llvm.fmuladd.v{ty.count}{suffix}", ir.FunctionType(ty, [ty] * 3))
        return self.b.call(fn, [w, v, acc])

    def intrinsic(self, name: str, fty: ir.FunctionType) -> ir.Function:
        module = self.kg.module
        fn = module.globals.get(name)
        if fn is None:
            fn = ir.Function(module, fty, name)
        assert isinstance(fn, ir.Function)
        return fn
