"""The verifier (docs/ir.md, "The verifier"): every structural, typing, dominance and stage rule,
reported as located diagnostics. It never stops at the first problem.
"""

from __future__ import annotations

from typing import cast

from dlvm.diagnostics import Diagnostic, DiagnosticError, Location
from dlvm.ir.dominance import dominator_tree
from dlvm.ir.typerules import TypeRuleError, check_literal_operand, gradient_type
from dlvm.ir.types import (
    AliasType,
    EnumType,
    FunctionType,
    StructType,
    TensorType,
    Type,
    canonical,
    is_void,
    same_type,
    size_problem,
)
from dlvm.ir.values import (
    EXTERN,
    Argument,
    Block,
    Function,
    GlobalVariable,
    Instruction,
    LiteralValue,
    Module,
    Value,
    attr_values,
    deep_values,
)

# What each stage may contain (docs/ir.md, "Stages").
_GRADIENT_DECLARATION_STAGES = ("raw",)
_COMPUTE_STAGES = ("compute", "schedule")


class _Verifier:
    def __init__(self, module: Module) -> None:
        self.module = module
        self.diags: list[Diagnostic] = []
        self.sized: set[int] = set()  # the types (by id) whose size was checked

    def error(self, message: str, loc: Location | None, context: str = "") -> None:
        if loc is None and context:
            message = f"{context}: {message}"
        self.diags.append(Diagnostic(message, loc))

    def run(self) -> list[Diagnostic]:
        m = self.module
        seen: dict[str, object] = {}
        for t in m.types:
            if t.name in seen:
                self.error(f"type ${t.name} is defined twice", t.loc)
            seen[t.name] = t
            self.type_decl(t)
            self.size(t, t.loc)
        names: set[str] = set()
        named: list[GlobalVariable | Function] = [*m.globals, *m.functions]
        for g in named:
            if g.name in names:
                self.error(f"@{g.name} is defined twice", g.loc)
            names.add(g.name)
            self.size(g.value_type if isinstance(g, GlobalVariable) else g.type, g.loc)
        for f in m.functions:
            self.function(f)
        return self.diags

    def type_decl(self, t: object) -> None:
        if isinstance(t, StructType):
            fields = [n for n, _ in t.fields]
            if len(set(fields)) != len(fields):
                self.error(f"struct ${t.name} repeats a field", t.loc)
        elif isinstance(t, EnumType):
            cases = [c for c, _ in t.cases]
            if len(set(cases)) != len(cases):
                self.error(f"enum ${t.name} repeats a case", t.loc)
        elif isinstance(t, AliasType):
            probe, steps = t.target, 0
            while isinstance(probe, AliasType) and probe.target is not None and steps < 100:
                probe, steps = probe.target, steps + 1
            if probe is t or steps >= 100:
                self.error(f"type alias ${t.name} refers to itself", t.loc)

    def size(self, ty: Type, loc: Location | None, context: str = "") -> None:
        """Reports a type whose values would be past the address space (MAX_TENSOR_BYTES), once
        per type: the code generator and the runtime size every value with 64-bit integers."""
        if (ty.__class__ is TensorType and not ty.shape) or id(ty) in self.sized:  # type: ignore[attr-defined]
            return  # a scalar, or seen before
        self.sized.add(id(ty))
        problem = size_problem(ty)
        if problem is not None:
            self.error(problem, loc, context)

    # Functions -------------------------------------------------------------------------------

    def function(self, fn: Function) -> None:
        ctx = f"in @{fn.name}"
        if not isinstance(canonical(fn.type), FunctionType):
            self.error(f"@{fn.name} has type {fn.type}, which is not a function type", fn.loc, ctx)
            return
        self.stage_rules(fn, ctx)
        decl = fn.declaration
        if decl is not None:
            if fn.blocks:
                self.error(f"declaration @{fn.name} must not have a body", fn.loc, ctx)
            if decl != EXTERN:
                self.gradient_declaration(fn)
            return
        if not fn.blocks:
            self.error(f"function @{fn.name} has no body", fn.loc, ctx)
            return
        entry = fn.blocks[0]
        params = cast(FunctionType, fn.type).arguments
        arg_types = tuple(a.type for a in entry.arguments)
        if len(arg_types) != len(params) or not all(map(same_type, arg_types, params)):
            self.error(
                f"entry block '{entry.name} takes ({', '.join(map(str, arg_types))}) but "
                f"@{fn.name} takes ({', '.join(map(str, params))})",
                entry.loc,
                ctx,
            )
        block_names: set[str] = set()
        value_names: set[str] = set()
        for b in fn.blocks:
            if b.name in block_names:
                self.error(f"block '{b.name} is defined twice", b.loc, ctx)
            block_names.add(b.name)
            for a in b.arguments:
                if a.name in value_names:
                    self.error(f"%{a.name} is defined twice", a.loc, ctx)
                value_names.add(a.name)
                self.size(a.type, a.loc, ctx)
            for inst in b.instructions:
                if inst.name is not None:
                    if inst.name in value_names:
                        self.error(f"%{inst.name} is defined twice", inst.loc, ctx)
                    value_names.add(inst.name)
        dom = dominator_tree(fn)
        for b in fn.blocks:
            self.block(fn, b, dom, ctx)

    def stage_rules(self, fn: Function, ctx: str) -> None:
        """What the module's stage allows of a function: `[compute]` kernels from stage compute
        on, `[schedule …]` lines at stage schedule only (a function without one gets the
        default schedule there)."""
        stage = self.module.stage
        if fn.compute and stage not in _COMPUTE_STAGES:
            message = f"compute function @{fn.name} is not allowed at stage {stage}"
            self.error(f"{message} (compute-generation makes them)", fn.loc, ctx)
        if (fn.schedule or fn.cuda_schedule) is not None and stage != "schedule":
            message = f"@{fn.name} has a schedule, which is not allowed at stage {stage}"
            self.error(f"{message} (compute-scheduling gives them)", fn.loc, ctx)
        if fn.cuda_schedule is not None and not fn.compute:
            message = f"@{fn.name} has a cuda schedule but is not a [compute] function"
            self.error(f"{message} (only kernels run on the GPU)", fn.loc, ctx)

    def gradient_declaration(self, fn: Function) -> None:
        decl = fn.gradient
        assert decl is not None
        if self.module.stage not in _GRADIENT_DECLARATION_STAGES:
            self.error(
                f"gradient declaration @{fn.name} is not allowed at stage {self.module.stage} "
                "(run differentiation first)",
                fn.loc,
                f"in @{fn.name}",
            )
        of = decl.of
        if of.module is not self.module:
            self.error(f"@{of.name} is not a function of this module", fn.loc, f"in @{fn.name}")
            return
        try:
            expected = gradient_type(
                cast(FunctionType, of.type), decl.source, decl.wrt, decl.keeping, decl.seedable
            )
        except TypeRuleError as e:
            self.error(f"invalid gradient declaration of @{of.name}: {e}", fn.loc)
            return
        if not same_type(expected, fn.type):
            self.error(
                f"gradient declaration @{fn.name} has type {fn.type}, but {decl} needs {expected}",
                fn.loc,
                f"in @{fn.name}",
            )

    def block(self, fn: Function, b: Block, dom, ctx: str) -> None:
        if b.function is not fn:
            self.error(f"block '{b.name} has a wrong parent", b.loc, ctx)
        if not b.instructions:
            self.error(f"block '{b.name} is empty; it needs a terminator", b.loc, ctx)
            return
        last = b.instructions[-1]
        if not last.is_terminator:
            self.error(
                f"block '{b.name} does not end with a terminator (branch, conditional, "
                "branchEnum or return)",
                last.loc or b.loc,
                ctx,
            )
        for inst in b.instructions[:-1]:
            if inst.is_terminator:
                self.error(
                    f"terminator '{inst.opcode}' must be last in block '{b.name}", inst.loc, ctx
                )
        reachable = dom.cfg.reachable(b)
        # The instructions before the current one: a same-block definition dominates a use
        # exactly when it is among them (a set, not list.index, keeps big blocks linear).
        earlier: set[Instruction] = set()
        for inst in b.instructions:
            if inst.block is not b:
                self.error("instruction has a wrong parent", inst.loc, ctx)
            self.instruction(fn, inst, dom if reachable else None, ctx, earlier)
            earlier.add(inst)

    def instruction(
        self,
        fn: Function,
        inst: Instruction,
        dom,
        ctx: str,
        earlier: set[Instruction] | None = None,
    ) -> None:
        loc = inst.loc
        op = inst.op
        block = inst.block
        # Attribute-free instructions use exactly their non-literal operands (scalar literals
        # hold no values): iterating the list directly skips the uses() generator.
        uses = inst.uses() if inst.attrs or op.name == "literal" else inst.operands
        for v in uses:
            if v.__class__ is LiteralValue:
                if not v.literal.elements():  # type: ignore[attr-defined]
                    continue
                for inner in deep_values(v):
                    self.operand(fn, inst, inner, dom, ctx, earlier)
                continue
            # The common case inline (an earlier value of this block, or of a dominating one);
            # `operand` handles everything else and reports problems.
            t = type(v)
            if dom is not None and (t is Instruction or t is Argument):
                vb = v.block  # type: ignore[attr-defined]  # t is Instruction or Argument
                if vb is block and earlier is not None and (t is Argument or v in earlier):
                    continue
                if (
                    vb is not None
                    and vb is not block
                    and vb.function is fn
                    and dom.dominates(vb, block)
                ):
                    continue
            self.operand(fn, inst, v, dom, ctx, earlier)
        if op.name == "literal" and not isinstance(inst.operands[0], LiteralValue):
            self.error("literal: the operand must be a literal, not a value", loc, ctx)
        for v in inst.operands:
            if v.__class__ is LiteralValue:
                try:
                    check_literal_operand(v, aggregate_ok=op.name == "literal")
                except TypeRuleError as e:
                    self.error(f"{op.name}: {e}", loc, ctx)
        if inst.attrs:
            self.attribute_literals(inst, ctx)
        try:
            ty = op.infer([v.type for v in inst.operands], inst.attrs)
        except TypeRuleError as e:
            self.error(f"{op.name}: {e}", loc, ctx)
            return
        if ty is not inst.type and not same_type(ty, inst.type):
            self.error(f"{op.name} produces {ty}, but the instruction says {inst.type}", loc, ctx)
        self.size(inst.type, loc, ctx)
        if inst.name is not None and inst.type.__class__ is not TensorType and is_void(inst.type):
            self.error(f"cannot name the result of '{op.name}', which produces no value", loc, ctx)
        if op.terminator:
            self.terminator(fn, inst, ctx)

    def attribute_literals(self, inst: Instruction, ctx: str) -> None:
        """Literals an instruction holds in its attributes (a branch's arguments, `zero: <7 x
        f32>` among them) must fit their types too: `1.5: i32` would reach the passes."""
        for a in inst.attrs.values():
            if isinstance(a, (int, str)) or a is None:
                continue
            for v in attr_values(a):
                if v.__class__ is LiteralValue:
                    try:
                        check_literal_operand(v, aggregate_ok=True)
                    except TypeRuleError as e:
                        self.error(f"{inst.opcode}: {e}", use_location(inst, v), ctx)

    def operand(
        self,
        fn: Function,
        inst: Instruction,
        v: Value,
        dom,
        ctx: str,
        earlier: set[Instruction] | None = None,
    ) -> None:
        if isinstance(v, (Argument, Instruction)):
            owner = v.block.function if v.block is not None else None
            if owner is not fn:
                self.error(
                    f"{v.ref_text()} is not defined in @{fn.name}", use_location(inst, v), ctx
                )
                return
            if dom is None:  # an unreachable block: dominance says nothing
                dominates = True
            elif earlier is not None and v.block is inst.block and isinstance(v, Instruction):
                dominates = v in earlier
            else:
                dominates = dom.value_dominates(v, inst)
            if not dominates:
                self.error(
                    f"{v.ref_text()} does not dominate this use (its definition is not on "
                    "every path to it)",
                    use_location(inst, v),
                    ctx,
                )
        elif isinstance(v, (Function, GlobalVariable)) and v.module is not self.module:
            self.error(f"@{v.name} is not part of this module", inst.loc, ctx)

    def terminator(self, fn: Function, inst: Instruction, ctx: str) -> None:
        name = inst.opcode
        if name == "return":
            want: Type = cast(FunctionType, fn.type).result
            if inst.operands:
                got = inst.operands[0].type
                if not same_type(got, want):
                    self.error(
                        f"return of {got} from @{fn.name}, which returns {want}", inst.loc, ctx
                    )
            elif not is_void(want):
                self.error(f"bare return from @{fn.name}, which returns {want}", inst.loc, ctx)
            return
        if name == "branchEnum":
            enum = canonical(inst.operands[0].type)
            for case, target in inst.attrs["cases"]:
                self.target_block(fn, inst, target, ctx)
                types = enum.case_types(case) if isinstance(enum, EnumType) else None
                if types is not None:
                    self.arguments(inst, target, list(types), f"case ?{case}", ctx)
            return
        for s in inst.successors():
            self.target_block(fn, inst, s.block, ctx)
            self.arguments(inst, s.block, [v.type for v in s.args], "branch", ctx)

    def target_block(self, fn: Function, inst: Instruction, target: Block, ctx: str) -> None:
        if target.function is not fn:
            self.error(
                f"branch to '{target.name}, which is not a block of @{fn.name}", inst.loc, ctx
            )
        elif fn.blocks and target is fn.blocks[0]:
            self.error(f"branch to the entry block '{target.name}", inst.loc, ctx)

    def arguments(
        self, inst: Instruction, target: Block, given: list[Type], what: str, ctx: str
    ) -> None:
        params = [a.type for a in target.arguments]
        if len(given) != len(params):
            self.error(
                f"{what} passes {len(given)} argument{'s' * (len(given) != 1)} to "
                f"'{target.name}, which takes {len(params)}",
                inst.loc,
                ctx,
            )
            return
        for i, (g, p) in enumerate(zip(given, params)):
            if not same_type(g, p):
                self.error(
                    f"{what} passes {g} as argument {i} of '{target.name}, which takes {p}",
                    inst.loc,
                    ctx,
                )


def use_location(inst: Instruction, v: Value) -> Location | None:
    """Where inst's source line mentions v (`%v:` after the `=`), else inst's own location."""
    loc = inst.loc
    if loc is None:
        return None
    text = loc.source.text
    start = loc.offset
    end = text.find("\n", start)
    end = len(text) if end < 0 else end
    if text.startswith("%", start):
        eq = text.find("=", start, end)
        start = eq + 1 if eq >= 0 else start
    ref = v.ref_text()
    i = text.find(ref + ":", start, end)
    return Location(loc.source, i, len(ref)) if i >= 0 else loc


def verify(module: Module) -> list[Diagnostic]:
    """Every problem in the module, as diagnostics (empty when it is valid)."""
    return _Verifier(module).run()


def verify_or_raise(module: Module) -> None:
    diags = verify(module)
    if diags:
        raise DiagnosticError(diags)
