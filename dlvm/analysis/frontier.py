"""Dominance frontiers (where a definition's dominance ends: join points for SSA repair) and
post-dominance frontiers (control dependence: the branches that decide whether a block runs).
"""

from __future__ import annotations

from collections.abc import Callable

from dlvm.analysis.postdominance import PostDominatorTree
from dlvm.ir.analysis_cache import analysis
from dlvm.ir.dominance import DominatorTree
from dlvm.ir.values import Block, Function


def _frontiers(
    blocks: list[Block],
    in_tree: Callable[[Block], bool],
    preds: Callable[[Block], list[Block]],
    parent: Callable[[Block], Block | None],
) -> dict[Block, list[Block]]:
    """Cooper, Harvey and Kennedy's frontier walk; `parent` is None at the (maybe virtual) root."""
    out: dict[Block, list[Block]] = {b: [] for b in blocks if in_tree(b)}
    for b in out:
        ps = [p for p in preds(b) if in_tree(p)]
        if len(ps) < 2 and not (ps and parent(b) is None):
            continue
        stop = parent(b)
        for p in ps:
            runner: Block | None = p
            # A root reached by a back edge is in its own frontier, so the walk then ends at None.
            while runner is not None and runner is not stop:
                if b not in out[runner]:
                    out[runner].append(b)
                runner = parent(runner)
    return out


class DominanceFrontier:
    """DF(b): the blocks where b's dominance ends (b dominates a predecessor, not the block)."""

    def __init__(self, fn: Function) -> None:
        self.function = fn
        dt = analysis(DominatorTree, fn)
        g = dt.cfg
        self._df = _frontiers(
            fn.blocks, g.reachable, g.predecessors.__getitem__, dt.immediate_dominator
        )

    def frontier(self, block: Block) -> list[Block]:
        """In function block order; empty for unreachable blocks."""
        return list(self._df.get(block, ()))


class PostDominanceFrontier:
    """PDF(b): the blocks whose branch decides whether b runs (b is control dependent on them)."""

    def __init__(self, fn: Function) -> None:
        self.function = fn
        pdt = analysis(PostDominatorTree, fn)
        g = pdt.cfg
        self._pdf = _frontiers(fn.blocks, pdt.contains, g.successors.__getitem__, pdt.ipdom)

    def frontier(self, block: Block) -> list[Block]:
        """In function block order; empty for blocks that reach no exit."""
        return list(self._pdf.get(block, ()))


def dominance_frontier(fn: Function) -> DominanceFrontier:
    return analysis(DominanceFrontier, fn)


def post_dominance_frontier(fn: Function) -> PostDominanceFrontier:
    return analysis(PostDominanceFrontier, fn)
