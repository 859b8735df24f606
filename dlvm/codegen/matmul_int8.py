"""The int8 product of `--quantize int8` on AVX-512 VNNI (a kernel scheduled `vnni 1`,
docs/quantization.md): out[m, n] = Σ_p x[m, p] · W[n, p], exact in i32, for x of at most a few
rows holding int8 values (as i32) and W_int8 an output channel per row (N x P, i8).

`vpdpbusd` multiplies unsigned bytes by signed bytes, four to a 32-bit lane, and adds the sums
to the lane. So the kernel first writes x's rows, shifted by +128 into [1, 255], as bytes in a
stack buffer, each row padded with zeros to a multiple of 64 bytes. Then, for each of its
output channels n, it sums W's row n (64 bytes a step, the last step a masked load, so nothing
past the row is read) against each row of x into 16 lanes, and against ones, which gives Σ_p
W[n, p]; out[m, n] is the lanes' total minus 128 · Σ_p W[n, p]. Padding adds nothing: its
bytes of x are 0 and of W masked to 0.

Threads share the channels in groups of compute-scheduling's `columns` (or, without it, the
rows of x); a CPU without VNNI computes the same product with the generic kernel
(dlvm.codegen.matmul), in i32 multiply-adds."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from dlvm.codegen.llvm_types import I1, I8, I32, I64, PTR
from dlvm.codegen.loops import counted_loop
from dlvm.ir.types import TensorType
from dlvm.transforms.int8_products import int8_rows_product

if TYPE_CHECKING:
    from dlvm.codegen.kernel import KernelGen

STEP = 64  # bytes of a row per vpdpbusd
LANES = 16  # i32 lanes of a 512-bit vector
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
    Int8Product(kg, kg.ptrs[x], kg.ptrs[w], out, rows, depth, channels).emit(
        (row_lo, row_hi), (first, last)
    )


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
        buffer = self.pack(rows)
        b = self.b
        ones = ir.Constant(BYTES, [1] * STEP)

        def channel(n: ir.Value) -> None:
            row = b.gep(self.w, [b.mul(n, _c(self.depth))], source_etype=I8)
            shift = b.mul(self.row_sum(row, ones), ir.Constant(I32, 128))

            def each_row(m: ir.Value) -> None:
                xs = b.gep(buffer, [_c(0), b.mul(m, _c(self.padded))])
                at = b.add(b.mul(m, _c(self.channels)), n)
                b.store(b.sub(self.row_sum(row, xs), shift),
                        b.gep(self.out, [at], source_etype=I32))  # fmt: skip

            counted_loop(b, rows[0], rows[1], each_row, "m")

        counted_loop(b, channels[0], channels[1], channel, "n")

    def pack(self, rows: tuple[ir.Value, ir.Value]) -> ir.Value:
        """x's rows as bytes + 128, each padded with zeros to `padded` bytes, on the stack."""
        b = self.b
        buffer = self.kg.alloca(ir.ArrayType(I8, self.rows * self.padded))

        def row(m: ir.Value) -> None:
            src = b.gep(self.x, [b.mul(m, _c(self.depth))], source_etype=I32)
            dst = b.gep(buffer, [_c(0), b.mul(m, _c(self.padded))])

            def element(p: ir.Value) -> None:
                v = b.load(b.gep(src, [p], source_etype=I32), typ=I32)
                byte = b.trunc(b.add(v, ir.Constant(I32, 128)), I8)
                b.store(byte, b.gep(dst, [p], source_etype=I8))

            def zero(p: ir.Value) -> None:
                b.store(ir.Constant(I8, 0), b.gep(dst, [p], source_etype=I8))

            counted_loop(b, 0, self.depth, element, "p")
            counted_loop(b, self.depth, self.padded, zero, "p")

        counted_loop(b, rows[0], rows[1], row, "m")
        return buffer

    def row_sum(self, weights: ir.Value, a: ir.Value) -> ir.Value:
        """Σ_p a[p] · W[p] (i32) over a row of W at `weights`: `a` a pointer to `padded` bytes,
        or a constant vector of bytes for every step."""
        b = self.b
        slot = self.kg.alloca(SUMS)
        b.store(ir.Constant(SUMS, None), slot)

        def step(k: ir.Value, last: bool = False) -> None:
            at = b.gep(weights, [b.mul(k, _c(STEP))], source_etype=I8)
            if last:
                no_bytes = ir.Constant(BYTES, None)
                w = b.call(self.masked_load, [at, ir.Constant(I32, 1), self.mask, no_bytes])
            else:
                w = b.load(at, typ=BYTES)
                w.align = 1
            if isinstance(a, ir.Constant):
                av = a
            else:
                av = b.load(b.gep(a, [b.mul(k, _c(STEP))], source_etype=I8), typ=BYTES)
                av.align = 1
            acc = b.load(slot, typ=SUMS)
            b.store(b.call(self.vpdpbusd, [acc, av, w]), slot)

        counted_loop(b, 0, self.steps - 1, step, "k")
        step(_c(self.steps - 1), last=True)
        return b.call(self.total, [b.load(slot, typ=SUMS)])


def _declare(module: ir.Module, name: str, result: ir.Type, args: list[ir.Type]) -> ir.Function:
    existing = module.globals.get(name)
    if isinstance(existing, ir.Function):
        return existing
    return ir.Function(module, ir.FunctionType(result, args), name)
