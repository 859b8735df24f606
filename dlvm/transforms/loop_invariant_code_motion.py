"""loop-invariant-code-motion (LICM): hoists loop-invariant instructions into the loop's preheader.

Loops are visited innermost first, so an instruction hoisted into an inner loop's preheader (a
block of the outer loop) can move on out of the outer loop. An instruction is invariant when
every value it reads (operands, attribute values, literal elements) is defined outside the loop
or is itself hoisted. It moves only when it may be speculated, that is executed on a path where
it did not run before (the loop may run zero times, or leave before reaching it):

- it has no side effect at all (no write, no read, no trap, deterministic), calls included;
- it cannot fail at run time: an integer division or modulo needs a literal divisor other than
  0 and -1 (the smallest integer divided by -1 overflows), an integer power a non-negative
  literal exponent; element keys that are values (dynamic indices) and pointer or box
  operations stay; a call or combinator needs a callee whose whole body qualifies, without
  loops (which might not end) or recursion.

Only the loop's own blocks (not its inner loops') that dominate every latch are hoisted from:
they run on every iteration anyway. Code on a conditional path inside the loop stays, since
tensor operations are expensive and it may run on few iterations or none. A loop without a
preheader gets one (`'<header>_preheader`, as CFGCan makes it) when something is to move.
"""

from __future__ import annotations

from collections.abc import Callable

from dlvm.analysis.loops import Loop, loop_info
from dlvm.analysis.side_effects import SideEffects, side_effects
from dlvm.ir.analysis_cache import analysis
from dlvm.ir.cfg import CFG
from dlvm.ir.dominance import dominator_tree
from dlvm.ir.literals import ScalarLiteral
from dlvm.ir.types import TensorType, Type, canonical
from dlvm.ir.values import ElementKey, Function, Instruction, LiteralValue, Module, Value
from dlvm.transforms.cfg_edits import innermost_first, insert_preheader, local_names
from dlvm.transforms.pass_base import FunctionPass

INTEGER_DIVISIONS = ("divide", "truncateDivide", "floorDivide", "modulo")


class LoopInvariantCodeMotion(FunctionPass):
    name = "loop-invariant-code-motion"
    alias = "LICM"
    summary = "hoist pure loop-invariant instructions into preheaders"

    def prepare(self, module: Module) -> None:
        self.speculation = Speculation(side_effects(module))

    def run_on_function(self, fn: Function) -> bool:
        return hoist_loop_invariants(fn, self.speculation.allows)


def hoist_loop_invariants(fn: Function, may_speculate: Callable[[Instruction], bool]) -> bool:
    """Hoists invariant instructions of every loop of fn; `may_speculate(inst)` says which
    instructions are safe to run where they did not before. True when any moved."""
    headers = [lp.header for lp in innermost_first(loop_info(fn).top_level)]
    taken = local_names(fn)
    changed = False
    for header in headers:
        loop = loop_info(fn).loop_for(header)  # recomputed after every edit
        assert loop is not None and loop.header is header
        hoisted = _invariants(fn, loop, may_speculate)
        if not hoisted:
            continue
        preheader = loop.preheader or insert_preheader(fn, loop, taken)
        terminator = preheader.terminator
        assert terminator is not None
        for inst in hoisted:  # in their order: each after the ones it reads
            assert inst.block is not None
            inst.block.remove(inst)
            preheader.insert(preheader.instructions.index(terminator), inst)
        changed = True
    return changed


def _invariants(
    fn: Function, loop: Loop, may_speculate: Callable[[Instruction], bool]
) -> list[Instruction]:
    """The instructions to hoist out of loop, in program order."""
    dom = dominator_tree(fn)
    info = loop_info(fn)
    latches = loop.latches
    hoisted: list[Instruction] = []
    moving: set[Value] = set()
    for block in loop.blocks:  # reverse post-order: definitions before uses
        # Inner loops' blocks had their turn. A block that does not dominate every latch may be
        # skipped on some iterations: hoisting its (tensor) work would pay for it on all of them.
        if info.loop_for(block) is not loop or not all(dom.dominates(block, b) for b in latches):
            continue
        for inst in block.instructions:
            if inst.is_terminator or not may_speculate(inst):
                continue
            if all(loop.is_invariant(v) or v in moving for v in inst.uses()):
                hoisted.append(inst)
                moving.add(inst)
    return hoisted


class Speculation:
    """Which instructions may run where they did not (see the module docstring)."""

    def __init__(self, effects: SideEffects) -> None:
        self.effects = effects
        self._callees: dict[Function, bool] = {}

    def allows(self, inst: Instruction) -> bool:
        if inst.is_terminator or not self.effects.instruction_effects(inst).pure:
            return False
        if inst.op.family == "memory" or _may_fail(inst):
            return False
        return all(self._callee_allows(f) for f in _called(inst))

    def _callee_allows(self, fn: Value) -> bool:
        if not isinstance(fn, Function):
            return False
        if fn not in self._callees:
            self._callees[fn] = False  # while deciding: a recursive call does not qualify
            self._callees[fn] = _acyclic(fn) and all(
                self.allows(i) for i in fn.instructions() if not i.is_terminator
            )
        return self._callees[fn]


def _called(inst: Instruction) -> list[Value]:
    out = [inst.operands[0]] if inst.opcode == "apply" else []
    comb = inst.attrs.get("comb")
    if isinstance(comb, Value):
        out.append(comb)
    return out


def _acyclic(fn: Function) -> bool:
    """fn has a body without cycles: a reverse post-order where no edge goes backwards."""
    if not fn.blocks or fn.is_declaration:
        return False
    g = analysis(CFG, fn)
    index = g.rpo_index
    return all(index[s] > index[b] for b in g.rpo for s in g.successors[b])


def _may_fail(inst: Instruction) -> bool:
    """inst may stop the program although it has no declared effect."""
    keys = inst.attrs.get("keys") or ()
    if any(isinstance(k, ElementKey) and k.value is not None for k in keys):
        return True  # a dynamic index may be out of bounds
    if inst.opcode in ("gather", "scatterAdd"):
        return True  # so may an id
    if not _integer(inst.type):
        return False
    if inst.opcode in INTEGER_DIVISIONS:  # by zero, or the smallest integer by -1 (overflow)
        return not _literal_where(inst.operands[1], lambda x: x not in (0, -1))
    if inst.opcode == "power":
        return not _literal_where(inst.operands[1], lambda x: x >= 0)
    return False


def _integer(ty: Type) -> bool:
    t = canonical(ty)
    return isinstance(t, TensorType) and t.dtype.is_int


def _literal_where(v: Value, test: Callable[[int | float], bool]) -> bool:
    return (
        isinstance(v, LiteralValue)
        and isinstance(v.literal, ScalarLiteral)
        and not isinstance(v.literal.value, bool)
        and test(v.literal.value)
    )
