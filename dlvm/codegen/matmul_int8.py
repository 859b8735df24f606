"""The int8 product of `--quantize int8` on AVX-512 VNNI (a kernel scheduled `vnni 1`,
docs/quantization.md): out[m, n] = Σ_p x[m, p] · W[n, p] in i32, for x (i32) of any number of
rows and W_int8 (i8) an output channel per row, N x P (dlvm.transforms.int8_products).

`vpdpbusd` multiplies unsigned bytes by signed bytes, four to a 32-bit lane, and adds the sums
to the lane. quantize_products makes x's values bytes already (x_q + 128, in [1, 255]); the
kernel writes them as bytes into a stack buffer, VNNI_GROUP_ROWS (16) rows at a time, each row
padded with zeros to a multiple of 64, and checks that every one fits a byte: if one does not
(the kernel is only known by its shape), it computes those rows element by element in i32
instead. For each block of VNNI_TILE_ROWS (4) channels, the group's rows are summed 4 at a
time against the block's 4 rows of W (a tile: 16 vectors of 16 lanes, 64 bytes a step, the
last step a masked load, so nothing past a row is read; padding adds nothing), and a tree of
shuffles adds the 16 vectors into one vector of the 16 sums; the block's rows of W stay in L1
from one tile to the next. Channels left over after the blocks are summed one at a time. Rows
left over after the tiles (a batch of 1, say) are summed a row at a time against blocks of 16
channels, by the same tree.

Threads share the channels in groups of compute-scheduling's `columns` (or, without it, the
rows of x); a CPU without VNNI computes the same product with the generic kernel
(dlvm.codegen.matmul), in i32 multiply-adds."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from dlvm.codegen.llvm_types import I1, I8, I32, I64, PTR
from dlvm.codegen.loops import counted_loop
from dlvm.ir.types import TensorType
from dlvm.transforms.int8_products import (
    VNNI_GROUP_ROWS,
    VNNI_TILE_ROWS,
    int8_rows_product,
)

if TYPE_CHECKING:
    from dlvm.codegen.kernel import KernelGen

STEP = 64  # bytes of a row per vpdpbusd
LANES = 16  # i32 lanes of a 512-bit vector; also the channels of a row's block
BYTES = ir.VectorType(I8, STEP)
SUMS = ir.VectorType(I32, LANES)


def _c(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def emit_int8_product(kg: KernelGen, out: ir.Value, begin: ir.Value, end: ir.Value) -> None:
    """The body of kg's kernel over its share [begin, end) (column groups, or rows of x)."""
    found = int8_rows_product(kg.fn)
    assert found is not None, f"@{kg.fn.name} is scheduled vnni but is no int8 product"
    x, w = found
    tx, tw = x.type, w.type
    assert isinstance(tx, TensorType) and isinstance(tw, TensorType)
    rows, depth = tx.shape
    channels = tw.shape[0]
    b = kg.b
    if kg.columns:
        first = b.mul(begin, _c(kg.columns))
        last = b.mul(end, _c(kg.columns))
        last = b.select(b.icmp_signed(">", last, _c(channels)), _c(channels), last)
        row_lo, row_hi = _c(0), _c(rows)
    else:
        first, last, row_lo, row_hi = _c(0), _c(channels), begin, end
    product = Int8Product(kg, kg.ptrs[x], kg.ptrs[w], out, rows, depth, channels)
    product.emit((row_lo, row_hi), (first, last))


class Int8Product:
    """One kernel body's int8 product: x (i32, rows x depth), w (i8, channels x depth), out
    (i32, rows x channels)."""

    def __init__(
        self,
        kg: KernelGen,
        x: ir.Value,
        w: ir.Value,
        out: ir.Value,
        rows: int,
        depth: int,
        channels: int,
    ) -> None:
        self.kg, self.b = kg, kg.b
        self.x, self.w, self.out = x, w, out
        self.rows, self.depth, self.channels = rows, depth, channels
        self.steps = -(-depth // STEP)
        self.padded = self.steps * STEP
        self.tail = depth - (self.steps - 1) * STEP  # bytes of the last step, 1 to 64
        module = kg.module
        self.vpdpbusd = _declare(module, "llvm.x86.avx512.vpdpbusd.512", SUMS, [SUMS, BYTES, BYTES])
        self.total = _declare(module, "llvm.vector.reduce.add.v16i32", I32, [SUMS])
        mask = ir.VectorType(I1, STEP)
        self.masked_load = _declare(
            module, "llvm.masked.load.v64i8.p0", BYTES, [PTR, I32, mask, BYTES]
        )
        self.mask = ir.Constant(mask, [1] * self.tail + [0] * (STEP - self.tail))

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
                    self.by_group(buffer, (lo, hi), channels)
                with other:
                    self.by_elements((lo, hi), channels)

        counted_loop(b, _c(0), groups, each_group, "group")

    def by_group(
        self, buffer: ir.Value, rows: tuple[ir.Value, ir.Value], channels: tuple[ir.Value, ir.Value]
    ) -> None:
        """Rows [rows) (at most VNNI_GROUP_ROWS, packed in buffer) by channels: tiles of
        VNNI_TILE_ROWS rows, then the rows left over a row at a time."""
        b = self.b
        tiles = b.sdiv(b.sub(rows[1], rows[0]), _c(VNNI_TILE_ROWS))
        left = b.mul(tiles, _c(VNNI_TILE_ROWS))
        self.by_tiles(buffer, rows[0], tiles, channels)
        with b.if_then(b.icmp_signed("<", b.add(rows[0], left), rows[1])):
            rest = b.gep(buffer, [b.mul(left, _c(self.padded))], source_etype=I8)
            self.by_vectors(rest, (b.add(rows[0], left), rows[1]), channels)

    def by_tiles(
        self, buffer: ir.Value, m0: ir.Value, tiles: ir.Value, channels: tuple[ir.Value, ir.Value]
    ) -> None:
        """`tiles` tiles of T = VNNI_TILE_ROWS rows (from row m0 on, packed in buffer) by
        channels: T x T sums at a time (each step reads T rows of x and T of W for T² = 16
        vpdpbusd), added across lanes by one tree; channels left over after the blocks one at
        a time, each with T sums. Each block of channels goes through every tile while its
        rows of W are in L1."""
        b = self.b
        t_rows = VNNI_TILE_ROWS
        span = b.sub(channels[1], channels[0])
        blocks = b.sdiv(span, _c(t_rows))
        rest = b.add(channels[0], b.mul(blocks, _c(t_rows)))

        def tile_rows(t: ir.Value) -> tuple[list[ir.Value], list[ir.Value]]:
            """The tile's rows of x (bytes) and where its rows of out begin."""
            first = b.mul(t, _c(t_rows))
            xs = [b.gep(buffer, [b.mul(b.add(first, _c(r)), _c(self.padded))], source_etype=I8)
                  for r in range(t_rows)]  # fmt: skip
            outs = [b.mul(b.add(b.add(m0, first), _c(r)), _c(self.channels)) for r in range(t_rows)]
            return xs, outs

        def block(i: ir.Value) -> None:
            n0 = b.add(channels[0], b.mul(i, _c(t_rows)))
            weights = [self.w_row(b.add(n0, _c(j))) for j in range(t_rows)]

            def each_tile(t: ir.Value) -> None:
                xs, outs = tile_rows(t)
                sums = _tree_total(b, self.sums(xs, weights))  # lane T·r + j: row r, channel j
                for r in range(t_rows):
                    part = ir.Constant(
                        ir.VectorType(I32, t_rows), [t_rows * r + j for j in range(t_rows)]
                    )
                    at = b.gep(self.out, [b.add(outs[r], n0)], source_etype=I32)
                    b.store(b.shuffle_vector(sums, sums, part), at, align=4)

            counted_loop(b, _c(0), tiles, each_tile, "tile")

        def channel(n: ir.Value) -> None:
            def each_tile(t: ir.Value) -> None:
                xs, outs = tile_rows(t)
                for r, acc in enumerate(self.sums(xs, [self.w_row(n)])):
                    at = b.gep(self.out, [b.add(outs[r], n)], source_etype=I32)
                    b.store(b.call(self.total, [acc]), at)

            counted_loop(b, _c(0), tiles, each_tile, "tile")

        counted_loop(b, _c(0), blocks, block, "block")
        counted_loop(b, rest, channels[1], channel, "n")

    def by_vectors(
        self, buffer: ir.Value, rows: tuple[ir.Value, ir.Value], channels: tuple[ir.Value, ir.Value]
    ) -> None:
        """Rows [rows) (packed in buffer) by channels, a row at a time: 16 channels a block,
        added across lanes by a tree; channels left over one at a time."""
        b = self.b
        span = b.sub(channels[1], channels[0])
        blocks = b.sdiv(span, _c(LANES))
        rest = b.add(channels[0], b.mul(blocks, _c(LANES)))
        m0 = rows[0]
        packed = (_c(0), b.sub(rows[1], rows[0]))

        def block(i: ir.Value) -> None:
            n0 = b.add(channels[0], b.mul(i, _c(LANES)))
            weights = [self.w_row(b.add(n0, _c(j))) for j in range(LANES)]

            def each_row(r: ir.Value) -> None:
                xs = b.gep(buffer, [b.mul(r, _c(self.padded))], source_etype=I8)
                sums = _tree_total(b, self.sums([xs], weights))
                m = b.add(m0, r)
                at = b.gep(self.out, [b.add(b.mul(m, _c(self.channels)), n0)], source_etype=I32)
                b.store(sums, at, align=4)

            counted_loop(b, packed[0], packed[1], each_row, "m")

        def channel(n: ir.Value) -> None:
            weights = [self.w_row(n)]

            def each_row(r: ir.Value) -> None:
                xs = b.gep(buffer, [b.mul(r, _c(self.padded))], source_etype=I8)
                (acc,) = self.sums([xs], weights)
                m = b.add(m0, r)
                at = b.gep(self.out, [b.add(b.mul(m, _c(self.channels)), n)], source_etype=I32)
                b.store(b.call(self.total, [acc]), at)

            counted_loop(b, packed[0], packed[1], each_row, "m")

        counted_loop(b, _c(0), blocks, block, "block")
        counted_loop(b, rest, channels[1], channel, "n")

    def w_row(self, n: ir.Value) -> ir.Value:
        """Where W's row (output channel) n begins."""
        return self.b.gep(self.w, [self.b.mul(n, _c(self.depth))], source_etype=I8)

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
                    wv = b.load(b.gep(self.w, [b.add(b.mul(n, _c(self.depth)), p)],
                                      source_etype=I8), typ=I8)  # fmt: skip
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

    def sums(self, xs: list[ir.Value], weights: list[ir.Value]) -> list[ir.Value]:
        """For each row of x (a pointer to its bytes) and each row of W (a pointer), row by
        row, their 16 lanes of sums."""
        b = self.b
        slots = [self.kg.alloca(SUMS) for _ in xs for _ in weights]
        for slot in slots:
            b.store(ir.Constant(SUMS, None), slot)

        def step(k: ir.Value, last: bool = False) -> None:
            offset = b.mul(k, _c(STEP))
            rows = []
            for x in xs:
                a = b.load(b.gep(x, [offset], source_etype=I8), typ=BYTES)
                a.align = 1
                rows.append(a)
            columns = []
            for row in weights:
                at = b.gep(row, [offset], source_etype=I8)
                if last:
                    no_bytes = ir.Constant(BYTES, None)
                    w = b.call(self.masked_load, [at, ir.Constant(I32, 1), self.mask, no_bytes])
                else:
                    w = b.load(at, typ=BYTES)
                    w.align = 1
                columns.append(w)
            for slot, (a, w) in zip(slots, [(a, w) for a in rows for w in columns]):
                acc = b.load(slot, typ=SUMS)
                b.store(b.call(self.vpdpbusd, [acc, a, w]), slot)

        counted_loop(b, 0, self.steps - 1, step, "k")
        step(_c(self.steps - 1), last=True)
        return [b.load(slot, typ=SUMS) for slot in slots]


def _tree_total(b: ir.IRBuilder, vectors: list[ir.Value]) -> ir.Value:
    """The 16 totals of 16 vectors of 16 lanes, as one vector (lane j: vector j's total): at
    each level, pairs of vectors are shuffled into the first and second halves of each group
    of lanes and added, halving the groups; a last shuffle puts the totals in order."""
    labels = [[j] * LANES for j in range(len(vectors))]  # whose sum each lane holds
    width = LANES
    while len(vectors) > 1:
        half = width // 2
        groups = range(LANES // width)
        lo = [g * width + i + o for g in groups for o in (0, LANES) for i in range(half)]
        hi = [i + half for i in lo]
        nxt, nxt_labels = [], []
        for k in range(0, len(vectors), 2):
            x, y = vectors[k], vectors[k + 1]
            pick = [ir.Constant(ir.VectorType(I32, LANES), m) for m in (lo, hi)]
            nxt.append(b.add(b.shuffle_vector(x, y, pick[0]), b.shuffle_vector(x, y, pick[1])))
            both = labels[k] + labels[k + 1]
            nxt_labels.append([both[i] for i in lo])
        vectors, labels, width = nxt, nxt_labels, half
    order = [labels[0].index(j) for j in range(LANES)]
    mask = ir.Constant(ir.VectorType(I32, LANES), order)
    return b.shuffle_vector(vectors[0], ir.Constant(SUMS, None), mask)


def _declare(module: ir.Module, name: str, result: ir.Type, args: list[ir.Type]) -> ir.Function:
    existing = module.globals.get(name)
    if isinstance(existing, ir.Function):
        return existing
    return ir.Function(module, ir.FunctionType(result, args), name)
