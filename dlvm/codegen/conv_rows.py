"""The CPU `convolve` of images with few output positions and long sums (the last stages of a
ResNet at a small batch) as dot products of the kernel's rows, read in place, with the rows of
the transposed im2col: out[n, g·cout_g + o, p] = Σq K[g·cout_g + o, q] · X̂ᵀ[(n, p), q], the
row-dot loops of dlvm.codegen.matmul_rows with x = X̂ᵀ and W = the OIHW kernel as the
row-major [cout × cin_g·taps] matrix.

Each kernel element serves only the few output positions, so the product is bound by reading
the kernel: conv_gemm's micro-kernel reads it by broadcasts, many rows at a time; here each
row is read once, contiguous along q, in vectors. X̂ᵀ (a row per output position of the
images of a pass, the group's input channels and taps along it) is small and built once per
pass into the thread's scratch buffer: with AVX-512's vectors, from each image's input planes
first copied zero-padded behind it, so that every tap reads without a check, where those are
smaller than X̂ᵀ and fit in L2 with it; otherwise element by element (0 in the padding).
Long sums go in chunks (RowDots.chunk), so that a group's rows of the kernel stay in L1.

The threads share the images (all of a share's images stacked into one pass, batch ×
positions ≤ matmul_rows.MANY_ROWS), or with a batch smaller than the threads
(compute-scheduling's `split`) each image's output channels, `split` blocks of whole groups
of row-dot columns: every thread then builds the image's X̂ᵀ but reads only its own rows of
the kernel. Each pass stores its sums at the output's (channel, position), a channel's
positions apart, and the kernel's epilogue rewrites them there. A thread whose scratch buffer
cannot be had computes the same share element by element (KernelGen.convolve_element)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from llvmlite import ir

from dlvm.codegen import conv_gemm
from dlvm.codegen.conv_gemm import ConvGemm
from dlvm.codegen.llvm_types import I1, I32, I64, memory_type
from dlvm.codegen.loops import counted_loop, linear_index, loop_nest, unravel
from dlvm.codegen.matmul import Tiling
from dlvm.codegen.matmul_rows import LONG_SUMS, MANY_ROWS, SUMS_PER_ROW, RowDots
from dlvm.codegen.panels import scratch_function
from dlvm.ir.types import TensorType
from dlvm.ir.values import Instruction, Value

if TYPE_CHECKING:
    from dlvm.codegen.kernel import KernelGen

# Output positions per image at most (8 × 8), and sums at least POSITION_SUMS times as long
# as those: with 8 × 8 positions and sums of 576 (64 channels, 3 × 3) conv_gemm's tiles are
# as fast (one thread, AVX-512, f32: bench/RESULTS.md, "Convolutions with few output
# positions").
MAX_POSITIONS = 64
POSITION_SUMS = 16
# Narrower vectors copy X̂ᵀ element by element (below), with which 8 × 8 positions lost to
# conv_gemm: 7 × 7 at most.
NARROW_POSITIONS = 49
# X̂ᵀ is copied from zero-padded input planes (no check per tap) when those planes are smaller
# than one image's X̂ᵀ and both fit in L2 together.
L2_BYTES = 1 << 20
# ... with vectors this wide (AVX-512): built for AVX2 the padded copy made the 4 × 4
# convolutions with sums of 4608 twice as slow (bench/RESULTS.md).
PADDED_VECTOR_BYTES = 64

# The bytes of a group's rows of the kernel that one chunk of the sums reads (RowDots.chunk):
# they stay in L1 while the tiles of X̂ᵀ pass over them.
CHUNK_BYTES = 16 * 1024


def _c(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def suits(conv: Instruction, lanes: int) -> bool:
    """Whether the convolution runs as row dots: it runs as products (conv_gemm.suits), its
    kernel's rows contiguous, at most MAX_POSITIONS output positions per image
    (NARROW_POSITIONS with vectors narrower than AVX-512's) and the whole batch's within the
    row-dot loops' rows, sums as long as theirs need and POSITION_SUMS per position; vectors
    of a power of two lanes."""
    if not conv_gemm.suits(conv, lanes) or lanes & (lanes - 1):
        return False
    x, kernel = conv.operands
    t, kt = conv.type, kernel.type
    assert isinstance(t, TensorType) and isinstance(kt, TensorType)
    found = conv_gemm.in_memory(kernel)
    assert found is not None, "conv_gemm.suits"
    depth = math.prod(kt.shape[1:])
    if conv_gemm.kernel_runs(kt.shape[1:], found[1][1:])[0] != depth:
        return False
    positions = math.prod(t.shape[2:])
    rows = t.shape[0] * positions
    most = MAX_POSITIONS if lanes * t.dtype.size >= PADDED_VECTOR_BYTES else NARROW_POSITIONS
    return (
        positions <= most
        and rows <= MANY_ROWS
        and depth >= max(LONG_SUMS, SUMS_PER_ROW * rows, POSITION_SUMS * positions)
        and len(t.shape) > 2
    )


class ConvRows:
    """The row dots of one convolve of kg's kernel into `out`, as the RowProduct of
    dlvm.codegen.matmul_rows: its rows the output positions of a pass's images, its columns
    a group's output channels, its sums along the group's input channels and taps."""

    def __init__(
        self, kg: KernelGen, conv: Instruction, out: ir.Value, lanes: int, split: int = 1
    ) -> None:
        self.kg, self.b, self.dot, self.out = kg, kg.b, conv, out
        # The convolution's geometry: where each tap reads the input, its operands' strides.
        self.geometry = ConvGemm(kg, conv, out, lanes)
        g = self.geometry
        self.a: Value = g.x
        self.t, self.dt, self.elem_ty = g.t, g.dt, g.elem_ty
        self.positions = math.prod(g.positions)
        self.split = split
        # A pass: one image of a share of its channels, or a share of whole images.
        self.images = 1 if split > 1 else g.t.shape[0]
        self.m, self.k, self.n = self.images * self.positions, g.k, g.cout_g
        self.tile = Tiling(1, 1, lanes, self.k, 1)
        # The zero-padded input planes of the taps' reach (none with left dilation).
        extent = tuple((o - 1) * s + (t - 1) * r + 1
                       for o, s, t, r in zip(g.positions, g.strides, g.taps, g.rd))  # fmt: skip
        padded = g.cin_g * math.prod(extent)
        rows = self.m * self.k
        self.padded: tuple[int, ...] = ()
        if (all(d == 1 for d in g.ld) and padded <= self.positions * self.k
                and (rows + padded) * self.dt.size <= L2_BYTES
                and lanes * self.dt.size >= PADDED_VECTOR_BYTES):  # fmt: skip
            self.padded = extent
        self.scratch_bytes = (rows + (padded if self.padded else 0)) * self.dt.size
        ks = g.k_strides[0]
        self.w_strides = (0, g.cout_g * ks, 1, ks)  # over [image, group, q, o]
        self.multiply_add = g.multiply_add

    def emit_images(self, begin: ir.Value, end: ir.Value) -> None:
        """The body's shares [begin, end): images, or (image, block of channels) pairs with
        `split`; element by element when the scratch buffer cannot be had."""
        b = self.b
        scratch = b.call(scratch_function(self.kg.module), [_c(self.scratch_bytes)])
        null = b.icmp_unsigned("==", scratch, ir.Constant(scratch.type, None))
        with b.if_else(null) as (elements, rows):
            with elements:
                self.shares(begin, end, self.elements)
            with rows:
                w = (self.kg.ptrs[self.geometry.k_base], self.w_strides)
                dots = RowDots(self, w, (scratch, (0, 0, self.k, 1)), CHUNK_BYTES)
                self.shares(begin, end, lambda n0, count, c0, c1: self.rows(
                    dots, scratch, n0, count, c0, c1))  # fmt: skip

    def shares(
        self, begin: ir.Value, end: ir.Value,
        body: Callable[[ir.Value, ir.Value, ir.Value, ir.Value], None],
    ) -> None:  # fmt: skip
        """body(n0, images, c0, c1): the pass over images [n0, n0 + images) and channels
        [c0, c1) of each group; the body's range is images, or (image, block) pairs."""
        b, n = self.b, self.n
        if self.split == 1:
            body(begin, b.sub(end, begin), _c(0), _c(n))
            return
        width = RowDots.group_width(self.tile.lanes, self.m)
        chunk = math.ceil(math.ceil(n / width) / self.split) * width  # whole groups of columns

        def share(i: ir.Value) -> None:
            c0 = b.mul(b.urem(i, _c(self.split)), _c(chunk))
            c0 = b.select(b.icmp_unsigned("<", c0, _c(n)), c0, _c(n))
            c1 = b.add(c0, _c(chunk))
            c1 = b.select(b.icmp_unsigned("<", c1, _c(n)), c1, _c(n))
            with b.if_then(b.icmp_unsigned("<", c0, c1)):  # a share past the channels: none
                body(b.udiv(i, _c(self.split)), _c(1), c0, c1)

        counted_loop(b, begin, end, share, name="share")

    def rows(
        self, dots: RowDots, buf: ir.Value, n0: ir.Value, count: ir.Value, c0: ir.Value,
        c1: ir.Value,
    ) -> None:  # fmt: skip
        """Images [n0, n0 + count), channels [c0, c1) of every group."""
        b = self.b
        rows = b.mul(count, _c(self.positions))

        def group(g: ir.Value) -> None:
            if self.padded:
                self.im2col_padded(buf, n0, count, g)
            else:
                self.im2col(buf, n0, g, rows)
            dots.emit([n0, g], _c(0), rows, (c0, c1))

        counted_loop(b, 0, self.geometry.groups, group, name="group")

    def elements(self, n0: ir.Value, count: ir.Value, c0: ir.Value, c1: ir.Value) -> None:
        """The same pass one output element at a time."""
        b, g = self.b, self.geometry
        at = self.kg.convolve_element(self.out)

        def image(n: ir.Value) -> None:
            def group(gi: ir.Value) -> None:
                def channel(o: ir.Value) -> None:
                    oc = b.add(b.mul(gi, _c(self.n)), o)
                    counted_loop(b, 0, self.positions, lambda p: at(
                        [n, oc, *unravel(b, p, g.positions)]), name="pos")  # fmt: skip

                counted_loop(b, c0, c1, channel, name="och")

            counted_loop(b, 0, g.groups, group, name="egroup")

        counted_loop(b, n0, b.add(n0, count), image, name="eimage")

    def im2col(self, buf: ir.Value, n0: ir.Value, g: ir.Value, rows: ir.Value) -> None:
        """buf[i · k + q] = X̂[q, p] of image n0 + i / positions, p = i % positions, for the
        rows i < rows: the input element each tap of each of the group's input channels
        reads, 0 in the padding."""
        b, geo = self.b, self.geometry
        x = self.kg.ptrs[geo.x_base]
        zero = ir.Constant(self.elem_ty, 0)
        spatial = len(geo.positions)
        taps = math.prod(geo.taps)

        def row(i: ir.Value) -> None:
            n = b.add(n0, b.udiv(i, _c(self.positions)))
            at = unravel(b, b.urem(i, _c(self.positions)), geo.positions)
            dst = b.mul(i, _c(self.k))

            def channel(c: ir.Value) -> None:
                channel = b.add(b.mul(g, _c(geo.cin_g)), c)
                base = b.add(b.mul(n, _c(geo.x_strides[0])), b.mul(channel, _c(geo.x_strides[1])))
                first = b.add(dst, b.mul(c, _c(taps)))

                def axis(d: int, off: ir.Value, inside: ir.Value, q: ir.Value) -> None:
                    if d == spatial:
                        v = b.load(b.gep(x, [off], source_etype=self.elem_ty), typ=self.elem_ty)
                        ptr = b.gep(buf, [b.add(first, q)], source_etype=self.elem_ty)
                        b.store(b.select(inside, v, zero), ptr)
                        return

                    def tap(t: ir.Value) -> None:
                        pos, ok = geo.input_position(d, at[d], t)
                        ok = b.and_(inside, ok)
                        step = b.mul(b.select(ok, pos, _c(0)), _c(geo.x_strides[d + 2]))
                        axis(d + 1, b.add(off, step), ok,
                             b.add(b.mul(q, _c(geo.taps[d])), t))  # fmt: skip

                    counted_loop(b, 0, geo.taps[d], tap, name=f"tap{d}")

                axis(0, base, ir.Constant(I1, 1), _c(0))

            counted_loop(b, 0, geo.cin_g, channel, name="xch")

        counted_loop(b, 0, rows, row, name="xrow")

    def im2col_padded(self, buf: ir.Value, n0: ir.Value, count: ir.Value, g: ir.Value) -> None:
        """The same X̂ᵀ for images [n0, n0 + count) without left dilation: each image's input
        channels of the group first copied, zero-padded, behind X̂ᵀ (`padded`), so that the
        rows read every tap without a check."""
        b, geo = self.b, self.geometry
        x = self.kg.ptrs[geo.x_base]
        zero = ir.Constant(self.elem_ty, 0)
        extent = self.padded
        plane = math.prod(extent)
        inner = [math.prod(extent[d + 1 :]) for d in range(len(extent))]
        pad = b.gep(buf, [_c(self.m * self.k)], source_etype=self.elem_ty)
        taps = math.prod(geo.taps)

        def image(l: ir.Value) -> None:
            n = b.add(n0, l)

            def fill(idx: list[ir.Value]) -> None:
                c, *at = idx
                channel = b.add(b.mul(g, _c(geo.cin_g)), c)
                off = b.add(b.mul(n, _c(geo.x_strides[0])), b.mul(channel, _c(geo.x_strides[1])))
                inside: ir.Value = ir.Constant(I1, 1)
                for d, e in enumerate(at):
                    q = b.sub(e, _c(geo.padding[d][0]))
                    ok = b.icmp_unsigned("<", q, _c(geo.xt.shape[d + 2]))
                    inside = b.and_(inside, ok)
                    off = b.add(off, b.mul(b.select(ok, q, _c(0)), _c(geo.x_strides[d + 2])))
                v = b.load(b.gep(x, [off], source_etype=self.elem_ty), typ=self.elem_ty)
                dst = b.add(b.mul(c, _c(plane)), self.linear(at, inner))
                b.store(b.select(inside, v, zero), b.gep(pad, [dst], source_etype=self.elem_ty))

            loop_nest(b, [geo.cin_g, *extent], fill)

            def position(p: ir.Value) -> None:
                at = unravel(b, p, geo.positions)
                corner = self.linear([b.mul(o, _c(s)) for o, s in zip(at, geo.strides)], inner)
                row = b.mul(b.add(b.mul(l, _c(self.positions)), p), _c(self.k))

                def channel(c: ir.Value) -> None:
                    src = b.add(b.mul(c, _c(plane)), corner)
                    first = b.add(row, b.mul(c, _c(taps)))

                    def tap(t: list[ir.Value]) -> None:
                        off = self.linear([b.mul(v, _c(r)) for v, r in zip(t, geo.rd)], inner)
                        v = b.load(b.gep(pad, [b.add(src, off)], source_etype=self.elem_ty),
                                   typ=self.elem_ty)  # fmt: skip
                        dst = b.add(first, linear_index(b, t, geo.taps))
                        b.store(v, b.gep(buf, [dst], source_etype=self.elem_ty))

                    loop_nest(b, list(geo.taps), tap)

                counted_loop(b, 0, geo.cin_g, channel, name="xch")

            counted_loop(b, 0, self.positions, position, name="xrow")

        counted_loop(b, 0, count, image, name="ximage")

    def linear(self, idx: list[ir.Value], inner: list[int]) -> ir.Value:
        """Σ idx[d] · inner[d]."""
        b = self.b
        total: ir.Value = _c(0)
        for i, s in zip(idx, inner):
            total = b.add(total, b.mul(i, _c(s)))
        return total

    # Where the sums go (RowProduct) ---------------------------------------------------------

    def out_offset(self, batch: list[ir.Value], i: ir.Value, o: ir.Value) -> ir.Value:
        """out's element for row i (image, position) and the group's channel o, in elements."""
        b = self.b
        n0, g = batch
        n = b.add(n0, b.udiv(i, _c(self.positions)))
        oc = b.add(b.mul(g, _c(self.n)), o)
        return b.add(b.mul(b.add(b.mul(n, _c(self.t.shape[1])), oc), _c(self.positions)),
                     b.urem(i, _c(self.positions)))  # fmt: skip

    def store_sums(
        self, batch: list[ir.Value], i: ir.Value, j0: ir.Value, sums: ir.Value, count: int
    ) -> None:
        """out[n, g·cout_g + j0 + c, p] = sums[c] for c < count: a channel's positions apart."""
        b = self.b
        first = self.out_offset(batch, i, j0)
        mem = memory_type(self.dt)
        for c in range(count):
            v = b.extract_element(sums, ir.Constant(I32, c))
            at = b.add(first, _c(c * self.positions))
            b.store(v, b.gep(self.out, [at], source_etype=mem))

    def epilogue(
        self, batch: list[ir.Value], i0: ir.Value, rows: int, j0: ir.Value, width: int
    ) -> None:
        """out[idx] = root(idx) over rows [i0, i0 + rows) and the group's channels [j0, j0 +
        width), the convolution read back from out."""
        b, kg = self.b, self.kg
        n0, g = batch
        root_t = kg.root.type
        assert isinstance(root_t, TensorType)

        def row(r: ir.Value) -> None:
            i = b.add(i0, r)
            n = b.add(n0, b.udiv(i, _c(self.positions)))
            at = unravel(b, b.urem(i, _c(self.positions)), self.geometry.positions)

            def col(c: ir.Value) -> None:
                kg.memo.clear()
                idx = [n, b.add(b.mul(g, _c(self.n)), b.add(j0, c)), *at]
                kg.store(self.out, idx, root_t, kg.elem(kg.root, idx))

            counted_loop(b, 0, width, col, name="epi")

        counted_loop(b, 0, rows, row, name="epr")
