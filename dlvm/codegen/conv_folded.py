"""The CPU `convolve` of images with few output positions (a kernel's gradient, whose outputs
are the primal's few taps; small feature maps): several images side by side as the columns of
one product. The kernel, as the row-major [cout_g × cin_g·taps] matrix a, is the same for every
image, so C[o, (n, j)] = Σq a[o, q] · X̂_n[q, j] for the images n of a panel: their blocks of X̂
are copied next to each other into the block of b (by ConvGemm's run copiers, an image each),
and the micro-kernel runs over strips as wide as its tile rather than over one image's few
columns (9 for a 3×3 kernel's gradient, 1 for a 1×1 kernel's, where the tile is 16 wide).

Columns of different images are not next to each other in the NCHW output, so the product
accumulates into a C tile of the panel's columns in the thread's scratch buffer (behind the
block of b); panels are the outer loop and slices of the depth the inner one, so C holds one
panel, and after a panel's last slice C is copied to the output, image by image, where the
kernel's epilogue, if it has one, is applied (ConvGemm.epilogue). The strips of a panel are
all whole: the columns past the panel's last image are zeros in b and never copied out.

The threads share the images as ConvGemm's do: each folds the images of its own share."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from llvmlite import ir

from dlvm.codegen.conv_gemm import CACHE_LINE, L1_BYTES, ConvGemm
from dlvm.codegen.llvm_types import I64, memory_type
from dlvm.codegen.loops import counted_loop
from dlvm.codegen.matmul import tiling
from dlvm.codegen.panels import scratch_function
from dlvm.ir.types import TensorType
from dlvm.ir.values import Instruction

if TYPE_CHECKING:
    from dlvm.codegen.kernel import KernelGen

# Columns of a panel of folded images: 256 columns × 256 steps × 4 bytes = 256 KiB of b.
FOLD_COLUMNS = 256
# Images fold when they have fewer output positions than this many tile widths: a strip of
# an image's own columns then leaves at least half of the micro-kernel's last vector idle.
FOLD_WIDTHS = 2


def _c(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def _width(lanes: int, conv: Instruction) -> int:
    """The tile width ConvGemm would use for this convolution."""
    k = conv.operands[1].type
    t = conv.type
    assert isinstance(k, TensorType) and isinstance(t, TensorType)
    groups = conv.attrs.get("groups") or 1
    cout_g = k.shape[0] // groups
    return tiling(cout_g, k.shape[1] * math.prod(k.shape[2:]), lanes).width


def folds(conv: Instruction, lanes: int) -> bool:
    """Whether a convolution that runs as products (conv_gemm.suits) folds its images: more
    than one image, each with fewer output positions than FOLD_WIDTHS tile widths."""
    t = conv.type
    assert isinstance(t, TensorType)
    positions = math.prod(t.shape[2:])
    return t.shape[0] > 1 and positions < FOLD_WIDTHS * _width(lanes, conv)


class ConvFolded(ConvGemm):
    """The products of one convolve whose images fold into the columns of one product."""

    def __init__(self, kg: KernelGen, conv: Instruction, out: ir.Value, lanes: int) -> None:
        super().__init__(kg, conv, out, lanes)
        width = self.tile.width
        # Images per panel, no more than the batch, and C's columns: whole strips.
        self.fold = max(1, min(FOLD_COLUMNS // self.n, self.t.shape[0]))
        self.c_stride = -(-self.fold * self.n // width) * width
        line = CACHE_LINE // self.dt.size
        lines = -(-self.c_stride // line)
        if self.tile.depth * lines * CACHE_LINE > L1_BYTES:
            lines += 1 - lines % 2  # an odd number of cache lines apart: rows in other sets
        self.row_stride = lines * line
        self.b_elements = self.tile.depth * self.row_stride
        self.scratch_bytes = (self.b_elements + self.m * self.c_stride) * self.dt.size

    def emit_images(self, begin: ir.Value, end: ir.Value, fallback: ir.Block) -> None:
        """Images [begin, end), `fold` at a time, as products; as ConvGemm.emit_images."""
        b = self.b
        scratch = b.call(scratch_function(self.kg.module), [_c(self.scratch_bytes)])
        here = b.function.append_basic_block("conv.folded")
        b.cbranch(b.icmp_unsigned("==", scratch, ir.Constant(scratch.type, None)), fallback, here)
        b.position_at_end(here)
        self.c_tile = b.gep(scratch, [_c(self.b_elements)], source_etype=self.elem_ty)
        panels = b.udiv(b.add(b.sub(end, begin), _c(self.fold - 1)), _c(self.fold))

        def group(g: ir.Value) -> None:
            def panel(q: ir.Value) -> None:
                n0 = b.add(begin, b.mul(q, _c(self.fold)))
                left = b.sub(end, n0)
                count = b.select(b.icmp_signed("<", left, _c(self.fold)), left, _c(self.fold))
                self.folded(scratch, n0, count, g)

            counted_loop(b, 0, panels, panel, name="fpanel")

        counted_loop(b, 0, self.groups, group, name="group")

    def folded(self, buf: ir.Value, n0: ir.Value, count: ir.Value, g: ir.Value) -> None:
        """Images [n0, n0 + count) of group g: the product over every slice into C, then C
        copied out."""
        b, tile = self.b, self.tile
        columns = b.mul(count, _c(self.n))
        strips = b.udiv(b.add(columns, _c(tile.width - 1)), _c(tile.width))
        batch = [n0, g]

        def one_slice(s: ir.Value) -> None:
            p0, p1, first, last = self.slice_bounds(s)
            copy = self.im2col_taps if self.along_taps else self.im2col

            def image(i: ir.Value) -> None:
                at = b.gep(buf, [b.mul(i, _c(self.n))], source_etype=self.elem_ty)
                copy(at, b.add(n0, i), g, p0, p1, _c(0), self.outer)

            counted_loop(b, 0, count, image, name="fimage")
            self.zero_tail(buf, p0, p1, columns, b.mul(strips, _c(tile.width)))

            def strip(q: ir.Value) -> None:
                j0 = b.mul(q, _c(tile.width))

                def b_at(p: ir.Value, c: int) -> ir.Value:
                    off = b.add(b.mul(b.sub(p, p0), _c(self.row_stride)), b.add(j0, _c(c)))
                    return b.gep(buf, [off], source_etype=self.elem_ty)

                def one_tile(i0: ir.Value, rows: int) -> None:
                    self.micro(batch, i0, rows, j0, tile.width, p0, p1, first, last,
                               self.a_at(batch, i0, p0), b_at)  # fmt: skip

                self.tiles(_c(0), _c(self.m), one_tile)

            counted_loop(b, 0, strips, strip, name="fstrip")

        counted_loop(b, 0, tile.slices, one_slice, name="slice")
        self.copy_out(n0, count, g)

    def zero_tail(
        self, buf: ir.Value, p0: ir.Value, p1: ir.Value, c0: ir.Value, c1: ir.Value
    ) -> None:
        """Zeros in columns [c0, c1) of the block's rows [p0, p1): the last strip's columns
        past the panel's images (whatever the buffer held could be a slow denormal)."""
        b = self.b
        zero = ir.Constant(self.elem_ty, 0)

        def row(p: ir.Value) -> None:
            base = b.mul(b.sub(p, p0), _c(self.row_stride))

            def column(c: ir.Value) -> None:
                b.store(zero, b.gep(buf, [b.add(base, c)], source_etype=self.elem_ty))

            counted_loop(b, c0, c1, column, name="ztail")

        counted_loop(b, p0, p1, row, name="zrow")

    def copy_out(self, n0: ir.Value, count: ir.Value, g: ir.Value) -> None:
        """out[n0 + i, g · cout_g + o, j] = C[o, i · positions + j], then the kernel's
        epilogue over each image's rows of the group."""
        b, kg = self.b, self.kg
        out_ty = memory_type(self.dt)

        def image(i: ir.Value) -> None:
            n = b.add(n0, i)

            def row(o: ir.Value) -> None:
                oc = b.add(b.mul(g, _c(self.cout_g)), o)
                dst = b.mul(b.add(b.mul(n, _c(self.t.shape[1])), oc), _c(self.n))
                src = b.add(b.mul(o, _c(self.c_stride)), b.mul(i, _c(self.n)))

                def element(j: ir.Value) -> None:
                    v = b.load(b.gep(self.c_tile, [b.add(src, j)], source_etype=self.elem_ty),
                               typ=self.elem_ty)  # fmt: skip
                    b.store(v, b.gep(self.out, [b.add(dst, j)], source_etype=out_ty))

                counted_loop(b, 0, self.n, element, name="fcopy")

            counted_loop(b, 0, self.m, row, name="frow")
            if kg.root is not self.dot:
                super(ConvFolded, self).epilogue([n, g], _c(0), self.m, _c(0), self.n)

        counted_loop(b, 0, count, image, name="fout")

    # The micro-kernel's accumulators live in C ---------------------------------------------

    def out_address(self, batch: list[ir.Value], i: ir.Value, j0: ir.Value, c: int) -> ir.Value:
        b = self.b
        off = b.add(b.mul(i, _c(self.c_stride)), b.add(j0, _c(c)))
        return b.gep(self.c_tile, [off], source_etype=self.elem_ty)

    def epilogue(
        self, batch: list[ir.Value], i0: ir.Value, rows: int, j0: ir.Value, width: int
    ) -> None:
        """Nothing at the micro-kernel's tile: a tile of C holds several images' columns,
        and the epilogue is applied to the output once C is copied out (copy_out)."""
