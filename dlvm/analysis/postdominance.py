"""Post-dominator trees: dominance on the reverse CFG, rooted at a virtual exit that every exit
block (a block with no successors) flows into, so functions with several returns have one tree.
"""

from __future__ import annotations

from dlvm.ir.analysis_cache import analysis
from dlvm.ir.cfg import CFG
from dlvm.ir.dominance import _idoms
from dlvm.ir.values import Block, Function


class _VirtualExit:
    """The root of the reverse CFG; never a real block and never returned to callers."""

    def __repr__(self) -> str:
        return "<virtual exit>"


def _reverse_rpo(root: object, succ: dict[object, list[Block]]) -> list:
    """Reverse post-order from `root` over the graph `succ` (iterative, deterministic)."""
    order: list = []
    seen = {root}
    stack = [(root, iter(succ[root]))]
    while stack:
        node, it = stack[-1]
        for s in it:
            if s not in seen:
                seen.add(s)
                stack.append((s, iter(succ[s])))
                break
        else:
            stack.pop()
            order.append(node)
    order.reverse()
    return order


class PostDominatorTree:
    """Post-dominance among the blocks that reach an exit.

    Blocks that cannot reach any exit (the inside of an infinite loop) are not in the tree: they
    post-dominate nothing and nothing post-dominates them.
    """

    def __init__(self, fn: Function) -> None:
        self.function = fn
        g = analysis(CFG, fn)
        self.cfg = g
        root = _VirtualExit()
        self._root = root
        exits = g.exits()
        # Reverse graph: an edge b -> p for each CFG edge p -> b, and root -> every exit.
        rsucc: dict[object, list[Block]] = {root: exits}
        rpred: dict[object, list[object]] = {}
        for b in fn.blocks:
            rsucc[b] = g.predecessors[b]
            rpred[b] = list(g.successors[b]) + ([root] if b in exits else [])
        rpred[root] = []
        order = _reverse_rpo(root, rsucc)
        self._idom: dict[object, object] = _idoms(order, rpred)
        self.roots: list[Block] = [b for b in order[1:] if self._idom[b] is root]
        self.children: dict[Block, list[Block]] = {b: [] for b in order[1:]}
        self._depth: dict[object, int] = {root: 0}
        for b in order[1:]:
            p = self._idom[b]
            self._depth[b] = self._depth[p] + 1
            if isinstance(p, Block):  # not the virtual exit
                self.children[p].append(b)

    def contains(self, block: Block) -> bool:
        """Whether `block` reaches an exit (is in the tree)."""
        return block in self.children

    def ipdom(self, block: Block) -> Block | None:
        """The immediate post-dominator; None for the virtual exit or a block not in the tree."""
        p = self._idom.get(block)
        return None if p is None or p is self._root else p  # type: ignore[return-value]

    def post_dominates(self, a: Block, b: Block) -> bool:
        """Every path from b to an exit goes through a (a block post-dominates itself)."""
        if a not in self._depth or b not in self._depth:
            return False
        da = self._depth[a]
        node: object = b
        while self._depth[node] > da:
            node = self._idom[node]
        return node is a

    def properly_post_dominates(self, a: Block, b: Block) -> bool:
        return a is not b and self.post_dominates(a, b)

    def nearest_common_post_dominator(self, a: Block, b: Block) -> Block | None:
        """The closest block post-dominating both; None when only the virtual exit does."""
        if a not in self._depth or b not in self._depth:
            return None
        x: object = a
        y: object = b
        while x is not y:
            if self._depth[x] >= self._depth[y]:
                x = self._idom[x]
            else:
                y = self._idom[y]
        return None if x is self._root else x  # type: ignore[return-value]


def post_dominator_tree(fn: Function) -> PostDominatorTree:
    return analysis(PostDominatorTree, fn)
