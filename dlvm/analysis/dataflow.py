"""Def-use chains inside one function: the users of every value and the operand instructions of
every instruction, both in program order (blocks in function order, instructions in block order).

A use is anything `Instruction.uses()` yields: operands, successor arguments, value element keys,
combinator functions and values nested in aggregate literals. Literals are not tracked.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from dlvm.ir.analysis_cache import analysis
from dlvm.ir.values import Function, Instruction, LiteralValue, Value


class DataFlow:
    """Users of the arguments, instructions, globals and functions used in one function."""

    def __init__(self, fn: Function) -> None:
        self.function = fn
        self._users: dict[Value, list[Instruction]] = {}
        self._counts: dict[Value, int] = {}
        self._operands: dict[Instruction, list[Instruction]] = {}
        for inst in fn.instructions():
            preds: list[Instruction] = []
            for v in inst.uses():
                if isinstance(v, LiteralValue):
                    continue  # literals compare by value: they have no identity to track
                self._counts[v] = self._counts.get(v, 0) + 1
                users = self._users.setdefault(v, [])
                if not users or users[-1] is not inst:  # each user once, however often it uses v
                    users.append(inst)
                if isinstance(v, Instruction) and v not in preds:
                    preds.append(v)
            self._operands[inst] = preds

    def users(self, value: Value) -> list[Instruction]:
        """The distinct instructions of this function that use `value`, in program order."""
        return list(self._users.get(value, ()))

    def has_users(self, value: Value) -> bool:
        return bool(self._users.get(value))

    def use_count(self, value: Value) -> int:
        """The number of use sites (an instruction using `value` twice counts twice)."""
        return self._counts.get(value, 0)

    def predecessors(self, inst: Instruction) -> list[Instruction]:
        """The distinct instructions `inst` uses, in the order of its uses (its data inputs)."""
        return list(self._operands.get(inst, ()))

    def transitive_users(self, values: Value | Iterable[Value]) -> list[Instruction]:
        """Every instruction that depends on `values` through data flow, in discovery order.

        Block arguments are not followed: a value passed to a successor reaches the terminator
        only (use `liveness` or the successor arguments when control flow matters).
        """
        work = deque([values] if isinstance(values, Value) else values)
        seen: set[Instruction] = set()
        out: list[Instruction] = []
        while work:
            v = work.popleft()
            for u in self._users.get(v, ()):
                if u not in seen:
                    seen.add(u)
                    out.append(u)
                    work.append(u)
        return out


def data_flow(fn: Function) -> DataFlow:
    return analysis(DataFlow, fn)
