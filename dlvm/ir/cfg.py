"""Control-flow graph: successors, predecessors and reverse post-order of a function's blocks.

`branchEnum` edges are CFG edges (the original DLVM forgot them).
"""

from __future__ import annotations

from dlvm.ir.values import Block, Function


class CFG:
    """Successor and predecessor lists, in a deterministic order, plus reachability."""

    def __init__(self, fn: Function) -> None:
        self.function = fn
        self.successors: dict[Block, list[Block]] = {}
        self.predecessors: dict[Block, list[Block]] = {b: [] for b in fn.blocks}
        for b in fn.blocks:
            succs: list[Block] = []
            for s in b.successors():
                if s not in succs:
                    succs.append(s)
            self.successors[b] = succs
            for s in succs:
                if s in self.predecessors and b not in self.predecessors[s]:
                    self.predecessors[s].append(b)
        self.postorder: list[Block] = []
        if fn.blocks:
            self._dfs(fn.blocks[0])
        self.rpo: list[Block] = list(reversed(self.postorder))
        self.rpo_index: dict[Block, int] = {b: i for i, b in enumerate(self.rpo)}

    def _dfs(self, entry: Block) -> None:
        seen = {entry}
        stack = [(entry, iter(self.successors.get(entry, ())))]
        while stack:
            block, it = stack[-1]
            for s in it:
                if s not in seen and s in self.successors:
                    seen.add(s)
                    stack.append((s, iter(self.successors[s])))
                    break
            else:
                stack.pop()
                self.postorder.append(block)

    def reachable(self, block: Block) -> bool:
        return block in self.rpo_index

    def exits(self) -> list[Block]:
        """Blocks ending in `return` (or with no successors)."""
        return [b for b in self.function.blocks if not self.successors[b]]


def cfg(fn: Function) -> CFG:
    return CFG(fn)
