"""Packed matrix products (the BLIS approach) for `dot`s large enough to reuse a copy many times.

For each slice of p (`depth` steps), b is copied panel by panel (up to PANEL_COLUMNS columns)
into strips of `width` columns laid out step after step, and for each block of the thread's
rows (BLOCK_TILES tiles) a is copied into tiles of `rows` rows laid out step after step. The
micro-kernel (MatMul.micro) then reads both contiguously (a block of a and a strip of b stay
in L2 while they are reused), with no cache-set conflicts, however far apart the rows of a and
b lie in memory, and whatever prologue (a transpose, a scaling) computes them, since the copies
go through `KernelGen.elem`.

A copy walks its operand in the operand's memory order: along rows, or down columns when the
operand is a transposed matrix (each element then lies next to the one read before); b = Wᵀ
read in place goes by square blocks, rows of W loaded as vectors and transposed in registers
(dlvm.codegen.transposing).

A bf16 product is packed in f32 (its elements widened as they are copied, for the f32
micro-kernel), or in pairs of steps of p for `vdpbf16ps` with `pairs 1` (dlvm.codegen.bf16_pairs);
its one slice covers the whole sum, so its blocks of a have as many tiles as fit A_BLOCK_BYTES
and its panels of b as many columns as fit PANEL_BYTES.

The copies live in the thread's scratch buffer (dlrt_scratch, kept between calls, so a warm
entry point allocates nothing). When it cannot be had, the same loops run with one tile of a and
one strip of b in stack buffers: slower, never wrong."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from llvmlite import ir

from dlvm.codegen import bf16_pairs
from dlvm.codegen.llvm_types import I32, I64, PTR
from dlvm.codegen.loops import counted_loop
from dlvm.ir.types import TensorType
from dlvm.ir.values import Instruction, Value

if TYPE_CHECKING:
    from dlvm.codegen.matmul import MatMul

BLOCK_TILES = 8  # row tiles per block of a: 8 × 14 rows × 384 steps × 4 bytes = 168 KiB (L2)
PANEL_COLUMNS = 4096  # columns of b per panel: 384 × 4096 × 4 bytes = 6 MiB at most
PANEL_BYTES = 6 << 20  # and a bf16 product's panels, whose slice is the whole sum
A_BLOCK_BYTES = 512 << 10  # a bf16 product's block of a (in L2 with a strip of b)


class _Block(NamedTuple):
    """A block of rows [ic, ic_end) of a panel starting at column jc, over steps [p0, p1)."""

    batch: list[ir.Value]
    ic: ir.Value
    ic_end: ir.Value
    jc: ir.Value
    p0: ir.Value
    p1: ir.Value
    first: ir.Value  # the first slice of p
    last: ir.Value  # the last slice of p
    a_pack: ir.Value
    b_pack: ir.Value


def _const(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def scratch_function(module: ir.Module) -> ir.Function:
    """The runtime's dlrt_scratch(bytes): the calling thread's buffer, or null."""
    fn = module.globals.get("dlrt_scratch")
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(PTR, [I64]), "dlrt_scratch")
    assert isinstance(fn, ir.Function)
    return fn


def transposed(v: Value) -> bool:
    """Whether consecutive elements of a row of matrix v lie a row apart in memory: v is a
    `transpose` (an odd number of them), perhaps under pointwise instructions of one matrix."""
    flips = False
    while isinstance(v, Instruction):
        if v.opcode == "transpose":
            flips = not flips
            v = v.operands[0]
            continue
        same = [o for o in v.operands if o.type == v.type]
        others = [o for o in v.operands if o.type != v.type]
        scalar = all(isinstance(o.type, TensorType) and not o.type.shape for o in others)
        if v.op.family not in ("unary", "binary") or len(same) != 1 or not scalar:
            break
        v = same[0]
    return flips


class Panels:
    """The packed loops of one MatMul."""

    def __init__(self, mm: MatMul) -> None:
        self.mm = mm
        self.b = mm.b
        tile = mm.tile
        self.rows, self.width, self.depth = tile.rows, tile.width, tile.depth
        # What a pack holds, and its elements per row of a (column of b) in a slice.
        self.pack_ty = mm.elem_ty if mm.pairs else mm.acc_ty
        size = 2 if mm.pairs else (4 if mm.wide else mm.dt.size)
        steps = 2 * bf16_pairs.half(self.depth) if mm.pairs else self.depth
        strips = -(-mm.n // self.width)
        block_tiles, panel_columns = BLOCK_TILES, PANEL_COLUMNS
        if mm.wide:
            block_tiles = max(1, min(BLOCK_TILES, A_BLOCK_BYTES // (self.rows * steps * size)))
            panel_columns = max(1, PANEL_BYTES // (steps * size) // self.width) * self.width
        self.block_rows = self.rows * block_tiles
        self.panel_columns = min(strips * self.width, panel_columns)
        self.a_elems = self.block_rows * steps
        self.scratch_bytes = (self.a_elems + steps * self.panel_columns) * size
        kg = mm.kg
        self.small_a = kg.alloca(ir.ArrayType(self.pack_ty, self.rows * steps))
        self.small_b = kg.alloca(ir.ArrayType(self.pack_ty, steps * self.width))

    def emit(self, batch: list[ir.Value], begin: ir.Value, end: ir.Value) -> None:
        b, mm = self.b, self.mm
        scratch = b.call(scratch_function(mm.kg.module), [_const(self.scratch_bytes)])
        big = b.icmp_unsigned("!=", scratch, ir.Constant(PTR, None))
        a_pack = b.select(big, scratch, b.bitcast(self.small_a, PTR))
        b_pack = b.select(
            big, b.gep(scratch, [_const(self.a_elems)], source_etype=self.pack_ty),
            b.bitcast(self.small_b, PTR),
        )  # fmt: skip
        block_rows = b.select(big, _const(self.block_rows), _const(self.rows))
        panel_columns = b.select(big, _const(self.panel_columns), _const(self.width))
        n = _const(mm.n)

        def one_slice(s: ir.Value) -> None:
            p0, p1, first, last = mm.slice_bounds(s)
            panels = b.udiv(b.add(n, b.sub(panel_columns, _const(1))), panel_columns)

            def panel(jp: ir.Value) -> None:
                jc = b.mul(jp, panel_columns)
                jc_end = self.minimum(b.add(jc, panel_columns), n)
                self.pack_b(batch, jc, jc_end, p0, p1, b_pack)
                blocks = b.udiv(b.add(b.sub(end, begin), b.sub(block_rows, _const(1))),
                                block_rows)  # fmt: skip

                def block(ib: ir.Value) -> None:
                    ic = b.add(begin, b.mul(ib, block_rows))
                    ic_end = self.minimum(b.add(ic, block_rows), end)
                    self.pack_a(batch, ic, ic_end, p0, p1, a_pack)
                    ctx = _Block(batch, ic, ic_end, jc, p0, p1, first, last, a_pack, b_pack)
                    full = b.udiv(b.sub(jc_end, jc), _const(self.width))
                    counted_loop(b, 0, full, lambda q: self.strip(ctx, q, self.width),
                                 name="strip")  # fmt: skip
                    if mm.n % self.width:  # the matrix's last, narrower strip ends this panel
                        with b.if_then(b.icmp_signed("==", jc_end, n)):
                            self.strip(ctx, full, mm.n % self.width)

                counted_loop(b, 0, blocks, block, name="block")

            counted_loop(b, 0, panels, panel, name="panel")

        counted_loop(b, 0, _const(mm.tile.slices), one_slice, name="slice")

    def minimum(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.b.select(self.b.icmp_signed("<", x, y), x, y)

    def strip(self, ctx: _Block, q: ir.Value, width: int) -> None:
        """Strip q of the panel (columns jc + q · width …) over the block's rows."""
        batch, ic, ic_end, jc, p0, p1, first, last, a_pack, b_pack = ctx
        b, mm, rows, depth = self.b, self.mm, self.rows, self.depth
        j0 = b.add(jc, b.mul(q, _const(self.width)))
        if mm.pairs:
            self.strip_pairs(ctx, j0, q, width)
            return
        b_base = b.mul(q, _const(depth * self.width))

        def b_at(p: ir.Value, c: int) -> ir.Value:
            off = b.add(b_base, b.add(b.mul(b.sub(p, p0), _const(self.width)), _const(c)))
            return b.gep(b_pack, [off], source_etype=self.pack_ty)

        def tile(i0: ir.Value, count: int) -> None:
            # A shorter tile may start part-way into a packed tile of `rows` rows.
            rel = b.sub(i0, ic)
            a_base = b.add(b.mul(b.udiv(rel, _const(rows)), _const(depth * rows)),
                           b.urem(rel, _const(rows)))  # fmt: skip

            def a_at(r: int, p: ir.Value) -> ir.Value:
                off = b.add(a_base, b.add(b.mul(b.sub(p, p0), _const(rows)), _const(r)))
                return b.load(b.gep(a_pack, [off], source_etype=mm.acc_ty), typ=mm.acc_ty)

            mm.micro(batch, i0, count, j0, width, p0, p1, first, last, a_at, b_at)

        mm.tiles(ic, ic_end, tile)

    def strip_pairs(self, ctx: _Block, j0: ir.Value, q: ir.Value, width: int) -> None:
        """strip, packed in pairs (dlvm.codegen.bf16_pairs)."""
        batch, ic, ic_end, a_pack, b_pack = ctx.batch, ctx.ic, ctx.ic_end, ctx.a_pack, ctx.b_pack
        b, rows, full = self.b, self.rows, self.width
        h = bf16_pairs.half(self.depth)
        b_base = b.mul(q, _const(h * full))

        def b_pair(pp: ir.Value, v: int) -> ir.Value:
            unit = b.add(b_base, b.add(b.mul(pp, _const(full)), _const(v * bf16_pairs.LANES)))
            return b.gep(b_pack, [b.mul(unit, _const(2))], source_etype=self.pack_ty)

        def tile(i0: ir.Value, count: int) -> None:
            rel = b.sub(i0, ic)  # a shorter tile may start part-way into a packed tile
            a_base = b.add(b.mul(b.udiv(rel, _const(rows)), _const(h * rows)),
                           b.urem(rel, _const(rows)))  # fmt: skip

            def a_pair(r: int, pp: ir.Value) -> ir.Value:
                unit = b.add(a_base, b.add(b.mul(pp, _const(rows)), _const(r)))
                return b.load(b.gep(a_pack, [unit], source_etype=I32), typ=I32)

            bf16_pairs.micro(self.mm, batch, i0, count, j0, width, a_pair, b_pair)

        self.mm.tiles(ic, ic_end, tile)

    def pack_a(
        self, batch: list[ir.Value], ic: ir.Value, ic_end: ir.Value, p0: ir.Value, p1: ir.Value,
        a_pack: ir.Value,
    ) -> None:  # fmt: skip
        """a_pack[(t · depth + p - p0) · rows + r] = a[…, ic + t · rows + r, p] (in pairs:
        dlvm.codegen.bf16_pairs)."""
        b, mm, rows = self.b, self.mm, self.rows
        if mm.pairs:
            bf16_pairs.pack_a(mm, rows, batch, ic, ic_end, a_pack, transposed(mm.a))
            return

        def element(i: ir.Value, p: ir.Value) -> None:
            mm.kg.memo.clear()
            v = mm.widened(mm.kg.elem(mm.a, [*batch, i, p]))
            rel = b.sub(i, ic)
            t, r = b.udiv(rel, _const(rows)), b.urem(rel, _const(rows))
            off = b.add(b.mul(b.add(b.mul(t, _const(self.depth)), b.sub(p, p0)), _const(rows)), r)
            b.store(v, b.gep(a_pack, [off], source_etype=self.pack_ty))

        if transposed(mm.a):  # down a's columns: along rows of the matrix in memory
            counted_loop(b, p0, p1, lambda p: counted_loop(
                b, ic, ic_end, lambda i: element(i, p), name="ra"), name="pa")  # fmt: skip
        else:
            counted_loop(b, ic, ic_end, lambda i: counted_loop(
                b, p0, p1, lambda p: element(i, p), name="pa"), name="ra")  # fmt: skip

    def pack_b(
        self, batch: list[ir.Value], jc: ir.Value, jc_end: ir.Value, p0: ir.Value, p1: ir.Value,
        b_pack: ir.Value,
    ) -> None:  # fmt: skip
        """b_pack[(q · depth + p - p0) · width + c] = b[…, p, jc + q · width + c] (in pairs:
        dlvm.codegen.bf16_pairs)."""
        b, mm, width = self.b, self.mm, self.width
        if mm.pairs:
            bf16_pairs.pack_b(mm, width, batch, jc, jc_end, b_pack, transposed(mm.bm))
            return
        strips = b.udiv(b.add(b.sub(jc_end, jc), _const(width - 1)), _const(width))

        def strip(q: ir.Value, p: ir.Value | None) -> None:
            """Strip q's columns: at step p, or at every step (p None)."""
            j0 = b.add(jc, b.mul(q, _const(width)))
            count = self.minimum(_const(width), b.sub(jc_end, j0))

            def element(c: ir.Value, p: ir.Value) -> None:
                mm.kg.memo.clear()
                v = mm.widened(mm.kg.elem(mm.bm, [*batch, p, b.add(j0, c)]))
                off = b.add(b.mul(q, _const(self.depth * width)),
                            b.add(b.mul(b.sub(p, p0), _const(width)), c))  # fmt: skip
                b.store(v, b.gep(b_pack, [off], source_etype=self.pack_ty))

            if p is not None:
                counted_loop(b, 0, count, lambda c: element(c, p), name="cb")
            else:
                counted_loop(b, 0, count, lambda c: counted_loop(
                    b, p0, p1, lambda p: element(c, p), name="pb"), name="cb")  # fmt: skip

        if mm.b_columns is not None:  # Wᵀ in place: square blocks along W's rows

            def columns(q: ir.Value) -> None:
                j0 = b.add(jc, b.mul(q, _const(width)))
                base = b.mul(q, _const(self.depth * width))
                mm.copy_columns(j0, self.minimum(_const(width), b.sub(jc_end, j0)), p0, p1,
                                lambda p, c: b.gep(b_pack, [b.add(base, b.add(b.mul(
                                    b.sub(p, p0), _const(width)), c))],
                                    source_etype=self.pack_ty))  # fmt: skip

            counted_loop(b, 0, strips, columns, name="qb")
        elif transposed(mm.bm):  # down b's columns: along rows of the matrix in memory
            counted_loop(b, 0, strips, lambda q: strip(q, None), name="qb")
        else:
            counted_loop(b, p0, p1, lambda p: counted_loop(
                b, 0, strips, lambda q: strip(q, p), name="qb"), name="pb")  # fmt: skip
