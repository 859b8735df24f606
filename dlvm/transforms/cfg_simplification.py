"""cfg-simplification (CFGSimp): removes control flow that does nothing, after the original DLVM's
pass of that name. Its rules run in this order, again and again until none applies:

1. blocks unreachable from the entry block are removed;
2. a `conditional` whose two edges go to the same block with the same values becomes a `branch`;
3. a block is merged into its only predecessor when that predecessor ends with a `branch` to it
   (its arguments become the values passed); a block that branches to itself is left alone;
4. simple trampolines go: a block holding only `branch 'b(…)` that passes exactly its own
   arguments in order (used nowhere else), whose predecessors then branch to 'b directly;
5. a block entered by exactly one edge, from a `branch` or `conditional`, loses its arguments:
   their uses read the values that edge passed.

The entry block is never merged away or skipped (nothing may branch to it). `branchEnum`
edges pass their case's values implicitly, so their targets are neither merged (rule 3) nor
stripped of arguments (rule 5); they are retargeted past trampolines like any other edge.
"""

from __future__ import annotations

from collections import Counter

from dlvm.ir.analysis_cache import analysis
from dlvm.ir.builder import Builder
from dlvm.ir.cfg import CFG
from dlvm.ir.values import Argument, Block, Function, Successor, Value
from dlvm.transforms.cfg_edits import edge_sources, rebuild_terminator, redirect
from dlvm.transforms.pass_base import FunctionPass
from dlvm.transforms.rewrite import replace_uses


class CFGSimplification(FunctionPass):
    name = "cfg-simplification"
    alias = "CFGSimp"
    summary = (
        "remove unreachable blocks and trampolines, merge blocks, drop single-predecessor arguments"
    )

    def run_on_function(self, fn: Function) -> bool:
        return simplify_cfg(fn)


def simplify_cfg(fn: Function) -> bool:
    """Applies the rules to fn until none applies; True when any did."""
    changed = False
    while True:
        applied = [rule(fn) for rule in RULES]  # every rule, in order, each time round
        if not any(applied):
            return changed
        changed = True


def remove_unreachable_blocks(fn: Function) -> bool:
    """Rule 1; True if it removed a block."""
    g = analysis(CFG, fn)
    dead = [b for b in fn.blocks if not g.reachable(b)]
    for b in dead:
        fn.remove_block(b)
    return bool(dead)


def fold_same_target_conditionals(fn: Function) -> bool:
    """Rule 2; True if it turned a conditional into a branch."""
    changed = False
    for block in fn.blocks:
        term = block.terminator
        if term is None or term.opcode != "conditional":
            continue
        then, other = term.attrs["then"], term.attrs["else"]
        if then.block is other.block and then.args == other.args:
            block.remove(term)
            Builder(block).branch(dest=Successor(then.block, list(then.args))).loc = term.loc
            changed = True
    return changed


def merge_into_predecessors(fn: Function) -> bool:
    """Rule 3; True if it merged a block."""
    sources = edge_sources(fn)
    replacement: dict[Value, Value] = {}
    changed = False
    for block in fn.blocks[1:]:
        preds = sources[block]
        if len(preds) != 1 or preds[0] is block:
            continue
        pred = preds[0]
        branch = pred.terminator
        if branch is None or branch.opcode != "branch":
            continue
        replacement.update(zip(block.arguments, branch.attrs["dest"].args))
        pred.remove(branch)
        for inst in list(block.instructions):
            block.remove(inst)
            pred.append(inst)
        fn.remove_block(block)
        for succ in pred.successors():  # block's successors: their edges now leave pred
            sources[succ] = [pred if p is block else p for p in sources[succ]]
        changed = True
    replace_uses(fn, _resolved(replacement))
    return changed


def remove_trampolines(fn: Function) -> bool:
    """Rule 4; True if it removed a trampoline."""
    sources = edge_sources(fn)
    uses = _argument_uses(fn)
    changed = False
    for block in fn.blocks[1:]:
        target = _trampoline_target(block, uses)
        if target is None:
            continue
        for pred in dict.fromkeys(sources[block]):
            redirect(pred, block, target)
        sources[target] = [p for p in sources[target] if p is not block] + sources[block]
        fn.remove_block(block)
        changed = True
    return changed


def _trampoline_target(block: Block, uses: Counter[Value]) -> Block | None:
    """The block `block` forwards to when it is a simple trampoline, else None."""
    if len(block.instructions) != 1 or block.instructions[0].opcode != "branch":
        return None
    dest = block.instructions[0].attrs["dest"]
    passes_own = len(dest.args) == len(block.arguments) and all(
        v is a for v, a in zip(dest.args, block.arguments)
    )
    if dest.block is block or not passes_own or any(uses[a] != 1 for a in block.arguments):
        return None
    return dest.block


def drop_single_predecessor_arguments(fn: Function) -> bool:
    """Rule 5; True if it dropped an argument."""
    sources = edge_sources(fn)
    replacement: dict[Value, Value] = {}
    for block in fn.blocks[1:]:
        preds = sources[block]
        if not block.arguments or len(preds) != 1 or preds[0] is block:
            continue
        pred = preds[0]
        term = pred.terminator
        if term is None or term.opcode == "branchEnum":
            continue
        [edge] = [s for s in term.successors() if s.block is block]
        replacement.update(zip(block.arguments, edge.args))
        _stop_passing(pred, block)
        for arg in list(block.arguments):
            block.remove_argument(arg)
    replace_uses(fn, _resolved(replacement))
    return bool(replacement)


def _stop_passing(pred: Block, block: Block) -> None:
    """pred's edge into block passes no values any more."""

    def retarget(s: Successor) -> Successor:
        return Successor(block, []) if s.block is block else s

    rebuild_terminator(pred, retarget)


def _argument_uses(fn: Function) -> Counter[Value]:
    """How often each block argument of fn is read."""
    counts: Counter[Value] = Counter()
    for inst in fn.instructions():
        counts.update(v for v in inst.uses() if isinstance(v, Argument))
    return counts


def _resolved(replacement: dict[Value, Value]) -> dict[Value, Value]:
    """Follows chains (an argument replaced by another replaced argument) to their end. They
    end: a cycle would need blocks that only enter each other, which are unreachable and gone."""
    out: dict[Value, Value] = {}
    for k, v in replacement.items():
        while v in replacement:
            v = replacement[v]
        out[k] = v
    return out


RULES = (
    remove_unreachable_blocks,
    fold_same_target_conditionals,
    merge_into_predecessors,
    remove_trampolines,
    drop_single_predecessor_arguments,
)
