"""The int8 product of `--quantize int8` on AVX-512 VNNI (a kernel scheduled `vnni 1`,
docs/quantization.md): out[m, n] = Σ_p x[m, p] · W[n, p] in i32, for x (i32) of any number of
rows and W_int8 (i8) in Int8Layout's panels (dlvm.transforms.int8_products): for each group
of four depths, the four bytes of each of a panel's channels side by side, a lane each.

`vpdpbusd` multiplies unsigned bytes by signed bytes, four to a 32-bit lane, and adds the sums
to the lane. quantize_products makes x's values bytes already (x_q + 128, in [1, 255]); the
kernel writes them as bytes into a stack buffer, VNNI_GROUP_ROWS (16) rows at a time, each row
padded with zeros to the layout's depth (a multiple of 4), and checks that every one fits a
byte: if one does not (the kernel is only known by its shape), it computes those rows element
by element in i32 instead. A row's four bytes at depth 4q, broadcast to every lane, times the
vector of 16 channels' lanes at q, add those 16 channels' four products: so a row reads each
panel from start to end, a vector of W per vpdpbusd, into one accumulator per vector of
channels, and needs no sum across lanes and no padding beyond 4 bytes. A row is summed
against blocks of 16 vectors (a panel's 256 channels: 16 accumulators), then 4, then 1; the
group's rows in tiles of VNNI_TILE_ROWS (8) rows by VNNI_TILE_VECTORS (2) vectors (16
accumulators; 8 broadcasts and 2 loads of W per 16 vpdpbusd), each strip of 32 channels through
all the group's tiles while it is in L1, the rows left over after the tiles a row at a time.

Threads share the channels in groups of compute-scheduling's `columns` (or, without it, the
rows of x); a CPU without VNNI computes the same product with the generic kernel
(dlvm.codegen.matmul), which reads W through the layout's views, in i32 multiply-adds."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from dlvm.codegen.llvm_types import I1, I8, I32, I64, PTR
from dlvm.codegen.loops import counted_loop
from dlvm.ir.types import TensorType
from dlvm.transforms.int8_products import (
    LANE_DEPTH,
    PANEL_CHANNELS,
    VECTOR_CHANNELS,
    VNNI_GROUP_ROWS,
    VNNI_TILE_ROWS,
    VNNI_TILE_VECTORS,
    Int8Layout,
    int8_rows_product,
)

if TYPE_CHECKING:
    from dlvm.codegen.kernel import KernelGen

LANES = VECTOR_CHANNELS  # i32 lanes of a 512-bit vector
VECTOR_BYTES = LANES * LANE_DEPTH  # bytes of W per vpdpbusd
PANEL_VECTORS = PANEL_CHANNELS // LANES
BYTES = ir.VectorType(I8, VECTOR_BYTES)
SUMS = ir.VectorType(I32, LANES)
MASK = ir.VectorType(I1, LANES)
# The blocks of vectors a row is summed against, largest first (one loop each).
ROW_BLOCKS = (PANEL_VECTORS, 4, 1)


def _c(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def emit_int8_product(kg: KernelGen, out: ir.Value, begin: ir.Value, end: ir.Value) -> None:
    """The body of kg's kernel over its share [begin, end) (column groups, or rows of x)."""
    found = int8_rows_product(kg.fn)
    assert found is not None, f"@{kg.fn.name} is scheduled vnni but is no int8 product"
    x, w, layout = found
    tx = x.type
    assert isinstance(tx, TensorType)
    rows = tx.shape[0]
    channels = layout.channels
    b = kg.b
    if kg.columns:
        first = b.mul(begin, _c(kg.columns))
        last = b.mul(end, _c(kg.columns))
        last = b.select(b.icmp_signed(">", last, _c(channels)), _c(channels), last)
        row_lo, row_hi = _c(0), _c(rows)
    else:
        first, last, row_lo, row_hi = _c(0), _c(channels), begin, end
    product = Int8Product(kg, kg.ptrs[x], kg.ptrs[w], out, rows, layout)
    product.emit((row_lo, row_hi), (first, last))


class Int8Product:
    """One kernel body's int8 product: x (i32, rows x depth), w (i8, in `layout`), out (i32,
    rows x channels)."""

    def __init__(
        self, kg: KernelGen, x: ir.Value, w: ir.Value, out: ir.Value, rows: int, layout: Int8Layout
    ) -> None:
        self.kg, self.b = kg, kg.b
        self.x, self.w, self.out = x, w, out
        self.rows, self.layout = rows, layout
        self.depth, self.channels = layout.depth, layout.channels
        self.padded = layout.padded_depth  # bytes of a packed row of x
        panels = layout.panels()
        self.last_panel = len(panels) - 1
        self.last_width = panels[-1][1]
        module = kg.module
        self.vpdpbusd = _declare(module, "llvm.x86.avx512.vpdpbusd.512", SUMS, [SUMS, BYTES, BYTES])
        self.masked_store = _declare(
            module, "llvm.masked.store.v16i32.p0", ir.VoidType(), [SUMS, PTR, I32, MASK]
        )
        tail = self.channels % LANES
        self.tail_mask = ir.Constant(MASK, [1] * tail + [0] * (LANES - tail)) if tail else None

    def emit(self, rows: tuple[ir.Value, ir.Value], channels: tuple[ir.Value, ir.Value]) -> None:
        """out's rows [rows) by its channels [channels): x packed VNNI_GROUP_ROWS rows at a
        time (as many as x has, when fewer), each group summed by VNNI where its values are
        bytes, element by element where not."""
        b = self.b
        group = min(VNNI_GROUP_ROWS, self.rows)
        stack = self.kg.alloca(ir.ArrayType(I8, group * self.padded))
        buffer = b.gep(stack, [_c(0), _c(0)])
        count = b.sub(rows[1], rows[0])
        groups = b.sdiv(b.add(count, _c(group - 1)), _c(group))

        def each_group(g: ir.Value) -> None:
            lo = b.add(rows[0], b.mul(g, _c(group)))
            hi = b.add(lo, _c(group))
            hi = b.select(b.icmp_signed(">", hi, rows[1]), rows[1], hi)
            fits = self.pack(buffer, (lo, hi))
            with b.if_else(fits) as (bytes_, other):
                with bytes_:
                    self.by_panels(buffer, (lo, hi), channels)
                with other:
                    self.by_elements((lo, hi), channels)

        counted_loop(b, _c(0), groups, each_group, "group")

    def by_panels(
        self, buffer: ir.Value, rows: tuple[ir.Value, ir.Value], channels: tuple[ir.Value, ir.Value]
    ) -> None:
        """Rows [rows) (at most VNNI_GROUP_ROWS, packed in buffer) by channels [channels) (their
        first a multiple of 16), panel by panel: tiles of the rows, then the rows left over a
        row at a time."""
        b = self.b
        v_lo = b.sdiv(channels[0], _c(LANES))
        v_hi = b.sdiv(b.add(channels[1], _c(LANES - 1)), _c(LANES))
        k_lo = b.sdiv(v_lo, _c(PANEL_VECTORS))
        k_hi = b.add(b.sdiv(b.sub(v_hi, _c(1)), _c(PANEL_VECTORS)), _c(1))
        count = b.sub(rows[1], rows[0])
        tiles = b.sdiv(count, _c(VNNI_TILE_ROWS))
        left = b.mul(tiles, _c(VNNI_TILE_ROWS))

        def panel(k: ir.Value) -> None:
            start = b.mul(k, _c(PANEL_VECTORS))
            a = b.select(b.icmp_signed(">", v_lo, start), v_lo, start)
            end = b.add(start, _c(PANEL_VECTORS))
            z = b.select(b.icmp_signed("<", v_hi, end), v_hi, end)
            last = b.icmp_signed("==", k, _c(self.last_panel))
            width = b.select(last, _c(self.last_width), _c(PANEL_CHANNELS))
            at = _Panel(
                b.gep(self.w, [b.mul(k, _c(PANEL_CHANNELS * self.padded))], source_etype=I8),
                b.mul(width, _c(LANE_DEPTH)),
                start,
            )
            self.by_tiles(buffer, rows[0], tiles, at, (a, z))
            with b.if_then(b.icmp_signed("<", left, count)):
                self.by_rows(buffer, rows[0], (left, count), at, (a, z))

        counted_loop(b, k_lo, k_hi, panel, "panel")

    def by_tiles(
        self,
        buffer: ir.Value,
        m0: ir.Value,
        tiles: ir.Value,
        at: _Panel,
        vectors: tuple[ir.Value, ir.Value],
    ) -> None:
        """`tiles` tiles of VNNI_TILE_ROWS rows (from packed row 0, out's row m0) by the
        panel's vectors [vectors): strips of VNNI_TILE_VECTORS vectors, each through every
        tile, then the vectors left over one at a time."""
        b = self.b
        span = b.sub(vectors[1], vectors[0])
        wide = VNNI_TILE_VECTORS
        strips = b.sdiv(span, _c(wide))
        rest = b.add(vectors[0], b.mul(strips, _c(wide)))

        def rows_of(t: ir.Value) -> list[ir.Value]:
            return [b.add(b.mul(t, _c(VNNI_TILE_ROWS)), _c(r)) for r in range(VNNI_TILE_ROWS)]

        def tiles_by(v0: ir.Value, count: int) -> None:
            def tile(t: ir.Value) -> None:
                self.block(buffer, m0, rows_of(t), at, v0, count)

            counted_loop(b, _c(0), tiles, tile, "tile")

        def strip(s: ir.Value) -> None:
            tiles_by(b.add(vectors[0], b.mul(s, _c(wide))), wide)

        counted_loop(b, _c(0), strips, strip, "strip")
        counted_loop(b, rest, vectors[1], lambda v: tiles_by(v, 1), "v")

    def by_rows(
        self,
        buffer: ir.Value,
        m0: ir.Value,
        rows: tuple[ir.Value, ir.Value],
        at: _Panel,
        vectors: tuple[ir.Value, ir.Value],
    ) -> None:
        """Packed rows [rows) (out's rows from m0 on) one at a time by the panel's vectors
        [vectors): blocks of ROW_BLOCKS vectors, largest first."""
        b = self.b

        def each_row(r: ir.Value) -> None:
            v = vectors[0]
            for wide in ROW_BLOCKS:
                blocks = b.sdiv(b.sub(vectors[1], v), _c(wide))
                first = v

                def block(i: ir.Value, first: ir.Value = first, wide: int = wide) -> None:
                    self.block(buffer, m0, [r], at, b.add(first, b.mul(i, _c(wide))), wide)

                counted_loop(b, _c(0), blocks, block, "block")
                v = b.add(first, b.mul(blocks, _c(wide)))

        counted_loop(b, rows[0], rows[1], each_row, "m")

    def block(
        self,
        buffer: ir.Value,
        m0: ir.Value,
        rows: list[ir.Value],
        at: _Panel,
        v0: ir.Value,
        wide: int,
    ) -> None:
        """Packed rows `rows` (out's rows m0 + each) by the panel's `wide` vectors from vector
        v0 (of all the channels): one accumulator each, a vpdpbusd per row and vector for each
        group of four depths, stored to out (the channels past the last masked off)."""
        b = self.b
        slots = [self.kg.alloca(SUMS) for _ in rows for _ in range(wide)]
        for slot in slots:
            b.store(ir.Constant(SUMS, None), slot)
        xs = [b.gep(buffer, [b.mul(r, _c(self.padded))], source_etype=I8) for r in rows]
        inner = b.mul(b.sub(v0, at.start), _c(VECTOR_BYTES))
        w0 = b.gep(at.base, [inner], source_etype=I8)

        def quad(q: ir.Value) -> None:
            depth = b.mul(q, _c(LANE_DEPTH))
            spread = []
            for x in xs:
                four = b.load(b.gep(x, [depth], source_etype=I8), typ=I32)
                four.align = 1
                splat = b.shuffle_vector(
                    b.insert_element(ir.Constant(SUMS, None), four, ir.Constant(I32, 0)),
                    ir.Constant(SUMS, None),
                    ir.Constant(SUMS, [0] * LANES),
                )
                spread.append(b.bitcast(splat, BYTES))
            row = b.gep(w0, [b.mul(q, at.stride)], source_etype=I8)
            ws = []
            for j in range(wide):
                w = b.load(b.gep(row, [_c(j * VECTOR_BYTES)], source_etype=I8), typ=BYTES)
                w.align = 1
                ws.append(w)
            for slot, (a, w) in zip(slots, [(a, w) for a in spread for w in ws]):
                b.store(b.call(self.vpdpbusd, [b.load(slot, typ=SUMS), a, w]), slot)

        counted_loop(b, _c(0), _c(self.layout.quads), quad, "q")
        for i, r in enumerate(rows):
            line = b.mul(b.add(m0, r), _c(self.channels))
            for j in range(wide):
                channel = b.mul(b.add(v0, _c(j)), _c(LANES))
                self.store(b.load(slots[i * wide + j], typ=SUMS), b.add(line, channel), channel)

    def store(self, sums: ir.Value, offset: ir.Value, channel: ir.Value) -> None:
        """16 sums into out at `offset`, those of channel `channel` on; past the last channel
        (the layout's padding) none."""
        b = self.b
        at = b.gep(self.out, [offset], source_etype=I32)
        if self.tail_mask is None:
            b.store(sums, at, align=4)
            return
        whole = b.icmp_signed("<=", b.add(channel, _c(LANES)), _c(self.channels))
        with b.if_else(whole) as (full, part):
            with full:
                b.store(sums, at, align=4)
            with part:
                b.call(self.masked_store, [sums, at, ir.Constant(I32, 4), self.tail_mask])

    def w_offset(self, n: ir.Value, p: ir.Value) -> ir.Value:
        """Where W[n, p] is in the layout."""
        b = self.b
        k = b.sdiv(n, _c(PANEL_CHANNELS))
        last = b.icmp_signed("==", k, _c(self.last_panel))
        width = b.select(last, _c(self.last_width), _c(PANEL_CHANNELS))
        inside = b.sub(n, b.mul(k, _c(PANEL_CHANNELS)))  # the channel within its panel
        lane = b.add(b.mul(b.sdiv(p, _c(LANE_DEPTH)), width), inside)
        panel = b.mul(k, _c(PANEL_CHANNELS * self.padded))
        return b.add(panel, b.add(b.mul(lane, _c(LANE_DEPTH)), b.srem(p, _c(LANE_DEPTH))))

    def by_elements(
        self, rows: tuple[ir.Value, ir.Value], channels: tuple[ir.Value, ir.Value]
    ) -> None:
        """out[m, n] one element at a time, in i32: for an x whose values are not bytes."""
        b = self.b
        slot = self.kg.alloca(I32)

        def channel(n: ir.Value) -> None:
            def each_row(m: ir.Value) -> None:
                b.store(ir.Constant(I32, 0), slot)

                def step(p: ir.Value) -> None:
                    xv = b.load(b.gep(self.x, [b.add(b.mul(m, _c(self.depth)), p)],
                                      source_etype=I32), typ=I32)  # fmt: skip
                    wv = b.load(b.gep(self.w, [self.w_offset(n, p)], source_etype=I8), typ=I8)
                    acc = b.load(slot, typ=I32)
                    b.store(b.add(acc, b.mul(xv, b.sext(wv, I32))), slot)

                counted_loop(b, 0, self.depth, step, "p")
                at = b.gep(self.out, [b.add(b.mul(m, _c(self.channels)), n)], source_etype=I32)
                b.store(b.load(slot, typ=I32), at)

            counted_loop(b, rows[0], rows[1], each_row, "m")

        counted_loop(b, channels[0], channels[1], channel, "n")

    def pack(self, buffer: ir.Value, rows: tuple[ir.Value, ir.Value]) -> ir.Value:
        """x's rows [rows) as bytes into buffer from its start, each padded with zeros to
        `padded` bytes; and whether every value was a byte (0 to 255)."""
        b = self.b
        outside = self.kg.alloca(I32)  # the bits of every value above a byte's, or-ed
        b.store(ir.Constant(I32, 0), outside)

        def row(r: ir.Value) -> None:
            m = b.add(rows[0], r)
            src = b.gep(self.x, [b.mul(m, _c(self.depth))], source_etype=I32)
            dst = b.gep(buffer, [b.mul(r, _c(self.padded))], source_etype=I8)

            def element(p: ir.Value) -> None:
                v = b.load(b.gep(src, [p], source_etype=I32), typ=I32)
                high = b.and_(v, ir.Constant(I32, ~0xFF))
                b.store(b.or_(b.load(outside, typ=I32), high), outside)
                b.store(b.trunc(v, I8), b.gep(dst, [p], source_etype=I8))

            def zero(p: ir.Value) -> None:
                b.store(ir.Constant(I8, 0), b.gep(dst, [p], source_etype=I8))

            counted_loop(b, 0, self.depth, element, "p")
            counted_loop(b, self.depth, self.padded, zero, "p")

        counted_loop(b, _c(0), b.sub(rows[1], rows[0]), row, "m")
        return b.icmp_signed("==", b.load(outside, typ=I32), ir.Constant(I32, 0))


class _Panel:
    """A panel of W: where it begins, the bytes from one group of four depths to the next (4
    times its channels), and its first vector (of all the channels)."""

    __slots__ = ("base", "stride", "start")

    def __init__(self, base: ir.Value, stride: ir.Value, start: ir.Value) -> None:
        self.base, self.stride, self.start = base, stride, start


def _declare(module: ir.Module, name: str, result: ir.Type, args: list[ir.Type]) -> ir.Function:
    existing = module.globals.get(name)
    if isinstance(existing, ir.Function):
        return existing
    return ir.Function(module, ir.FunctionType(result, args), name)
