"""Memory planning for a host function's frame: which values need storage, when each is live,
and offsets that let values whose lifetimes do not overlap share bytes.

An *owner* is a value with storage of its own: a call's result (a tuple's elements laid out one
after another), a random tensor, a popped or extracted tensor, an insert's copy, a stack handle,
and the argument of every block but the entry. Other values borrow storage: a tuple element
taken with `extract` or a tuple literal keeps its owners alive. Two owners interfere when one is
defined while the other is live, or is read by the instruction that defines the other (a kernel
must not write over its own input); the planner then places each owner, in program order, at the
first offset where it overlaps no interfering owner (first fit over an interval list)."""

from __future__ import annotations

import math
from collections import defaultdict

from dlvm.analysis.liveness import liveness
from dlvm.ir.types import StackType, TensorType, TupleType, Type
from dlvm.ir.values import Argument, Function, Instruction, LiteralValue, Value

ALIGN = 64
_OWNING = {"apply", "random", "pop", "insert", "createStack"}


def storage_size(t: Type) -> int:
    """Bytes a value of type t takes in a frame (each tensor 64-byte aligned)."""
    if isinstance(t, TupleType):
        return sum(storage_size(e) for e in t.elements)
    if isinstance(t, StackType):
        return ALIGN
    assert isinstance(t, TensorType), t
    return -(-max(math.prod(t.shape) * t.dtype.size, 1) // ALIGN) * ALIGN


class FramePlan:
    """Offsets of every owner of fn; `size` is the frame's size in bytes."""

    def __init__(self, fn: Function) -> None:
        self.fn = fn
        self.order: list[Value] = []
        for i, block in enumerate(fn.blocks):
            if i > 0:
                self.order.extend(block.arguments)
            self.order.extend(inst for inst in block.instructions if self.is_owner(inst))
        self.interferes: dict[Value, set[Value]] = defaultdict(set)
        self.find_interference()
        self.offset: dict[Value, int] = {}
        self.size = 0
        self.place()

    def is_owner(self, v: Value) -> bool:
        if isinstance(v, Argument):
            return v.block is not None and v.block is not self.fn.blocks[0]
        if not isinstance(v, Instruction):
            return False
        if v.opcode == "extract":  # a copy out of a tensor; a tuple's element is borrowed
            return not isinstance(v.operands[0].type, TupleType)
        return v.opcode in _OWNING

    def owners(self, v: Value) -> set[Value]:
        """The owners whose storage v's value lives in."""
        if self.is_owner(v):
            return {v}
        if isinstance(v, LiteralValue):
            return {o for e in v.literal.elements() for o in self.owners(e)}
        if isinstance(v, Instruction) and v.opcode in ("extract", "literal"):
            return {o for u in v.operands for o in self.owners(u)}
        return set()

    def find_interference(self) -> None:
        live_info = liveness(self.fn)
        for block in self.fn.blocks:
            live = {o for v in live_info.live_out(block) for o in self.owners(v)}
            for inst in reversed(block.instructions):
                read = {o for v in inst.uses() for o in self.owners(v)}
                defs: set[Value]
                if inst.is_terminator:  # the successors' arguments are written here
                    args = {a for s in inst.successors() for a in s.block.arguments}
                    defs = {a for a in args if self.is_owner(a)}
                else:
                    defs = {inst} if self.is_owner(inst) else set()
                for d in defs:
                    for other in live | read | defs:
                        if other is not d:
                            self.interferes[d].add(other)
                            self.interferes[other].add(d)
                live -= defs
                live |= read

    def place(self) -> None:
        placed: list[tuple[int, int, Value]] = []  # (offset, size, owner)
        for v in self.order:
            size = storage_size(v.type)
            taken = sorted((o, s) for o, s, w in placed if w in self.interferes[v])
            offset = 0
            for o, s in taken:
                if offset + size <= o:
                    break
                offset = max(offset, o + s)
            self.offset[v] = offset
            placed.append((offset, size, v))
            self.size = max(self.size, offset + size)
