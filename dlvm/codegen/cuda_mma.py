"""The `dot` of f16 or bf16 matrices, or of f32 matrices in TF32 when asked for (`telc build
--tf32`), on tensor cores: a CUDA kernel scheduled `block 128 tile 64 x 64 x 16 mma 1 grid …`
(`… mma 1 tf32 1 …` for TF32; dlvm.transforms.compute_scheduling).

As in the SIMT product (dlvm.codegen.cuda_matmul), block (x, y, z) computes the 64 × 64 tile of
out at rows y·64…, columns x·64… of batch element z, staging 16-deep slices of the operands in
shared memory (in the operands' type, f16 or bf16; zeros beyond the edges). Its four warps each
own a 32 × 32 quarter of the tile, as 2 × 4 tensor-core products of shape m16n8k16
(`mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32`, or `….f32.bf16.bf16.f32`: f16 or bf16
operands, f32 accumulators), fed from shared memory in the fragment layout the PTX ISA defines
for that shape, the same for f16 and bf16:

- A (16 × 16, row-major), element i of lane l (g = l / 4, t = l % 4): row g, plus 8 for
  i in {2, 3, 6, 7}; column 2t + (i mod 2), plus 8 for i ≥ 4;
- B (16 × 8, column-major): row 2t + (i mod 2), plus 8 for i ≥ 2; column g;
- C and D (16 × 8, f32): row g, plus 8 for i ≥ 2; column 2t + (i mod 2).

TF32 products are m16n8k8, two per 16-deep slice, their operands rounded to TF32 (10 bits of
mantissa, `cvt.rna.tf32.f32`) as they are read from shared memory:

- A (16 × 8): row g, plus 8 for i odd; column t, plus 4 for i ≥ 2;
- B (8 × 8): row t, plus 4 for i = 1; column g.

Each product is one call of `dl.mma.m16n8k16`, `dl.mma.m16n8k16.bf16` or `dl.mma.m16n8k8.tf32`
(internal functions around the intrinsics, so that the CPU emulator of tests/unit can stand in
for them). The accumulated tile is rounded to the output's type once, as it is stored (an f32 sum
of exact products, as the interpreter's bf16 and f16 products are), and the epilogue is applied
there to the rounded product, as the IR says: computed in f32 and rounded once again for bf16
(dlvm.codegen.elementwise)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llvmlite import ir

from dlvm.codegen.errors import CodegenError
from dlvm.codegen.llvm_types import BFLOAT, I32, I64, PTR, constant
from dlvm.codegen.loops import counted_loop, unravel
from dlvm.codegen.nvptx import barrier, shared_array, special_register
from dlvm.ir.types import DataType, TensorType
from dlvm.ir.values import Function
from dlvm.transforms.compute_generation import kernel_core

if TYPE_CHECKING:
    from dlvm.codegen.kernel import KernelGen

HALF = ir.HalfType()
F32 = ir.FloatType()
HALF2 = ir.VectorType(HALF, 2)


@dataclass(frozen=True)
class Operands:
    """One kind of tensor-core product: the internal function each product calls, (ptr acc[4],
    i32 a0..a3, i32 b0, b1): acc += A·B for the warp; the NVVM intrinsic it wraps; the element
    staged in shared memory; and whether the intrinsic takes the i32 fragments as two f16."""

    function: str
    intrinsic: str
    element: ir.Type
    as_half2: bool = False


# m16n8k16 with f16 or bf16 in each half of an i32 fragment; TF32's m16n8k8 (A 16 × 8, B 8 × 8)
# with one TF32 in each i32, rounded from the f32 staged.
F16_PRODUCT = Operands("dl.mma.m16n8k16", "llvm.nvvm.mma.m16n8k16.row.col.f32.f32", HALF, True)
BF16_PRODUCT = Operands("dl.mma.m16n8k16.bf16", "llvm.nvvm.mma.m16n8k16.row.col.bf16", BFLOAT)
TF32_PRODUCT = Operands("dl.mma.m16n8k8.tf32", "llvm.nvvm.mma.m16n8k8.row.col.tf32", F32)
PRODUCTS = {DataType.F16: F16_PRODUCT, DataType.BF16: BF16_PRODUCT}
WARPS_M, WARPS_N = 2, 2  # the block's 4 warps, over the tile's rows and columns
TILES_M, TILES_N = 2, 4  # each warp's m16n8 products: 32 rows × 32 columns


def to_tf32(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """x rounded to TF32 (cvt.rna.tf32.f32), as the i32 an mma.tf32 fragment holds."""
    name = "llvm.nvvm.f2tf32.rna"
    fn = b.module.globals.get(name) or ir.Function(b.module, ir.FunctionType(I32, [F32]), name)
    return b.call(fn, [x])


def tensor_cores(fn: Function) -> bool:
    """Whether fn's cuda schedule asks for a tensor-core product."""
    sched = fn.cuda_schedule
    return sched is not None and sched.get("mma") == 1 and kernel_core(fn).opcode == "dot"


def mma_function(module: ir.Module, kind: Operands) -> ir.Function:
    """kind's internal function: the accumulators at acc[0..3] += this warp's product of the A
    fragments a0..a3 and B fragments b0, b1 (each two f16 or bf16 in an i32, or one TF32)."""
    fn = module.globals.get(kind.function)
    if fn is not None:
        return fn
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR] + [I32] * 6), kind.function)
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    acc, *frags = fn.args
    operands = [b.bitcast(f, HALF2) for f in frags] if kind.as_half2 else frags
    slots = [b.gep(acc, [ir.Constant(I64, i)], source_etype=F32) for i in range(4)]
    c = [b.load(s, typ=F32) for s in slots]
    ret = ir.LiteralStructType([F32] * 4)
    intrinsic = module.globals.get(kind.intrinsic) or ir.Function(
        module, ir.FunctionType(ret, [o.type for o in operands] + [F32] * 4), kind.intrinsic
    )
    d = b.call(intrinsic, [*operands, *c])
    for i, s in enumerate(slots):
        b.store(b.extract_value(d, i), s)
    b.ret_void()
    return fn


class MmaProduct:
    """Emits the tensor-core product into kg's body."""

    def __init__(self, kg: KernelGen) -> None:
        self.kg = kg
        core = kg.core
        t = core.type
        sched = kg.fn.cuda_schedule
        assert isinstance(t, TensorType) and sched is not None
        self.tf32 = sched.get("tf32") == 1
        kind = TF32_PRODUCT if self.tf32 and t.dtype is DataType.F32 else PRODUCTS.get(t.dtype)
        if kind is None or (self.tf32 and kind is not TF32_PRODUCT):
            raise CodegenError(f"@{kg.fn.name}: {sched}: not for a product of {t.dtype}")
        self.t = t
        self.kind = kind
        self.element = kind.element
        self.a, self.b = core.operands
        a_t = self.a.type
        assert isinstance(a_t, TensorType)
        self.m, self.n, self.k = t.shape[-2], t.shape[-1], a_t.shape[-1]
        self.batch_shape = t.shape[:-2]
        if sched.get_all("tile") != (64, 64, 16) or sched.get("block") != 128:
            raise CodegenError(f"@{kg.fn.name}: {sched}: mma needs block 128 tile 64 x 64 x 16")

    def shared(self, name: str, count: int) -> ir.Value:
        kg = self.kg
        return shared_array(kg.b, f"{kg.body.name}.{name}", self.element, count)

    def emit(self) -> None:
        kg = self.kg
        out = kg.bind_arguments()
        b = kg.b
        mma = mma_function(kg.module, self.kind)
        element = self.element
        a_tile, b_tile = self.shared("a", 64 * 16), self.shared("b", 16 * 64)

        def c(v: int) -> ir.Constant:
            return ir.Constant(I64, v)

        def reg(name: str) -> ir.Value:
            return b.zext(special_register(b, name), I64)

        thread = reg("tid.x")
        warp, lane = b.udiv(thread, c(32)), b.urem(thread, c(32))
        group, tig = b.udiv(lane, c(4)), b.urem(lane, c(4))
        warp_row = b.mul(b.udiv(warp, c(WARPS_N)), c(32))
        warp_col = b.mul(b.urem(warp, c(WARPS_N)), c(32))
        row0, col0 = b.mul(reg("ctaid.y"), c(64)), b.mul(reg("ctaid.x"), c(64))
        batch = unravel(b, reg("ctaid.z"), self.batch_shape) if self.batch_shape else []
        acc = {(i, j): self.accumulators() for i in range(TILES_M) for j in range(TILES_N)}
        for slot in acc.values():
            for e in range(4):
                b.store(ir.Constant(F32, 0.0), self.at(slot, e))
        zero = constant(self.t.dtype, 0)

        def operand(v, i: ir.Value, j: ir.Value, shape: tuple[int, int]) -> ir.Value:
            kg.memo.clear()
            inside, (ci, cj) = kg.clamp([i, j], shape)
            return b.select(inside, kg.elem(v, [*batch, ci, cj]), zero)

        def element_at(tile: ir.Value, offset: ir.Value) -> ir.Value:  # an element of a tile
            return b.gep(tile, [offset], source_etype=element)

        def tf32_at(tile: ir.Value, offset: ir.Value) -> ir.Value:
            return to_tf32(b, b.load(element_at(tile, offset), typ=F32))

        two = ir.VectorType(element, 2)

        def pair(tile: ir.Value, first: ir.Value, second: ir.Value) -> ir.Value:
            """Two f16 or bf16 of shared memory as one i32 fragment register (first in the low
            half)."""
            v = ir.Constant(two, ir.Undefined)
            for lane, at in enumerate((first, second)):
                x = b.load(element_at(tile, at), typ=element)
                v = b.insert_element(v, x, ir.Constant(I32, lane))
            return b.bitcast(v, I32)

        def slice_(index: ir.Value) -> None:
            p0 = b.mul(index, c(16))
            for e in range(8):  # a: 64 × 16, consecutive threads along p
                flat = b.add(thread, c(e * 128))
                r, q = b.udiv(flat, c(16)), b.urem(flat, c(16))
                v = operand(self.a, b.add(row0, r), b.add(p0, q), (self.m, self.k))
                b.store(v, element_at(a_tile, b.add(b.mul(r, c(16)), q)))
            for e in range(8):  # b: 16 × 64, consecutive threads along columns
                flat = b.add(thread, c(e * 128))
                q, j = b.udiv(flat, c(64)), b.urem(flat, c(64))
                v = operand(self.b, b.add(p0, q), b.add(col0, j), (self.k, self.n))
                b.store(v, element_at(b_tile, b.add(b.mul(q, c(64)), j)))
            barrier(b)
            if self.tf32:
                self.tf32_products(mma, acc, a_tile, b_tile, warp_row, warp_col, group, tig,
                                   tf32_at)  # fmt: skip
                barrier(b)
                return
            k_lo = b.mul(tig, c(2))  # this lane's first column of A, row of B
            a_frags = []
            for i in range(TILES_M):
                top = b.add(b.add(warp_row, c(16 * i)), group)
                regs = []
                for rows, cols in ((0, 0), (8, 0), (0, 8), (8, 8)):  # a0a1, a2a3, a4a5, a6a7
                    at = b.add(b.mul(b.add(top, c(rows)), c(16)), b.add(k_lo, c(cols)))
                    regs.append(pair(a_tile, at, b.add(at, c(1))))
                a_frags.append(regs)
            for j in range(TILES_N):
                col = b.add(b.add(warp_col, c(8 * j)), group)
                regs = []
                for rows in (0, 8):  # b0b1, b2b3: rows k, k + 1 of column col
                    at = b.add(b.mul(b.add(k_lo, c(rows)), c(64)), col)
                    regs.append(pair(b_tile, at, b.add(at, c(64))))
                for i in range(TILES_M):
                    b.call(mma, [self.at(acc[(i, j)], 0), *a_frags[i], *regs])
            barrier(b)

        counted_loop(b, 0, math.ceil(self.k / 16), slice_, name="slice")
        for (i, j), slot in acc.items():
            for e in range(4):
                r = b.add(row0, b.add(warp_row, b.add(group, c(16 * i + 8 * (e // 2)))))
                col = b.add(col0, b.add(warp_col, b.add(b.mul(tig, c(2)), c(8 * j + e % 2))))
                inside = b.and_(b.icmp_unsigned("<", r, c(self.m)),
                                b.icmp_unsigned("<", col, c(self.n)))  # fmt: skip
                with b.if_then(inside):
                    idx = [*batch, r, col]
                    value = b.load(self.at(slot, e), typ=F32)
                    if element is not F32:  # rounded once to f16 or bf16
                        value = b.fptrunc(value, element)
                    kg.store_product(out, idx, value)
                    if kg.root is not kg.core:
                        kg.store_root(out, idx)
        b.ret_void()

    def tf32_products(self, mma, acc, a_tile, b_tile, warp_row, warp_col, group, tig, tf32_at):
        """The slice's two k8 halves of each of the warp's 2 × 4 products, in TF32."""
        b = self.kg.b

        def c(v: int) -> ir.Constant:
            return ir.Constant(I64, v)

        for half in (0, 8):
            k = b.add(tig, c(half))  # this lane's column of A, row of B
            a_frags = []
            for i in range(TILES_M):
                top = b.add(b.add(warp_row, c(16 * i)), group)
                a_frags.append([tf32_at(a_tile, b.add(b.mul(b.add(top, c(rows)), c(16)),
                                                      b.add(k, c(cols))))
                                for rows, cols in ((0, 0), (8, 0), (0, 4), (8, 4))])  # fmt: skip
            for j in range(TILES_N):
                col = b.add(b.add(warp_col, c(8 * j)), group)
                regs = [tf32_at(b_tile, b.add(b.mul(b.add(k, c(rows)), c(64)), col))
                        for rows in (0, 4)]  # fmt: skip
                for i in range(TILES_M):
                    b.call(mma, [self.at(acc[(i, j)], 0), *a_frags[i], *regs])

    def accumulators(self) -> ir.Value:
        """Four f32 on the stack, in the body's entry block (registers once promoted)."""
        b = self.kg.b
        here = b.block
        b.position_at_start(self.kg.body.entry_basic_block)
        slot = b.alloca(F32, size=ir.Constant(I64, 4))
        b.position_at_end(here)
        return slot

    def at(self, slot: ir.Value, e: int) -> ir.Value:
        return self.kg.b.gep(slot, [ir.Constant(I64, e)], source_etype=F32)
