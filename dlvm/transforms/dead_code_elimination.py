"""dead-code-elimination (DCE): removes unused instructions that have no side effects (calls
included, through the side-effect analysis), then the operands that became unused."""

from __future__ import annotations

from collections import Counter

from dlvm.analysis.side_effects import side_effects
from dlvm.ir.values import Function, Instruction, Module
from dlvm.transforms.pass_base import FunctionPass


class DeadCodeElimination(FunctionPass):
    name = "dead-code-elimination"
    alias = "DCE"
    summary = "remove unused side-effect-free instructions"

    def prepare(self, module: Module) -> None:
        self.effects = side_effects(module)

    def run_on_function(self, fn: Function) -> bool:
        return eliminate_dead_code(fn, self.effects.may_remove)


def eliminate_dead_code(fn: Function, may_remove) -> bool:
    """Removes dead instructions of fn; `may_remove(inst)` says which ones have no effects."""
    counts: Counter[Instruction] = Counter()
    everything = list(fn.instructions())
    for inst in everything:
        for v in inst.uses():
            if isinstance(v, Instruction):
                counts[v] += 1
    work = everything[::-1]
    dead: set[Instruction] = set()
    while work:
        inst = work.pop()
        if inst in dead or counts[inst] or inst.is_terminator or not may_remove(inst):
            continue
        dead.add(inst)
        for v in inst.uses():
            if isinstance(v, Instruction):
                counts[v] -= 1
                if not counts[v]:
                    work.append(v)
    if not dead:
        return False
    for b in fn.blocks:
        b.remove_all(dead)
    return True
