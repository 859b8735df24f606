"""The `dot` kernel: a register-blocked, cache-tiled matrix product emitted as LLVM IR, with
the kernel's elementwise epilogue (bias, activation) applied to each tile while it is hot.

out[…, i, j] = Σp a[…, i, p] · b[…, p, j] is computed in tiles of `rows` × `width` elements
of out held in vector registers (accumulators) across a slice of p (`depth` long, so that the
slice of b a tile reads stays in L1 while the thread's rows pass over it). Loop order, from
outside in: slices of p, strips of `width` columns of b, tiles of `rows` rows of the thread's
share. Each step of p loads `width / lanes` vectors of b and broadcasts `rows` elements of a
into `rows × width / lanes` fused multiply-adds. The first slice starts the accumulators at
zero, later ones at what the tile holds; after the last slice the epilogue rewrites the tile
in place (out[idx] = epilogue(out[idx], …), each element read before it is written).

b is read where it lies when it is a kernel argument (row-major in memory); a `b` computed by
the kernel (a transposed or scaled matrix fused in as a prologue) is first packed, one strip
and slice at a time, into a stack buffer laid out the same way: Wᵀ read in place (an
nn.Linear's weight) by square blocks along W's rows (dlvm.codegen.transposing), anything else
element by element. With few rows of a, x · Wᵀ skips the tiles altogether: dot products of x's
rows with W's rows (dlvm.codegen.matmul_rows). Elements of a are read one by one
(`KernelGen.elem`), so a shape-only prologue such as a transpose costs only addressing.

Row and column counts need not divide the tile: leftover rows are one shorter tile, leftover
columns one narrower strip (LLVM vectors of any width).

A bf16 or f16 product (`wide`) accumulates in f32 vectors (half as many lanes) over
its whole sum in one slice (dlvm.codegen.bf16_products bounds its length), and rounds once to
its type as the tile is stored, before the epilogue reads it back (an epilogue that ends in f32,
`--precision bf16`'s weight update, holds the rounded tile widened in its f32 result).
Packed and with `pairs 1` in its schedule (AVX-512 BF16), its operands go in pairs of steps
of p and the micro-kernel is dlvm.codegen.bf16_pairs'; otherwise its elements are widened to
f32 as they are read or packed, and the f32 micro-kernel runs."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llvmlite import ir

from dlvm.codegen.llvm_types import BFLOAT, I32, I64, narrow, value_type
from dlvm.codegen.loops import counted_loop
from dlvm.codegen.transposing import columns_in_place, copy_transposed
from dlvm.ir.types import DataType, TensorType
from dlvm.ir.values import Argument, Instruction

if TYPE_CHECKING:
    from dlvm.codegen.kernel import KernelGen

DEPTH = 256  # at most this many steps of p per slice, unpacked: a 16-column strip of b is 16 KiB
PACKED_DEPTH = 384  # per slice when packing (dlvm.codegen.panels): C is read and written once


def _c(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def bf16_rounded(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """A vector of f32 rounded to bf16 in integer arithmetic (to nearest even, NaN kept quiet,
    subnormals kept: as ml_dtypes rounds), for a CPU without vcvtneps2bf16, where LLVM would
    call __truncsfbf2 once per lane."""
    vt = x.type
    assert isinstance(vt, ir.VectorType)
    n = vt.count
    i32, i16 = ir.VectorType(I32, n), ir.VectorType(ir.IntType(16), n)

    def splat(v: int) -> ir.Constant:
        return ir.Constant(i32, [v] * n)

    bits = b.bitcast(x, i32)
    high = b.lshr(bits, splat(16))
    even = b.add(b.add(bits, splat(0x7FFF)), b.and_(high, splat(1)))
    rounded = b.select(b.fcmp_unordered("uno", x, x), b.or_(high, splat(0x40)),
                       b.lshr(even, splat(16)))  # fmt: skip
    return b.bitcast(b.trunc(rounded, i16), ir.VectorType(BFLOAT, n))


@dataclass(frozen=True)
class Tiling:
    """A tile of `rows` × (`vectors` × `lanes`) accumulators, slices of `depth` steps of p;
    `packed`: a and b are copied into contiguous panels first (dlvm.codegen.matmul)."""

    rows: int
    vectors: int
    lanes: int
    depth: int
    slices: int
    packed: bool = False

    @property
    def width(self) -> int:
        return self.vectors * self.lanes


def tiling(m: int, k: int, lanes: int, n: int = 0, elem_bytes: int = 4) -> Tiling:
    """Tile shape for m rows. With 16 vector registers (AVX2): 6 × 2 vectors (12 accumulators
    and 3 more registers); with 32 (AVX-512): 14 × 2. With fewer rows, more column vectors keep
    enough independent multiply-add chains in flight to hide their latency. Products with
    enough rows and columns to reuse a packed panel many times are packed."""
    avx512 = lanes * elem_bytes * 8 >= 512  # 32 vector registers; AVX2 has 16
    big_rows = 14 if avx512 else 6
    if m >= big_rows:
        rows, vectors = big_rows, 2
    else:
        rows, vectors = (m, 2) if m >= 3 else (max(m, 1), 4)
    packed = m >= 4 * big_rows and n >= 2 * vectors * lanes and k >= 16 and lanes > 1
    depth = PACKED_DEPTH if packed else DEPTH
    slices = max(1, math.ceil(k / depth))
    return Tiling(rows, vectors, lanes, math.ceil(k / slices) if k else 0, slices, packed)


class MatMul:
    """Emits the tiled product of `dot` (an instruction of kg's kernel) into `out`, then the
    kernel's root computed from it in place when the root is an epilogue."""

    wide = False  # bf16 or f16 operands, f32 sums (the module docstring)
    pairs = False  # and packed in pairs for vdpbf16ps (dlvm.codegen.bf16_pairs)
    converts = False  # and the CPU rounds f32 to bf16 in one instruction (vcvtneps2bf16)

    def __init__(self, kg: KernelGen, dot: Instruction, out: ir.Value, lanes: int) -> None:
        self.kg = kg
        self.b = kg.b
        self.dot = dot
        self.out = out
        self.a, self.bm = dot.operands
        t = dot.type
        assert isinstance(t, TensorType)
        self.t = t
        self.dt = t.dtype
        self.m, self.n = t.shape[-2], t.shape[-1]
        at = self.a.type
        assert isinstance(at, TensorType)
        self.k = at.shape[-1]
        self.elem_ty = value_type(self.dt)
        self.wide = self.dt in (DataType.BF16, DataType.F16)
        if self.wide:  # f32 accumulators, the whole sum in one slice
            lanes = max(1, lanes // 2)
            self.tile = dataclasses.replace(tiling(self.m, self.k, lanes, self.n, 4),
                                            depth=self.k, slices=1)  # fmt: skip
            sched = kg.fn.schedule
            self.converts = sched is not None and sched.get("pairs") == 1  # AVX-512 BF16
            self.pairs = self.converts and self.tile.packed and lanes == 16
        else:
            self.tile = tiling(self.m, self.k, lanes, self.n, self.dt.size)
        from dlvm.codegen.matmul_rows import row_dots  # matmul_rows builds on this module

        self.row_dots = row_dots(self)
        self.packed = (
            not isinstance(self.bm, Argument) and not self.tile.packed and self.row_dots is None
        )
        # b = Wᵀ read in place: packed by square blocks read along W's rows.
        self.b_columns = None
        if not isinstance(self.bm, Argument) and not self.dt.is_bool:
            self.b_columns = columns_in_place(self.bm, kg.ptrs)
        if self.packed:
            size = max(1, self.tile.depth * self.tile.width)
            self.pack = kg.alloca(ir.ArrayType(self.acc_ty, size))

    @property
    def acc_ty(self) -> ir.Type:
        """The type the micro-kernel multiplies and sums in (and packs hold, but in pairs)."""
        return ir.FloatType() if self.wide else self.elem_ty

    def widened(self, v: ir.Value) -> ir.Value:
        """An element (or vector) of the operands in acc_ty."""
        if not self.wide:
            return v
        t = ir.VectorType(ir.FloatType(), v.type.count) if isinstance(
            v.type, ir.VectorType) else ir.FloatType()  # fmt: skip
        return self.b.fpext(v, t)

    def emit(
        self, batch: list[ir.Value], begin: ir.Value, end: ir.Value,
        columns: tuple[ir.Value, ir.Value] | None = None,
    ) -> None:  # fmt: skip
        """Rows [begin, end) of the matrix at batch index `batch`; `columns`: only columns
        [c0, c1), c0 a multiple of the tile width (a thread's share of a product with few
        rows)."""
        b, tile = self.b, self.tile
        if self.row_dots is not None:
            self.row_dots.emit(batch, begin, end, columns)
            return
        if tile.packed and columns is None:
            from dlvm.codegen.panels import Panels  # panels builds on this module

            Panels(self).emit(batch, begin, end)
            return
        c0, c1 = columns or (ir.Constant(I64, 0), ir.Constant(I64, self.n))
        width = ir.Constant(I64, tile.width)
        slices = ir.Constant(I64, tile.slices)

        def one_slice(s: ir.Value) -> None:
            p0, p1, first, last = self.slice_bounds(s)
            full = b.udiv(b.sub(c1, c0), width)

            def strip(q: ir.Value) -> None:
                j0 = b.add(c0, b.mul(q, width))
                self.strip(batch, begin, end, j0, tile.width, p0, p1, first, last)

            counted_loop(b, 0, full, strip, name="strip")
            if self.n % tile.width:  # the last, narrower strip, in the share that ends at n
                with b.if_then(b.icmp_signed("==", c1, ir.Constant(I64, self.n))):
                    j0 = ir.Constant(I64, self.n // tile.width * tile.width)
                    self.strip(batch, begin, end, j0, self.n % tile.width, p0, p1, first, last)

        counted_loop(b, 0, slices, one_slice, name="slice")

    def slice_bounds(self, s: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value]:
        """Slice s's steps [p0, p1), and whether it is the first and the last slice."""
        b, tile = self.b, self.tile
        p0 = b.mul(s, ir.Constant(I64, tile.depth))
        p1 = b.select(
            b.icmp_signed("==", s, ir.Constant(I64, tile.slices - 1)),
            ir.Constant(I64, self.k),
            b.add(p0, ir.Constant(I64, tile.depth)),
        )
        first = b.icmp_signed("==", s, ir.Constant(I64, 0))
        last = b.icmp_signed("==", s, ir.Constant(I64, tile.slices - 1))
        return p0, p1, first, last

    def strip(
        self, batch: list[ir.Value], begin: ir.Value, end: ir.Value, j0: ir.Value, width: int,
        p0: ir.Value, p1: ir.Value, first: ir.Value, last: ir.Value,
    ) -> None:  # fmt: skip
        """Columns [j0, j0 + width) of rows [begin, end) over steps [p0, p1)."""
        if self.packed:
            self.pack_strip(batch, j0, width, p0, p1)

        def tile(i0: ir.Value, rows: int) -> None:
            a_at = self.a_direct(batch, i0)
            b_at = self.b_direct(batch, p0, j0, width)
            self.micro(batch, i0, rows, j0, width, p0, p1, first, last, a_at, b_at,
                       b_narrow=self.wide and not self.packed)  # fmt: skip

        self.tiles(begin, end, tile)

    def tiles(self, begin: ir.Value, end: ir.Value, tile: Callable[[ir.Value, int], None]) -> None:
        """tile(i0, rows) over rows [begin, end): full tiles, then the leftover rows as shorter
        tiles of 8, 4, 2 and 1 rows (each size its own straight-line code: four sizes rather
        than one per count keep the kernel small, and so LLVM fast); in a compact kernel,
        looped tiles of 4 rows, then of 1."""
        b, rows = self.b, self.tile.rows
        tiles = b.udiv(b.sub(end, begin), ir.Constant(I64, rows))
        counted_loop(b, 0, tiles, lambda q: tile(b.add(begin, b.mul(q, ir.Constant(I64, rows))),
                                                 rows), name="tile")  # fmt: skip
        i0 = b.add(begin, b.mul(tiles, ir.Constant(I64, rows)))
        if self.kg.compact:  # two more copies of the micro-kernel rather than four
            fours = b.udiv(b.sub(end, i0), ir.Constant(I64, 4))
            counted_loop(b, 0, fours, lambda q: tile(b.add(i0, b.mul(q, ir.Constant(I64, 4))),
                                                     4), name="four")  # fmt: skip
            counted_loop(b, b.add(i0, b.mul(fours, ir.Constant(I64, 4))), end,
                         lambda i: tile(i, 1), name="row")  # fmt: skip
            return
        rest = b.sub(end, i0)
        for size in (8, 4, 2, 1):
            if size >= rows:
                continue
            here = i0
            with b.if_then(b.icmp_unsigned("!=", b.and_(rest, ir.Constant(I64, size)),
                                           ir.Constant(I64, 0))):  # fmt: skip
                tile(here, size)
            i0 = b.add(i0, b.and_(rest, ir.Constant(I64, size)))

    def pack_strip(
        self, batch: list[ir.Value], j0: ir.Value, width: int, p0: ir.Value, p1: ir.Value
    ) -> None:
        """pack[(p - p0) · width + c] = b[…, p, j0 + c]: the strip of a computed b."""
        b, kg = self.b, self.kg
        if self.b_columns is not None:
            self.copy_columns(j0, _c(width), p0, p1, lambda p, c: b.gep(self.pack, [
                _c(0), b.add(b.mul(b.sub(p, p0), _c(width)), c)]))  # fmt: skip
            return

        def step(p: ir.Value) -> None:
            base = b.mul(b.sub(p, p0), ir.Constant(I64, width))

            def col(c: ir.Value) -> None:
                kg.memo.clear()
                v = self.widened(kg.elem(self.bm, [*batch, p, b.add(j0, c)]))
                b.store(v, b.gep(self.pack, [ir.Constant(I64, 0), b.add(base, c)]))

            counted_loop(b, 0, width, col, name="pc")

        counted_loop(b, p0, p1, step, name="pp")

    def copy_columns(
        self, j0: ir.Value, count: ir.Value, p0: ir.Value, p1: ir.Value,
        target: Callable[[ir.Value, ir.Value], ir.Value],
    ) -> None:  # fmt: skip
        """*target(p, c) = b[p, j0 + c] (in acc_ty) for c in [0, count), p in [p0, p1), b = Wᵀ
        read in place along W's rows (dlvm.codegen.transposing)."""
        assert self.b_columns is not None
        b = self.b
        ptr, (_, row) = self.b_columns

        def source(c: ir.Value, p: ir.Value) -> ir.Value:
            off = b.add(b.mul(b.add(j0, c), _c(row)), p)
            return b.gep(ptr, [off], source_etype=self.elem_ty)

        lanes = self.tile.lanes
        if lanes < 2 or lanes & (lanes - 1):
            lanes = 1  # no square blocks: one element at a time, still along W's rows
        copy_transposed(b, self.elem_ty, self.dt.size, lanes, source, target, count, p0, p1,
                        self.widened)  # fmt: skip

    # Where the micro-kernel reads a and b --------------------------------------------------

    def a_direct(self, batch: list[ir.Value], i0: ir.Value) -> Callable[[int, ir.Value], ir.Value]:
        """a[…, i0 + r, p], element by element (through any prologue), in acc_ty."""
        b = self.b
        return lambda r, p: self.widened(
            self.kg.elem(self.a, [*batch, b.add(i0, ir.Constant(I64, r)), p])
        )

    def b_direct(
        self, batch: list[ir.Value], p0: ir.Value, j0: ir.Value, width: int
    ) -> Callable[[ir.Value, int], ir.Value]:
        """The address of b[…, p, j0 + c] (or of its copy in the strip's pack)."""
        return lambda p, c: self.b_address(batch, p, p0, j0, c, width)

    def micro(
        self, batch: list[ir.Value], i0: ir.Value, rows: int, j0: ir.Value, width: int,
        p0: ir.Value, p1: ir.Value, first: ir.Value, last: ir.Value,
        a_at: Callable[[int, ir.Value], ir.Value], b_at: Callable[[ir.Value, int], ir.Value],
        b_narrow: bool = False,
    ) -> None:  # fmt: skip
        """One tile: rows × width accumulators over steps [p0, p1), stored to out, then the
        epilogue when this is the last slice. a_at(r, p) is a's element for row i0 + r (in
        acc_ty); b_at(p, c) the address of b's element for column j0 + c, in acc_ty, or with
        `b_narrow` bf16 to widen."""
        b, kg, lanes = self.b, self.kg, self.tile.lanes
        widths = [min(lanes, width - v) for v in range(0, width, lanes)]
        vtypes = [ir.VectorType(self.acc_ty, w) for w in widths]
        acc = [[kg.alloca(vt) for vt in vtypes] for _ in range(rows)]
        out_ptrs = [
            [self.out_address(batch, b.add(i0, ir.Constant(I64, r)), j0, v * lanes)
             for v in range(len(widths))]
            for r in range(rows)
        ]  # fmt: skip
        with b.if_else(first) as (zero, resume):
            with zero:
                for r in range(rows):
                    for slot, vt in zip(acc[r], vtypes):
                        b.store(ir.Constant(vt, None), slot)
            with resume:
                for r in range(rows):
                    for slot, ptr, vt in zip(acc[r], out_ptrs[r], vtypes):
                        b.store(self.load_vector(ptr, vt, narrow=self.narrow_out), slot)

        def step(p: ir.Value) -> None:
            kg.memo.clear()
            bv = [self.load_vector(b_at(p, v * lanes), vt, narrow=b_narrow)
                  for v, vt in enumerate(vtypes)]  # fmt: skip
            for r in range(rows):
                a = a_at(r, p)
                for slot, x, vt in zip(acc[r], bv, vtypes):
                    b.store(self.multiply_add(self.splat(a, vt), x, b.load(slot)), slot)

        counted_loop(b, p0, p1, step, name="p")
        for r in range(rows):
            for slot, ptr in zip(acc[r], out_ptrs[r]):
                self.store_vector(b.load(slot), ptr)
        if kg.root is not self.dot:
            with b.if_then(last):
                self.epilogue(batch, i0, rows, j0, width)

    def epilogue(
        self, batch: list[ir.Value], i0: ir.Value, rows: int, j0: ir.Value, width: int
    ) -> None:
        """out[idx] = root(idx) over the tile, the product read back from out."""
        b, kg = self.b, self.kg
        root_t = kg.root.type
        assert isinstance(root_t, TensorType)
        # One loop over the rows, not one per row: a loop each (29 per packed kernel) cost LLVM
        # a vectorised copy with alias checks apiece, a third of the library's build time.

        def row(r: ir.Value) -> None:
            i = b.add(i0, r)

            def col(c: ir.Value) -> None:
                kg.memo.clear()
                idx = [*batch, i, b.add(j0, c)]
                kg.store(self.out, idx, root_t, kg.elem(kg.root, idx))

            counted_loop(b, 0, width, col, name="epi")

        counted_loop(b, 0, rows, row, name="epr")

    # Vectors ---------------------------------------------------------------------------------

    def out_address(self, batch: list[ir.Value], i: ir.Value, j0: ir.Value, c: int) -> ir.Value:
        return self.kg.address(self.out, [*batch, i, self.b.add(j0, ir.Constant(I64, c))],
                               self.held)  # fmt: skip

    def store_sums(
        self, batch: list[ir.Value], i: ir.Value, j0: ir.Value, sums: ir.Value, count: int
    ) -> None:
        """out[…, i, j0 + c] = sums[c] for c < count (a vector of count or more lanes): next
        to each other in a row of the output, one store."""
        b = self.b
        vt = sums.type
        assert isinstance(vt, ir.VectorType)
        if count < vt.count:
            sums = b.shuffle_vector(sums, ir.Constant(vt, None), ir.Constant(
                ir.VectorType(I32, count), list(range(count))))  # fmt: skip
        b.store(sums, self.out_address(batch, i, j0, 0), align=self.dt.size)

    def b_address(
        self, batch: list[ir.Value], p: ir.Value, p0: ir.Value, j0: ir.Value, c: int, width: int
    ) -> ir.Value:
        b = self.b
        if self.packed:
            off = b.add(b.mul(b.sub(p, p0), ir.Constant(I64, width)), ir.Constant(I64, c))
            return b.gep(self.pack, [ir.Constant(I64, 0), off])
        bt = self.bm.type
        assert isinstance(bt, TensorType)
        col = b.add(j0, ir.Constant(I64, c))
        return self.kg.address(self.kg.ptrs[self.bm], [*batch, p, col], bt)

    def load_vector(self, ptr: ir.Value, vt: ir.VectorType, narrow: bool = False) -> ir.Value:
        """A vector of vt at ptr; `narrow`: bf16 in memory, widened to vt (f32)."""
        if not narrow:
            return self.b.load(ptr, typ=vt, align=self.dt.size)
        v = self.b.load(ptr, typ=ir.VectorType(self.elem_ty, vt.count), align=self.dt.size)
        return self.b.fpext(v, vt)

    @property
    def held(self) -> TensorType:
        """The tile's type in out: t, or f32 for a bf16 product under an f32 epilogue
        (KernelGen.held)."""
        held = self.kg.held
        if isinstance(held, TensorType) and held.shape == self.t.shape:
            return held
        return self.t

    @property
    def narrow_out(self) -> bool:
        """Whether out holds the tile in bf16 (not widened for an f32 epilogue)."""
        return self.wide and self.held.dtype is self.dt

    def store_vector(self, v: ir.Value, ptr: ir.Value) -> None:
        """Sums into out: a bf16 product's f32 sums rounded once to bf16 (and widened back,
        exactly, where out holds them in f32)."""
        b = self.b
        vt = v.type
        if self.wide:
            assert isinstance(vt, ir.VectorType)
            to = ir.VectorType(self.elem_ty, vt.count)
            if self.converts or self.dt is DataType.F16:
                v = narrow(b, v, to)
            else:
                v = bf16_rounded(b, v)
            if not self.narrow_out:
                v = b.fpext(v, vt)
        b.store(v, ptr, align=self.held.dtype.size)

    def splat(self, x: ir.Value, vt: ir.VectorType) -> ir.Value:
        b = self.b
        one = b.insert_element(ir.Constant(vt, ir.Undefined), x, ir.Constant(I32, 0))
        return b.shuffle_vector(one, ir.Constant(vt, ir.Undefined), ir.Constant(
            ir.VectorType(I32, vt.count), [0] * vt.count))  # fmt: skip

    def multiply_add(self, x: ir.Value, y: ir.Value, acc: ir.Value) -> ir.Value:
        """acc + x · y: one fused multiply-add for floats where the CPU has one."""
        b = self.b
        if not self.dt.is_float:
            return b.add(acc, b.mul(x, y))
        vt = x.type
        assert isinstance(vt, ir.VectorType)
        suffix = {16: "f16", 32: "f32", 64: "f64"}[self.dt.bits]
        name = f"llvm.fmuladd.v{vt.count}{suffix}"
        module = self.kg.module
        fn = module.globals.get(name)
        if fn is None:
            fn = ir.Function(module, ir.FunctionType(vt, [vt, vt, vt]), name)
        return b.call(fn, [x, y, acc])
