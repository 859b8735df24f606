"""compute-scheduling (CS): gives every function a schedule (dlvm.ir.schedule) and sets stage
schedule (DESIGN.md section 2).

A `[compute]` function gets `[schedule cpu parallel P vectorize W grain G]`: P outer loops of
its loop nest are split across the runtime's threads when the kernel does enough work to pay
for waking them (P = 0 otherwise), the innermost loop is vectorised W lanes wide, and a thread
takes at least G iterations of the parallel loop. A matrix product with only a few rows adds
`columns C`: the parallel loop runs over groups of C columns instead of rows. A host function
gets `[schedule host]`."""

from __future__ import annotations

import math

from dlvm.ir.schedule import Schedule
from dlvm.ir.types import TensorType
from dlvm.ir.values import Function, Instruction, Module
from dlvm.transforms.compute_generation import kernel_core
from dlvm.transforms.pass_base import Pass

# Work (elements touched) below which a kernel runs on one thread: waking a worker costs a
# few microseconds, the time to stream ~64K floats.
PARALLEL_WORK = 1 << 16
# A matrix product with fewer rows than this is shared out by groups of STRIP_COLUMNS columns
# (a multiple of every tile width of dlvm.codegen.matmul), as `columns C` in its schedule.
FEW_ROWS = 8
STRIP_COLUMNS = 64


class ComputeScheduling(Pass):
    name = "compute-scheduling"
    alias = "CS"
    summary = "decides loop schedules (threads, vector width) for every kernel; sets stage schedule"
    stages = ("compute", "schedule")

    def __init__(self, vector_bits: int = 256) -> None:
        self.vector_bits = vector_bits

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
        parallel = 1 if work >= PARALLEL_WORK and outer > 1 else 0
        grain = max(1, math.ceil(outer * PARALLEL_WORK / max(work, 1))) if parallel else 0
        items = [("parallel", (parallel,)), ("vectorize", (lanes,))]
        if parallel:
            items.append(("grain", (min(grain, outer),)))
            if columns:
                items.append(("columns", (columns,)))
        return Schedule("cpu", tuple(items))


def _work(root: Instruction) -> int:
    """Roughly the number of multiply-adds or elements the kernel touches."""
    out = root.type
    assert isinstance(out, TensorType)
    n = math.prod(out.shape)
    if root.opcode == "dot":
        a = root.operands[0].type
        assert isinstance(a, TensorType)
        return n * a.shape[-1]
    if root.opcode in ("reduce", "convolve", "reduceWindow", "scan"):
        src = root.operands[0].type
        assert isinstance(src, TensorType)
        return max(n, math.prod(src.shape))
    return n
