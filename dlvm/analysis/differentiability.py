"""Differentiability: which types and arguments can have derivatives, and activity analysis (the
values on a data path from the arguments differentiated with respect to, to the returned value).

Derivatives follow data through the operands that adjoint rules differentiate (declared with
each instruction): a branch condition or a `select` mask carries none, and nothing flows through
an instruction without an adjoint rule. Successor arguments flow into the matching block
arguments.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import cast

from dlvm.ir.types import (
    ArrayType,
    FunctionType,
    StructType,
    TensorType,
    TupleType,
    Type,
    canonical,
    is_differentiable,
)
from dlvm.ir.values import Argument, Block, Function, Instruction, Value, deep_values


def is_differentiable_type(ty: Type) -> bool:
    """A tensor (or scalar) of a float data type."""
    return is_differentiable(ty)


def differentiable_arguments(fn: Function) -> list[int]:
    """The indices of fn's arguments that have a differentiable type (the default `wrt`)."""
    arguments = cast(FunctionType, fn.type).arguments
    return [i for i, t in enumerate(arguments) if is_differentiable(t)]


def carries_gradient(ty: Type) -> bool:
    """A float tensor, or an aggregate with a float tensor somewhere inside."""
    t = canonical(ty)
    if isinstance(t, TensorType):
        return t.dtype.is_float
    if isinstance(t, TupleType):
        return any(carries_gradient(e) for e in t.elements)
    if isinstance(t, StructType):
        return any(carries_gradient(ft) for _, ft in t.fields)
    if isinstance(t, ArrayType):
        return carries_gradient(t.element)
    return False


def gradient_operands(inst: Instruction) -> list[Value]:
    """The operands a derivative can flow into through inst: the values an adjoint rule may
    give a contribution to (for `literal`, the elements of its aggregate)."""
    op = inst.op
    if op.adjoint is None:
        return []
    if op.name == "literal":
        return list(inst.operands[0].literal.elements())  # type: ignore[attr-defined]
    if op.name == "apply":
        return inst.operands[1:]
    if op.name == "convert" and not all(
        carries_gradient(t) for t in (inst.type, inst.operands[0].type)
    ):
        return []  # to an integer, a step function (as floor); from one, no derivative
    if op.gradient_slots is None:
        return list(inst.operands)
    return [inst.operands[i] for i in op.gradient_slots if i < len(inst.operands)]


def _edges(fn: Function) -> tuple[dict[Value, list[Value]], dict[Value, list[Value]]]:
    """(forward, backward): forward data edges of every use; backward edges only where a
    derivative can flow (adjoint rules and successor arguments)."""
    forward: dict[Value, list[Value]] = {}
    backward: dict[Value, list[Value]] = {}
    for b in fn.blocks:
        for inst in b.instructions:
            if inst.is_terminator:
                for succ in inst.successors():
                    for a, v in zip(succ.block.arguments, succ.args):
                        for d in deep_values(v):
                            forward.setdefault(d, []).append(a)
                            backward.setdefault(a, []).append(d)
                for v in inst.uses():  # conditions: data, but no derivative
                    forward.setdefault(v, [])
                continue
            for v in inst.uses():
                forward.setdefault(v, []).append(inst)
            grads = gradient_operands(inst)
            if grads:
                backward[inst] = [d for v in grads for d in deep_values(v)]
    return forward, backward


class Activity:
    """Varied values (they depend on `wrt`), useful values (a derivative can flow from the
    differentiated result back to them) and active values (both, of a type that carries a
    gradient): the values whose adjoints reverse-mode AD computes.

    `wrt` are argument indices (None: every differentiable argument); `sources` are the values
    differentiated (default: the returned values). A varied and useful value that is not
    active, or a varied and useful instruction without an adjoint rule, means the derivative
    does not exist; `obstacles` lists them in program order.
    """

    def __init__(
        self,
        fn: Function,
        wrt: Iterable[int] | None = None,
        sources: Iterable[Value] | None = None,
    ) -> None:
        self.function = fn
        indices = differentiable_arguments(fn) if wrt is None else list(wrt)
        args = fn.arguments
        self.wrt: list[Argument] = [args[i] for i in indices if i < len(args)]
        forward, backward = _edges(fn)
        if sources is None:
            sources = [
                d
                for inst in fn.instructions()
                if inst.opcode == "return"
                for v in inst.operands
                for d in deep_values(v)
            ]
        self.varied: set[Value] = _closure(self.wrt, forward)
        self.useful: set[Value] = _closure(sources, backward)
        both = self.varied & self.useful
        self.active: set[Value] = {v for v in both if carries_gradient(v.type)}
        self.obstacles: list[Value] = [
            v
            for v in _program_order(fn)
            if v in both
            and (
                not carries_gradient(v.type)
                or (isinstance(v, Instruction) and v.op.adjoint is None)
            )
        ]

    def is_active(self, value: Value) -> bool:
        return value in self.active

    def active_instructions(self) -> list[Instruction]:
        """Active instructions in program order."""
        return [i for i in self.function.instructions() if i in self.active]

    def active_arguments(self, block: Block | None = None) -> list[Argument]:
        """Active arguments of `block` (default: the entry block, i.e. the function's)."""
        b = block if block is not None else self.function.entry
        return [a for a in b.arguments if a in self.active] if b is not None else []


def _closure(seeds: Iterable[Value], edges: dict[Value, list[Value]]) -> set[Value]:
    seen: set[Value] = set()
    work = list(seeds)
    while work:
        v = work.pop()
        if v in seen:
            continue
        seen.add(v)
        work.extend(edges.get(v, ()))
    return seen


def _program_order(fn: Function) -> Iterator[Value]:
    for b in fn.blocks:
        yield from b.arguments
        yield from b.instructions


def activity(
    fn: Function, wrt: Iterable[int] | None = None, sources: Iterable[Value] | None = None
) -> Activity:
    """Activity of fn with respect to the arguments `wrt` (not cached: it depends on `wrt`)."""
    return Activity(fn, wrt, sources)
