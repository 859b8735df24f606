"""Dominator trees (Cooper, Harvey and Kennedy's iterative algorithm) and value dominance."""

from __future__ import annotations

from typing import TypeVar

from dlvm.ir.analysis_cache import analysis
from dlvm.ir.cfg import CFG
from dlvm.ir.values import Argument, Block, Function, Instruction, Value

_Node = TypeVar("_Node")  # a Block, or (post-dominance) a Block or the virtual exit


def _idoms(order: list[_Node], preds: dict[_Node, list[_Node]]) -> dict[_Node, _Node]:
    """Immediate dominators over `order` (a reverse post-order from the root)."""
    index = {b: i for i, b in enumerate(order)}
    root = order[0]
    idom: dict[_Node, _Node] = {root: root}
    changed = True
    while changed:
        changed = False
        for b in order[1:]:
            new = None
            for p in preds[b]:
                if p not in idom:
                    continue
                if new is None:
                    new = p
                    continue
                a, c = p, new
                while a is not c:
                    while index[a] > index[c]:
                        a = idom[a]
                    while index[c] > index[a]:
                        c = idom[c]
                new = a
            if new is not None and idom.get(b) is not new:
                idom[b] = new
                changed = True
    return idom


class DominatorTree:
    """Dominance among the blocks reachable from the entry."""

    def __init__(self, fn: Function) -> None:
        self.function = fn
        g = analysis(CFG, fn)
        self.cfg = g
        self.idom: dict[Block, Block] = _idoms(g.rpo, g.predecessors) if g.rpo else {}
        self.children: dict[Block, list[Block]] = {b: [] for b in self.idom}
        for b in g.rpo:
            parent = self.idom.get(b)
            if parent is not None and parent is not b:
                self.children[parent].append(b)
        self._depth: dict[Block, int] = {}
        for b in g.rpo:
            p = self.idom[b]
            self._depth[b] = 0 if p is b else self._depth[p] + 1

    def immediate_dominator(self, b: Block) -> Block | None:
        p = self.idom.get(b)
        return None if p is None or p is b else p

    def dominates(self, a: Block, b: Block) -> bool:
        """a dominates b (every block dominates itself); False for unreachable blocks."""
        if a not in self._depth or b not in self._depth:
            return False
        da = self._depth[a]
        while self._depth[b] > da:
            b = self.idom[b]
        return a is b

    def properly_dominates(self, a: Block, b: Block) -> bool:
        return a is not b and self.dominates(a, b)

    def value_dominates(self, value: Value, user: Instruction) -> bool:
        """A definition is available at `user`: literals, globals and functions always are."""
        if isinstance(value, Argument):
            ub = user.block
            return value.block is not None and ub is not None and self.dominates(value.block, ub)
        if isinstance(value, Instruction):
            vb, ub = value.block, user.block
            if vb is None or ub is None:
                return False
            if vb is ub:
                insts = vb.instructions
                return insts.index(value) < insts.index(user)
            return self.dominates(vb, ub)
        return True


def dominator_tree(fn: Function) -> DominatorTree:
    return analysis(DominatorTree, fn)
