"""Memory planning for a host function's frame: which values need storage, when each is live,
and offsets that let values whose lifetimes do not overlap share bytes.

An *owner* is a value with storage of its own: a call's result (a tuple's elements laid out one
after another), a random tensor, a popped, loaded or extracted tensor, an insert's copy, a built
aggregate literal, a stack handle, a pointer or box an instruction makes, and the argument of every
block but the entry. Other values borrow storage: an element of a tuple, struct or array taken with
`extract`, a tuple literal and a bitCast in host code keep their owners alive. Two owners interfere
when one is defined while the other is live, or is read by the instruction that defines the other
(a kernel must not write over its own input), except that a pointwise kernel's result may take
exactly the storage of an input it reads only at the index it writes (dlvm/codegen/inplace.py) when
that input dies there. The planner places each owner, in program order, in such an input's storage
when it can, else at the first offset where it overlaps no interfering owner and no such input at
all (first fit over an interval list).

An owner that the function's only `return` returns (itself, or an element of a tuple literal)
takes no frame bytes: it is computed straight into the caller's result buffer, which overlaps
no argument and no other result (docs/c-abi.md section 5), so a kernel writes its output there
instead of into the frame followed by a copy."""

from __future__ import annotations

import math
from collections import defaultdict

from dlvm.analysis.liveness import liveness
from dlvm.codegen.inplace import aligned_inputs
from dlvm.codegen.layout import layout
from dlvm.ir.literals import AggregateLiteral, EnumLiteral, StructLiteral
from dlvm.ir.typerules import element_type
from dlvm.ir.types import MAX_TENSOR_BYTES, TensorType, TupleType, Type, canonical
from dlvm.ir.values import Argument, Function, Instruction, LiteralValue, Value

ALIGN = 64
# The most bytes a frame may take: a value of the most bytes any may take, aligned (2^62). Every
# offset into a frame and its size are then i64 constants, with no sum of them to wrap.
MAX_FRAME_BYTES = -(-MAX_TENSOR_BYTES // ALIGN) * ALIGN
_OWNING = {
    "apply", "random", "pop", "insert", "createStack", "load", "reduce", "allocateStack",
    "allocateHeap", "allocateBox", "projectBox", "elementPointer",
}  # fmt: skip
_BORROWING = {"extract", "literal", "bitCast"}


def storage_size(t: Type) -> int:
    """Bytes a value of type t takes in a frame (each tensor 64-byte aligned)."""
    t = canonical(t)
    if isinstance(t, TupleType):
        return sum(storage_size(e) for e in t.elements)
    if isinstance(t, TensorType):
        return -(-max(math.prod(t.shape) * t.dtype.size, 1) // ALIGN) * ALIGN
    return -(-max(layout(t).size, 1) // ALIGN) * ALIGN


class FramePlan:
    """Offsets of every owner of fn; `size` is the frame's size in bytes. With in_place
    false, no kernel's result shares storage with its inputs."""

    def __init__(self, fn: Function, in_place: bool = True) -> None:
        self.fn = fn
        self.in_place = in_place
        # Owners computed in the caller's result buffers: the index of the first (a tuple
        # takes one per element, flattened).
        self.returned: dict[Value, int] = self.find_returned()
        self.order: list[Value] = []
        for i, block in enumerate(fn.blocks):
            if i > 0:
                self.order.extend(block.arguments)
            self.order.extend(
                inst
                for inst in block.instructions
                if self.is_owner(inst) and inst not in self.returned
            )
        self.interferes: dict[Value, set[Value]] = defaultdict(set)
        # Owners that may take exactly each other's storage, never part of it (in-place calls).
        self.shares: dict[Value, set[Value]] = defaultdict(set)
        self._aligned: dict[Function, set[int]] = {}
        self.find_interference()
        self.offset: dict[Value, int] = {}
        self.size = 0
        self.place()

    def is_owner(self, v: Value) -> bool:
        if isinstance(v, Argument):
            return v.block is not None and v.block is not self.fn.blocks[0]
        if not isinstance(v, Instruction):
            return False
        if v.opcode == "extract":  # a copy out of a tensor; an aggregate's element is borrowed
            return indexes_tensor(v)
        if v.opcode == "literal":  # a tuple literal borrows; other aggregates are built
            lit = v.operands[0]
            return isinstance(lit, LiteralValue) and builds(lit)
        return v.opcode in _OWNING

    def owners(self, v: Value) -> set[Value]:
        """The owners whose storage v's value lives in."""
        if self.is_owner(v):
            return {v}
        if isinstance(v, LiteralValue):
            return {o for e in v.literal.elements() for o in self.owners(e)}
        if isinstance(v, Instruction) and v.opcode in _BORROWING:
            return {o for u in v.uses() for o in self.owners(u)}
        return set()

    def find_returned(self) -> dict[Value, int]:
        """The owners the only `return` of the function returns, each at the first result
        pointer it is returned through (a value returned twice is copied to the second)."""
        returns = [i for b in self.fn.blocks for i in b.instructions if i.opcode == "return"]
        if len(returns) != 1 or not returns[0].operands:
            return {}
        found: dict[Value, int] = {}
        index = 0

        def visit(v: Value) -> None:
            nonlocal index
            items = _tuple_items(v)
            if items is not None:
                for item in items:
                    visit(item)
                return
            if isinstance(v, Instruction) and self.is_owner(v) and v not in found:
                found[v] = index
            index += result_count(v.type)

        visit(returns[0].operands[0])
        return found

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
                overwritten = self.overwritable_inputs(inst, live) if defs else set()
                for d in defs:
                    for c in overwritten:
                        self.shares[d].add(c)
                        self.shares[c].add(d)
                    for other in live | (read - overwritten) | defs:
                        if other is not d:
                            self.interferes[d].add(other)
                            self.interferes[other].add(d)
                live -= defs
                live |= read

    def overwritable_inputs(self, inst: Instruction, live_after: set[Value]) -> set[Value]:
        """The owners read by a kernel call that its result may be written over: each an
        argument the kernel reads only at the index it writes, dead after the call, and read
        by the call through no other argument."""
        callee = inst.operands[0] if inst.opcode == "apply" else None
        if not self.in_place or not isinstance(callee, Function) or not callee.compute:
            return set()
        if callee not in self._aligned:
            self._aligned[callee] = aligned_inputs(callee)
        aligned = self._aligned[callee]
        args = inst.operands[1:]
        found: set[Value] = set()
        for k, v in enumerate(args):
            # An argument of the host function is the caller's memory (a parameter, say).
            if k not in aligned or not self.is_owner(v) or v in live_after:
                continue
            if storage_size(v.type) != storage_size(inst.type):
                continue
            if all(u is v and j in aligned for j, u in enumerate(args) if v in self.owners(u)):
                found.add(v)
        return found

    def place(self) -> None:
        placed: list[tuple[int, int, Value]] = []  # (offset, size, owner)
        for v in self.order:
            size = storage_size(v.type)
            offset = self.shared_offset(v, size, placed)
            if offset is None:
                offset = self.first_fit(v, size, placed)
            self.offset[v] = offset
            placed.append((offset, size, v))
            self.size = max(self.size, offset + size)

    def shared_offset(
        self, v: Value, size: int, placed: list[tuple[int, int, Value]]
    ) -> int | None:
        """The offset of a placed input whose storage v may take whole, when v there overlaps
        no interfering owner and no other such input in part."""
        for o, s, w in placed:
            whole = w in self.shares[v] and w not in self.interferes[v] and s == size
            if whole and not any(self.clashes(v, o, size, p) for p in placed):
                return o
        return None

    def clashes(self, v: Value, offset: int, size: int, other: tuple[int, int, Value]) -> bool:
        """Whether v at offset would overlap a placed owner it must not: one it interferes
        with, or one it may share with but not at exactly the same place."""
        o, s, w = other
        if not (offset < o + s and o < offset + size):
            return False
        if w in self.interferes[v]:
            return True
        return w in self.shares[v] and (o, s) != (offset, size)

    def first_fit(self, v: Value, size: int, placed: list[tuple[int, int, Value]]) -> int:
        """The lowest offset where v overlaps no interfering owner and no owner it could have
        shared with (a kernel must not write over part of an input)."""
        avoid = self.interferes[v] | self.shares[v]
        offset = 0
        for o, s in sorted((o, s) for o, s, w in placed if w in avoid):
            if offset + size <= o:
                break
            offset = max(offset, o + s)
        return offset


def result_count(t: Type) -> int:
    """How many result pointers a value of type t is returned through (tuples flattened)."""
    t = canonical(t)
    if isinstance(t, TupleType):
        return sum(result_count(e) for e in t.elements)
    return 1


def _tuple_items(v: Value) -> list[Value] | None:
    """The elements of a tuple literal, as an operand or a `literal` instruction; else None."""
    if isinstance(v, Instruction) and v.opcode == "literal":
        v = v.operands[0]
    if isinstance(v, LiteralValue):
        lit = v.literal
        if isinstance(lit, AggregateLiteral) and lit.kind == "tuple":
            return list(lit.items)
    return None


def builds(lit: LiteralValue) -> bool:
    """Whether a literal's value is built in storage of its own: a struct, enum, array or
    tensor literal (a tuple literal is its elements, a scalar or `zero` a constant)."""
    value = lit.literal
    if isinstance(value, AggregateLiteral):
        return value.kind != "tuple"
    return isinstance(value, StructLiteral | EnumLiteral)


def indexes_tensor(extract: Instruction) -> bool:
    """Whether an extract's keys reach into a tensor (its result is then a copy)."""
    t = extract.operands[0].type
    for key in extract.attrs["keys"]:
        if isinstance(canonical(t), TensorType):
            return True
        t = element_type(t, key)
    return False
