"""Differentiating one function: copy the primal, find the active values, then write the
reverse sweep — in place for a single block, through control_flow for anything else."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from dlvm.analysis.differentiability import Activity, carries_gradient
from dlvm.diagnostics import Diagnostic, DiagnosticError
from dlvm.ir.adjoints import AdjointError
from dlvm.ir.builder import Builder
from dlvm.ir.cloning import clone_body
from dlvm.ir.literals import AggregateLiteral
from dlvm.ir.typerules import TypeRuleError
from dlvm.ir.types import FunctionType, TupleType, Type, canonical, is_differentiable
from dlvm.ir.values import (
    EXTERN,
    Argument,
    ElementKey,
    Function,
    GradientDecl,
    Instruction,
    LiteralValue,
    Value,
    fresh_name,
)
from dlvm.transforms.differentiation.emitter import Emitter

if TYPE_CHECKING:
    from dlvm.transforms.differentiation import ModuleDifferentiator

Adjoints = dict[Value, Value]


class FunctionDifferentiator:
    """Turns the gradient declaration `decl` of function g into g's definition."""

    def __init__(self, module_ad: ModuleDifferentiator, g: Function, decl: GradientDecl) -> None:
        self.module_ad = module_ad
        self.g = g
        self.decl = decl
        self.primal_type = cast(FunctionType, decl.of.type)
        n = len(self.primal_type.arguments)
        self.wrt: tuple[int, ...] = decl.wrt if decl.wrt is not None else tuple(range(n))

    # Setting up ------------------------------------------------------------------------------

    def run(self) -> None:
        g, decl = self.g, self.decl
        clone_body(decl.of, g)
        entry = g.blocks[0]
        self.seed: Value | None = None
        if decl.seedable:
            names = {a.name for b in g.blocks for a in b.arguments}
            names |= {i.name for i in g.instructions() if i.name}
            self.seed = entry.add_argument(Argument(fresh_name("seed", names), self.source_type()))
        self.returns = [i for i in g.instructions() if i.opcode == "return"]
        if not self.returns:
            raise DiagnosticError(
                [Diagnostic(f"cannot differentiate @{decl.of.name}: it never returns", g.loc)]
            )
        self.sources = {r: self.source_of(r) for r in self.returns}
        self.activity = Activity(g, self.wrt, [s for s in self.sources.values()])
        self.report_obstacles()
        if len(g.blocks) == 1 and len(self.returns) == 1:
            self.straight_line()
        else:
            from dlvm.transforms.differentiation.control_flow import ControlFlowSweep

            ControlFlowSweep(self).run()

    def source_type(self) -> Type:
        result = canonical(self.primal_type.result)
        if self.decl.source is not None:
            assert isinstance(result, TupleType)
            return result.elements[self.decl.source]
        return self.primal_type.result

    def source_of(self, ret: Instruction) -> Value:
        """The value differentiated at this return: the returned value, or for `from S` the
        element S of the returned tuple (the element itself when the tuple is a literal)."""
        v = ret.operands[0]
        if self.decl.source is None:
            return v
        agg = _tuple_literal(v)
        return agg[self.decl.source] if agg is not None else v

    def kept(self, ret: Instruction, b: Builder) -> list[Value]:
        """The outputs `keeping` asks for, as values available at the return."""
        v = ret.operands[0]
        if self.decl.source is None:
            return [v for _ in self.decl.keeping]
        agg = _tuple_literal(v)
        out = []
        for k in self.decl.keeping:
            out.append(agg[k] if agg is not None else b.extract(v, keys=(ElementKey(k),)))
        return out

    def report_obstacles(self) -> None:
        diags = []
        for v in self.activity.obstacles:
            loc = getattr(v, "loc", None)
            if isinstance(v, Instruction) and v.op.adjoint is None:
                msg = f"cannot differentiate through '{v.opcode}'"
                if v.opcode == "random":
                    msg += ": random numbers have no derivative"
                elif v.opcode in ("truncateDivide", "floorDivide", "modulo"):
                    msg += ": integer-style division has no adjoint (write it with divide)"
            else:
                msg = (
                    f"the derivative would flow through {v.ref_text()} of type {v.type}; "
                    "only float values have derivatives"
                )
            diags.append(Diagnostic(f"{msg} (in the gradient of @{self.decl.of.name})", loc))
        if diags:
            raise DiagnosticError(diags)

    # The reverse sweep of a list of instructions ---------------------------------------------

    def sweep(
        self,
        e: Emitter,
        instructions: list[Instruction],
        adjoints: Adjoints,
        consumed: Callable[[Value], None] | None = None,
    ) -> None:
        """Writes the adjoint code of `instructions` (in reverse order) with e, reading and
        updating `adjoints`. `consumed(inst)` is told when an instruction's adjoint was used."""
        active = self.activity.active
        for inst in reversed(instructions):
            if inst not in active or inst.is_terminator:
                continue
            d = adjoints.pop(inst, None)
            if consumed is not None:
                consumed(inst)
            if d is None:
                continue
            try:
                pairs = self.call_adjoint(e, inst, d) if inst.opcode == "apply" else None
                if pairs is None:
                    assert inst.op.adjoint is not None
                    pairs = inst.op.adjoint(e, inst, d)
            except (AdjointError, TypeRuleError) as err:
                raise DiagnosticError([Diagnostic(f"{inst.opcode}: {err}", inst.loc)]) from None
            for v, c in pairs:
                if v in active:
                    self.contribute(e, adjoints, v, c)

    def contribute(self, e: Emitter, adjoints: Adjoints, v: Value, c: Value) -> None:
        c = e.unbroadcast(c, v.type)
        adjoints[v] = e.accumulate(adjoints.get(v), c)

    def call_adjoint(self, e: Emitter, inst: Instruction, d: Value) -> list[tuple[Value, Value]]:
        """`apply @f(args)`: `apply @f_grad(args, seed)` per differentiated element of the
        result, and `extract` of each argument's derivative."""
        callee, args = inst.operands[0], inst.operands[1:]
        if not isinstance(callee, Function):
            raise AdjointError("cannot differentiate an indirect call (through a function value)")
        if not callee.blocks or callee.declaration == EXTERN:
            raise AdjointError(f"cannot differentiate through @{callee.name}: it has no body")
        cty = cast(FunctionType, callee.type)
        wrt = tuple(i for i, t in enumerate(cty.arguments) if is_differentiable(t))
        for i, a in enumerate(args):
            if i not in wrt and e.wants(a):
                raise AdjointError(
                    f"cannot differentiate @{callee.name} with respect to its aggregate "
                    f"argument {i} ({a.type})"
                )
        result = canonical(cty.result)
        seeds: list[tuple[int | None, Value]]
        if isinstance(result, TupleType):
            seeds = [
                (s, e.op("extract", d, keys=(ElementKey(s),)))
                for s, t in enumerate(result.elements)
                if is_differentiable(t)
            ]
        else:
            seeds = [(None, d)]
        pairs: list[tuple[Value, Value]] = []
        primal_args = [e.primal(a) for a in args]
        for source, seed in seeds:
            grad = self.module_ad.gradient_of(callee, source, wrt, self.g)
            call = e.op("apply", grad, *primal_args, seed)
            for j, i in enumerate(wrt):
                if e.wants(args[i]):
                    pairs.append((args[i], e.op("extract", call, keys=(ElementKey(j),))))
        return pairs

    def seed_value(self, b: Builder, at_top: Callable[[], Builder]) -> Value:
        """The seed: the seed argument, a bare `1: f32` for a scalar source, else a
        `literal 1: <…>` instruction made by the builder `at_top()` returns."""
        if self.seed is not None:
            return self.seed
        return Emitter(at_top(), lambda v: v, lambda v: False).constant(1, self.source_type())

    def seed_adjoint(self, e: Emitter, ret: Instruction, adjoints: Adjoints, seed: Value) -> None:
        """Puts the seed on the source of `ret` (one-hot in the returned tuple when the
        source is an element of a tuple that is not a literal)."""
        src = self.sources[ret]
        if src not in self.activity.active:
            return
        if self.decl.source is not None and src is ret.operands[0]:
            seed = e.one_hot(seed, src.type, (ElementKey(self.decl.source),))
        adjoints[src] = e.accumulate(adjoints.get(src), seed)

    def results(self, e: Emitter, adjoints: Adjoints, kept: list[Value]) -> Value:
        """`literal (derivatives…, kept…)` with a zero for arguments that got no adjoint."""
        args = self.g.blocks[0].arguments
        derivs = []
        for i in self.wrt:
            a = args[i]
            d = adjoints.get(a)
            derivs.append(d if d is not None else e.zeros(a.type))
        result_type = cast(FunctionType, self.g.type).result
        return e.op(
            "literal", LiteralValue(AggregateLiteral("tuple", (*derivs, *kept)), result_type)
        )

    # One block, one return: the adjoint code follows the primal code ------------------------

    def straight_line(self) -> None:
        block = self.g.blocks[0]
        ret = self.returns[0]
        forward = [i for i in block.instructions if i is not ret]
        b = Builder().at_end(block)
        seed = self.seed_value(b, lambda: Builder(block, 0))
        kept = self.kept(ret, Builder().before(ret))
        block.remove(ret)
        e = Emitter(b, lambda v: v, self.activity.is_active)
        adjoints: Adjoints = {}
        self.seed_adjoint(e, ret, adjoints, seed)
        self.sweep(e, forward, adjoints)
        b.build("return", [self.results(e, adjoints, kept)])


def _tuple_literal(v: Value) -> tuple[Value, ...] | None:
    """The elements of v when v is a `literal (…)` tuple instruction."""
    if isinstance(v, Instruction) and v.opcode == "literal":
        lit = v.operands[0]
        agg = lit.literal if isinstance(lit, LiteralValue) else None
        if isinstance(agg, AggregateLiteral) and agg.kind == "tuple":
            return agg.items
    return None


__all__ = ["FunctionDifferentiator", "carries_gradient"]
