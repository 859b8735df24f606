"""Natural loops (after LLVM's LoopInfo): a header with back edges from blocks it dominates, the
blocks that reach those latches without passing the header, and the nesting of loops.

Cycles without a dominating header (irreducible control flow) are not loops here. Unreachable
blocks belong to no loop and are ignored as predecessors.
"""

from __future__ import annotations

from collections.abc import Iterator

from dlvm.ir.analysis_cache import analysis
from dlvm.ir.cfg import CFG
from dlvm.ir.dominance import DominatorTree
from dlvm.ir.values import Argument, Block, Function, Instruction, Value


class Loop:
    """One natural loop; `blocks` are in reverse post-order, so the header comes first."""

    def __init__(self, header: Block, cfg: CFG) -> None:
        self.header = header
        self.parent: Loop | None = None
        self.subloops: list[Loop] = []
        self.blocks: list[Block] = []
        self._set: set[Block] = set()
        self._cfg = cfg

    def __contains__(self, block: Block) -> bool:
        return block in self._set

    def contains(self, block: Block) -> bool:
        return block in self._set

    @property
    def depth(self) -> int:
        """1 for an outermost loop, one more per enclosing loop."""
        d, p = 1, self.parent
        while p is not None:
            d, p = d + 1, p.parent
        return d

    @property
    def latches(self) -> list[Block]:
        """The blocks inside the loop that branch back to the header."""
        return [p for p in self._cfg.predecessors[self.header] if p in self._set]

    @property
    def latch(self) -> Block | None:
        """The unique latch, or None when there are several."""
        ls = self.latches
        return ls[0] if len(ls) == 1 else None

    @property
    def entering_blocks(self) -> list[Block]:
        """The reachable predecessors of the header outside the loop."""
        g = self._cfg
        return [p for p in g.predecessors[self.header] if p not in self._set and g.reachable(p)]

    @property
    def preheader(self) -> Block | None:
        """The unique entering block when its only successor is the header; else None."""
        entering = self.entering_blocks
        if len(entering) == 1 and len(self._cfg.successors[entering[0]]) == 1:
            return entering[0]
        return None

    @property
    def exit_edges(self) -> list[tuple[Block, Block]]:
        """(inside, outside) pairs, in block order then successor order."""
        g = self._cfg
        return [(b, s) for b in self.blocks for s in g.successors[b] if s not in self._set]

    @property
    def exiting_blocks(self) -> list[Block]:
        """Blocks inside the loop with a successor outside it."""
        out: list[Block] = []
        for b, _ in self.exit_edges:
            if b not in out:
                out.append(b)
        return out

    @property
    def exits(self) -> list[Block]:
        """Blocks outside the loop reached directly from inside it."""
        out: list[Block] = []
        for _, s in self.exit_edges:
            if s not in out:
                out.append(s)
        return out

    @property
    def has_dedicated_exits(self) -> bool:
        """Every exit is entered only from inside the loop."""
        g = self._cfg
        return all(p in self._set for e in self.exits for p in g.predecessors[e] if g.reachable(p))

    def is_invariant(self, value: Value) -> bool:
        """`value` is defined outside the loop (literals, globals and functions always are)."""
        if isinstance(value, (Instruction, Argument)):
            return value.block not in self._set
        return True

    def __repr__(self) -> str:
        return f"Loop('{self.header.name}, depth {self.depth})"


class LoopInfo:
    """Every natural loop of a function, the nesting forest and the innermost loop per block."""

    def __init__(self, fn: Function) -> None:
        self.function = fn
        dt = analysis(DominatorTree, fn)
        g = dt.cfg
        self._innermost: dict[Block, Loop] = {}
        found: list[Loop] = []
        # Dominator-tree post-order visits inner headers before the loops enclosing them.
        for header in _dom_postorder(dt, fn):
            latches = [p for p in g.predecessors[header] if dt.dominates(header, p)]
            if latches:
                found.append(Loop(header, g))
                self._discover(found[-1], latches, g)
        for b in g.rpo:  # RPO fills blocks in order, so every loop's header comes first
            lp = self._innermost.get(b)
            while lp is not None:
                lp.blocks.append(b)
                lp._set.add(b)
                lp = lp.parent
        for lp in found:
            lp.subloops.sort(key=lambda s: g.rpo_index[s.header])
        self.top_level: list[Loop] = sorted(
            (lp for lp in found if lp.parent is None), key=lambda lp: g.rpo_index[lp.header]
        )
        self.loops: list[Loop] = list(_preorder(self.top_level))

    def _discover(self, loop: Loop, latches: list[Block], g: CFG) -> None:
        """Walks backwards from the latches, adopting already-found loops as subloops."""
        work = list(latches)
        while work:
            b = work.pop()
            sub = self._innermost.get(b)
            if sub is None:
                self._innermost[b] = loop
                if b is not loop.header:
                    work.extend(p for p in g.predecessors[b] if g.reachable(p))
                continue
            while sub.parent is not None:
                sub = sub.parent
            if sub is not loop:
                sub.parent = loop
                loop.subloops.append(sub)
                work.extend(p for p in g.predecessors[sub.header] if g.reachable(p))

    def loop_for(self, block: Block) -> Loop | None:
        """The innermost loop containing `block`."""
        return self._innermost.get(block)

    def depth(self, block: Block) -> int:
        """The loop nesting depth of `block` (0 outside every loop)."""
        lp = self._innermost.get(block)
        return lp.depth if lp is not None else 0

    def is_header(self, block: Block) -> bool:
        lp = self._innermost.get(block)
        return lp is not None and lp.header is block

    def __iter__(self) -> Iterator[Loop]:
        return iter(self.loops)


def _dom_postorder(dt: DominatorTree, fn: Function) -> list[Block]:
    if not dt.idom or fn.entry is None:
        return []
    out: list[Block] = []
    stack = [(fn.entry, iter(dt.children[fn.entry]))]
    while stack:
        b, it = stack[-1]
        child = next(it, None)
        if child is None:
            stack.pop()
            out.append(b)
        else:
            stack.append((child, iter(dt.children[child])))
    return out


def _preorder(loops: list[Loop]) -> Iterator[Loop]:
    for lp in loops:
        yield lp
        yield from _preorder(lp.subloops)


def loop_info(fn: Function) -> LoopInfo:
    return analysis(LoopInfo, fn)
