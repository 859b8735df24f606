"""compute-scheduling (CS): gives every function a schedule (dlvm.ir.schedule) and sets stage
schedule (docs/ir.md, "Stages").

A `[compute]` function gets `[schedule cpu parallel P vectorize W grain G]`: P outer loops of
its loop nest are split across the runtime's threads when the kernel does enough work to pay
for waking them (P = 0 otherwise), the innermost loop is vectorised W lanes wide, and a thread
takes at least G iterations of the parallel loop. A matrix product with only a few rows adds
`columns C`: the parallel loop runs over groups of C columns instead of rows. A parallel
convolution with a batch smaller than CONV_SHARES (inference, often a batch of 1) adds `split
S`: the parallel loop runs over each image's S blocks of output rows (the output positions but
the last axis), S the fewest that divide the rows and give batch × S ≥ CONV_SHARES shares, so
that more threads than images get work (a convolution that runs as dot products of the
kernel's rows, dlvm.codegen.conv_rows, cuts its output channels into the S blocks instead).
A host function gets `[schedule host]`.

With `fast_math` (`telc build --fast-math`), a CPU kernel that computes an f32 `exp`, `tanh` or
`log` adds `fastmath 1`: code generation computes those with the faster approximations of
dlvm.codegen.fast_math (docs/ir.md, "Fast math") instead of the 2-ulp ones; a memory-bound
pointwise kernel with an output larger than the last-level cache adds `stream 1`: its output is
stored by non-temporal vector stores (dlvm.transforms.stream_schedule says which kernels).

With `bf16_pairs` (a CPU with AVX-512 BF16), a kernel whose core is a bf16 matrix product or
convolution adds `pairs 1`: its packed operands go in pairs of steps of the sum for `vdpbf16ps`
(dlvm.codegen.bf16_pairs); without it, they are widened to f32 as they are packed.

Scheduling for CUDA as well (`cuda=True`, a library that runs on either device) gives every
`[compute]` function a second line, its GPU launch:
- a matrix product of floats with at least a tile's worth of outputs (64 × 64),
  `[schedule cuda block 16 x 16 tile 64 x 64 x 16 grid X x Y x Z]`:
  each block of 16 × 16 threads computes a 64 × 64 tile of the output (4 × 4 elements a thread)
  from 16-deep slices of the operands staged in shared memory; X tiles across the columns, Y
  down the rows, Z one per batch element (dlvm.codegen.cuda_matmul);
- an f16 or bf16 product of that size, on tensor cores: `[schedule cuda block 128 tile 64 x 64
  x 16 mma 1 grid X x Y x Z]`, four warps a block, each 2 × 4 mma.m16n8k16 products with f32
  accumulators (dlvm.codegen.cuda_mma); with `tf32`, f32 products too (`… mma 1 tf32 1 …`:
  operands rounded to TF32, mma.m16n8k8). Only these bf16 products stay bf16 in a build for
  CUDA: the others are taken in f32 before compute generation (dlvm.codegen.bf16_products);
- a convolution of floats with at least 64 × 64 outputs, the same tiled product over its
  implicit matrices: the group's kernel (output channels × input channels and taps) times the
  inputs each tap reads (× batch and output positions), grid Z over the groups
  (dlvm.codegen.cuda_conv);
- a long reduction into few outputs by add, multiply, max or min,
  `[schedule cuda block 256 grid G cooperative 1]`: each block reduces one output element at a
  time, its threads' partial results combined in shared memory and warp shuffles
  (dlvm.codegen.cuda_reduce);
- any other kernel, `[schedule cuda block B grid G]`: B threads a block, G blocks, and a
  grid-stride loop over the output's elements (a smaller product computes each as one
  thread's sum; a scan is one thread's pass over the whole tensor), consecutive threads on
  consecutive elements so that accesses coalesce."""

from __future__ import annotations

import math

from dlvm.ir.schedule import Schedule
from dlvm.ir.types import DataType, TensorType
from dlvm.ir.values import Function, Instruction, Module
from dlvm.transforms.compute_generation import kernel_core
from dlvm.transforms.int8_products import int8_rows_product
from dlvm.transforms.pass_base import Pass
from dlvm.transforms.stream_schedule import streams

# Work (elements touched) below which a kernel runs on one thread: waking a worker costs a
# few microseconds, the time to stream ~64K floats.
PARALLEL_WORK = 1 << 16
# A matrix product with fewer rows than this is shared out by groups of STRIP_COLUMNS columns
# (a multiple of every tile width of dlvm.codegen.matmul), as `columns C` in its schedule.
FEW_ROWS = 8
STRIP_COLUMNS = 64
# A parallel convolution's batch is shared out in at least this many parts (images, or blocks
# of an image's output rows): enough for 8 threads, or 2 with 4 parts each to balance their load.
CONV_SHARES = 8
# CUDA: threads a block, the most blocks a grid-stride kernel launches (an H200's 132
# multiprocessors hold 8 such blocks each; more only queue), and the product's tiles.
CUDA_BLOCK = 256
CUDA_MAX_GRID = 4096
CUDA_TILE = (64, 64, 16)
CUDA_THREADS = (16, 16)
# A reduction of at least CUDA_BLOCK elements per output into fewer than this many outputs (too
# few for a thread each to fill the GPU) runs a block per output; only by these combinators,
# which may be applied in any order (float sums then agree to rounding).
CUDA_BLOCK_OUTPUTS = 1 << 16
BLOCK_COMBINATORS = ("add", "multiply", "max", "min")
# The operations `fastmath 1` computes with dlvm.codegen.fast_math (f32 only).
FAST_MATH_OPS = ("exp", "tanh", "log")


class ComputeScheduling(Pass):
    name = "compute-scheduling"
    alias = "CS"
    summary = "decides loop schedules (threads, vector width) for every kernel; sets stage schedule"
    stages = ("compute", "schedule")

    # Whether a pass made without saying schedules for CUDA too (dlopt --target cuda), and
    # computes f32 products in TF32 on tensor cores there (--tf32).
    default_cuda = False
    default_tf32 = False

    def __init__(
        self,
        vector_bits: int = 256,
        cuda: bool | None = None,
        tf32: bool | None = None,
        fast_math: bool = False,
        bf16_pairs: bool = False,
        vnni: bool = False,
    ) -> None:
        self.vector_bits = vector_bits
        self.bf16_pairs = bf16_pairs
        self.cuda = self.default_cuda if cuda is None else cuda
        self.tf32 = self.default_tf32 if tf32 is None else tf32
        self.fast_math = fast_math
        self.vnni = vnni

    def run(self, module: Module) -> bool:
        changed = module.stage != "schedule"
        module.stage = "schedule"
        for fn in module.functions:
            if not fn.blocks or fn.is_declaration:
                continue
            schedule = self.kernel_schedule(fn) if fn.compute else Schedule("host")
            if fn.schedule != schedule:
                fn.schedule = schedule
                changed = True
            cuda = cuda_schedule(fn, self.tf32) if self.cuda and fn.compute else None
            if fn.cuda_schedule != cuda:
                fn.cuda_schedule = cuda
                changed = True
        return changed

    def kernel_schedule(self, fn: Function) -> Schedule:
        root = kernel_core(fn)
        out = root.type
        assert isinstance(out, TensorType)
        lanes = max(1, self.vector_bits // max(8, out.dtype.bits))
        work = _work(root)
        outer = out.shape[0] if out.shape else 1
        columns = 0
        if root.opcode == "dot" and len(out.shape) == 2 and out.shape[0] < FEW_ROWS:
            # Too few rows to share: the threads take groups of columns instead.
            outer = math.ceil(out.shape[1] / STRIP_COLUMNS)
            columns = STRIP_COLUMNS
        split = 1
        if root.opcode == "convolve" and outer < CONV_SHARES and work >= PARALLEL_WORK:
            split = conv_split(outer, math.prod(out.shape[2:-1]))
            outer *= split
        parallel = 1 if work >= PARALLEL_WORK and outer > 1 else 0
        grain = max(1, math.ceil(outer * PARALLEL_WORK / max(work, 1))) if parallel else 0
        items = [("parallel", (parallel,)), ("vectorize", (lanes,))]
        if parallel:
            items.append(("grain", (min(grain, outer),)))
            if columns:
                items.append(("columns", (columns,)))
            if split > 1:
                items.append(("split", (split,)))
        if self.fast_math and any(_fast_math_op(i) for i in fn.blocks[0].instructions):
            items.append(("fastmath", (1,)))
        if self.fast_math and streams(fn):
            items.append(("stream", (1,)))
        if self.bf16_pairs and root.opcode in ("dot", "convolve") and out.rank >= 2 and (
                out.dtype is DataType.BF16):  # fmt: skip
            items.append(("pairs", (1,)))
        if self.vnni and int8_rows_product(fn) is not None:
            items.append(("vnni", (1,)))
        return Schedule("cpu", tuple(items))


def _fast_math_op(inst: Instruction) -> bool:
    """Whether --fast-math computes `inst` differently: an f32 exp, tanh or log."""
    t = inst.type
    return inst.opcode in FAST_MATH_OPS and isinstance(t, TensorType) and t.dtype is DataType.F32


def conv_split(batch: int, rows: int) -> int:
    """How many blocks of its `rows` output rows each of a convolution's `batch` images is cut
    into: the fewest that divide the rows evenly (every block the same loop) and give at least
    CONV_SHARES blocks in all, or one per row."""
    return next((d for d in range(1, rows + 1) if rows % d == 0 and batch * d >= CONV_SHARES),
                rows)  # fmt: skip


def on_tensor_cores(inst: Instruction, tf32: bool = False) -> bool:
    """Whether `inst` is a product that CUDA computes on tensor cores: a matrix `dot` of f16 or
    bf16 (or f32 with `tf32`) with at least a tile's worth of outputs."""
    out = inst.type
    if inst.opcode != "dot" or not isinstance(out, TensorType) or out.rank < 2:
        return False
    rows, cols, _ = CUDA_TILE
    types = (DataType.F16, DataType.BF16, DataType.F32) if tf32 else (DataType.F16, DataType.BF16)
    return out.dtype in types and out.shape[-2] * out.shape[-1] >= rows * cols


def cuda_schedule(fn: Function, tf32: bool = False) -> Schedule:
    """The GPU launch of a [compute] function (the module docstring); `tf32`: f32 products on
    tensor cores in TF32."""
    root = kernel_core(fn)
    out = root.type
    assert isinstance(out, TensorType)
    rows, cols, _ = CUDA_TILE
    if on_tensor_cores(root, tf32):
        tiles = (
            math.ceil(out.shape[-1] / cols),
            math.ceil(out.shape[-2] / rows),
            math.prod(out.shape[:-2]),
        )
        mma = (("mma", (1,)), ("tf32", (1,))) if out.dtype is DataType.F32 else (("mma", (1,)),)
        return Schedule("cuda", (("block", (128,)), ("tile", CUDA_TILE), *mma, ("grid", tiles)))
    if root.opcode == "dot" and out.rank >= 2 and out.dtype.is_float and (
            out.shape[-2] * out.shape[-1] >= rows * cols):  # fmt: skip
        tiles = (
            math.ceil(out.shape[-1] / cols),
            math.ceil(out.shape[-2] / rows),
            math.prod(out.shape[:-2]),
        )
        return Schedule("cuda", (("block", CUDA_THREADS), ("tile", CUDA_TILE), ("grid", tiles)))
    if root.opcode == "convolve" and out.dtype.is_float and math.prod(out.shape) >= rows * cols:
        x, k = (o.type for o in root.operands)
        assert isinstance(x, TensorType) and isinstance(k, TensorType)
        groups = root.attrs.get("groups") or 1
        columns = out.shape[0] * math.prod(out.shape[2:])  # batch × output positions
        tiles = (math.ceil(columns / cols), math.ceil(k.shape[0] // groups / rows), groups)
        return Schedule("cuda", (("block", CUDA_THREADS), ("tile", CUDA_TILE), ("grid", tiles)))
    if root.opcode == "reduce" and root is fn.blocks[0].instructions[-1].operands[0]:
        src = root.operands[0].type
        assert isinstance(src, TensorType)
        length, outputs = math.prod(src.shape) // max(1, math.prod(out.shape)), math.prod(out.shape)
        comb = root.attrs["comb"]
        if (isinstance(comb, str) and comb in BLOCK_COMBINATORS and not out.dtype.is_bool
                and length >= CUDA_BLOCK and outputs < CUDA_BLOCK_OUTPUTS):  # fmt: skip
            grid = min(CUDA_MAX_GRID, outputs)
            return Schedule("cuda", (("block", (CUDA_BLOCK,)), ("grid", (grid,)),
                                     ("cooperative", (1,))))  # fmt: skip
    # One pass over the whole tensor for a scan (dlvm.codegen.kernel).
    extent = 1 if root.opcode == "scan" else math.prod(out.shape)
    block = min(CUDA_BLOCK, 32 * math.ceil(extent / 32))
    grid = min(CUDA_MAX_GRID, math.ceil(extent / block))
    return Schedule("cuda", (("block", (block,)), ("grid", (grid,))))


def _work(root: Instruction) -> int:
    """Roughly the number of multiply-adds or elements the kernel touches."""
    out = root.type
    assert isinstance(out, TensorType)
    n = math.prod(out.shape)
    if root.opcode == "dot":
        a = root.operands[0].type
        assert isinstance(a, TensorType)
        return n * a.shape[-1]
    if root.opcode == "convolve":  # each output element sums its group's channels and taps
        x, k = (v.type for v in root.operands)
        assert isinstance(x, TensorType) and isinstance(k, TensorType)
        return max(n * math.prod(k.shape[1:]), math.prod(x.shape))
    if root.opcode in ("reduce", "reduceWindow", "scan"):
        src = root.operands[0].type
        assert isinstance(src, TensorType)
        return max(n, math.prod(src.shape))
    return n
