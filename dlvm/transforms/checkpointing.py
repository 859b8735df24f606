"""checkpointing (CP): trades memory for recomputation, chiefly in adjoint code.

A gradient function keeps forward values alive until the reverse sweep reads them. Within each
block, this pass finds the point where the live tensors take the most memory and, while that
exceeds the budget, recomputes a cheap value (elementwise, compare, select, shape operations)
right before its first use after that point instead of keeping it alive across it. A value's
recomputation may recompute cheap operands too; expensive ones (`dot`, `convolve`, calls,
reductions) are checkpoints: they stay alive, and a value is only recomputed when that frees
more memory than the checkpoints it extends. Results are unchanged: only pure instructions are
duplicated.

The budget is in bytes (default 0: recompute whatever saves memory); `dlopt
--checkpoint-budget BYTES` sets it.
"""

from __future__ import annotations

from typing import ClassVar

from dlvm.analysis.dataflow import data_flow
from dlvm.ir.types import TensorType, canonical
from dlvm.ir.values import Argument, Block, Function, Instruction, Value
from dlvm.transforms.pass_base import FunctionPass

# Cheap besides the elementwise instructions (OpDef.elementwise).
CHEAP_FAMILIES = frozenset({"cast", "shape"})
MAX_ROUNDS = 1000


class Checkpointing(FunctionPass):
    name: ClassVar[str] = "checkpointing"
    alias: ClassVar[str] = "CP"
    summary: ClassVar[str] = "recompute cheap forward values instead of keeping them alive"
    stages: ClassVar[tuple[str, ...]] = ("optimizable",)
    default_budget: ClassVar[int] = 0

    def __init__(self, budget: int | None = None) -> None:
        self.budget = self.default_budget if budget is None else budget

    def run_on_function(self, fn: Function) -> bool:
        changed = False
        for b in fn.blocks:
            changed |= BlockCheckpointer(b, self.budget).run()
        return changed


def size_of(v: Value) -> int:
    """Bytes a value occupies (tensors only; everything else counts as nothing)."""
    t = canonical(v.type)
    if not isinstance(t, TensorType):
        return 0
    return t.unit_count * max(1, t.dtype.bits // 8)


def is_cheap(inst: Instruction) -> bool:
    return inst.op.pure and (inst.op.elementwise or inst.op.family in CHEAP_FAMILIES)


class BlockCheckpointer:
    def __init__(self, block: Block, budget: int) -> None:
        self.block = block
        self.budget = budget
        # Recomputed instructions are never recomputed again: each value moves at most once,
        # which bounds the work and keeps recomputation from chasing its own tail.
        self.copies: set[Value] = set()

    def run(self) -> bool:
        changed = False
        for _ in range(MAX_ROUNDS):
            point, live = self.peak()
            if point < 0 or sum(size_of(v) for v in live) <= self.budget:
                break
            plan = self.best_plan(point, live)
            if plan is None:
                break
            self.rematerialize(point, *plan)
            changed = True
        return changed

    def intervals(self) -> dict[Value, tuple[int, int]]:
        """Each local value's (definition index, last use index) in this block; block
        arguments are defined at -1, and a value another block uses lives past the end."""
        insts = self.block.instructions
        span: dict[Value, list[int]] = {a: [-1, -1] for a in self.block.arguments}
        for i, inst in enumerate(insts):
            for v in inst.uses():
                if v in span:
                    span[v][1] = i
            span[inst] = [i, i]
        fn = self.block.function
        if fn is not None:
            flow = data_flow(fn)
            for inst in insts:
                if any(u.block is not self.block for u in flow.users(inst)):
                    span[inst][1] = len(insts) + 1
        return {v: (d, u) for v, (d, u) in span.items()}

    def peak(self) -> tuple[int, list[Value]]:
        """The program point (an instruction index) where live local tensors take the most
        bytes, and the values live across it (defined before, used after)."""
        spans = self.intervals()
        n = len(self.block.instructions)
        diff = [0] * (n + 3)
        for v, (d, u) in spans.items():
            if u > d + 1:
                diff[d + 1 + 1] += size_of(v)  # shifted by one: index -1 is the arguments
                diff[u + 1] -= size_of(v)
        best, best_point, running = -1, -1, 0
        for p in range(n):
            running += diff[p + 1]
            if running > best:
                best, best_point = running, p
        self.spans = spans
        live = [v for v, (d, u) in spans.items() if d < best_point < u]
        return best_point, live

    def best_plan(
        self, point: int, live: list[Value]
    ) -> tuple[Instruction, list[Instruction]] | None:
        """The value to recompute after `point` and the instructions its recomputation needs
        (in order), choosing the one that frees the most bytes."""
        live_set = set(live)
        best: tuple[int, Instruction, list[Instruction]] | None = None
        end = len(self.block.instructions)
        for v in live:
            if (
                not isinstance(v, Instruction)
                or not is_cheap(v)
                or v in self.copies
                or self.spans[v][1] > end
            ):
                continue  # (a value used by another block stays alive anyway)
            closure: list[Instruction] = []
            extended: set[Value] = set()
            if not self.closure(v, live_set, closure, extended, set()):
                continue
            saving = size_of(v) - sum(size_of(x) for x in extended)
            if saving > 0 and (best is None or saving > best[0]):
                best = (saving, v, closure)
        return None if best is None else (best[1], best[2])

    def closure(
        self,
        v: Instruction,
        live: set[Value],
        out: list[Instruction],
        extended: set[Value],
        seen: set[Value],
    ) -> bool:
        """Collects in `out` the cheap instructions that recompute v from values available
        after the peak (live there, arguments, constants, or checkpoints that `extended`
        keeps alive); False if v cannot be recomputed here."""
        if v in seen:
            return True
        seen.add(v)
        for u in v.uses():
            if u in live or not isinstance(u, (Instruction, Argument)):
                continue
            if isinstance(u, Argument) or u.block is not self.block:
                continue  # defined outside the block or an argument: always available
            if is_cheap(u) and u not in self.copies:
                if not self.closure(u, live, out, extended, seen):
                    return False
            else:
                extended.add(u)
        out.append(v)
        return True

    def rematerialize(self, point: int, value: Instruction, chain: list[Instruction]) -> None:
        insts = self.block.instructions
        late = [i for i in insts[point + 1 :] if value in set(i.uses())]
        first = insts.index(late[0])
        copies: dict[Value, Value] = {}
        for k, inst in enumerate(chain):
            copy = Instruction(inst.op, list(inst.operands), dict(inst.attrs), inst.type)
            copy.map_values(lambda x: copies.get(x, x))
            self.block.insert(first + k, copy)
            copies[inst] = copy
            self.copies.add(copy)
        for user in late:
            user.map_values(lambda x: copies.get(x, x) if x is value else x)
