"""cfg-canonicalization (CFGCan): gives the CFG the shape that reversal (AD over control flow)
and loop passes expect, after the original DLVM's pass of that name.

1. Several `return`s become branches to one appended `'exit(%exit_value: R)` block (`'exit()`
   for void functions).
2. Join blocks: for an edge bb → succ where succ branches (two or more successors) and both share
   the immediate post-dominator P, the edges into P from succ's region (the blocks reachable from
   succ without passing P) go through a new `'<succ>_join` inserted before P, so that every
   branch gets a join point of its own. Only when that groups two or more of P's predecessors
   and P also has others (otherwise P already is succ's own join point); the sweep repeats until
   no join is added, so a second run adds none.
3. Loops, innermost first: a `'<header>_preheader` before the header when the loop has no
   preheader; one `'<header>_latch` after the last latch when there are several; and a
   `'<header>_exit` before each exit block that is also entered from outside the loop, so that
   exits are dedicated.

New blocks take fresh copies of their target's argument names and just pass them on. Fresh
names follow docs/ir.md: `name`, then `name_0`, `name_1`… among every block, argument and
instruction name of the function.
"""

from __future__ import annotations

from typing import cast

from dlvm.analysis.loops import Loop, loop_info
from dlvm.analysis.postdominance import post_dominator_tree
from dlvm.ir.analysis_cache import analysis
from dlvm.ir.builder import Builder
from dlvm.ir.cfg import CFG
from dlvm.ir.types import FunctionType, canonical, is_void
from dlvm.ir.values import Argument, Block, Function, Successor, fresh_name
from dlvm.transforms.cfg_edits import innermost_first, insert_preheader, local_names, split_edges
from dlvm.transforms.pass_base import FunctionPass


class CFGCanonicalization(FunctionPass):
    name = "cfg-canonicalization"
    alias = "CFGCan"
    summary = "single exit, join blocks, loop preheaders, unique latches, dedicated exits"

    def run_on_function(self, fn: Function) -> bool:
        return canonicalize_cfg(fn)


def canonicalize_cfg(fn: Function) -> bool:
    """Runs the three steps on fn; True when anything changed."""
    taken = local_names(fn)
    changed = merge_exits(fn, taken)
    changed |= form_join_blocks(fn, taken)
    changed |= canonicalize_loops(fn, taken)
    return changed


def merge_exits(fn: Function, taken: set[str]) -> bool:
    """Turns every `return v` into `branch 'exit(v)` when there are several."""
    returns = [b for b in fn.blocks if b.terminator and b.terminator.opcode == "return"]
    if len(returns) < 2:
        return False
    result = cast(FunctionType, canonical(fn.type)).result
    args = [] if is_void(result) else [Argument(fresh_name("exit_value", taken), result)]
    exit_block = fn.add_block(Block(fresh_name("exit", taken), args))
    Builder(exit_block).build("return", [*args])
    for block in returns:
        ret = block.terminator
        assert ret is not None
        block.remove(ret)
        Builder(block).branch(dest=Successor(exit_block, list(ret.operands))).loc = ret.loc
    return True


def form_join_blocks(fn: Function, taken: set[str]) -> bool:
    """Sweeps the CFG breadth-first, adding join blocks, until a sweep adds none."""
    changed = False
    while _join_sweep(fn, taken):
        changed = True
    return changed


def _join_sweep(fn: Function, taken: set[str]) -> bool:
    # Termination: a join groups two or more (not all) predecessors of P under one new block,
    # and every join has a single successor, so the joins form a forest over the function's
    # original edges with at least two children per join: fewer joins than edges.
    added = False
    visited: set[Block] = set()
    for bb in _breadth_first(analysis(CFG, fn)):
        for succ in analysis(CFG, fn).successors[bb]:
            if succ not in visited and _form_join(fn, bb, succ, taken):
                added = True
        visited.add(bb)
    return added


def _breadth_first(g: CFG) -> list[Block]:
    """The blocks reachable from the entry, breadth-first."""
    entry = g.function.blocks[0]
    order, seen = [entry], {entry}
    for b in order:
        for s in g.successors[b]:
            if s not in seen and s in g.successors:
                seen.add(s)
                order.append(s)
    return order


def _form_join(fn: Function, bb: Block, succ: Block, taken: set[str]) -> bool:
    """Adds `'<succ>_join` for the edge bb → succ when step 2 asks for one; True if it did."""
    g = analysis(CFG, fn)
    if succ not in g.successors[bb] or len(g.successors[succ]) < 2:
        return False
    pdt = post_dominator_tree(fn)
    post = pdt.ipdom(succ)
    if post is None or pdt.ipdom(bb) is not post:
        return False
    region = _region(g, succ, post)
    inside = [p for p in g.predecessors[post] if p in region]
    outside = [p for p in g.predecessors[post] if p not in region and g.reachable(p)]
    if len(inside) < 2 or not outside:
        return False
    split_edges(fn, post, inside, f"{succ.name}_join", post.index, taken)
    return True


def _region(g: CFG, start: Block, stop: Block) -> set[Block]:
    """The blocks reachable from start without passing stop."""
    seen, work = {start}, [start]
    while work:
        for s in g.successors[work.pop()]:
            if s is not stop and s not in seen:
                seen.add(s)
                work.append(s)
    return seen


def canonicalize_loops(fn: Function, taken: set[str]) -> bool:
    """Preheader, unique latch and dedicated exits for every loop, innermost first.

    Each step keeps the forms the steps before it made, for this loop and the inner ones: the
    new blocks lie outside the loop (preheader, exits) or only forward to its header (latch).
    """
    headers = [lp.header for lp in innermost_first(loop_info(fn).top_level)]
    changed = False
    for header in headers:
        for step in (_preheader, _unique_latch, _dedicated_exits):
            loop = loop_info(fn).loop_for(header)  # recomputed after every edit
            assert loop is not None and loop.header is header
            changed |= step(fn, loop, taken)
    return changed


def _preheader(fn: Function, loop: Loop, taken: set[str]) -> bool:
    """Gives loop a preheader if it has none; True if it made one."""
    if loop.preheader is not None:
        return False
    insert_preheader(fn, loop, taken)
    return True


def _unique_latch(fn: Function, loop: Loop, taken: set[str]) -> bool:
    """Routes the back edges of several latches through one new latch; True if it did."""
    latches = loop.latches
    if len(latches) < 2:
        return False
    header = loop.header
    after_last = max(b.index for b in latches) + 1
    split_edges(fn, header, latches, f"{header.name}_latch", after_last, taken)
    return True


def _dedicated_exits(fn: Function, loop: Loop, taken: set[str]) -> bool:
    """Puts a block between the loop and each exit also entered from outside; True if any."""
    g = analysis(CFG, fn)
    changed = False
    for exit_block in loop.exits:
        preds = [p for p in g.predecessors[exit_block] if g.reachable(p)]
        inside = [p for p in preds if p in loop]
        if len(inside) < len(preds):
            base = f"{loop.header.name}_exit"
            split_edges(fn, exit_block, inside, base, exit_block.index, taken)
            changed = True
    return changed
