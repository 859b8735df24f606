"""Side effects of instructions and functions, propagated through calls over the whole module.

An instruction's own effects come from its declaration (`writes`, `reads`, `traps`, `nondet`);
`apply @f` and a combinator `by @f` add everything f may do. A function's effects are those of
its instructions, solved over the call graph with a worklist until nothing changes (the
original DLVM never reset its "changed" flag, so its loop never ended). Unknown code has every
effect: `[extern]` declarations, calls through a function-typed value (`apply %fp(…)`), and
callees outside the module. A gradient declaration will be expanded by AD into a copy of its
primal's code, so it has its primal's effects (none when the primal is pure).
"""

from __future__ import annotations

from dataclasses import dataclass

from dlvm.ir.analysis_cache import analysis
from dlvm.ir.values import EXTERN, Function, Instruction, Module


@dataclass(frozen=True, slots=True)
class Effects:
    """What running some code may do; combine with `|`."""

    writes: bool = False  # memory or other state (stacks, reference counts)
    reads: bool = False  # memory: the result may change across a write
    traps: bool = False  # may abort
    nondet: bool = False  # two runs may differ (random, allocations)

    def __or__(self, other: Effects) -> Effects:
        return Effects(
            self.writes or other.writes,
            self.reads or other.reads,
            self.traps or other.traps,
            self.nondet or other.nondet,
        )

    @property
    def pure(self) -> bool:
        """No effect at all."""
        return not (self.writes or self.reads or self.traps or self.nondet)


NO_EFFECTS = Effects()
ALL_EFFECTS = Effects(True, True, True, True)


def _callees(inst: Instruction) -> list[object]:
    """The values `inst` calls: the `apply` callee and a value combinator (`reduce … by @f`)."""
    out: list[object] = []
    if inst.opcode == "apply" and inst.operands:
        out.append(inst.operands[0])
    comb = inst.attrs.get("comb")
    if comb is not None and not isinstance(comb, str):
        out.append(comb)
    return out


def _own_effects(inst: Instruction) -> Effects:
    op = inst.op
    return Effects(op.writes, op.reads, op.traps, op.nondet)


class _LocalEffects:
    """One function's effects before calls are resolved, and the functions it calls."""

    def __init__(self, fn: Function) -> None:
        self.function = fn
        self.callees: list[Function] = []
        if fn.declaration == EXTERN or (not fn.blocks and fn.gradient is None):
            self.effects = ALL_EFFECTS  # unknown code (a body-less non-gradient is invalid IR)
            return
        if fn.gradient is not None and not fn.blocks:
            self.effects = NO_EFFECTS
            self.callees.append(fn.gradient.of)
            return
        effects = NO_EFFECTS
        for inst in fn.instructions():
            effects |= _own_effects(inst)
            for c in _callees(inst):
                if isinstance(c, Function):
                    if c not in self.callees:
                        self.callees.append(c)
                else:
                    effects = ALL_EFFECTS  # an indirect call may run anything
        self.effects = effects


class SideEffects:
    """The effects of every function of a module, solved to a fixpoint over the call graph."""

    def __init__(self, module: Module) -> None:
        self.module = module
        local = {f: analysis(_LocalEffects, f) for f in module.functions}
        self._key = _key(module, local)
        self._effects: dict[Function, Effects] = {}
        callers: dict[Function, list[Function]] = {f: [] for f in module.functions}
        for f, lf in local.items():
            e = lf.effects
            for c in lf.callees:
                if c in callers:
                    callers[c].append(f)
                else:
                    e = ALL_EFFECTS  # a function of another module (or detached): unknown
            self._effects[f] = e
        # Effects only grow and there are 16 values, so every function re-enters the worklist
        # at most four times: this ends, also for direct and mutual recursion.
        work = list(module.functions)
        queued = set(work)
        while work:
            g = work.pop()
            queued.discard(g)
            for f in callers[g]:
                new = self._effects[f] | self._effects[g]
                if new != self._effects[f]:
                    self._effects[f] = new
                    if f not in queued:
                        queued.add(f)
                        work.append(f)

    def function_effects(self, fn: Function) -> Effects:
        """What calling fn may do; unknown functions have every effect."""
        return self._effects.get(fn, ALL_EFFECTS)

    def instruction_effects(self, inst: Instruction) -> Effects:
        """inst's own effects plus those of whatever it calls."""
        e = _own_effects(inst)
        for c in _callees(inst):
            e |= self.function_effects(c) if isinstance(c, Function) else ALL_EFFECTS
        return e

    def may_remove(self, inst: Instruction) -> bool:
        """Dead-code elimination may delete inst when its result is unused.

        Reads and nondeterminism are invisible once the result is gone; writes and traps are not.
        """
        if inst.is_terminator:
            return False
        e = self.instruction_effects(inst)
        return not (e.writes or e.traps)

    def may_merge(self, inst: Instruction) -> bool:
        """CSE may replace inst by an identical earlier one: pure, so deterministic and
        memory-free."""
        return not inst.is_terminator and self.instruction_effects(inst).pure


def _key(module: Module, local: dict[Function, _LocalEffects]) -> tuple:
    # The local summaries are cached per function revision (and dropped by `invalidate`), so a
    # new summary object means that function changed.
    return tuple((f, local[f]) for f in module.functions)


_MODULE_CACHE: dict[int, SideEffects] = {}


def side_effects(module: Module) -> SideEffects:
    """The module's side-effect analysis, recomputed when any of its functions changed."""
    hit = _MODULE_CACHE.get(id(module))
    if hit is not None and hit.module is module:
        local = {f: analysis(_LocalEffects, f) for f in module.functions}
        if hit._key == _key(module, local):
            return hit
    result = SideEffects(module)
    _MODULE_CACHE[id(module)] = result
    return result


def function_effects(fn: Function) -> Effects:
    """What calling fn may do (through its module's analysis; every effect when detached)."""
    return side_effects(fn.module).function_effects(fn) if fn.module is not None else ALL_EFFECTS


def instruction_effects(inst: Instruction) -> Effects:
    """inst's effects, calls resolved through its module; a detached call has every effect."""
    if not _callees(inst):
        return _own_effects(inst)  # no call: the module-wide solution is not needed
    fn = inst.function
    if fn is not None and fn.module is not None:
        return side_effects(fn.module).instruction_effects(inst)
    return ALL_EFFECTS


def is_pure(inst: Instruction) -> bool:
    """No effects at all and not a terminator."""
    return not inst.is_terminator and instruction_effects(inst).pure


def may_remove(inst: Instruction) -> bool:
    """Whether DCE may delete inst when unused (see SideEffects.may_remove)."""
    fn = inst.function
    if fn is not None and fn.module is not None:
        return side_effects(fn.module).may_remove(inst)
    return not inst.is_terminator and not (e := instruction_effects(inst)).writes and not e.traps


def may_merge(inst: Instruction) -> bool:
    """Whether CSE may merge inst with an identical dominating one (SideEffects.may_merge)."""
    return is_pure(inst)
