"""The `reduce` of a CUDA kernel scheduled `block B grid G cooperative 1`
(dlvm.transforms.compute_scheduling): each output element reduced by a whole block, for
reductions long enough that one thread per element would leave the GPU idle (a loss, the sum
of a large tensor).

Block g takes output elements g, g + G, …. For each, its B threads fold strided shares of the
reduced elements into partial results (starting from the combinator's identity), write them to
shared memory, and halve them in a tree, a barrier after each level, down to one warp; that warp
finishes with shuffles (`shfl.sync.down`, for 32-bit elements; wider ones go on in shared
memory), and its first thread stores comb(init, result). The elements are combined in another
order than the interpreter's left-to-right fold, so only associative, commutative combinators
(add, multiply, max, min) are scheduled this way, and float sums agree to rounding."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from llvmlite import ir

from dlvm.codegen.errors import CodegenError
from dlvm.codegen.llvm_types import (
    I32,
    I64,
    constant,
    load_element,
    memory_type,
    store_element,
    value_type,
)
from dlvm.codegen.loops import strided_loop, unravel
from dlvm.codegen.nvptx import barrier, shared_array, special_register
from dlvm.ir.types import DataType, TensorType
from dlvm.ir.values import Function
from dlvm.transforms.compute_generation import kernel_core

if TYPE_CHECKING:
    from dlvm.codegen.kernel import KernelGen

COMBINATORS = ("add", "multiply", "max", "min")
WARP = 32


def cooperative(fn: Function) -> bool:
    """Whether fn's cuda schedule asks for the block reduction."""
    sched = fn.cuda_schedule
    wanted = sched is not None and sched.get("cooperative") == 1
    return wanted and kernel_core(fn).opcode == "reduce"


def identity(comb: str, dt: DataType) -> ir.Constant:
    """The element x with comb(x, y) = y for every y."""
    if comb == "add":
        return constant(dt, 0)
    if comb == "multiply":
        return constant(dt, 1)
    if dt.is_float:
        return constant(dt, -math.inf if comb == "max" else math.inf)
    bound = 1 << (dt.bits - 1)
    return constant(dt, -bound if comb == "max" else bound - 1)


class BlockReduce:
    """Emits the block reduction into kg's body."""

    def __init__(self, kg: KernelGen) -> None:
        self.kg = kg
        root = kg.root
        sched = kg.fn.cuda_schedule
        assert sched is not None and root is kg.core
        self.threads = sched.get("block", 1)
        if self.threads & (self.threads - 1) or self.threads < WARP:
            raise CodegenError(f"@{kg.fn.name}: {sched}: the block must be a power of 2 ≥ 32")
        self.comb = root.attrs["comb"]
        t, src_t = root.type, root.operands[0].type
        assert isinstance(t, TensorType) and isinstance(src_t, TensorType)
        if not isinstance(self.comb, str) or self.comb not in COMBINATORS or t.dtype.is_bool:
            raise CodegenError(f"@{kg.fn.name}: a block reduction by {self.comb} of {t.dtype}")
        self.t, self.src_t = t, src_t
        self.dims = sorted(root.attrs["dims"])
        self.kept = [d for d in range(src_t.rank) if d not in self.dims]

    def emit(self) -> None:
        kg, t, dt = self.kg, self.t, self.t.dtype
        out = kg.bind_arguments()
        b = kg.b
        mt, vt = memory_type(dt), value_type(dt)
        partial = shared_array(b, f"{kg.body.name}.partial", mt, self.threads)

        def wide(name: str) -> ir.Value:
            return b.zext(special_register(b, name), I64)

        tid, block, blocks = wide("tid.x"), wide("ntid.x"), wide("nctaid.x")
        reduced = [self.src_t.shape[d] for d in self.dims]
        length = math.prod(reduced)
        slot = kg.alloca(vt)
        src, init = kg.root.operands

        def cell(index: ir.Value) -> ir.Value:
            return b.gep(partial, [index], source_etype=mt)

        def at(o: ir.Value) -> None:
            out_idx = unravel(b, o, t.shape) if t.shape else []
            b.store(identity(self.comb, dt), slot)

            def share(r: ir.Value) -> None:  # this thread's elements r = tid, tid + B, …
                kg.memo.clear()
                full: list[ir.Value] = [ir.Constant(I64, 0)] * self.src_t.rank
                for d, i in zip(self.kept, out_idx):
                    full[d] = i
                for d, i in zip(self.dims, unravel(b, r, tuple(reduced))):
                    full[d] = i
                b.store(kg.combine(self.comb, b.load(slot), kg.elem(src, full), dt), slot)

            strided_loop(b, tid, ir.Constant(I64, length), block, share, "r")
            store_element(b, b.load(slot), cell(tid), dt)
            barrier(b)
            shuffle = dt.bits == 32
            half = self.threads // 2
            while half >= (WARP if shuffle else 1):
                with b.if_then(b.icmp_unsigned("<", tid, ir.Constant(I64, half))):
                    mine = load_element(b, cell(tid), dt)
                    other = load_element(b, cell(b.add(tid, ir.Constant(I64, half))), dt)
                    store_element(b, kg.combine(self.comb, mine, other, dt), cell(tid), dt)
                barrier(b)
                half //= 2
            if shuffle:
                with b.if_then(b.icmp_unsigned("<", tid, ir.Constant(I64, WARP))):
                    v = load_element(b, cell(tid), dt)
                    for delta in (16, 8, 4, 2, 1):
                        v = kg.combine(self.comb, v, _shuffle_down(b, v, delta), dt)
                    b.store(v, slot)
            else:
                b.store(load_element(b, cell(ir.Constant(I64, 0)), dt), slot)
            with b.if_then(b.icmp_unsigned("==", tid, ir.Constant(I64, 0))):
                kg.memo.clear()
                result = kg.combine(self.comb, kg.elem(init, []), b.load(slot), dt)
                kg.store(out, out_idx, t, result)
            barrier(b)  # the next element's partials overwrite these

        strided_loop(b, wide("ctaid.x"), ir.Constant(I64, math.prod(t.shape)), blocks, at, "o")
        b.ret_void()


def _shuffle_down(b: ir.IRBuilder, v: ir.Value, delta: int) -> ir.Value:
    """The value of lane + delta in the warp (this lane's own past the last lane)."""
    suffix = "f32" if isinstance(v.type, ir.FloatType) else "i32"
    fname = f"llvm.nvvm.shfl.sync.down.{suffix}"
    fn = b.module.globals.get(fname) or ir.Function(
        b.module, ir.FunctionType(v.type, [I32, v.type, I32, I32]), fname
    )
    full, clamp = ir.Constant(I32, -1), ir.Constant(I32, 0x1F)  # every lane; a warp's width
    return b.call(fn, [full, v, ir.Constant(I32, delta), clamp])
