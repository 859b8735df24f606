"""Differentiability: which types and arguments can have derivatives, and activity analysis (the
values on a data path from the arguments differentiated with respect to, to the returned value).

Activity only follows data: a branch condition carries no derivative, and neither does the
result of a non-differentiable instruction (`sign`, `floor`, comparisons, memory access).
Successor arguments flow into the matching block arguments.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import cast

from dlvm.ir.types import FunctionType, TensorType, Type, canonical, is_differentiable
from dlvm.ir.values import Argument, Block, Function, Instruction, Value, deep_values


def is_differentiable_type(ty: Type) -> bool:
    """A tensor (or scalar) of a float data type."""
    return is_differentiable(ty)


def differentiable_arguments(fn: Function) -> list[int]:
    """The indices of fn's arguments that have a differentiable type (the default `wrt`)."""
    arguments = cast(FunctionType, fn.type).arguments
    return [i for i, t in enumerate(arguments) if is_differentiable(t)]


def _may_carry(ty: Type) -> bool:
    # Only a non-float tensor is certainly derivative-free; aggregates, pointers and the like
    # may hold floats, and tracking them element by element is not worth it here.
    t = canonical(ty)
    return not isinstance(t, TensorType) or t.dtype.is_float


def _flows(fn: Function) -> Iterator[tuple[Value, Value]]:
    """Data edges (source, destination) that can carry a derivative."""
    for b in fn.blocks:
        for inst in b.instructions:
            edges: list[tuple[Value, Value]] = []
            if inst.is_terminator:
                for succ in inst.successors():
                    for a, v in zip(succ.block.arguments, succ.args):
                        edges.extend((d, a) for d in deep_values(v))
            elif inst.op.differentiable:
                callee = inst.operands[0] if inst.opcode == "apply" else None
                edges.extend((v, inst) for v in inst.uses() if v is not callee)
            for src, dst in edges:
                if _may_carry(src.type) and _may_carry(dst.type):
                    yield src, dst


class Activity:
    """Varied values (depend on `wrt`), useful values (the result depends on them) and active
    values (both): the values whose adjoints reverse-mode AD has to compute.

    `wrt` are argument indices; None means every differentiable argument.
    """

    def __init__(self, fn: Function, wrt: Iterable[int] | None = None) -> None:
        self.function = fn
        indices = differentiable_arguments(fn) if wrt is None else list(wrt)
        args = fn.arguments
        self.wrt: list[Argument] = [args[i] for i in indices if i < len(args)]
        forward: dict[Value, list[Value]] = {}
        backward: dict[Value, list[Value]] = {}
        for src, dst in _flows(fn):
            forward.setdefault(src, []).append(dst)
            backward.setdefault(dst, []).append(src)
        results = [v for inst in fn.instructions() if inst.opcode == "return" for v in inst.uses()]
        self.varied: set[Value] = _closure(self.wrt, forward)
        self.useful: set[Value] = _closure(results, backward)
        self.active: set[Value] = self.varied & self.useful

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


def activity(fn: Function, wrt: Iterable[int] | None = None) -> Activity:
    """Activity of fn with respect to the arguments `wrt` (not cached: it depends on `wrt`)."""
    return Activity(fn, wrt)
