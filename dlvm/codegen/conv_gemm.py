"""The CPU `convolve` as a matrix product on the micro-kernel of `dot` (MatMul.micro): for image n
and group g, out[n, g·cout_g + o, j] = Σq K[g·cout_g + o, q] · X̂[q, j], q = (input channel of
the group, tap) and j the output position (row-major). The OIHW kernel already is the row-major
[cout × cin_g·taps] matrix a, and the NCHW output of one image one [cout × positions] matrix.

X̂ (im2col) is never whole in memory: for each slice of q (`depth` steps) and each panel of
whole output rows, its block is copied into the thread's scratch buffer (dlrt_scratch), a row of
X̂ per q, one run of the input row per output row. With stride 1 and no left dilation the run is
a plain copy between two stretches of zeros (the padding), which LLVM vectorises; otherwise
each element is selected (0 in the padding, or where the left dilation does not divide). Where
the kernel's last axis is longer than the output's (a kernel's gradient: its kernel is the
output's gradient, its output the few taps), the runs go along the taps instead, a column of
the block each. The micro-kernel then reads the block as a row-major b: its rows packed when
the block fits L1, else an odd number of cache lines apart, so that the `depth` rows a strip
reads do not share cache sets.

The threads share the images (the output's first dimension), and with a batch smaller than the
threads, blocks of each image's output rows (compute-scheduling's `split`, image_blocks): a
block's panels are its own, so that no thread copies what another copies. The kernel's rows
(output channels) are not shared out instead: every thread would copy all of X̂.

Copying the block rather than packing X̂'s panels inside the micro-kernel's loops: each element
of the block is read by every tile of rows (cout_g / rows times), so the copy costs 1 / cout_g
of the product; the copy of a row of the input is contiguous only along output rows, which a
panel of whole rows keeps. Depthwise convolutions (one output channel per group and a short
sum) gain nothing from a product of one row: they have a direct loop (conv_depthwise). A thread
whose scratch buffer cannot be had keeps the element loop (KernelGen.convolve_elements). A bf16
convolution is this product over its whole sum, its block in pairs of steps or widened to f32
(dlvm.codegen.conv_bf16: `prepare`, block_ty and to_block are its hooks)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from llvmlite import ir

from dlvm.codegen.llvm_types import I64, memory_type, value_type
from dlvm.codegen.loops import counted_loop, linear_index, unravel
from dlvm.codegen.matmul import DEPTH, MatMul, Tiling, tiling
from dlvm.codegen.panels import scratch_function
from dlvm.ir.strided import contiguous_strides, view_strides
from dlvm.ir.types import TensorType
from dlvm.ir.values import Argument, Instruction, Value

if TYPE_CHECKING:
    from dlvm.codegen.kernel import KernelGen

PANEL_COLUMNS = 256  # output positions per block of X̂: 256 columns × 256 steps × 4 bytes = 256 KiB
CACHE_LINE = 64
# One output channel per group: a product of one row still beats the element loop from this
# many steps (measured: LeNet's first input gradient, 150 steps, 0.93 -> 0.35 ms).
ONE_ROW_DEPTH = 32
L1_BYTES = 32 * 1024  # a block this small is copied and read in L1, its rows packed


def _c(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def suits(conv: Instruction, lanes: int) -> bool:
    """Whether the convolution runs as a product: floats held in registers as in memory, in
    vectors, operands in memory (perhaps strided views of them, the kernel's with its last
    axis contiguous), and more than one output channel per group or one with a long sum (the
    input's gradient of a one-channel input)."""
    x, k = conv.operands
    t = conv.type
    assert isinstance(t, TensorType) and isinstance(k.type, TensorType)
    groups = conv.attrs.get("groups") or 1
    xv, kv = in_memory(x), in_memory(k)
    return (
        t.dtype.is_float
        and value_type(t.dtype) == memory_type(t.dtype)
        and t.dtype.bits >= 32
        and lanes > 1
        and xv is not None
        and kv is not None
        and _runs_fit(k.type.shape[1:], kv[1][1:])
        and (k.type.shape[0] // groups >= 2 or math.prod(k.type.shape[1:]) >= ONE_ROW_DEPTH)
    )


def _runs_fit(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether the kernel's columns are one run, or runs longer than one element."""
    run = kernel_runs(shape, strides)[0]
    return run > 1 or run == math.prod(shape)


def in_memory(v: Value) -> tuple[Argument, tuple[int, ...]] | None:
    """The kernel's argument that operand v is or views in place (a strided view: batch and
    channels exchanged for a kernel's gradient, compute generation's _keep_strided_view), and
    v's strides over it; None if v is computed."""
    found = view_strides(v)
    if found is None or not isinstance(found[0], Argument):
        return None
    return found[0], found[1]


def kernel_runs(
    shape: tuple[int, ...], strides: tuple[int, ...]
) -> tuple[int, list[tuple[int, int]]]:
    """The kernel's columns (input channel, taps: `shape` and `strides`) as runs of
    contiguous elements: the run's length (the innermost axes that are contiguous), and the
    axes outside it as (size, stride), whose index picks the run."""
    run, outer = 1, list[tuple[int, int]]()
    for i in range(len(shape) - 1, -1, -1):
        if shape[i] == 1:
            continue
        if strides[i] != run or outer:
            outer.append((shape[i], strides[i]))
        else:
            run *= shape[i]
    return run, outer[::-1]


def image_blocks(
    b: ir.IRBuilder, begin: ir.Value, end: ir.Value, split: int, rows: int,
    body: Callable[[ir.Value, ir.Value], None],
) -> None:  # fmt: skip
    """body(n, r0) for the shares [begin, end) of a convolution's output, each image's `rows`
    output rows cut into `split` blocks of rows / split: image n, first row r0."""
    if split == 1:
        counted_loop(b, begin, end, lambda n: body(n, _c(0)), name="image")
        return

    def share(i: ir.Value) -> None:
        body(b.udiv(i, _c(split)), b.mul(b.urem(i, _c(split)), _c(rows // split)))

    counted_loop(b, begin, end, share, name="share")


class ConvGemm(MatMul):
    """The product of one convolve of kg's kernel into `out`, shares [begin, end) of its
    images, each cut into `split` blocks of output rows (image_blocks)."""

    def __init__(
        self, kg: KernelGen, conv: Instruction, out: ir.Value, lanes: int, split: int = 1
    ) -> None:
        self.kg, self.b, self.dot, self.out = kg, kg.b, conv, out
        x, kernel = conv.operands
        xt, kt, t = x.type, kernel.type, conv.type
        assert isinstance(xt, TensorType) and isinstance(kt, TensorType)
        assert isinstance(t, TensorType)
        self.x, self.kernel, self.xt, self.kt, self.t = x, kernel, xt, kt, t
        xv, kv = in_memory(x), in_memory(kernel)
        assert xv is not None and kv is not None, "conv_gemm.suits"
        (self.x_base, self.x_strides), (self.k_base, self.k_strides) = xv, kv
        self.run, self.run_outer = kernel_runs(kt.shape[1:], self.k_strides[1:])
        self.dt = t.dtype
        self.elem_ty = value_type(self.dt)
        spatial = len(xt.shape) - 2
        a = conv.attrs
        self.strides = a.get("strides") or (1,) * spatial
        self.padding = a.get("padding") or ((0, 0),) * spatial
        self.ld = a.get("leftDilation") or (1,) * spatial
        self.rd = a.get("rightDilation") or (1,) * spatial
        self.groups = a.get("groups") or 1
        self.cin_g, self.cout_g = kt.shape[1], kt.shape[0] // self.groups
        self.taps = kt.shape[2:]
        self.positions = t.shape[2:]
        self.m, self.k, self.n = self.cout_g, self.cin_g * math.prod(self.taps), math.prod(
            self.positions)  # fmt: skip
        shape = tiling(self.m, self.k, lanes, self.n, self.dt.size)
        slices = max(1, math.ceil(self.k / DEPTH))
        depth = math.ceil(self.k / slices)
        # Runs of X̂ along the kernel's last axis where it is longer than the output's (a
        # kernel's gradient, whose kernel is the output's gradient): slices of whole runs.
        self.along_taps = self.positions[-1] < self.taps[-1] <= DEPTH
        if self.along_taps:
            depth = DEPTH // self.taps[-1] * self.taps[-1]
            slices = math.ceil(self.k / depth)
        # A kernel read in place in runs (a kernel's gradient: the output's gradient, batch and
        # channels exchanged) is sliced within runs, so that a slice reads one run.
        self.run_slices = 1
        if self.run < self.k:
            self.run_slices = math.ceil(self.run / depth)
            depth = math.ceil(self.run / self.run_slices)
            if self.along_taps:
                depth = -(-depth // self.taps[-1]) * self.taps[-1]
            slices = self.k // self.run * self.run_slices
        self.tile = Tiling(shape.rows, shape.vectors, lanes, depth, slices)
        width = self.positions[-1]
        self.panel_rows = max(1, PANEL_COLUMNS // width)  # whole output rows per panel
        self.outer = math.prod(self.positions[:-1])  # output rows
        self.split = split
        self.block_rows = self.outer // split  # a share's output rows
        self.panel_rows = min(self.panel_rows, self.block_rows)
        line = CACHE_LINE // self.dt.size
        lines = -(-self.panel_rows * width // line)
        if self.tile.depth * lines * CACHE_LINE > L1_BYTES:
            # Rows of the block an odd number of cache lines apart (at least one line past the
            # panel), so that the `depth` rows a strip reads do not share cache sets.
            lines += 2 - lines % 2
        self.row_stride = lines * line
        self.scratch_bytes = self.tile.depth * self.row_stride * self.dt.size

    # The loops -----------------------------------------------------------------------------

    def emit_images(self, begin: ir.Value, end: ir.Value, fallback: ir.Block) -> None:
        """Shares [begin, end) as products; branches to `fallback` when there is no scratch
        buffer and continues, after it, at a new block that the fallback must branch to."""
        b = self.b
        scratch = b.call(scratch_function(self.kg.module), [_c(self.scratch_bytes)])
        here = b.function.append_basic_block("conv.gemm")
        b.cbranch(b.icmp_unsigned("==", scratch, ir.Constant(scratch.type, None)), fallback, here)
        b.position_at_end(here)
        self.prepare(scratch)

        def image(n: ir.Value, r0: ir.Value) -> None:
            counted_loop(b, 0, self.groups, lambda g: self.group(scratch, n, g, r0),
                         name="group")  # fmt: skip

        image_blocks(b, begin, end, self.split, self.outer, image)

    def prepare(self, scratch: ir.Value) -> None:
        """What a thread does with its scratch buffer before its shares: nothing here (a bf16
        convolution packs its kernel, dlvm.codegen.conv_bf16)."""

    def group(self, buf: ir.Value, n: ir.Value, g: ir.Value, first: ir.Value) -> None:
        """Group g of image n, output rows [first, first + block_rows)."""
        b, tile = self.b, self.tile
        batch = [n, g]
        full, rest = divmod(self.block_rows, self.panel_rows)
        offset = (lambda r: r) if self.split == 1 else (lambda r: b.add(first, r))

        def one_slice(s: ir.Value) -> None:
            bounds = self.slice_bounds(s)

            def panel(r0: ir.Value, rows: int) -> None:
                copy = self.im2col_taps if self.along_taps else self.im2col
                copy(buf, n, g, bounds[0], bounds[1], r0, rows)
                self.panel(buf, batch, b.mul(r0, _c(self.positions[-1])), rows, bounds)

            counted_loop(b, 0, full, lambda q: panel(offset(b.mul(q, _c(self.panel_rows))),
                                                     self.panel_rows), name="panel")  # fmt: skip
            if rest:
                panel(offset(_c(full * self.panel_rows)), rest)

        counted_loop(b, 0, tile.slices, one_slice, name="slice")

    def panel(
        self, buf: ir.Value, batch: list[ir.Value], jc: ir.Value, rows: int,
        bounds: tuple[ir.Value, ir.Value, ir.Value, ir.Value],
    ) -> None:  # fmt: skip
        """The product over columns [jc, jc + rows · width) from the block in buf."""
        b, width = self.b, self.tile.width
        columns = rows * self.positions[-1]

        def full(q: ir.Value) -> None:
            self.strip_product(buf, batch, jc, b.add(jc, b.mul(q, _c(width))), width, bounds)

        counted_loop(b, 0, columns // width, full, name="strip")
        if columns % width:
            j0 = b.add(jc, _c(columns // width * width))
            self.strip_product(buf, batch, jc, j0, columns % width, bounds)

    def strip_product(
        self, buf: ir.Value, batch: list[ir.Value], jc: ir.Value, j0: ir.Value, count: int,
        bounds: tuple[ir.Value, ir.Value, ir.Value, ir.Value],
    ) -> None:  # fmt: skip
        """Columns [j0, j0 + count) of the panel that starts at column jc, every row."""
        b = self.b
        p0, p1, first, last = bounds
        rel = b.sub(j0, jc)

        def b_at(p: ir.Value, c: int) -> ir.Value:
            off = b.add(b.mul(b.sub(p, p0), _c(self.row_stride)), b.add(rel, _c(c)))
            return b.gep(buf, [off], source_etype=self.block_ty)

        def tile(i0: ir.Value, tile_rows: int) -> None:
            self.micro(batch, i0, tile_rows, j0, count, p0, p1, first, last,
                       self.a_at(batch, i0, p0), b_at)  # fmt: skip

        self.tiles(_c(0), _c(self.m), tile)

    def slice_bounds(self, s: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value]:
        """As MatMul's; with the kernel in runs, `run_slices` slices of each run."""
        if self.run == self.k:
            return super().slice_bounds(s)
        b, tile = self.b, self.tile
        start = b.mul(b.udiv(s, _c(self.run_slices)), _c(self.run))
        p0 = b.add(start, b.mul(b.urem(s, _c(self.run_slices)), _c(tile.depth)))
        p1, end = b.add(p0, _c(tile.depth)), b.add(start, _c(self.run))
        p1 = b.select(b.icmp_signed("<", p1, end), p1, end)
        first = b.icmp_signed("==", s, _c(0))
        last = b.icmp_signed("==", s, _c(tile.slices - 1))
        return p0, p1, first, last

    def a_at(
        self, batch: list[ir.Value], i0: ir.Value, p0: ir.Value
    ) -> Callable[[int, ir.Value], ir.Value]:
        """K[g · cout_g + i0 + r, p] (the kernel as a matrix) for the steps p of the slice
        that starts at p0, which lie in one run of the kernel's columns."""
        b, ptr = self.b, self.kg.ptrs[self.k_base]
        row0 = b.add(b.mul(batch[1], _c(self.cout_g)), i0)
        rows = self.k_strides[0]
        base = b.mul(row0, _c(rows))
        if self.run < self.k:  # the run's place, less its first column
            run = b.udiv(p0, _c(self.run))
            outer = unravel(b, run, tuple(n for n, _ in self.run_outer))
            for i, (_, stride) in zip(outer, self.run_outer):
                base = b.add(base, b.mul(i, _c(stride)))
            base = b.sub(base, b.mul(run, _c(self.run)))

        def at(r: int, p: ir.Value) -> ir.Value:
            off = b.add(b.add(base, _c(r * rows)), p)
            return b.load(b.gep(ptr, [off], source_etype=self.elem_ty), typ=self.elem_ty)

        return at

    # X̂'s block -----------------------------------------------------------------------------

    def im2col(
        self, buf: ir.Value, n: ir.Value, g: ir.Value, p0: ir.Value, p1: ir.Value, r0: ir.Value,
        rows: int,
    ) -> None:  # fmt: skip
        """buf[(q − p0) · row_stride + (r − r0) · width + o] = X̂[q, (r, o)] for q in [p0, p1)
        and output rows r in [r0, r0 + rows)."""
        b = self.b

        def step(q: ir.Value) -> None:
            self.block_step(b.gep(buf, [b.mul(b.sub(q, p0), _c(self.row_stride))],
                                  source_etype=self.block_ty), n, g, q, r0, rows)  # fmt: skip

        counted_loop(b, p0, p1, step, name="col")

    def block_step(
        self, row: ir.Value, n: ir.Value, g: ir.Value, q: ir.Value, r0: ir.Value, rows: int
    ) -> None:
        """row[(r − r0) · width + o] = X̂[q, (r, o)] for output rows r in [r0, r0 + rows)."""
        b = self.b
        width = self.positions[-1]
        c, *taps = unravel(b, q, (self.cin_g, *self.taps))
        channel = b.add(b.mul(g, _c(self.cin_g)), c)

        def out_row(rr: ir.Value) -> None:
            at, inside = self.input_row(n, channel, b.add(r0, rr), taps)
            shift = b.sub(b.mul(taps[-1], _c(self.rd[-1])), _c(self.padding[-1][0]))
            self.copy_run(row, b.mul(rr, _c(width)), 1, width, at, self.strides[-1], shift,
                          inside)  # fmt: skip

        counted_loop(b, 0, rows, out_row, name="orow")

    def im2col_taps(
        self, buf: ir.Value, n: ir.Value, g: ir.Value, p0: ir.Value, p1: ir.Value, r0: ir.Value,
        rows: int,
    ) -> None:  # fmt: skip
        """The same block as im2col, copied in runs along the kernel's last axis: for each
        output position, the taps' input elements (a column of the block)."""
        b = self.b
        width, taps = self.positions[-1], self.taps[-1]

        def run(u: ir.Value) -> None:
            q = b.add(p0, b.mul(u, _c(taps)))
            c, *outer_taps = unravel(b, b.udiv(q, _c(taps)), (self.cin_g, *self.taps[:-1]))
            channel = b.add(b.mul(g, _c(self.cin_g)), c)
            first = b.mul(b.sub(q, p0), _c(self.row_stride))

            def out_row(rr: ir.Value) -> None:
                at, inside = self.input_row(n, channel, b.add(r0, rr), outer_taps)

                def column(o: ir.Value) -> None:
                    dst = b.add(first, b.add(b.mul(rr, _c(width)), o))
                    shift = b.sub(b.mul(o, _c(self.strides[-1])), _c(self.padding[-1][0]))
                    self.copy_run(buf, dst, self.row_stride, taps, at, self.rd[-1], shift,
                                  inside)  # fmt: skip

                counted_loop(b, 0, width, column, name="ocol")

            counted_loop(b, 0, rows, out_row, name="orow")

        counted_loop(b, 0, b.udiv(b.sub(p1, p0), _c(taps)), run, name="run")

    @property
    def block_ty(self) -> ir.Type:
        """What the block holds an element of X̂ as: the input's type here."""
        return self.elem_ty

    def to_block(self, v: ir.Value) -> ir.Value:
        """An element of the input as the block holds it."""
        return v

    def input_row(
        self, n: ir.Value, channel: ir.Value, r: ir.Value, taps: list[ir.Value]
    ) -> tuple[list[ir.Value], ir.Value]:
        """The index (less its last axis) of the input row that output row r reads at the outer
        axes' taps, clamped inside the input, and whether that row is inside it."""
        b = self.b
        outer = unravel(b, r, self.positions[:-1]) if self.positions[:-1] else []
        inside: ir.Value = ir.Constant(ir.IntType(1), 1)
        at = [n, channel]
        for d, o in enumerate(outer):
            pos, ok = self.input_position(d, o, taps[d])
            inside = b.and_(inside, ok)
            at.append(b.select(ok, pos, _c(0)))
        return at, inside

    def input_position(self, d: int, o: ir.Value, t: ir.Value) -> tuple[ir.Value, ir.Value]:
        """The input position along spatial axis d that output position o reads at tap t, and
        whether there is one (inside the input, on a dilated input's element)."""
        b = self.b
        q = b.sub(b.add(b.mul(o, _c(self.strides[d])), b.mul(t, _c(self.rd[d]))),
                  _c(self.padding[d][0]))  # fmt: skip
        ok: ir.Value = ir.Constant(ir.IntType(1), 1)
        if self.ld[d] > 1:
            ok = b.icmp_signed("==", b.srem(q, _c(self.ld[d])), _c(0))
            q = b.sdiv(q, _c(self.ld[d]))
        inside = b.icmp_unsigned("<", q, _c(self.xt.shape[d + 2]))
        return q, b.and_(ok, inside)

    def copy_run(
        self, buf: ir.Value, dst: ir.Value, dst_step: int, count: int, at: list[ir.Value],
        step: int, shift: ir.Value, inside: ir.Value,
    ) -> None:  # fmt: skip
        """buf[dst + u · dst_step] for u in [0, count): the input row at `at` (all zeros when
        not `inside`) at dilated position u · step + shift, 0 in the padding or between
        left-dilated elements."""
        b, d = self.b, len(self.positions) - 1
        size, ld = self.xt.shape[-1], self.ld[d]
        x = self.kg.ptrs[self.x_base]
        zero = ir.Constant(self.elem_ty, 0)
        row = self.x_offset(at)
        along = self.x_strides[-1]

        def put(u: ir.Value, v: ir.Value) -> None:
            off = b.add(dst, b.mul(u, _c(dst_step))) if dst_step != 1 else b.add(dst, u)
            b.store(self.to_block(v), b.gep(buf, [off], source_etype=self.block_ty))

        def load(i: ir.Value) -> ir.Value:
            at = b.add(row, i if along == 1 else b.mul(i, _c(along)))
            return b.load(b.gep(x, [at], source_etype=self.elem_ty), typ=self.elem_ty)

        if ld > 1:  # every element chosen on its own

            def element(u: ir.Value) -> None:
                q = b.add(b.mul(u, _c(step)), shift)
                ok = b.and_(inside, b.icmp_signed("==", b.srem(q, _c(ld)), _c(0)))
                i = b.sdiv(q, _c(ld))
                ok = b.and_(ok, b.icmp_unsigned("<", i, _c(size)))
                put(u, b.select(ok, load(b.select(ok, i, _c(0))), zero))

            counted_loop(b, 0, count, element, name="el")
            return
        # The run reads inside the input for u in [lo, hi).
        lo = self.clamp(self.ceil_div(b.neg(shift), step), count, inside)
        hi = self.clamp(self.ceil_div(b.sub(_c(size), shift), step), count, inside)
        hi = b.select(b.icmp_signed("<", hi, lo), lo, hi)
        counted_loop(b, 0, lo, lambda u: put(u, zero), name="zlo")
        counted_loop(b, lo, hi, lambda u: put(u, load(b.add(b.mul(u, _c(step)), shift))),
                     name="cp")  # fmt: skip
        counted_loop(b, hi, count, lambda u: put(u, zero), name="zhi")

    def x_offset(self, at: list[ir.Value]) -> ir.Value:
        """The input's element at index `at` (its last axis 0), in elements from x_base."""
        if self.x_strides == contiguous_strides(self.xt.shape):
            return linear_index(self.b, [*at, _c(0)], self.xt.shape)
        off: ir.Value = _c(0)
        for i, stride in zip(at, self.x_strides):
            if stride:
                off = self.b.add(off, self.b.mul(i, _c(stride)))
        return off

    def ceil_div(self, v: ir.Value, s: int) -> ir.Value:
        """⌈v / s⌉ for v ≥ 0, and 0 for v < 0."""
        b = self.b
        q = b.sdiv(b.add(v, _c(s - 1)), _c(s))
        return b.select(b.icmp_signed("<", v, _c(0)), _c(0), q)

    def clamp(self, v: ir.Value, count: int, inside: ir.Value) -> ir.Value:
        """v within [0, count]; 0 when the run reads no input."""
        b, most = self.b, _c(count)
        v = b.select(b.icmp_signed(">", v, most), most, v)
        return b.select(inside, v, _c(0))

    # Where the micro-kernel writes ---------------------------------------------------------

    def out_address(self, batch: list[ir.Value], i: ir.Value, j0: ir.Value, c: int) -> ir.Value:
        b = self.b
        n, g = batch
        oc = b.add(b.mul(g, _c(self.cout_g)), i)
        off = b.add(b.mul(b.add(b.mul(n, _c(self.t.shape[1])), oc), _c(self.n)),
                    b.add(j0, _c(c)))  # fmt: skip
        return b.gep(self.out, [off], source_etype=memory_type(self.dt))

    def epilogue(
        self, batch: list[ir.Value], i0: ir.Value, rows: int, j0: ir.Value, width: int
    ) -> None:
        """out[idx] = root(idx) over the tile, the convolution read back from out."""
        b, kg = self.b, self.kg
        n, g = batch

        def row(r: ir.Value) -> None:
            oc = b.add(b.mul(g, _c(self.cout_g)), b.add(i0, r))
            start = b.mul(b.add(b.mul(n, _c(self.t.shape[1])), oc), _c(self.n))

            def col(c: ir.Value) -> None:
                kg.memo.clear()
                j = b.add(j0, c)
                idx = [n, oc, *unravel(b, j, self.positions)]
                # Operands of the output's shape (and out) at that offset, consecutive along
                # the row: LLVM vectorises the loop rather than address each element apart.
                kg.remember(b.add(start, j), idx, self.t.shape)
                kg.store(self.out, idx, self.t, kg.elem(kg.root, idx))

            counted_loop(b, 0, width, col, name="epi")

        counted_loop(b, 0, rows, row, name="epr")
