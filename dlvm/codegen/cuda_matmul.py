"""The `dot` of a CUDA kernel scheduled `block TX x TY tile BM x BN x BK grid …`
(dlvm.transforms.compute_scheduling): a matrix product tiled through shared memory.

Block (x, y, z) computes the BM × BN tile of out at rows y·BM…, columns x·BN… of batch element
z. Its TX × TY threads step through p in slices BK deep: together they copy the slice of a
(BM × BK) and of b (BK × BN) into shared memory (consecutive threads read consecutive
addresses), wait at a barrier, then each thread multiplies and adds its (BM/TY) × (BN/TX)
elements (rows ty, ty + TY…, columns tx, tx + TX…) from shared memory into registers, and all
wait again before the next slice overwrites it. Elements beyond the edges read as 0 and are not
stored, so no size need divide the tile. The epilogue (bias, activation) is applied to each
element as it is stored, as in the CPU kernel: it reads the product back from out.

a's slice is stored transposed (column p of the tile contiguous, one element of padding a row)
so that a warp reading it does not hit one shared-memory bank 32 times. Operands are read with
`KernelGen.elem`, so a fused prologue (a transpose, a scaling) costs nothing extra here."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from llvmlite import ir

from dlvm.codegen.elementwise import binary
from dlvm.codegen.errors import CodegenError
from dlvm.codegen.llvm_types import (
    I64,
    constant,
    load_element,
    memory_type,
    store_element,
    value_type,
)
from dlvm.codegen.loops import counted_loop, unravel
from dlvm.codegen.nvptx import barrier, shared_array, special_register
from dlvm.ir.types import TensorType
from dlvm.ir.values import Function
from dlvm.transforms.compute_generation import kernel_core

if TYPE_CHECKING:
    from dlvm.codegen.kernel import KernelGen


def tiled(fn: Function) -> bool:
    """Whether fn's cuda schedule asks for a tiled product (a dot, or a convolution as one)."""
    return fn.cuda_schedule is not None and fn.cuda_schedule.get_all("tile") is not None and (
        kernel_core(fn).opcode in ("dot", "convolve"))  # fmt: skip


class TiledProduct:
    """Emits the tiled product into kg's body (called with the builder at the entry)."""

    def __init__(self, kg: KernelGen) -> None:
        self.kg = kg
        sched = kg.fn.cuda_schedule
        assert sched is not None
        self.tx, self.ty = (*(sched.get_all("block") or ()), 1, 1)[:2]
        self.bm, self.bn, self.bk = sched.get_all("tile")  # type: ignore[misc]
        threads = self.tx * self.ty
        if self.bm % self.ty or self.bn % self.tx or (self.bm * self.bk) % threads or (
                self.bk * self.bn) % threads:  # fmt: skip
            raise CodegenError(
                f"@{kg.fn.name}: {sched}: the tile must be whole multiples of the block"
            )
        core = kg.core
        t = core.type
        assert isinstance(t, TensorType)
        self.t: TensorType = t
        self.dt = t.dtype
        self.a, self.b = core.operands
        self.layout()

    # The product, as a convolution (cuda_conv.py) redefines it --------------------------------

    def layout(self) -> None:
        """m × k times k × n, once per grid z (the batch elements)."""
        a_t = self.a.type
        assert isinstance(a_t, TensorType)
        self.m, self.n, self.k = self.t.shape[-2], self.t.shape[-1], a_t.shape[-1]
        self.batch_shape = self.t.shape[:-2]

    def start(self, z: ir.Value) -> None:
        """What the block's grid z selects (the batch element)."""
        b = self.kg.b
        self.batch = unravel(b, z, self.batch_shape) if self.batch_shape else []

    def left(self, i: ir.Value, p: ir.Value) -> ir.Value:
        """A[i, p] of the z-th product, or 0 outside it."""
        return self.operand(self.a, i, p, (self.m, self.k))

    def right(self, p: ir.Value, j: ir.Value) -> ir.Value:
        return self.operand(self.b, p, j, (self.k, self.n))

    def operand(self, v, i: ir.Value, j: ir.Value, shape: tuple[int, int]) -> ir.Value:
        """v[batch, i, j], or 0 outside v."""
        kg, b = self.kg, self.kg.b
        kg.memo.clear()
        inside, (ci, cj) = kg.clamp([i, j], shape)
        return b.select(inside, kg.elem(v, [*self.batch, ci, cj]), constant(self.dt, 0))

    def output_index(self, i: ir.Value, j: ir.Value) -> list[ir.Value]:
        """Where element (i, j) of the z-th product goes in the output."""
        return [*self.batch, i, j]

    def shared(self, name: str, count: int) -> ir.Value:
        """A shared-memory array of `count` elements, as a generic pointer."""
        kg = self.kg
        return shared_array(kg.b, f"{kg.body.name}.{name}", memory_type(self.dt), count)

    def emit(self) -> None:
        kg = self.kg
        out = kg.bind_arguments()
        b = kg.b
        dt, mt = self.dt, memory_type(self.dt)
        bm, bn, bk, tx_n, ty_n = self.bm, self.bn, self.bk, self.tx, self.ty
        a_tile = self.shared("a", bk * (bm + 1))
        b_tile = self.shared("b", bk * bn)

        def reg(name: str) -> ir.Value:
            return b.zext(special_register(b, name), I64)

        def c(v: int) -> ir.Constant:
            return ir.Constant(I64, v)

        tx, ty = reg("tid.x"), reg("tid.y")
        thread = b.add(b.mul(ty, c(tx_n)), tx)
        row0 = b.mul(reg("ctaid.y"), c(bm))
        col0 = b.mul(reg("ctaid.x"), c(bn))
        self.start(reg("ctaid.z"))
        rows, cols = bm // ty_n, bn // tx_n
        acc = [[kg.alloca(value_type(dt)) for _ in range(cols)] for _ in range(rows)]
        zero = constant(dt, 0)
        for line in acc:
            for slot in line:
                b.store(zero, slot)
        threads = tx_n * ty_n

        def element(tile: ir.Value, offset: ir.Value) -> ir.Value:
            return b.gep(tile, [offset], source_etype=mt)

        def slice_(index: ir.Value) -> None:
            p0 = b.mul(index, c(bk))
            for e in range(bm * bk // threads):  # a: consecutive threads along p
                flat = b.add(thread, c(e * threads))
                r, q = b.udiv(flat, c(bk)), b.urem(flat, c(bk))
                v = self.left(b.add(row0, r), b.add(p0, q))
                store_element(b, v, element(a_tile, b.add(b.mul(q, c(bm + 1)), r)), dt)
            for e in range(bk * bn // threads):  # b: consecutive threads along columns
                flat = b.add(thread, c(e * threads))
                q, j = b.udiv(flat, c(bn)), b.urem(flat, c(bn))
                v = self.right(b.add(p0, q), b.add(col0, j))
                store_element(b, v, element(b_tile, b.add(b.mul(q, c(bn)), j)), dt)
            barrier(b)

            def step(p: ir.Value) -> None:  # a loop LLVM unrolls: the IR stays small
                a_row = b.add(b.mul(p, c(bm + 1)), ty)
                b_row = b.add(b.mul(p, c(bn)), tx)
                xs = [load_element(b, element(a_tile, b.add(a_row, c(i * ty_n))), dt)
                      for i in range(rows)]  # fmt: skip
                ys = [load_element(b, element(b_tile, b.add(b_row, c(j * tx_n))), dt)
                      for j in range(cols)]  # fmt: skip
                for i, x in enumerate(xs):
                    for j, y in enumerate(ys):
                        slot = acc[i][j]
                        b.store(_multiply_add(b, x, y, b.load(slot), dt), slot)

            counted_loop(b, 0, bk, step, name="p")
            barrier(b)

        counted_loop(b, 0, math.ceil(self.k / bk), slice_, name="slice")
        for i in range(rows):
            for j in range(cols):
                r = b.add(row0, b.add(ty, c(i * ty_n)))
                col = b.add(col0, b.add(tx, c(j * tx_n)))
                inside = b.and_(b.icmp_unsigned("<", r, c(self.m)),
                                b.icmp_unsigned("<", col, c(self.n)))  # fmt: skip
                with b.if_then(inside):
                    idx = self.output_index(r, col)
                    kg.store_product(out, idx, b.load(acc[i][j]))
                    if kg.root is not kg.core:
                        kg.store_root(out, idx)
        b.ret_void()


def _multiply_add(b: ir.IRBuilder, x: ir.Value, y: ir.Value, z: ir.Value, dt) -> ir.Value:
    """x·y + z, one fused multiply-add for floats (llvm.fmuladd)."""
    if not dt.is_float:
        return binary(b, "add", binary(b, "multiply", x, y, dt), z, dt)
    suffix = {16: "f16", 32: "f32", 64: "f64"}[dt.bits]
    fname = f"llvm.fmuladd.{suffix}"
    fn = b.module.globals.get(fname) or ir.Function(
        b.module, ir.FunctionType(x.type, [x.type] * 3), fname
    )
    return b.call(fn, [x, y, z])
