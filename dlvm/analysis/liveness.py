"""Liveness of SSA values (block arguments and instruction results) at block boundaries.

A block's arguments are defined at its entry; the values a terminator passes to a successor are
uses at the end of the predecessor, so a successor's arguments are never live out of it.
"""

from __future__ import annotations

from dlvm.ir.analysis_cache import analysis
from dlvm.ir.cfg import CFG
from dlvm.ir.values import Block, Function, Instruction, Value


class Liveness:
    """Live-in and live-out values of every block (reachable or not), by backward data flow."""

    def __init__(self, fn: Function) -> None:
        self.function = fn
        g = analysis(CFG, fn)
        # Program order of definitions: the deterministic order results are returned in.
        self._order: dict[Value, int] = {}
        for b in fn.blocks:
            for a in b.arguments:
                self._order[a] = len(self._order)
            for inst in b.instructions:
                self._order[inst] = len(self._order)
        gen: dict[Block, set[Value]] = {}  # used before (or without) a definition in the block
        kill: dict[Block, set[Value]] = {}  # defined in the block
        for b in fn.blocks:
            defined: set[Value] = set(b.arguments)
            used: set[Value] = set()
            for inst in b.instructions:
                for v in inst.uses():
                    if v in self._order and v not in defined:
                        used.add(v)
                defined.add(inst)
            gen[b], kill[b] = used, defined
        self._in: dict[Block, set[Value]] = {b: set(gen[b]) for b in fn.blocks}
        self._out: dict[Block, set[Value]] = {b: set() for b in fn.blocks}
        # Post-order first lets most values settle in one sweep; the worklist finishes the rest.
        order = g.postorder + [b for b in fn.blocks if not g.reachable(b)]
        work = list(reversed(order))
        queued = set(work)
        while work:
            b = work.pop()
            queued.discard(b)
            out: set[Value] = set()
            for s in g.successors[b]:
                out |= self._in[s]
            self._out[b] = out
            new_in = gen[b] | (out - kill[b])
            if new_in != self._in[b]:
                self._in[b] = new_in
                for p in g.predecessors[b]:
                    if p not in queued:
                        queued.add(p)
                        work.append(p)

    def _sorted(self, values: set[Value]) -> list[Value]:
        return sorted(values, key=self._order.__getitem__)

    def live_in(self, block: Block) -> list[Value]:
        """Values live at the entry of `block` (its own arguments excluded), in program order."""
        return self._sorted(self._in[block])

    def live_out(self, block: Block) -> list[Value]:
        """Values live at the end of `block`, after its terminator, in program order."""
        return self._sorted(self._out[block])

    def is_live_in(self, value: Value, block: Block) -> bool:
        return value in self._in[block]

    def is_live_out(self, value: Value, block: Block) -> bool:
        return value in self._out[block]

    def live_after(self, inst: Instruction) -> list[Value]:
        """Values live just after `inst` (its own result included when something uses it)."""
        assert inst.block is not None
        block = inst.block
        live = set(self._out[block])
        for later in reversed(block.instructions):
            if later is inst:
                break
            live.discard(later)
            live.update(v for v in later.uses() if v in self._order)
        return self._sorted(live)


def liveness(fn: Function) -> Liveness:
    return analysis(Liveness, fn)
