"""The CPU `convolve` whose kernel is longer than its output (a kernel's gradient, as
_kernel_adjoint makes it: the input and the output's gradient with batch and channels
exchanged, both read in place through compute generation's strided views), as one product
whose rows are the output's (image, tap) pairs: for x [B, C, n…], kernel k [O, C, P…] and
stride 1 between a kernel's taps (rightDilation 1, no left dilation, one group),

    out[c, o, t] = Σn Σp k[o, n, p] · x̂[c, n, t·s + p]      (x̂: x padded)

is C[(c, t), o] = Σ(n, q) A[(c, t), (n, q)] · Bk[(n, q), o], with q running over the padded
input's positions p flattened (q = Σ pᵢ · pstrideᵢ): A's row (c, t) for channel n is then the
padded plane of x[c, n] itself, read from q + Σ tᵢ·sᵢ·pstrideᵢ on, contiguous, with no copy per
tap (im2col would copy every element once per tap). The positions q of the padded grid that
are no position p of the kernel (pᵢ ≥ Pᵢ) get zeros in Bk, so that whatever A holds there adds
nothing. Per thread, for each channel n: the planes x[c, n] of its images c are copied once
into a zero-padded buffer, and each slice of q of Bk (k[·, n, ·] transposed: its rows the
micro-kernel's vectors) is packed; the micro-kernel (MatMul.micro) accumulates C in the
thread's scratch buffer over every n and slice, then C is copied out.

Against ConvFolded (which copies X̂ whole, the kernel read in place as a): the copies here are
the kernel k once per thread and x once, instead of x once per tap.

A bf16 convolution (the kernel's gradient of a bf16 convolution, kept bf16 by
dlvm.codegen.bf16_products) runs the same product in f32: its planes and kernel are widened as
they are copied into the scratch buffer (each element once per pass, against the product's
q · O multiply-adds per element), C sums in f32 over every channel and slice, and copy_out
rounds each sum once to bf16 (docs/ir.md#bf16). Its f32 vectors have half the schedule's bf16
lanes."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from llvmlite import ir

from dlvm.codegen import conv_gemm
from dlvm.codegen.llvm_types import I64, memory_type, narrow, value_type
from dlvm.codegen.loops import counted_loop, unravel
from dlvm.codegen.matmul import DEPTH, MatMul, Tiling, tiling
from dlvm.codegen.panels import scratch_function
from dlvm.codegen.transposing import transpose_square
from dlvm.ir.strided import contiguous_strides
from dlvm.ir.types import DataType, TensorType
from dlvm.ir.values import Instruction

if TYPE_CHECKING:
    from dlvm.codegen.kernel import KernelGen

# Images per pass of a thread: their C and padded planes stay within this many bytes.
PASS_BYTES = 1 << 20


def _c(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def suits(conv: Instruction, lanes: int) -> bool:
    """Whether the convolution runs as this product: it runs as products (conv_gemm.suits; a
    bf16 one: both operands in memory, f32 vectors of half its lanes), its shapes take it
    (takes), rows of both operands contiguous, vectors of a power of two lanes."""
    x, k = conv.operands
    t = conv.type
    assert isinstance(t, TensorType)
    if t.dtype is DataType.BF16:
        lanes //= 2  # f32 sums
        if lanes < 4 or conv_gemm.in_memory(x) is None or conv_gemm.in_memory(k) is None:
            return False
    elif not conv_gemm.suits(conv, lanes):
        return False
    xv, kv = conv_gemm.in_memory(x), conv_gemm.in_memory(k)
    assert xv is not None and kv is not None
    return takes(conv) and lanes & (lanes - 1) == 0 and xv[1][-1] == 1 and kv[1][-1] == 1


def takes(conv: Instruction) -> bool:
    """Whether the convolution's shapes and attributes are this product's: a spatial axis at
    least, one group, no dilation of the input or between the kernel's taps, its kernel longer
    than its output along the last axis (a kernel's gradient)."""
    a = conv.attrs
    t, kt = conv.type, conv.operands[1].type
    assert isinstance(t, TensorType) and isinstance(kt, TensorType)
    return (
        len(t.shape) - 2 >= 1
        and (a.get("groups") or 1) == 1
        and all(d == 1 for d in a.get("leftDilation") or (1,))
        and all(d == 1 for d in a.get("rightDilation") or (1,))
        and t.shape[-1] < kt.shape[-1]
    )


class KernelGradient(MatMul):
    """The product of one convolve of kg's kernel into `out` (see the module docstring)."""

    def __init__(
        self, kg: KernelGen, conv: Instruction, out: ir.Value, lanes: int, pairs: bool = False
    ) -> None:
        """`pairs`: the planes, G and Bk hold bf16 in pairs of steps
        (dlvm.codegen.conv_kernel_grad_pairs), not widened to f32."""
        self.kg, self.b, self.dot, self.out = kg, kg.b, conv, out
        x, kernel = conv.operands
        xt, kt, t = x.type, kernel.type, conv.type
        assert isinstance(xt, TensorType) and isinstance(kt, TensorType)
        assert isinstance(t, TensorType)
        xv, kv = conv_gemm.in_memory(x), conv_gemm.in_memory(kernel)
        assert xv is not None and kv is not None, "suits"
        (self.x_base, self.x_strides), (self.k_base, self.k_strides) = xv, kv
        self.xt, self.kt, self.t = xt, kt, t
        # The scratch buffer's and the sums' type (f32 for bf16: the module docstring); the
        # operands' and the output's, src_ty and out_dt.
        self.out_dt = t.dtype
        self.src_ty = value_type(t.dtype)
        if t.dtype is DataType.BF16:
            self.dt, lanes = DataType.F32, max(1, lanes // 2)
        else:
            self.dt = t.dtype
        self.elem_ty = value_type(self.dt)
        # What the planes, G and Bk hold.
        self.op_ty = self.src_ty if pairs else self.elem_ty
        op_size = t.dtype.size if pairs else self.dt.size
        unit = 2 if pairs else 1  # steps of a block's row of Bk
        spatial = len(xt.shape) - 2
        a = conv.attrs
        self.strides = a.get("strides") or (1,) * spatial
        padding = a.get("padding") or ((0, 0),) * spatial
        self.lo = tuple(lo for lo, _ in padding)
        self.images, self.channels = xt.shape[0], xt.shape[1]
        self.o = kt.shape[0]
        self.n_in = xt.shape[2:]  # the input's spatial sizes
        self.p_sizes = kt.shape[2:]  # the kernel's
        self.taps = t.shape[2:]  # the output's: each a row of the product per image
        self.padded = tuple(n + lo + hi for n, (lo, hi) in zip(self.n_in, padding))
        self.pstride = contiguous_strides(self.padded)
        self.plane = math.prod(self.padded)
        # Steps of q per channel: up to the kernel's last position in the padded grid.
        self.q = sum((p - 1) * s for p, s in zip(self.p_sizes, self.pstride)) + 1
        self.t_count = math.prod(self.taps)
        self.m, self.k, self.n = self.images * self.t_count, self.q, self.o
        shape = tiling(self.m, self.k, lanes, self.n, self.dt.size)
        slices = max(1, math.ceil(self.q / DEPTH))
        # Whole blocks of the transpose.
        depth = -(-math.ceil(self.q / slices) // (lanes * unit)) * lanes * unit
        slices = math.ceil(self.q / depth)
        self.tile = Tiling(shape.rows, shape.vectors, lanes, depth, slices)
        width = self.tile.width
        self.c_stride = -(-self.o // width) * width  # C's and Bk's rows: whole strips
        self.g_stride = slices * depth  # G's rows: every slice's whole blocks
        per_image = (self.t_count * self.c_stride + self.plane) * self.dt.size
        self.per_pass = max(1, min(self.images, PASS_BYTES // per_image))
        # The scratch buffer: Bk, G, C, the planes (with room for a pair past the last step).
        self.g_elements = self.c_stride * self.g_stride
        self.plane_elements = self.per_pass * self.plane + 2
        c_elements = self.per_pass * self.t_count * self.c_stride
        self.g_offset = depth * self.c_stride * op_size
        self.c_offset = self.g_offset + self.g_elements * op_size
        self.planes_offset = self.c_offset + c_elements * self.dt.size
        self.scratch_bytes = self.planes_offset + self.plane_elements * op_size

    def emit_images(
        self, begin: ir.Value, end: ir.Value, fallback: ir.Block, split: int = 1
    ) -> None:
        """Shares [begin, end) of the output, each image cut into `split` blocks of its rows
        (compute scheduling's split: share i is the product's rows [i, i + 1) · T / split),
        the images they touch `per_pass` at a time; as ConvGemm.emit_images."""
        b = self.b
        share = self.t_count // split
        row0, row1 = b.mul(begin, _c(share)), b.mul(end, _c(share))
        first = b.udiv(row0, _c(self.t_count))
        last = b.udiv(b.add(row1, _c(self.t_count - 1)), _c(self.t_count))
        scratch = b.call(scratch_function(self.kg.module), [_c(self.scratch_bytes)])
        here = b.function.append_basic_block("conv.kgrad")
        b.cbranch(b.icmp_unsigned("==", scratch, ir.Constant(scratch.type, None)), fallback, here)
        b.position_at_end(here)
        i8 = ir.IntType(8)
        self.bk = scratch
        self.grid = b.gep(scratch, [_c(self.g_offset)], source_etype=i8)
        self.c_tile = b.gep(scratch, [_c(self.c_offset)], source_etype=i8)
        self.planes = b.gep(scratch, [_c(self.planes_offset)], source_etype=i8)
        self.zero(self.grid, self.g_elements)  # what is not the kernel's stays zero
        passes = b.udiv(b.add(b.sub(last, first), _c(self.per_pass - 1)), _c(self.per_pass))

        def one_pass(i: ir.Value) -> None:
            c0 = b.add(first, b.mul(i, _c(self.per_pass)))
            left = b.sub(last, c0)
            count = b.select(b.icmp_signed("<", left, _c(self.per_pass)), left, _c(self.per_pass))
            base = b.mul(c0, _c(self.t_count))
            lo = b.sub(row0, base)
            lo = b.select(b.icmp_signed("<", lo, _c(0)), _c(0), lo)
            hi, whole = b.sub(row1, base), b.mul(count, _c(self.t_count))
            hi = b.select(b.icmp_signed("<", hi, whole), hi, whole)
            self.images_pass(c0, count, lo, hi)

        counted_loop(b, 0, passes, one_pass, name="kpass")

    def images_pass(self, c0: ir.Value, count: ir.Value, lo: ir.Value, hi: ir.Value) -> None:
        """Rows [lo, hi) of images [c0, c0 + count) (rows counted from image c0's first): C
        over every channel and slice, then copied out."""
        b, tile = self.b, self.tile
        self.zero(self.planes, self.plane_elements)  # the padding stays zero

        def channel(n: ir.Value) -> None:
            self.copy_planes(c0, count, n)
            self.spread_kernel(n)

            def one_slice(s: ir.Value) -> None:
                p0 = b.mul(s, _c(tile.depth))
                p1 = b.add(p0, _c(tile.depth))
                p1 = b.select(b.icmp_signed("<", p1, _c(self.q)), p1, _c(self.q))
                first = b.and_(b.icmp_signed("==", n, _c(0)), b.icmp_signed("==", s, _c(0)))
                self.pack_kernel(p0, p1)

                def strip(j0: ir.Value, width: int) -> None:
                    self.strip_product(lo, hi, j0, width, p0, p1, first)

                full, rest = divmod(self.o, tile.width)
                counted_loop(b, 0, full, lambda j: strip(b.mul(j, _c(tile.width)), tile.width),
                             name="kstrip")  # fmt: skip
                if rest:
                    strip(_c(full * tile.width), rest)

            counted_loop(b, 0, tile.slices, one_slice, name="kslice")

        counted_loop(b, 0, self.channels, channel, name="kchan")
        self.copy_out(c0, lo, hi)

    def strip_product(
        self, lo: ir.Value, hi: ir.Value, j0: ir.Value, width: int, p0: ir.Value, p1: ir.Value,
        first: ir.Value,
    ) -> None:  # fmt: skip
        """C's columns [j0, j0 + width) of rows [lo, hi) plus the steps [p0, p1): started
        from zero where `first`."""
        b = self.b
        never = ir.Constant(ir.IntType(1), 0)

        def b_at(p: ir.Value, c: int) -> ir.Value:
            off = b.add(b.mul(b.sub(p, p0), _c(self.c_stride)), b.add(j0, _c(c)))
            return self.at(self.bk, off)

        def one_tile(i0: ir.Value, rows: int) -> None:
            a_at = self.a_at(i0, rows)
            self.micro([], i0, rows, j0, width, p0, p1, first, never, a_at, b_at)

        self.tiles(lo, hi, one_tile)

    # The operands -------------------------------------------------------------------------

    def a_at(self, i0: ir.Value, rows: int) -> Callable[[int, ir.Value], ir.Value]:
        """A[(c, t), q] for the tile's rows: the padded plane of image c from q + Σ tᵢ·sᵢ·
        pstrideᵢ on (each row's start computed once per tile)."""
        b = self.b
        starts = self.row_starts(i0, rows)

        def at(r: int, p: ir.Value) -> ir.Value:
            return b.load(self.at(self.planes, b.add(starts[r], p)), typ=self.elem_ty)

        return at

    def row_starts(self, i0: ir.Value, rows: int) -> list[ir.Value]:
        """Where A's rows i0 … i0 + rows - 1 start in the planes."""
        b = self.b
        starts = []
        for r in range(rows):
            i = b.add(i0, _c(r))
            c, t = b.udiv(i, _c(self.t_count)), b.urem(i, _c(self.t_count))
            start = b.mul(c, _c(self.plane))
            for ti, s, ps in zip(unravel(b, t, self.taps), self.strides, self.pstride):
                start = b.add(start, b.mul(ti, _c(s * ps)))
            starts.append(start)
        return starts

    def copy_planes(self, c0: ir.Value, count: ir.Value, n: ir.Value) -> None:
        """The planes x[c, n] of images [c0, c0 + count) into the padded buffer's interiors,
        row by row (rows of the input are contiguous: suits)."""
        b = self.b
        x = self.kg.ptrs[self.x_base]
        xs = self.x_strides
        outer, last = self.n_in[:-1], self.n_in[-1]
        rows = math.prod(outer)

        def image(i: ir.Value) -> None:
            src0 = b.add(b.mul(b.add(c0, i), _c(xs[0])), b.mul(n, _c(xs[1])))
            dst0 = b.add(b.mul(i, _c(self.plane)), _c(self.lo[-1]))

            def row(r: ir.Value) -> None:
                src, dst = src0, dst0
                for d, v in enumerate(unravel(b, r, outer) if outer else []):
                    src = b.add(src, b.mul(v, _c(xs[d + 2])))
                    dst = b.add(dst, b.mul(b.add(v, _c(self.lo[d])), _c(self.pstride[d])))

                def element(j: ir.Value) -> None:
                    v = b.load(b.gep(x, [b.add(src, j)], source_etype=self.src_ty),
                               typ=self.src_ty)  # fmt: skip
                    b.store(self.to_scratch(v), self.op_at(self.planes, b.add(dst, j)))

                counted_loop(b, 0, last, element, name="kcopy")

            counted_loop(b, 0, rows, row, name="krow")

        counted_loop(b, 0, count, image, name="kimage")

    def spread_kernel(self, n: ir.Value) -> None:
        """The kernel's channel n onto the padded grid: G[o, q] = k[o, n, p] at the grid's
        positions q of the kernel's positions p, row by row (runs of its last axis). The other
        positions, the same for every channel, stay the zeros emit_images wrote."""
        b = self.b
        k = self.kg.ptrs[self.k_base]
        ks = self.k_strides
        outer = self.p_sizes[:-1]

        def output(o: ir.Value) -> None:
            base = b.add(b.mul(o, _c(ks[0])), b.mul(n, _c(ks[1])))
            dst0 = b.mul(o, _c(self.g_stride))

            def row(r: ir.Value) -> None:
                src, dst = base, dst0
                for d, v in enumerate(unravel(b, r, outer) if outer else []):
                    src = b.add(src, b.mul(v, _c(ks[d + 2])))
                    dst = b.add(dst, b.mul(v, _c(self.pstride[d])))

                def element(j: ir.Value) -> None:
                    at = b.gep(k, [b.add(src, j)], source_etype=self.src_ty)
                    v = self.to_scratch(b.load(at, typ=self.src_ty))
                    b.store(v, self.op_at(self.grid, b.add(dst, j)))

                counted_loop(b, 0, self.p_sizes[-1], element, name="kspread")

            counted_loop(b, 0, math.prod(outer), row, name="kprow")

        counted_loop(b, 0, self.o, output, name="kpo")

    def pack_kernel(self, p0: ir.Value, p1: ir.Value) -> None:
        """Bk's steps [p0, p1) (rounded up to whole blocks): G's columns transposed, a block
        of lanes × lanes at a time through vector shuffles."""
        b, lanes = self.b, self.tile.lanes
        vt = ir.VectorType(self.elem_ty, lanes)
        blocks = b.udiv(b.add(b.sub(p1, p0), _c(lanes - 1)), _c(lanes))

        def block(qb: ir.Value) -> None:
            q = b.add(p0, b.mul(qb, _c(lanes)))

            def rows(ob: ir.Value) -> None:
                o = b.mul(ob, _c(lanes))
                vs = [
                    b.load(self.at(self.grid, b.add(b.mul(b.add(o, _c(i)), _c(self.g_stride)),
                                                    q)), typ=vt, align=self.dt.size)
                    for i in range(lanes)
                ]  # fmt: skip
                for i, v in enumerate(transpose_square(b, vs)):
                    row = b.add(b.mul(qb, _c(lanes)), _c(i))
                    at = self.at(self.bk, b.add(b.mul(row, _c(self.c_stride)), o))
                    b.store(v, at, align=self.dt.size)

            counted_loop(b, 0, self.c_stride // lanes, rows, name="kpob")

        counted_loop(b, 0, blocks, block, name="kpqb")

    # C ------------------------------------------------------------------------------------

    def out_address(self, batch: list[ir.Value], i: ir.Value, j0: ir.Value, c: int) -> ir.Value:
        b = self.b
        return self.at(self.c_tile, b.add(b.mul(i, _c(self.c_stride)), b.add(j0, _c(c))))

    def copy_out(self, c0: ir.Value, lo: ir.Value, hi: ir.Value) -> None:
        """out[c0 + i // T, o, i % T] = C[i, o] for the rows i in [lo, hi) (f32 sums rounded
        once to bf16 for a bf16 convolution), then the kernel's epilogue, if it has one, at
        that element (the convolution read back from out)."""
        b, kg = self.b, self.kg
        out_ty = memory_type(self.out_dt)

        def row(i: ir.Value) -> None:
            c, t = b.udiv(i, _c(self.t_count)), b.urem(i, _c(self.t_count))
            dst = b.add(b.mul(b.add(c0, c), _c(self.o * self.t_count)), t)
            src = b.mul(i, _c(self.c_stride))

            def output(o: ir.Value) -> None:
                v = b.load(self.at(self.c_tile, b.add(src, o)), typ=self.elem_ty)
                if self.src_ty != self.elem_ty:
                    v = narrow(b, v, self.src_ty)
                at = b.add(dst, b.mul(o, _c(self.t_count)))
                b.store(v, b.gep(self.out, [at], source_etype=out_ty))
                if kg.root is not self.dot:
                    kg.memo.clear()
                    idx = [b.add(c0, c), o, *unravel(b, t, self.taps)]
                    kg.store(self.out, idx, self.t, kg.elem(kg.root, idx))

            counted_loop(b, 0, self.o, output, name="kout")

        counted_loop(b, lo, hi, row, name="korow")

    def epilogue(
        self, batch: list[ir.Value], i0: ir.Value, rows: int, j0: ir.Value, width: int
    ) -> None:
        """Nothing at the micro-kernel's tile, whose rows are (image, tap) pairs: copy_out
        applies the epilogue."""

    def to_scratch(self, v: ir.Value) -> ir.Value:
        """An operand's element in op_ty (bf16 widened to f32 unless in pairs)."""
        return v if self.src_ty == self.op_ty else self.b.fpext(v, self.op_ty)

    def zero(self, ptr: ir.Value, count: int) -> None:
        """ptr[0, count) = 0, elements of op_ty."""
        b = self.b
        zero = ir.Constant(self.op_ty, 0)
        counted_loop(b, 0, count, lambda i: b.store(zero, self.op_at(ptr, i)), name="kzero")

    def at(self, ptr: ir.Value, off: ir.Value) -> ir.Value:
        """Element off of ptr, in the sums' type."""
        return self.b.gep(ptr, [off], source_etype=self.elem_ty)

    def op_at(self, ptr: ir.Value, off: ir.Value) -> ir.Value:
        """Element off of ptr, in op_ty."""
        return self.b.gep(ptr, [off], source_etype=self.op_ty)
