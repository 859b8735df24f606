"""A `dot` x · Wᵀ with few rows of x, as dot products of x's rows with W's rows read where they
lie: what PyTorch's nn.Linear exports (`Gemm` with transB=1, a `MatMul` of a `Transpose`) at
small batches, whose `b` the tiled kernel (dlvm.codegen.matmul) would otherwise pack, every
call, at more cost than the product itself when x has few rows.

out[i, j] = Σp x[i, p] · W[j, p]: b = Wᵀ is a view of a kernel argument in which consecutive
steps of p lie next to each other (dlvm.ir.strided). The columns go in groups of `width` (rows
of W: `lanes` for one row of x, half as many for more), the rows of x in tiles of `rows`. For
each (group, tile), width × rows vector accumulators (`unroll` each, so that enough fused
multiply-adds are in flight) run along p, `lanes` elements a step, each vector of W loaded
once for the tile's rows; a last partial step loads the k % lanes elements left and pads them
with zeros. A tree of shuffles and adds then folds each row's accumulators into one vector of
the group's sums, stored at once, and the kernel's epilogue rewrites them in place. The group's
rows of W stay in L1 while the tiles of x pass over them.

x is read in place too when its steps of p are contiguous; otherwise (a transpose computes it)
its rows are first copied into a stack buffer, once per call.

The loops serve any RowProduct: a MatMul, or a convolution with few output positions whose
rows of x are its transposed im2col (dlvm.codegen.conv_rows), which stores each row's sums
where its output puts them (store_sums)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from llvmlite import ir

from dlvm.codegen.llvm_types import I32, I64
from dlvm.codegen.loops import counted_loop
from dlvm.codegen.transposing import columns_in_place
from dlvm.ir.strided import view_strides
from dlvm.ir.types import DataType, TensorType
from dlvm.ir.values import Argument, Value

if TYPE_CHECKING:
    from dlvm.codegen.kernel import KernelGen
    from dlvm.codegen.matmul import MatMul, Tiling

# Which products: one row of x, or up to MANY_ROWS rows with sums at least LONG_SUMS long and
# SUMS_PER_ROW times as long as x has rows. Past that, each element of W is reused often
# enough that packing it costs less than the folds that end every sum (one thread, AVX-512,
# f32: bench/RESULTS.md, "Products with a transposed weight").
MANY_ROWS = 64
LONG_SUMS = 128
SUMS_PER_ROW = 4
COPIED_ELEMENTS = 16384  # the most elements of x copied to the stack (64 KiB of f32)
CHAINS = 8  # independent multiply-add chains wanted: FMA latency (4) × FMA units (2)


def _c(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def rows_in_place(v: Value, ptrs: dict[Value, ir.Value]) -> tuple[ir.Value, tuple[int, ...]] | None:
    """The pointer of the kernel argument that v views in place and v's strides over it, when
    consecutive elements along v's rows lie next to each other; None otherwise (the other
    way round: dlvm.codegen.transposing.columns_in_place)."""
    found = view_strides(v)
    if found is None or not isinstance(found[0], Argument) or found[0] not in ptrs:
        return None
    base, strides = found
    t = v.type
    assert isinstance(t, TensorType)
    if strides[-1] != 1 and t.shape[-1] != 1:
        return None
    return ptrs[base], strides


class RowProduct(Protocol):
    """What the row-dot loops need of their product: x · Wᵀ with x m × k (rows of x at batch
    index `batch` …), W n × k; where the sums go and the epilogue over a tile."""

    kg: KernelGen
    b: ir.IRBuilder
    a: Value  # x, read through kg.elem when its rows are copied
    m: int
    k: int
    n: int
    dt: DataType
    elem_ty: ir.Type
    tile: Tiling  # its lanes

    @property
    def dot(self) -> Value:
        """The kernel's product: an epilogue follows when it is not the kernel's root."""

    def multiply_add(self, x: ir.Value, y: ir.Value, acc: ir.Value) -> ir.Value: ...

    def store_sums(
        self, batch: list[ir.Value], i: ir.Value, j0: ir.Value, sums: ir.Value, count: int
    ) -> None:
        """out[…, i, j0 + c] = sums[c] for c < count."""

    def epilogue(
        self, batch: list[ir.Value], i0: ir.Value, rows: int, j0: ir.Value, width: int
    ) -> None: ...


def row_dots(mm: MatMul) -> RowDots | None:
    """The row-dot kernel for mm's product when it suits: few rows and long sums (above), a
    float type, b a view of an argument with W's rows (b's columns) contiguous."""
    long_sums = mm.m <= MANY_ROWS and mm.k >= max(LONG_SUMS, SUMS_PER_ROW * mm.m)
    if not (mm.m == 1 or long_sums) or mm.dt not in (DataType.F32, DataType.F64) or mm.k == 0:
        return None
    lanes = mm.tile.lanes
    if lanes < 2 or lanes & (lanes - 1):
        return None
    at, bt = mm.a.type, mm.bm.type
    assert isinstance(at, TensorType) and isinstance(bt, TensorType)
    if len(at.shape) != 2 or len(bt.shape) != 2:
        return None  # a batch of products (no transpose gives a batch of Wᵀ in place)
    ptrs = mm.kg.ptrs
    w = columns_in_place(mm.bm, ptrs)
    if w is None:
        return None
    x = rows_in_place(mm.a, ptrs)
    if x is None and mm.m * mm.k > COPIED_ELEMENTS:
        return None
    return RowDots(mm, w, x)


class RowDots:
    """The row-dot loops of one product (see the module docstring)."""

    def __init__(
        self, mm: RowProduct, w: tuple[ir.Value, tuple[int, ...]],
        x: tuple[ir.Value, tuple[int, ...]] | None, chunk_bytes: int = 0,
    ) -> None:  # fmt: skip
        self.mm, self.b = mm, mm.b
        self.w_ptr, self.w_strides = w
        self.x = x
        self.lanes = lanes = mm.tile.lanes
        # One row of x: a group of `lanes` rows of W. More: half as many, read by `rows` rows
        # of x at a time (each element of W loaded once for them all).
        self.width = self.group_width(lanes, mm.m)
        registers = 24 if lanes * mm.dt.size * 8 >= 512 else 12  # accumulators (as tiling's)
        self.rows = max(1, min(mm.m, registers // self.width))
        self.unroll = max(1, CHAINS // (self.rows * self.width))
        self.vt = ir.VectorType(mm.elem_ty, self.lanes)
        self.copy = None if x is not None else mm.kg.alloca(
            ir.ArrayType(mm.elem_ty, mm.m * mm.k))  # fmt: skip
        # Sums a chunk of p at a time (`chunk` elements, whole blocks of vectors) when the
        # group's rows of W would not stay in L1 while the tiles of x pass: each tile's
        # accumulators wait in `partial` between chunks.
        self.chunk: int | None = None
        self.partial: ir.Value | None = None
        if chunk_bytes and self.rows < mm.m:
            block = lanes * self.unroll
            self.chunk = max(block, chunk_bytes // (self.width * mm.dt.size) // block * block)
            self.partial = mm.kg.alloca(ir.ArrayType(self.vt, mm.m * self.width * self.unroll))

    @staticmethod
    def group_width(lanes: int, m: int) -> int:
        """The columns of a group (above), for m rows of x."""
        return lanes if m == 1 else max(2, lanes // 2)

    def emit(
        self, batch: list[ir.Value], begin: ir.Value, end: ir.Value,
        columns: tuple[ir.Value, ir.Value] | None = None,
    ) -> None:  # fmt: skip
        """Rows [begin, end) at batch index `batch`; columns [c0, c1) (all by default), c0 a
        multiple of `lanes`, in groups of `width`."""
        b, mm, width = self.b, self.mm, self.width
        c0, c1 = columns or (_c(0), _c(mm.n))
        if self.copy is not None:
            self.copy_rows(batch, begin, end)
        groups = b.udiv(b.sub(c1, c0), _c(width))

        def group(g: ir.Value) -> None:
            self.group(batch, begin, end, b.add(c0, b.mul(g, _c(width))), width)

        counted_loop(b, 0, groups, group, name="wg")
        if mm.n % width:  # the last, narrower group, in the share that ends at n
            with b.if_then(b.icmp_signed("==", c1, _c(mm.n))):
                self.group(batch, begin, end, _c(mm.n // width * width), mm.n % width)

    def copy_rows(self, batch: list[ir.Value], begin: ir.Value, end: ir.Value) -> None:
        """copy[i · k + p] = x[…, i, p] for the rows [begin, end): x through its prologue."""
        b, mm = self.b, self.mm
        assert self.copy is not None

        def row(i: ir.Value) -> None:
            def step(p: ir.Value) -> None:
                mm.kg.memo.clear()
                v = mm.kg.elem(mm.a, [*batch, i, p])
                b.store(v, self.copied(b.add(b.mul(i, _c(mm.k)), p)))

            counted_loop(b, 0, mm.k, step, name="xc")

        counted_loop(b, begin, end, row, name="xr")

    def group(
        self, batch: list[ir.Value], begin: ir.Value, end: ir.Value, j0: ir.Value, count: int
    ) -> None:
        """Columns [j0, j0 + count) of rows [begin, end), tiles of `rows` rows (then one
        shorter tile), then the epilogue there. With `chunk`, the sums go a chunk of p at a
        time over every tile, each tile's accumulators kept in `partial` between chunks."""
        b, mm = self.b, self.mm
        w_rows = [self.w_row(batch, b.add(j0, _c(j))) for j in range(count)]

        def finish(i0: ir.Value, size: int, acc: list[list[list[ir.Value]]]) -> None:
            for r, sums in enumerate(self.folded(acc)):
                mm.store_sums(batch, b.add(i0, _c(r)), j0, sums, count)
            if mm.kg.root is not mm.dot:
                mm.epilogue(batch, i0, size, j0, count)

        def whole(i0: ir.Value, size: int) -> None:
            xs = [self.x_row(batch, b.add(i0, _c(r))) for r in range(size)]
            acc = self.accumulators(size, count)
            self.sweep(xs, w_rows, acc, _c(0), mm.k)
            finish(i0, size, acc)

        if self.chunk is None or mm.k <= self.chunk:
            self.tiles(begin, end, whole)
            return
        chunk = self.chunk
        chunks = -(-mm.k // chunk)
        last = mm.k - (chunks - 1) * chunk

        def part(p0: ir.Value, length: int, final: bool) -> None:
            def tile(i0: ir.Value, size: int) -> None:
                xs = [self.x_row(batch, b.add(i0, _c(r))) for r in range(size)]
                acc = self.accumulators(size, count)
                kept = self.kept(b.sub(i0, begin), size, count)
                with b.if_then(b.icmp_unsigned("!=", p0, _c(0))):
                    self.move(kept, acc, load=True)
                self.sweep(xs, w_rows, acc, p0, length)
                if final:
                    finish(i0, size, acc)
                else:
                    self.move(kept, acc, load=False)

            self.tiles(begin, end, tile)

        counted_loop(b, 0, chunks - 1, lambda c: part(b.mul(c, _c(chunk)), chunk, False),
                     name="kc")  # fmt: skip
        part(_c(mm.k - last), last, True)

    def tiles(self, begin: ir.Value, end: ir.Value, tile: Callable[[ir.Value, int], None]) -> None:
        """tile(i0, size) over rows [begin, end): tiles of `rows` rows, then one shorter."""
        b, rows = self.b, self.rows
        full = b.udiv(b.sub(end, begin), _c(rows))
        counted_loop(b, 0, full, lambda t: tile(b.add(begin, b.mul(t, _c(rows))), rows),
                     name="xt")  # fmt: skip
        i0 = b.add(begin, b.mul(full, _c(rows)))
        rest = b.sub(end, i0)
        for size in range(1, rows):
            with b.if_then(b.icmp_unsigned("==", rest, _c(size))):
                tile(i0, size)

    def accumulators(self, size: int, count: int) -> list[list[list[ir.Value]]]:
        """acc[r][j][u]: zeroed vector slots for `size` rows of x and `count` rows of W."""
        b, vt = self.b, self.vt
        acc = [[[self.mm.kg.alloca(vt) for _ in range(self.unroll)] for _ in range(count)]
               for _ in range(size)]  # fmt: skip
        for row in acc:
            for slots in row:
                for slot in slots:
                    b.store(ir.Constant(vt, None), slot)
        return acc

    def kept(self, i: ir.Value, size: int, count: int) -> list[list[list[ir.Value]]]:
        """The addresses in `partial` of the accumulators of the tile at row i (from begin)."""
        b = self.b
        assert self.partial is not None
        per_row = self.width * self.unroll
        first = b.mul(i, _c(per_row))
        return [[[b.gep(self.partial, [_c(0), b.add(first, _c(r * per_row + j * self.unroll + u))])
                  for u in range(self.unroll)] for j in range(count)]
                for r in range(size)]  # fmt: skip

    def move(self, kept: list[list[list[ir.Value]]], acc: list[list[list[ir.Value]]],
             load: bool) -> None:  # fmt: skip
        """acc = kept (load) or kept = acc."""
        b = self.b
        for kr, ar in zip(kept, acc):
            for ks, as_ in zip(kr, ar):
                for k_slot, a_slot in zip(ks, as_):
                    src, dst = (k_slot, a_slot) if load else (a_slot, k_slot)
                    b.store(b.load(src), dst)

    def sweep(
        self, xs: list[ir.Value], w_rows: list[ir.Value], acc: list[list[list[ir.Value]]],
        p0: ir.Value, length: int,
    ) -> None:  # fmt: skip
        """acc[r][j][u] += x_r · w_j over p in [p0, p0 + length), in vectors of `lanes`, the
        last elements padded with zeros (0 · 0: no NaN from what lies beyond)."""
        b, mm, lanes, unroll = self.b, self.mm, self.lanes, self.unroll
        block = lanes * unroll

        def step(p: ir.Value, u: int, count: int = lanes) -> None:
            xv = [self.load(x, p, count) for x in xs]
            for j, w in enumerate(w_rows):
                wv = self.load(w, p, count)
                for x, row in zip(xv, acc):
                    slot = row[j][u]
                    b.store(mm.multiply_add(x, wv, b.load(slot)), slot)

        blocks = length // block

        def one_block(q: ir.Value) -> None:
            for u in range(unroll):
                step(b.add(p0, b.add(b.mul(q, _c(block)), _c(u * lanes))), u)

        counted_loop(b, 0, blocks, one_block, name="wp")
        for u in range(length % block // lanes):  # whole vectors left after the blocks
            step(b.add(p0, _c(blocks * block + u * lanes)), u)
        rest = length % lanes
        if rest:
            step(b.add(p0, _c(length - rest)), 0, rest)

    def folded(self, acc: list[list[list[ir.Value]]]) -> list[ir.Value]:
        """Each row's sums: its accumulators added, folded into one vector."""
        b, lanes = self.b, self.lanes
        zero = ir.Constant(self.vt, None)
        out = []
        for row in acc:
            totals = []
            for slots in row:
                total = b.load(slots[0])
                for slot in slots[1:]:
                    total = b.fadd(total, b.load(slot))
                totals.append(total)
            out.append(self.fold(totals + [zero] * (lanes - len(totals))))
        return out

    def fold(self, vectors: list[ir.Value]) -> ir.Value:
        """The vector whose element j is the sum of the elements of vectors[j]: pairs of
        vectors halve the groups of lanes they hold, low halves plus high halves, until each
        lane holds one vector's total (lanes - 1 pairs in all)."""
        b, lanes = self.b, self.lanes
        group = lanes
        while group > 1:
            half = group // 2
            groups = lanes // group
            low = [g * group + e for g in range(groups) for e in range(half)]
            low = low + [lanes + i for i in low]
            high = [i + half for i in low]
            mask_lo = ir.Constant(ir.VectorType(I32, lanes), low)
            mask_hi = ir.Constant(ir.VectorType(I32, lanes), high)
            vectors = [
                b.fadd(b.shuffle_vector(x, y, mask_lo), b.shuffle_vector(x, y, mask_hi))
                for x, y in zip(vectors[::2], vectors[1::2])
            ]
            group = half
        (total,) = vectors
        return total

    def load(self, row: ir.Value, p: ir.Value, count: int) -> ir.Value:
        """row[p : p + count] as a vector of `lanes`, zeros past count."""
        b, mm = self.b, self.mm
        vt = ir.VectorType(mm.elem_ty, count)
        v = b.load(self.at(row, p), typ=vt, align=mm.dt.size)
        if count == self.lanes:
            return v
        widen = list(range(count)) + [count] * (self.lanes - count)
        return b.shuffle_vector(v, ir.Constant(vt, None), ir.Constant(
            ir.VectorType(I32, self.lanes), widen))  # fmt: skip

    def w_row(self, batch: list[ir.Value], j: ir.Value) -> ir.Value:
        """The address of W's row j (b's column j): b[…, 0, j]."""
        return self.at(self.w_ptr, self.offset(self.w_strides, [*batch, _c(0), j]))

    def x_row(self, batch: list[ir.Value], i: ir.Value) -> ir.Value:
        """The address of x's row i: in place, or in the copy."""
        if self.x is None:
            return self.copied(self.b.mul(i, _c(self.mm.k)))
        ptr, strides = self.x
        return self.at(ptr, self.offset(strides, [*batch, i, _c(0)]))

    def offset(self, strides: tuple[int, ...], idx: list[ir.Value]) -> ir.Value:
        b = self.b
        total: ir.Value = _c(0)
        for i, s in zip(idx, strides):
            if s:
                total = b.add(total, b.mul(i, _c(s)))
        return total

    def copied(self, off: ir.Value) -> ir.Value:
        """The address of copy[off]."""
        assert self.copy is not None
        return self.b.gep(self.copy, [_c(0), off])

    def at(self, ptr: ir.Value, off: ir.Value) -> ir.Value:
        return self.b.gep(ptr, [off], source_etype=self.mm.elem_ty)
