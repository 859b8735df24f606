"""common-subexpression-elimination (CSE): replaces an instruction by an identical one (same
opcode, attributes, operands by identity and type) that properly dominates it.

A walk of the dominator tree with a scoped table makes it one pass: equal instructions in
sibling blocks are not merged, since neither dominates the other.
"""

from __future__ import annotations

from dlvm.analysis.side_effects import side_effects
from dlvm.ir.dominance import dominator_tree
from dlvm.ir.values import Block, Function, Instruction, Module, Value
from dlvm.transforms.pass_base import FunctionPass


class CommonSubexpressionElimination(FunctionPass):
    name = "common-subexpression-elimination"
    alias = "CSE"
    summary = "merge identical instructions where one dominates the other"

    def prepare(self, module: Module) -> None:
        self.effects = side_effects(module)

    def run_on_function(self, fn: Function) -> bool:
        return eliminate_common_subexpressions(fn, self.effects.may_merge)


def _key(inst: Instruction) -> tuple:
    return (inst.op, tuple(inst.operands), tuple(inst.attrs.values()), inst.type)


def eliminate_common_subexpressions(fn: Function, may_merge) -> bool:
    """Merges equal instructions of fn; `may_merge(inst)` says which are pure and deterministic."""
    dom = dominator_tree(fn)
    replaced: dict[Value, Value] = {}

    def forward(v: Value) -> Value:
        return replaced.get(v, v)

    available: dict[tuple, Instruction] = {}
    stack: list[tuple[Block | None, list[tuple]]] = [(fn.blocks[0], [])]
    while stack:
        block, added = stack.pop()
        if block is None:  # leaving a dominator subtree: forget what it made available
            for key in added:
                del available[key]
            continue
        scope: list[tuple] = []
        for inst in block.instructions:
            if replaced and any(v in replaced for v in inst.uses()):
                inst.map_values(forward)
            if inst.is_terminator or inst.is_void or not may_merge(inst):
                continue
            key = _key(inst)
            prior = available.get(key)
            if prior is not None:
                replaced[inst] = prior
            else:
                available[key] = inst
                scope.append(key)
        stack.append((None, scope))
        stack.extend((child, []) for child in reversed(dom.children.get(block, [])))
    if not replaced:
        return False
    for b in fn.blocks:
        if not dom.cfg.reachable(b):
            for inst in b.instructions:
                if any(v in replaced for v in inst.uses()):
                    inst.map_values(forward)
        b.remove_all(set(replaced))  # type: ignore[arg-type]
    return True
