"""Control-flow edits shared by the CFG passes: fresh local names, edges counted one by one,
retargeting terminators, forwarding blocks (a preheader, join, latch or exit block that only
passes its arguments on to the block it was made for), and the innermost-first loop order."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from dlvm.analysis.loops import Loop
from dlvm.ir.builder import Builder
from dlvm.ir.values import Argument, Block, Function, Successor, Value, fresh_name


def local_names(fn: Function) -> set[str]:
    """Every block, argument and named-instruction name of fn: the pool fresh names avoid."""
    taken = {b.name for b in fn.blocks}
    taken |= {a.name for b in fn.blocks for a in b.arguments}
    taken |= {i.name for i in fn.instructions() if i.name is not None}
    return taken


def edge_sources(fn: Function) -> dict[Block, list[Block]]:
    """For each block, the block at the source of each edge into it: a `conditional` whose two
    edges reach the same block counts twice (the CFG analysis counts it once)."""
    sources: dict[Block, list[Block]] = {b: [] for b in fn.blocks}
    for b in fn.blocks:
        term = b.terminator
        for s in term.successors() if term is not None else ():
            if s.block in sources:
                sources[s.block].append(b)
    return sources


def rebuild_terminator(block: Block, retarget: Callable[[Successor], Successor]) -> None:
    """Replaces block's terminator by a copy (made with the Builder) whose successors went
    through `retarget`; `branchEnum` cases pass no values, so only their blocks change."""
    term = block.terminator
    assert term is not None
    attrs: dict[str, object] = {}
    for name, kind in term.op.attr_kinds.items():
        a = term.attrs.get(name)
        if kind == "successor" and a is not None:
            a = retarget(a)
        elif kind == "cases" and a is not None:
            a = tuple((case, retarget(Successor(b, [])).block) for case, b in a)
        attrs[name] = a
    block.remove(term)
    Builder(block).build(term.opcode, list(term.operands), term.name, **attrs).loc = term.loc


def redirect(block: Block, old: Block, new: Block) -> None:
    """Every edge of block's terminator into `old` goes to `new` instead, with the same values."""
    rebuild_terminator(block, lambda s: Successor(new, list(s.args)) if s.block is old else s)


def forwarding_block(fn: Function, target: Block, base: str, index: int, taken: set[str]) -> Block:
    """A new block `'<fresh base>(<fresh copies of target's arguments>)` at position index that
    branches to target passing its arguments in order."""
    args = [Argument(fresh_name(a.name, taken), a.type) for a in target.arguments]
    block = fn.add_block(Block(fresh_name(base, taken), args), index)
    passed: list[Value] = list(args)
    Builder(block).branch(dest=Successor(target, passed))
    return block


def split_edges(
    fn: Function, target: Block, sources: Iterable[Block], base: str, index: int, taken: set[str]
) -> Block:
    """Routes every edge from `sources` into target through a new forwarding block at index."""
    block = forwarding_block(fn, target, base, index, taken)
    for s in sources:
        redirect(s, target, block)
    return block


def insert_preheader(fn: Function, loop: Loop, taken: set[str]) -> Block:
    """A new `'<header>_preheader` right before the loop's header that every entering edge now
    goes through (the shape CFGCan and LICM share)."""
    header = loop.header
    base = f"{header.name}_preheader"
    return split_edges(fn, header, loop.entering_blocks, base, header.index, taken)


def innermost_first(loops: list[Loop]) -> Iterator[Loop]:
    """The loops and all their subloops, each after the loops it contains."""
    for lp in loops:
        yield from innermost_first(lp.subloops)
        yield lp
