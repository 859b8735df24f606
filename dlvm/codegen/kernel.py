"""A `[compute]` function as LLVM IR (docs/ir.md, "Stages"): a loop nest that writes the root's
result, computing the pointwise instructions fused into it on the fly at each index.

Each kernel becomes two functions: `body(ptr args, i64 begin, i64 end)`, the runtime's task
signature, which runs the outermost loop from begin to end, and `kernel(ptr args)`, which runs
the body on the calling thread or hands it to `dlrt_parallel_for` as the schedule says (a packed
matrix product to `dlrt_parallel_split`, one chunk per thread, since each chunk packs the right
operand anew). `args` points to the kernel's input pointers followed by the output pointer."""

from __future__ import annotations

import math
from collections.abc import Callable, Generator

import numpy as np
from llvmlite import ir

from dlvm.codegen import (
    conv_bf16,
    conv_depthwise,
    conv_folded,
    conv_gemm,
    conv_kernel_grad,
    conv_long_sums,
    conv_rows,
    streaming,
)
from dlvm.codegen.bf16_products import NARROW
from dlvm.codegen.combinators import not_inlinable
from dlvm.codegen.conv_bf16 import Bf16Conv
from dlvm.codegen.conv_depthwise import DepthwiseConv
from dlvm.codegen.conv_folded import ConvFolded
from dlvm.codegen.conv_gemm import ConvGemm
from dlvm.codegen.conv_kernel_grad import KernelGradient
from dlvm.codegen.conv_kernel_grad_pairs import kernel_gradient
from dlvm.codegen.conv_long_sums import LongSums
from dlvm.codegen.conv_rows import ConvRows
from dlvm.codegen.elementwise import binary, cast, compare, convert, unary
from dlvm.codegen.errors import CodegenError
from dlvm.codegen.gather import (
    copies_rows,
    gather_element,
    gather_rows,
    scatter_add,
    scatter_extent,
)
from dlvm.codegen.host_values import Runtime
from dlvm.codegen.inplace import aligned_inputs
from dlvm.codegen.llvm_types import (
    I1,
    I64,
    PTR,
    BFloatType,
    byte_array,
    constant,
    load_element,
    memory_type,
    narrow,
    store_element,
    value_type,
)
from dlvm.codegen.loops import counted_loop, linear_index, loop_nest, strided_offset, unravel
from dlvm.codegen.matmul import MatMul
from dlvm.codegen.matmul_int8 import emit_int8_product
from dlvm.ir.literals import (
    AggregateLiteral,
    DenseLiteral,
    ScalarLiteral,
    SpecialLiteral,
    dense_array,
)
from dlvm.ir.strided import STRIDED_VIEWS, base_axis_terms, contiguous_strides, view_strides
from dlvm.ir.types import DataType, TensorType, Type
from dlvm.ir.values import Argument, Function, Instruction, LiteralValue, Value
from dlvm.ir.windows import window_padding
from dlvm.transforms.compute_generation import PRODUCTS, kernel_core

TASK = ir.FunctionType(ir.VoidType(), [PTR, I64, I64])
KERNEL = ir.FunctionType(ir.VoidType(), [PTR])

# How one element is computed (KernelGen._elem): a generator that yields each (value, index)
# whose element it needs, is sent that element back, and returns its own. KernelGen.elem runs
# them on a stack of its own, so a fused chain thousands of instructions long does not
# recurse through Python's.
Steps = Generator[tuple[Value, list[ir.Value]], ir.Value, ir.Value]


def held_type(core: Instruction, root: Instruction) -> Type | None:
    """The type out holds a kernel's core in (its product before the epilogue reads it back):
    the core's, or f32 when a bf16 matrix product's epilogue ends in f32
    (dlvm.transforms.compute_generation); None for any other epilogue of another type."""
    t, rt = core.type, root.type
    if core is root or rt == t:
        return t
    if (core.opcode == "dot" and isinstance(t, TensorType) and isinstance(rt, TensorType)
            and t.dtype is DataType.BF16 and rt.dtype is DataType.F32
            and rt.shape == t.shape):  # fmt: skip
        return rt
    return None


def tensor_type(v: Value) -> TensorType:
    t = v.type
    assert isinstance(t, TensorType), f"expected a tensor, found {t}"
    return t


def sum_type(dt: DataType) -> DataType:
    """The type a product of dt elements multiplies and sums in, one output element at a time:
    f32 for bf16 and f16 (exact products, rounded once, as the interpreter's), else dt."""
    return DataType.F32 if dt in NARROW else dt


def constant_array(lit: LiteralValue) -> np.ndarray:
    """A literal without nested uses as a flat NumPy array of its element values."""
    t = tensor_type(lit)
    n = math.prod(t.shape)
    value = lit.literal
    if isinstance(value, ScalarLiteral):
        return np.full(n, value.value, dtype=object)
    if isinstance(value, SpecialLiteral) and value.word in ("zero", "undefined"):
        return np.zeros(n, dtype=object)
    if isinstance(value, AggregateLiteral) and value.kind == "tensor":
        parts = [constant_array(item) for item in value.items]  # type: ignore[arg-type]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=object)
    if isinstance(value, DenseLiteral):
        return dense_array(value.data, t.dtype)
    raise CodegenError(f"literal {value} cannot be compiled")


class KernelGen:
    """Lowers one [compute] function into `module`; `entry` is the kernel(args) function."""

    def __init__(self, module: ir.Module, fn: Function, symbol: str, rt: Runtime | None):
        self.module = module
        self.fn = fn
        ret = fn.blocks[-1].instructions[-1]
        root = ret.operands[0]
        if len(fn.blocks) != 1 or not isinstance(root, Instruction):
            raise CodegenError(f"@{fn.name}: a [compute] function must be one block")
        self.root = root
        self.core = kernel_core(fn)
        self.held = held_type(self.core, root)
        if self.held is None:
            op = self.core.opcode
            raise CodegenError(f"@{fn.name}: a {op}'s epilogue must have the {op}'s type")
        if sum(inst.opcode in PRODUCTS for inst in fn.blocks[0].instructions) > 1:
            raise CodegenError(
                f"@{fn.name}: a [compute] function holds at most one dot or convolve"
            )
        self.body = ir.Function(module, TASK, symbol + ".body")
        self.body.linkage = "internal"
        self.entry = self.declare_entry(symbol)
        self.rt = rt
        self.per_thread = 0  # chunks per thread: 0 for dlrt_parallel_for's default
        self.memo: dict[tuple[int, tuple[int, ...]], tuple[ir.Value, list[ir.Value]]] = {}
        # The offsets that indices were unravelled from (by their values' ids; the entry keeps
        # them alive): the offset of such an index in the same shape is the offset itself.
        self.offsets: dict[tuple[int, ...], tuple[ir.Value, tuple[int, ...], list[ir.Value]]] = {}
        self.ptrs: dict[Value, ir.Value] = {}
        self.bound: dict[Value, ir.Value] = {}
        self.literal_count = 0
        # A pointwise kernel that reads an operand through a permutation whose last axis lies
        # contiguous (KernelGen.view): its loops are kept as they are (llgen), so that LLVM
        # vectorises the innermost along that axis rather than unrolling it, when short, and
        # vectorising the next one out with a gather and a scatter per vector (a multi-head
        # attention's query split into heads, [32 x 4 x 16 x 16]: 26 -> 2 us).
        self.permuted_copy = False
        self.reads_permuted = False
        self.in_chain = False  # reading the rest of a chain that is not one strided view
        # Smaller code over faster code (LLVM level 1 and below, where a build's time counts
        # most): a product's leftover rows go in tiles of 4, then of 1 (matmul.MatMul.tiles).
        self.compact = False
        # The body's range counts output elements rather than rows of the output's first
        # dimension (every root but scan; a product one element at a time): set for GPU
        # kernels, whose threads take a few elements each (dlvm.codegen.cuda_kernel).
        self.flat = False
        sched = fn.schedule
        columns = sched.get("columns", 0) if sched is not None else 0
        # Groups of columns split among threads (compute-scheduling's `columns`): only for a
        # 2-D product, in whole tiles.
        self.columns = columns if self.core.opcode == "dot" and len(
            tensor_type(self.core).shape) == 2 and columns > 0 else 0  # fmt: skip
        # Blocks of output rows per image that threads share (compute-scheduling's `split`):
        # the body's range counts (image, block) pairs.
        split = sched.get("split", 1) if sched is not None else 1
        self.conv_split = split if self.core.opcode == "convolve" and split > 1 else 1
        # f32 exp, tanh and log by dlvm.codegen.fast_math (compute-scheduling's `fastmath`).
        self.fast_math = sched is not None and sched.get("fastmath") == 1
        # The output by non-temporal vector stores (compute-scheduling's `stream`).
        self.stream = sched is not None and sched.get("stream") == 1

    # The two functions ---------------------------------------------------------------------

    def declare_entry(self, symbol: str) -> ir.Function:
        entry = ir.Function(self.module, KERNEL, symbol)
        entry.linkage = "internal"
        return entry

    def emit(self) -> ir.Function:
        self.emit_body()
        b = ir.IRBuilder(self.entry.append_basic_block("entry"))
        (args,) = self.entry.args
        extent = self.outer_extent()
        sched = self.fn.schedule
        assert self.rt is not None, "a CPU kernel calls the runtime's thread pool"
        if sched is not None and sched.get("parallel") and extent > 1:
            n, grain = ir.Constant(I64, extent), ir.Constant(I64, max(1, sched.get("grain", 1)))
            if self.per_thread:
                per_thread = ir.Constant(I64, self.per_thread)
                b.call(self.rt.parallel_split, [n, grain, per_thread, self.body, args])
            else:
                b.call(self.rt.parallel_for, [n, grain, self.body, args])
        else:
            b.call(self.body, [args, ir.Constant(I64, 0), ir.Constant(I64, extent)])
        b.ret_void()
        return self.entry

    def outer_extent(self) -> int:
        """The trip count of the loop the body splits: the output's first dimension (groups of
        columns for a product scheduled by `columns`)."""
        out = tensor_type(self.core)
        if self.core.opcode == "scatterAdd":
            return scatter_extent(self)
        if self.flat and self.core.opcode != "scan":
            return math.prod(out.shape)  # each_output's elements
        if self.columns:
            return -(-out.shape[-1] // self.columns)
        if self.conv_split > 1:
            return out.shape[0] * self.conv_split
        if self.core.opcode == "scan":  # one pass per axis over the whole tensor
            return 1
        return out.shape[0] if out.shape else 1

    def bind_arguments(self) -> ir.Value:
        """Starts the body: reads the input pointers and returns the output pointer."""
        b = self.b = ir.IRBuilder(self.body.append_basic_block("entry"))
        args = self.body.args[0]
        inputs = self.fn.arguments
        for i, a in enumerate(inputs):
            self.ptrs[a] = b.load(b.gep(args, [ir.Constant(I64, i)], source_etype=PTR), typ=PTR)
        self.out = b.load(b.gep(args, [ir.Constant(I64, len(inputs))], source_etype=PTR), typ=PTR)
        return self.out

    def emit_body(self) -> None:
        out = self.bind_arguments()
        b = self.b
        _, begin, end = self.body.args
        op = self.core.opcode
        if op == "dot" and self.fn.schedule is not None and self.fn.schedule.get("vnni"):
            emit_int8_product(self, out, begin, end)
        elif op == "dot" and tensor_type(self.core).shape and self.flat:
            self.columns = 0  # one element at a time: the threads share rows
            self.product_elements(out, begin, end)
        elif op == "dot" and tensor_type(self.core).shape:
            self.matmul(out, begin, end)
        elif op == "dot":
            self.dot(out)
        elif op == "reduce":
            self.reduce(out, begin, end)
        elif op == "convolve":
            self.convolve(out, begin, end)
        elif op == "reduceWindow":
            self.reduce_window(out, begin, end)
        elif op == "scan":
            self.scan(out)
        elif op == "gather" and copies_rows(self):
            gather_rows(self, out, begin, end)
        elif op == "scatterAdd":
            scatter_add(self, out, begin, end)
        else:
            self.pointwise(out, begin, end)
        b.ret_void()

    # Root kinds ----------------------------------------------------------------------------

    def pointwise(self, out: ir.Value, begin: ir.Value, end: ir.Value) -> None:
        """The loop nest, once more for each input the result may be written over
        (dlvm.codegen.inplace) and run when that input is `out`: reading it through `out`
        shows LLVM each element loaded before it is stored at the same address, so the loop
        vectorises without the overlap check that would send an in-place call to its scalar
        loop."""
        b = self.b
        done = self.body.append_basic_block("pointwise.done")
        for k in sorted(aligned_inputs(self.fn)):
            a = self.fn.arguments[k]
            here = self.body.append_basic_block(f"inplace.{k}")
            other = self.body.append_basic_block(f"inplace.{k}.not")
            b.cbranch(b.icmp_unsigned("==", self.ptrs[a], out), here, other)
            b.position_at_end(here)
            saved, self.ptrs[a] = self.ptrs[a], out
            self.pointwise_loop(out, begin, end)
            self.ptrs[a] = saved
            b.branch(done)
            b.position_at_end(other)
        self.pointwise_loop(out, begin, end)
        b.branch(done)
        b.position_at_end(done)

    def pointwise_loop(self, out: ir.Value, begin: ir.Value, end: ir.Value) -> None:
        t = tensor_type(self.root)

        def at(idx: list[ir.Value]) -> None:
            self.memo.clear()
            v = self.elem(self.root, idx)
            self.store(out, idx, t, v)

        if self.stream and not self.flat:
            streaming.streamed_loop(self, out, begin, end)
        else:
            self.each_output(t, at, begin, end)
        self.permuted_copy = self.reads_permuted

    def reduce(self, out: ir.Value, begin: ir.Value, end: ir.Value) -> None:
        b = self.b
        root = self.root
        src = root.operands[0]
        st, t = tensor_type(src), tensor_type(root)
        comb = root.attrs["comb"]
        self.check_combinator(comb)
        dims = sorted(root.attrs["dims"])
        kept = [d for d in range(len(st.shape)) if d not in dims]
        # (Not a bf16 sum: rounded to bf16 in out after every step, it would stop growing.)
        bf16_sum = comb == "add" and t.dtype is DataType.BF16
        if not self.flat and dims and kept and kept[-1] == len(st.shape) - 1 and value_type(
                t.dtype) == memory_type(t.dtype) and not bf16_sum:  # fmt: skip
            self.reduce_rows(out, begin, end, dims, kept)
            return
        # A float32 sum is accumulated in float64, so that a sum of many terms that cancel (a
        # batch norm's gradient sums 512 of them per channel) keeps float32 accuracy instead
        # of losing digits; a float16 or bfloat16 one too, rounded once as the interpreter's. In
        # float64 the order no longer shows in the float32 result, so the adds may be
        # reassociated: LLVM then vectorises the loop (a [16 x 64 x 16 x 16] sum over all but
        # the channels, one thread: 0.18 -> 0.09 ms).
        narrow_ty = value_type(t.dtype)
        wide = comb == "add" and isinstance(narrow_ty, (ir.HalfType, ir.FloatType, BFloatType))
        acc_slot = self.alloca(ir.DoubleType() if wide else narrow_ty)

        def at(out_idx: list[ir.Value]) -> None:
            self.memo.clear()
            init = self.elem(root.operands[1], [])
            b.store(b.fpext(init, ir.DoubleType()) if wide else init, acc_slot)

            def inner(red_idx: list[ir.Value]) -> None:
                self.memo.clear()
                full: list[ir.Value] = [ir.Constant(I64, 0)] * len(st.shape)
                for d, i in zip(kept, out_idx):
                    full[d] = i
                for d, i in zip(dims, red_idx):
                    full[d] = i
                x = self.elem(src, full)
                acc = b.load(acc_slot)
                if wide:
                    b.store(b.fadd(acc, b.fpext(x, ir.DoubleType()), flags=["reassoc"]), acc_slot)
                else:
                    b.store(self.combine(comb, acc, x, t.dtype), acc_slot)

            loop_nest(b, [st.shape[d] for d in dims], inner)
            total = b.load(acc_slot)
            self.store(out, out_idx, t, narrow(b, total, narrow_ty) if wide else total)

        self.each_output(t, at, begin, end)

    def reduce_rows(
        self, out: ir.Value, begin: ir.Value, end: ir.Value, dims: list[int], kept: list[int]
    ) -> None:
        """A reduction that keeps the source's last dimension (a sum over a batch's rows):
        accumulated in out, a whole row of it per step of the reduced indices, so that the
        innermost loop runs along rows of the source and vectorises. Each element still
        combines the same values in the same order as one accumulator would."""
        b, root = self.b, self.root
        src = root.operands[0]
        st, t = tensor_type(src), tensor_type(root)
        comb = root.attrs["comb"]
        width = t.shape[-1]

        def rows(outer: list[ir.Value], j0: ir.Value, j1: ir.Value) -> None:
            def init(j: ir.Value) -> None:
                self.memo.clear()
                self.store(out, [*outer, j], t, self.elem(root.operands[1], []))

            counted_loop(b, j0, j1, init, name="ri")

            def step(red_idx: list[ir.Value]) -> None:
                def col(j: ir.Value) -> None:
                    self.memo.clear()
                    full: list[ir.Value] = [ir.Constant(I64, 0)] * len(st.shape)
                    for d, i in zip(kept, [*outer, j]):
                        full[d] = i
                    for d, i in zip(dims, red_idx):
                        full[d] = i
                    address = self.address(out, [*outer, j], t)
                    acc = load_element(b, address, t.dtype)
                    x = self.elem(src, full)
                    store_element(b, self.combine(comb, acc, x, t.dtype), address, t.dtype)

                counted_loop(b, j0, j1, col, name="rj")

            loop_nest(b, [st.shape[d] for d in dims], step)

        if len(t.shape) == 1:  # the threads share out's only dimension
            rows([], begin, end)
        else:
            zero, n = ir.Constant(I64, 0), ir.Constant(I64, width)
            loop_nest(b, list(t.shape[:-1]), lambda outer: rows(outer, zero, n),
                      first=(begin, end))  # fmt: skip

    def matmul(self, out: ir.Value, begin: ir.Value, end: ir.Value) -> None:
        """A matrix product (dlvm.codegen.matmul) over the thread's rows, or over its share of
        the first batch dimension when there is one."""
        t = tensor_type(self.core)
        sched = self.fn.schedule
        lanes = sched.get("vectorize", 1) if sched is not None else 1
        product = MatMul(self, self.core, out, max(1, lanes))
        if self.columns % product.tile.width:
            self.columns = 0  # not whole tiles (narrow types, wide vectors): share rows instead
        if self.columns:
            n, c = t.shape[-1], ir.Constant(I64, self.columns)
            last = self.b.mul(end, c)
            last = self.b.select(self.b.icmp_signed(">", last, ir.Constant(I64, n)),
                                 ir.Constant(I64, n), last)  # fmt: skip
            rows = ir.Constant(I64, t.shape[-2])
            product.emit([], ir.Constant(I64, 0), rows, (self.b.mul(begin, c), last))
            return
        if len(t.shape) == 2:
            if product.tile.packed:
                self.per_thread = 1
            product.emit([], begin, end)
            return
        rows = ir.Constant(I64, t.shape[-2])
        loop_nest(
            self.b, list(t.shape[:-2]),
            lambda batch: product.emit(batch, ir.Constant(I64, 0), rows), first=(begin, end),
        )  # fmt: skip

    def elem_in(self, v: Value, idx: list[ir.Value], dt: DataType) -> ir.Value:
        """v's element at idx, widened to dt (sum_type) where v's elements are narrower."""
        e = self.elem(v, idx)
        return e if tensor_type(v).dtype is dt else self.b.fpext(e, value_type(dt))

    def product_elements(self, out: ir.Value, begin: ir.Value, end: ir.Value) -> None:
        """A matrix product one output element at a time (each a sum over p in order), then
        the epilogue at that element: the untiled product of a GPU thread. A bf16 product's
        products and sums are f32 (exact products, rounded once, as the interpreter's), and so
        are an f16 one's (sum_type)."""
        b, core = self.b, self.core
        x, y = core.operands
        t = tensor_type(core)
        dt = sum_type(t.dtype)
        wide = dt is not t.dtype
        slot = self.alloca(value_type(dt))

        def operand(v: Value, idx: list[ir.Value]) -> ir.Value:
            return self.elem_in(v, idx, dt)

        def at(idx: list[ir.Value]) -> None:
            batch, i, j = idx[:-2], idx[-2], idx[-1]
            b.store(constant(dt, 0), slot)

            def step(p: ir.Value) -> None:
                self.memo.clear()
                xy = binary(b, "multiply", operand(x, [*batch, i, p]),
                            operand(y, [*batch, p, j]), dt)  # fmt: skip
                b.store(binary(b, "add", b.load(slot), xy, dt), slot)

            counted_loop(b, 0, tensor_type(x).shape[-1], step, name="p")
            total = b.load(slot)
            self.store_product(out, idx, narrow(b, total, value_type(t.dtype)) if wide else total)
            if self.root is not core:
                self.store_root(out, idx)

        self.each_output(t, at, begin, end)

    def dot(self, out: ir.Value) -> None:
        """The scalar product of two vectors."""
        b = self.b
        x, y = self.root.operands
        dt = tensor_type(self.root).dtype
        slot = self.alloca(value_type(dt))
        b.store(constant(dt, 0), slot)

        def step(p: ir.Value) -> None:
            self.memo.clear()
            prod = binary(b, "multiply", self.elem(x, [p]), self.elem(y, [p]), dt)
            b.store(binary(b, "add", b.load(slot), prod, dt), slot)

        counted_loop(b, 0, tensor_type(x).shape[0], step, name="p")
        store_element(b, b.load(slot), out, dt)

    def scan(self, out: ir.Value) -> None:
        """Inclusive running folds along each listed axis in turn: the first pass reads the
        operand, later ones rewrite `out` in place."""
        b = self.b
        root = self.root
        t = tensor_type(root)
        comb = root.attrs["comb"]
        self.check_combinator(comb)
        slot = self.alloca(value_type(t.dtype))
        for k, d in enumerate(root.attrs["dims"]):
            others = [n for axis, n in enumerate(t.shape) if axis != d]

            def read(idx: list[ir.Value], first: bool = k == 0) -> ir.Value:
                if first:
                    return self.elem(root.operands[0], idx)
                return load_element(b, self.address(out, idx, t), t.dtype)

            def line(rest: list[ir.Value], d: int = d, read=read) -> None:
                def full(i: ir.Value) -> list[ir.Value]:
                    return [*rest[:d], i, *rest[d:]]

                self.memo.clear()
                start = full(ir.Constant(I64, 0))
                b.store(read(start), slot)
                self.store(out, start, t, b.load(slot))

                def step(i: ir.Value) -> None:
                    self.memo.clear()
                    acc = self.combine(comb, b.load(slot), read(full(i)), t.dtype)
                    b.store(acc, slot)
                    self.store(out, full(i), t, acc)

                counted_loop(b, 1, t.shape[d], step, name="s")

            loop_nest(b, others, line)

    def reduce_window(self, out: ir.Value, begin: ir.Value, end: ir.Value) -> None:
        """out[o] folds init and x[o·s + w − low] over the window offsets w; a position in
        the padding contributes init (the interpreter pads with it)."""
        b = self.b
        root = self.root
        x, init_v = root.operands
        xt, t = tensor_type(x), tensor_type(root)
        comb = root.attrs["comb"]
        self.check_combinator(comb)
        dims, strides = root.attrs["dims"], root.attrs["strides"]
        pads = [
            window_padding(n, w, s, m, root.attrs["padding"])
            for n, w, s, m in zip(xt.shape, dims, strides, t.shape)
        ]
        slot = self.alloca(value_type(t.dtype))

        def at(o: list[ir.Value]) -> None:
            self.memo.clear()
            init = self.elem(init_v, [])
            b.store(init, slot)

            def tap(w: list[ir.Value]) -> None:
                self.memo.clear()
                pos = [
                    b.sub(b.add(b.mul(oi, ir.Constant(I64, s)), wi), ir.Constant(I64, lo))
                    for oi, wi, s, (lo, _) in zip(o, w, strides, pads)
                ]
                inside, clamped = self.clamp(pos, xt.shape)
                v = b.select(inside, self.elem(x, clamped), init)
                b.store(self.combine(comb, b.load(slot), v, t.dtype), slot)

            loop_nest(b, list(dims), tap)
            self.store(out, o, t, b.load(slot))

        self.each_output(t, at, begin, end)

    def convolve(self, out: ir.Value, begin: ir.Value, end: ir.Value) -> None:
        """A depthwise convolution with few outputs and long sums (a depthwise kernel's
        gradient) as dlvm.codegen.conv_long_sums's loop; other depthwise convolutions as a
        direct vectorised loop (dlvm.codegen.conv_depthwise); a kernel longer than the output
        (a kernel's gradient) as dlvm.codegen.conv_kernel_grad's product; few output
        positions and long sums as dlvm.codegen.conv_rows's row dots; a
        convolution as matrix products (dlvm.codegen.conv_gemm) where it suits them, with
        the element loop for a thread that cannot have the products' scratch buffer; the
        element loop alone otherwise (and in a GPU thread's share). A bf16 convolution as
        conv_kernel_grad's product (in pairs or in f32: dlvm.codegen.conv_kernel_grad_pairs),
        conv_depthwise's loop (in f32) or dlvm.codegen.conv_bf16's product where it suits them,
        else the element loop."""
        sched = self.fn.schedule
        lanes = max(1, sched.get("vectorize", 1)) if sched is not None else 1
        if tensor_type(self.core).dtype is DataType.BF16:
            if not self.flat and conv_kernel_grad.suits(self.core, lanes):
                gradient = kernel_gradient(self, self.core, out, lanes)
                self.convolve_product(gradient, out, begin, end)
                return
            if not self.flat and conv_depthwise.suits(self.core, lanes):
                depthwise = DepthwiseConv(self, self.core, out, lanes)
                depthwise.emit_images(begin, end, self.conv_split)
                return
            if self.flat or not conv_bf16.suits(self.core, lanes):
                self.convolve_elements(out, begin, end)
                return
            bf16 = Bf16Conv(self, self.core, out, lanes, self.conv_split)
            self.convolve_product(bf16, out, begin, end)
            return
        if not self.flat and conv_long_sums.suits(self.core, lanes):
            LongSums(self, self.core, out, lanes).emit_images(begin, end, self.conv_split)
            return
        if not self.flat and conv_depthwise.suits(self.core, lanes):
            DepthwiseConv(self, self.core, out, lanes).emit_images(begin, end, self.conv_split)
            return
        if self.flat or not conv_gemm.suits(self.core, lanes):
            self.convolve_elements(out, begin, end)
            return
        if conv_rows.suits(self.core, lanes):  # few output positions, long sums
            ConvRows(self, self.core, out, lanes, self.conv_split).emit_images(begin, end)
            return
        if conv_kernel_grad.suits(self.core, lanes):  # a kernel longer than the output
            self.convolve_product(KernelGradient(self, self.core, out, lanes), out, begin, end)
        # Shares of blocks of rows (a batch smaller than the threads) are not folded: folding
        # puts several whole images side by side.
        elif self.conv_split == 1 and conv_folded.folds(self.core, lanes):
            self.convolve_product(ConvFolded(self, self.core, out, lanes), out, begin, end)
        else:
            product = ConvGemm(self, self.core, out, lanes, self.conv_split)
            self.convolve_product(product, out, begin, end)

    def convolve_product(
        self, product: ConvGemm | KernelGradient, out: ir.Value, begin: ir.Value, end: ir.Value
    ) -> None:
        """The product's shares, the element loop for a thread without its scratch buffer."""
        b = self.b
        fallback = self.body.append_basic_block("conv.elements")
        if isinstance(product, KernelGradient):
            product.emit_images(begin, end, fallback, self.conv_split)
        else:
            product.emit_images(begin, end, fallback)
        done = self.body.append_basic_block("conv.done")
        b.branch(done)
        b.position_at_end(fallback)
        self.convolve_elements(out, begin, end)
        b.branch(done)
        b.position_at_end(done)

    def convolve_elements(self, out: ir.Value, begin: ir.Value, end: ir.Value) -> None:
        """XLA's convolution (dlvm/interp/convolution.py), one output element at a time
        (convolve_element), over the body's share of the output."""
        b = self.b
        at = self.convolve_element(out)
        t = tensor_type(self.core)
        if self.conv_split == 1 or self.flat:
            self.each_output(t, at, begin, end)
            return
        rows, split = math.prod(t.shape[2:-1]), self.conv_split

        def block(n: ir.Value, r0: ir.Value) -> None:
            def element(i: list[ir.Value]) -> None:
                outer = unravel(b, b.add(r0, i[1]), t.shape[2:-1])
                at([n, i[0], *outer, i[2]])

            loop_nest(b, [t.shape[1], rows // split, t.shape[-1]], element)

        conv_gemm.image_blocks(b, begin, end, split, rows, block)

    def convolve_element(self, out: ir.Value) -> Callable[[list[ir.Value]], None]:
        """at(idx) emits the output element at idx: the sum over the group's input channels
        and the kernel taps of input × kernel, where the input position of a tap is
        (p·stride + tap·rightDilation − padLow) / leftDilation when that divides exactly and
        lands inside the input; then the epilogue, if any, at that element (read back from
        out)."""
        b = self.b
        root = self.core
        x, k = root.operands
        xt, kt, t = tensor_type(x), tensor_type(k), tensor_type(root)
        n = len(xt.shape) - 2
        a = root.attrs
        strides = a.get("strides") or (1,) * n
        padding = a.get("padding") or ((0, 0),) * n
        ld = a.get("leftDilation") or (1,) * n
        rd = a.get("rightDilation") or (1,) * n
        groups = a.get("groups") or 1
        cin_g, cout_g = kt.shape[1], kt.shape[0] // groups
        # A bf16 convolution multiplies and sums in f32 and rounds once, as the interpreter.
        dt = sum_type(t.dtype)
        wide = dt is not t.dtype
        slot = self.alloca(value_type(dt))

        def operand(v: Value, idx: list[ir.Value]) -> ir.Value:
            return self.elem_in(v, idx, dt)

        def at(o: list[ir.Value]) -> None:
            batch, oc, p = o[0], o[1], o[2:]
            b.store(constant(dt, 0), slot)
            base = b.mul(b.udiv(oc, ir.Constant(I64, cout_g)), ir.Constant(I64, cin_g))

            def tap(ct: list[ir.Value]) -> None:
                self.memo.clear()
                c, taps = ct[0], ct[1:]
                pos, ok = [], []
                for pi, ti, s, r, (lo, _), dil in zip(p, taps, strides, rd, padding, ld):
                    q = b.add(b.mul(pi, ir.Constant(I64, s)), b.mul(ti, ir.Constant(I64, r)))
                    q = b.sub(q, ir.Constant(I64, lo))
                    if dil > 1:
                        ok.append(b.icmp_signed("==", b.srem(q, ir.Constant(I64, dil)),
                                                ir.Constant(I64, 0)))  # fmt: skip
                        q = b.sdiv(q, ir.Constant(I64, dil))
                    pos.append(q)
                inside, clamped = self.clamp(pos, xt.shape[2:])
                for cond in ok:
                    inside = b.and_(inside, cond)
                xv = operand(x, [batch, b.add(base, c), *clamped])
                xv = b.select(inside, xv, constant(dt, 0))
                kv = operand(k, [oc, c, *taps])
                acc = binary(b, "add", b.load(slot), binary(b, "multiply", xv, kv, dt), dt)
                b.store(acc, slot)

            loop_nest(b, [cin_g, *kt.shape[2:]], tap)
            total = b.load(slot)
            self.store(out, o, t, narrow(b, total, value_type(t.dtype)) if wide else total)
            if self.root is not root:
                self.memo.clear()
                self.store(out, o, t, self.elem(self.root, o))

        return at

    def each_output(
        self, t: TensorType, at: Callable[[list[ir.Value]], None], begin: ir.Value, end: ir.Value
    ) -> None:
        """at(idx) for the body's share of the output's elements: rows begin..end of its first
        dimension, or with `flat` (a GPU thread's share) its row-major elements begin..end."""
        if not t.shape:
            at([])
        elif self.flat:
            counted_loop(self.b, begin, end, lambda i: at(self.unravel(i, t.shape)), name="e")
        else:
            loop_nest(self.b, list(t.shape), at, first=(begin, end))

    def clamp(self, pos: list[ir.Value], shape: tuple[int, ...]) -> tuple[ir.Value, list[ir.Value]]:
        """Whether every position is inside the shape, and the positions clamped into it (so
        that a load is always in bounds; the caller selects it away when outside)."""
        b = self.b
        inside: ir.Value = ir.Constant(I1, 1)
        clamped = []
        for q, n in zip(pos, shape):
            ok = b.icmp_unsigned("<", q, ir.Constant(I64, n))
            inside = b.and_(inside, ok)
            clamped.append(b.select(ok, q, ir.Constant(I64, 0)))
        return inside, clamped

    # Combinators ---------------------------------------------------------------------------

    def check_combinator(self, comb: str | Value) -> None:
        """Refuses a combinator the kernel cannot compute inline: a function value, or a
        function that is not scalar straight-line code. Every fold is left to right in
        row-major order, the interpreter's, so any binary operation will do."""
        if isinstance(comb, str):
            return
        what = f"@{self.fn.name}: {self.root.opcode} by"
        if not isinstance(comb, Function):
            raise CodegenError(f"{what} a function value is not compiled in a kernel")
        bad = not_inlinable(comb)
        if bad is not None:
            raise CodegenError(f"{what} @{comb.name} is not compiled: {bad}")

    def combine(self, comb: str | Value, acc: ir.Value, x: ir.Value, dt: DataType) -> ir.Value:
        """comb(acc, x): the operation, or the function's body computed inline."""
        if isinstance(comb, str):
            return binary(self.b, comb, acc, x, dt)
        assert isinstance(comb, Function)
        return self.inline(comb, [acc, x])

    def inline(self, fn: Function, args: list[ir.Value]) -> ir.Value:
        """The value a scalar straight-line function returns for args (checked by
        not_inlinable), its instructions computed as a kernel's elements are."""
        saved, self.memo = self.memo, {}
        bound, self.bound = self.bound, dict(zip(fn.arguments, args))
        try:
            ret = fn.blocks[0].instructions[-1]
            return self.elem(ret.operands[0], [])
        finally:
            self.memo, self.bound = saved, bound

    # Elements ------------------------------------------------------------------------------

    def alloca(self, ty: ir.Type) -> ir.Value:
        """A stack slot in the entry block (promoted to a register by LLVM)."""
        b = self.b
        here = b.block
        b.position_at_start(self.body.entry_basic_block)
        slot = b.alloca(ty)
        b.position_at_end(here)
        return slot

    def unravel(self, offset: ir.Value, shape: tuple[int, ...]) -> list[ir.Value]:
        """The row-major index of offset in shape, remembered so that `linear` gives the
        offset back without arithmetic."""
        idx = unravel(self.b, offset, shape)
        self.remember(offset, idx, shape)
        return idx

    def remember(self, offset: ir.Value, idx: list[ir.Value], shape: tuple[int, ...]) -> None:
        """That idx is the row-major index of offset in shape (as `unravel` remembers it)."""
        self.offsets[tuple(id(i) for i in idx)] = (offset, shape, idx)

    def linear(self, idx: list[ir.Value], shape: tuple[int, ...]) -> ir.Value:
        """The row-major offset of idx in shape. An index `unravel` made from an offset in the
        same shape is that offset: a chain of shapeCasts (a pooling gradient's views) costs no
        division, and the offset dominates wherever its index is used."""
        hit = self.offsets.get(tuple(id(i) for i in idx))
        if hit is not None and hit[1] == shape:
            return hit[0]
        return linear_index(self.b, idx, shape)

    def address(self, base: ir.Value, idx: list[ir.Value], t: TensorType) -> ir.Value:
        return self.address_at(base, self.linear(idx, t.shape), t)

    def address_at(self, base: ir.Value, off: ir.Value, t: TensorType) -> ir.Value:
        return self.b.gep(base, [off], source_etype=memory_type(t.dtype))

    def store(self, base: ir.Value, idx: list[ir.Value], t: TensorType, v: ir.Value) -> None:
        store_element(self.b, v, self.address(base, idx, t), t.dtype)

    def store_product(self, base: ir.Value, idx: list[ir.Value], v: ir.Value) -> None:
        """An element of the kernel's product (in the product's type) into out, where it is
        held in `held`'s type until the epilogue reads it back."""
        held = self.held
        assert isinstance(held, TensorType)
        if held.dtype is not tensor_type(self.core).dtype:
            v = self.b.fpext(v, value_type(held.dtype))
        self.store(base, idx, held, v)

    def store_root(self, base: ir.Value, idx: list[ir.Value]) -> None:
        """The root's element at idx into out: an epilogue, over the product held there."""
        self.memo.clear()
        self.store(base, idx, tensor_type(self.root), self.elem(self.root, idx))

    def elem(self, v: Value, idx: list[ir.Value]) -> ir.Value:
        """The element of v at idx, computed at the builder's position: each element an
        element needs first, depth first and in operand order, each (value, index) once."""
        stack: list[tuple[Steps, tuple[int, tuple[int, ...]], list[ir.Value]]] = []
        wanted: tuple[Value, list[ir.Value]] | None = (v, idx)
        result: ir.Value | None = None  # what the innermost generator is sent next
        while True:
            if wanted is not None:
                w, at = wanted
                # Keyed by identity; the entry keeps `at` alive so that no id is reused.
                key = (id(w), tuple(id(i) for i in at))
                hit = self.memo.get(key)
                if hit is None:
                    stack.append((self._elem(w, at), key, at))
                    result = None
                elif not stack:
                    return hit[0]
                else:
                    result = hit[0]
            steps, key, at = stack[-1]
            try:
                wanted = steps.send(result)
            except StopIteration as finished:
                stack.pop()
                result, wanted = finished.value, None
                self.memo[key] = (result, at)
                if not stack:
                    return result

    def _elem(self, v: Value, idx: list[ir.Value]) -> Steps:
        """The element of v at idx, as Steps."""
        b = self.b
        if v in self.bound:  # an argument of a function computed inline
            return self.bound[v]
        if isinstance(v, Argument):
            t = tensor_type(v)
            return load_element(b, self.address(self.ptrs[v], idx, t), t.dtype)
        if isinstance(v, LiteralValue):
            return self.literal(v, idx)
        if v is self.core and v is not self.root:  # an epilogue reads the product from out
            t, held = tensor_type(v), self.held
            assert isinstance(held, TensorType)
            e = load_element(b, self.address(self.out, idx, held), held.dtype)
            # bf16 sums held in f32 narrow exactly
            return e if held.dtype is t.dtype else b.fptrunc(e, value_type(t.dtype))
        assert isinstance(v, Instruction)
        op = v.opcode
        fam = v.op.family
        t = tensor_type(v)
        operands: list[ir.Value] = []
        if fam in ("unary", "binary", "boolean", "shift", "compare"):
            for o in v.operands:
                operands.append((yield o, self.broadcast(idx, t, o)))
            if fam == "compare":
                return compare(b, op, operands[0], operands[1], tensor_type(v.operands[0]).dtype)
            if op == "not":
                return b.not_(operands[0])
            if len(operands) == 1:
                return unary(b, op, operands[0], t.dtype, self.fast_math)
            return binary(b, op, operands[0], operands[1], t.dtype)
        if op == "select":
            for o in v.operands:
                operands.append((yield o, self.broadcast(idx, t, o)))
            x, y, c = operands
            return b.select(c, x, y)
        if op == "dataTypeCast":
            src = v.operands[0]
            held = self.held
            if src is self.core and isinstance(held, TensorType) and held.dtype is t.dtype:
                # the product's bf16 sums, already widened in out
                return load_element(b, self.address(self.out, idx, held), held.dtype)
            return cast(b, (yield src, idx), tensor_type(src).dtype, t.dtype)
        if op == "convert":
            src = v.operands[0]
            return convert(b, (yield src, idx), tensor_type(src).dtype, t.dtype)
        if op == "bitCast":
            return (yield from self.bit_cast(v, idx))
        if op == "literal":
            return self.literal(v.operands[0], idx)  # type: ignore[arg-type]
        if op in STRIDED_VIEWS:
            return (yield from self.view(v, idx))
        if op == "reverse":
            flipped = list(idx)
            for d in v.attrs["dims"]:
                flipped[d] = b.sub(ir.Constant(I64, t.shape[d] - 1), idx[d])
            return (yield v.operands[0], flipped)
        if op == "slice":
            first = b.add(idx[0], ir.Constant(I64, v.attrs["lo"]))
            return (yield v.operands[0], [first, *idx[1:]])
        if op == "padShape":
            i = v.attrs["index"]
            return (yield v.operands[0], idx[:i] + idx[i + 1 :])
        if op == "squeezeShape":
            i = v.attrs["index"]
            return (yield v.operands[0], [*idx[:i], ir.Constant(I64, 0), *idx[i:]])
        if op == "concatenate":
            return (yield from self.concatenate(v, idx))
        if op == "gather":
            return gather_element(self, v, idx)
        if op == "apply" and isinstance(v.operands[0], Function):  # inside a combinator
            for a in v.operands[1:]:
                operands.append((yield a, []))
            return self.inline(v.operands[0], operands)
        raise CodegenError(f"@{self.fn.name}: '{op}' cannot be fused into a kernel")

    def view(self, v: Instruction, idx: list[ir.Value]) -> Steps:
        """The element of a chain of transposes and changes of shape ending at v: read where
        it lies when the chain is a strided view (dlvm.ir.strided) of the tensor it starts
        from, at Σ idx·stride of an argument, or at that tensor's index found axis by axis,
        without the division and remainder per step that would keep LLVM from vectorising a
        permuted copy (a multi-head attention's split into heads). Otherwise (or when the
        index came from an offset in the same shape, which a plain change of shape gives back
        for free) step by step: a transpose reverses the index, a change of shape unravels
        the row-major offset in the operand's shape."""
        t = tensor_type(v)
        found = view_strides(v)
        if found is not None and found[0] not in self.bound:
            base, strides = found
            bt = tensor_type(base)
            plain = all(s == c for n, s, c in zip(t.shape, strides, contiguous_strides(t.shape))
                        if n != 1)  # fmt: skip
            off = self.linear(idx, t.shape) if plain else strided_offset(self.b, idx, strides)
            if not (plain or self.in_chain) and t.shape[-1] > 1 and strides[-1] == 1:
                self.reads_permuted = True
            if isinstance(base, Argument):
                return load_element(self.b, self.address_at(self.ptrs[base], off, bt), bt.dtype)
            unravelled = self.offsets.get(tuple(id(i) for i in idx))
            terms = base_axis_terms(bt.shape, t.shape, strides)
            if terms is not None and not (plain and unravelled is not None):
                at = [strided_offset(self.b, [idx[k] for k, _ in ax], tuple(m for _, m in ax))
                      for ax in terms]  # fmt: skip
                return (yield base, at)
            return (yield base, self.unravel(off, bt.shape))
        if v.opcode == "transpose":
            at = list(reversed(idx))
        else:
            at = self.unravel(self.linear(idx, t.shape), tensor_type(v.operands[0]).shape)
        # The rest of the chain is read at an unravelled index (not the loops' own): no
        # permuted copy for LLVM to vectorise along its last axis.
        outer, self.in_chain = self.in_chain, True
        x = yield v.operands[0], at
        self.in_chain = outer
        return x

    def bit_cast(self, v: Instruction, idx: list[ir.Value]) -> Steps:
        """The bits of the operand's element at the same row-major offset, read as the new
        element type (of the same size: bools only to bools)."""
        b = self.b
        src = v.operands[0]
        st, t = tensor_type(src), tensor_type(v)
        at = idx if st.shape == t.shape else self.unravel(self.linear(idx, t.shape), st.shape)
        x = yield src, at
        target = value_type(t.dtype)
        return x if x.type == target else b.bitcast(x, target)

    def broadcast(self, idx: list[ir.Value], t: TensorType, operand: Value) -> list[ir.Value]:
        """The index of an elementwise operand (a scalar, or equal rank with 1s stretched)."""
        ot = tensor_type(operand)
        if not ot.shape:
            return []
        zero = ir.Constant(I64, 0)
        return [zero if n == 1 and m != 1 else i for i, n, m in zip(idx, ot.shape, t.shape)]

    def literal(self, lit: LiteralValue, idx: list[ir.Value]) -> ir.Value:
        t = tensor_type(lit)
        if isinstance(lit.literal, ScalarLiteral):
            return constant(t.dtype, lit.literal.value)
        if isinstance(lit.literal, SpecialLiteral) and lit.literal.word in ("zero", "undefined"):
            return constant(t.dtype, 0)
        if isinstance(lit.literal, DenseLiteral):  # its bytes are the table already
            table = self.constant_global(byte_array(lit.literal.data))
            table.align = t.dtype.size  # as an array of the elements would be
        else:
            table = self.constant_table(constant_array(lit), t.dtype)
        off = linear_index(self.b, idx, t.shape)
        ptr = self.b.gep(table, [off], source_etype=memory_type(t.dtype))
        return load_element(self.b, ptr, t.dtype)

    def constant_table(self, values: np.ndarray, dt: DataType) -> ir.GlobalVariable:
        mt = memory_type(dt)
        items = [
            ir.Constant(mt, int(bool(x)) if dt.is_bool else (float(x) if dt.is_float else int(x)))
            for x in values
        ]
        ty = ir.ArrayType(mt, len(items))
        return self.constant_global(ir.Constant(ty, items))

    def constant_global(self, value: ir.Constant) -> ir.GlobalVariable:
        """A private constant of the kernel's module holding value."""
        name = f"{self.body.name}.lit{self.literal_count}"
        self.literal_count += 1
        g = ir.GlobalVariable(self.module, value.type, name)
        g.initializer = value
        g.global_constant = True
        g.linkage = "private"
        return g

    def concatenate(self, v: Instruction, idx: list[ir.Value]) -> Steps:
        """The element comes from the operand whose range along the axis holds idx[axis]:
        a chain of branches, one per operand, meeting at a phi."""
        b = self.b
        axis = v.attrs["axis"]
        t = tensor_type(v)
        merge = self.body.append_basic_block("cat.merge")
        incoming: list[tuple[ir.Value, ir.Block]] = []
        start = 0
        saved = dict(self.memo)
        for k, operand in enumerate(v.operands):
            size = tensor_type(operand).shape[axis]
            local = [*idx[:axis], b.sub(idx[axis], ir.Constant(I64, start)), *idx[axis + 1 :]]
            if k == len(v.operands) - 1:
                self.memo = dict(saved)
                incoming.append(((yield operand, local), b.block))
                b.branch(merge)
                break
            here = self.body.append_basic_block(f"cat.{k}")
            other = self.body.append_basic_block(f"cat.{k}.next")
            b.cbranch(b.icmp_signed("<", idx[axis], ir.Constant(I64, start + size)), here, other)
            b.position_at_end(here)
            self.memo = dict(saved)
            incoming.append(((yield operand, local), b.block))
            b.branch(merge)
            b.position_at_end(other)
            start += size
        b.position_at_end(merge)
        self.memo = saved
        phi = b.phi(value_type(t.dtype))
        for value, block in incoming:
            phi.add_incoming(value, block)
        return phi
