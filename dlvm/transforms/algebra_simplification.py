"""algebra-simplification (AS): rewrites algebraic identities (x+0, x·1, x^2 → x·x,
e^x/e^y → e^(x−y), (x/y)/z → x/(y·z), transpose(transpose A) → A, …) until none applies.

The identities are a table in algebra_rules.py; this file owns the driver: trying the rules of
each instruction, replacing every use of a rewritten root (inside aggregate literals, successor
arguments and returns too), and removing the root with whatever only it used.
"""

from __future__ import annotations

from collections import deque

from dlvm.ir.ops import BINARY, UNARY_FLOAT, UNARY_NUMERIC
from dlvm.ir.typerules import TypeRuleError
from dlvm.ir.types import same_type
from dlvm.ir.values import Function, Instruction, Value
from dlvm.transforms.algebra_rules import BY_ROOT, Rewrite
from dlvm.transforms.pass_base import FunctionPass


class AlgebraSimplification(FunctionPass):
    name = "algebra-simplification"
    alias = "AS"
    summary = "rewrite algebraic identities (x+0, x*1, x^2, e^x/e^y, ...) to a fixpoint"

    def run_on_function(self, fn: Function) -> bool:
        return simplify_algebra(fn)


class _Users:
    """The instructions using each instruction, kept current while rewriting. Removed users are
    skipped when read rather than erased when removed."""

    def __init__(self, fn: Function) -> None:
        self._of: dict[Instruction, list[Instruction]] = {}
        for inst in fn.instructions():
            self.add(inst)

    def add(self, inst: Instruction) -> None:
        for v in inst.uses():
            if isinstance(v, Instruction):
                self._of.setdefault(v, []).append(inst)

    def live(self, v: Instruction) -> list[Instruction]:
        """v's users still in a block, each once, in a deterministic order."""
        return list(dict.fromkeys(u for u in self._of.get(v, ()) if u.block is not None))

    def only(self, v: Value, user: Instruction) -> bool:
        """Whether `user` is the only instruction using v."""
        return isinstance(v, Instruction) and self.live(v) == [user]

    def replace(self, old: Instruction, new: Value) -> None:
        """Makes every user of old use new instead."""
        moved = self.live(old)
        self._of.pop(old, None)

        def swap(v: Value) -> Value:
            return new if v is old else v

        for u in moved:
            u.map_values(swap)
        if isinstance(new, Instruction):
            self._of.setdefault(new, []).extend(moved)


def simplify_algebra(fn: Function) -> bool:
    """Applies the rules to every instruction of fn until none applies; True if any did."""
    users = _Users(fn)
    changed = False
    while True:
        # One sweep in block order simplifies operands before their users, so chains mostly
        # collapse at once; new instructions are tried right after they are made. Another sweep
        # catches users that come earlier in block order than their operands (loops).
        progress = False
        work = deque(fn.instructions())
        while work:
            inst = work.popleft()
            if inst.block is None or inst.is_terminator:
                continue
            created = _rewrite(inst, users)
            if created is not None:
                progress = True
                work.extendleft(reversed(created))
        if not progress:
            return changed
        changed = True


def _rewrite(root: Instruction, users: _Users) -> list[Instruction] | None:
    """Tries root's rules in order and commits the first that yields a value of exactly root's
    type; returns the instructions it created, or None when no rule applied."""
    for rule in BY_ROOT.get(root.opcode, ()):
        r = Rewrite(root, users.only)
        try:
            new = rule.apply(r)
        except TypeRuleError:  # a rebuilt expression whose operands no longer broadcast
            new = None
        if new is not None and _acceptable(root, new, r.created):
            _commit(root, new, r.created, users)
            return r.created
        r.discard()
    return None


def _acceptable(root: Instruction, new: Value, created: list[Instruction]) -> bool:
    # Never change a value's type (a broadcast must survive). Unreachable blocks may hold
    # instruction cycles, where a pattern can lead back to its own root.
    if new is root or not same_type(new.type, root.type):
        return False
    return not any(v is root for inst in created for v in inst.uses())


def _commit(root: Instruction, new: Value, created: list[Instruction], users: _Users) -> None:
    for inst in created:
        users.add(inst)
    operands = list(root.uses())
    root.erase()
    # The new instructions are unnamed, as in the original DLVM (whose FileCheck tests print
    # them by position): a name describes the old computation, not the simplified one.
    root.name = None
    users.replace(root, new)
    _remove_intermediates(operands, users)


# The operations algebraic expressions are made of; anything else is an atom of an expression.
_ALGEBRAIC = frozenset([*UNARY_FLOAT, *UNARY_NUMERIC, *BINARY, "transpose"])


def _remove_intermediates(values: list[Value], users: _Users) -> None:
    """Removes the algebraic instructions among values that the rewrite left unused, and then
    theirs: the matched pattern's intermediates. Atoms (a `literal`, a `dot`, …) stay even when
    dead, as in the original DLVM; dead-code elimination removes them."""
    work = [v for v in values if isinstance(v, Instruction)]
    while work:
        inst = work.pop()
        if inst.block is None or inst.opcode not in _ALGEBRAIC or users.live(inst):
            continue
        inst.erase()
        work.extend(v for v in inst.uses() if isinstance(v, Instruction))
