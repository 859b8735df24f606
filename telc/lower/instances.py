"""One IR function per distinct binding of a `def` (monomorphisation), calls compiled into the
caller where a function draws random numbers, and `grad(…)` calls as IR gradient
declarations."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from dlvm.ir.builder import gradient_declaration, new_function
from dlvm.ir.typerules import TypeRuleError
from dlvm.ir.types import FunctionType, TensorType, TupleType, Type
from dlvm.ir.values import ElementKey, Function, Successor, Value, fresh_name
from telc import ast
from telc.lower.context import Abort, Context, FnState, InlineFrame, Scope, ftype
from telc.lower.exprs import ExprLowerer
from telc.lower.resolve import Resolver
from telc.lower.statements import StatementLowerer
from telc.lower.values import POISON, TV, Elaborated, FnRef, _Poison, show
from telc.program import Unit, suggest
from telc.types import ANY_INT, DIM_PARAM

# (the def, its argument types, its bound dims, training)
InstanceKey = tuple[int, tuple[Type, ...], tuple[tuple[str, int], ...], bool]
GradientKey = tuple[int, tuple[int, ...], tuple[int, ...], bool]


@dataclass
class Instance:
    """One specialisation of a `def`: its IR function and TEL parameter types."""

    ir: Function
    params: list[Type]
    param_names: list[str]  # module parameters it takes after its own arguments
    result: Type | None
    done: bool = False


class Instances:
    """The specialisations made so far, and the gradient declarations made for grad()."""

    def __init__(
        self, cx: Context, exprs: ExprLowerer, resolve: Resolver, bodies: StatementLowerer
    ) -> None:
        self.cx = cx
        self.exprs = exprs
        self.resolve = resolve
        self.bodies = bodies
        self.table: dict[InstanceKey, Instance] = {}
        self.gradients: dict[GradientKey, Function] = {}

    def instance(
        self,
        ref: FnRef,
        types: list[Type],
        cs: Scope,
        span: ast.Span,
        force_name: str | None = None,
    ) -> Instance | None:
        """The specialisation of ref's def for these argument types (cs binds its dimension
        variables and element type), lowered when first asked for."""
        fn, unit = ref.function, ref.unit
        # The dims too: a `heads: dim` parameter is an i64 whatever its value.
        key = (id(fn), tuple(types), tuple(cs.dims.items()), cs.training)
        inst = self.table.get(key)
        if inst is not None:
            if force_name is not None:
                # An exported def that a declaration or another def called first: the entry point
                # is that same function, under the def's own name.
                inst.ir.name = force_name
            return inst
        if sum(1 for k in self.table if k[0] == id(fn)) >= 64:
            self.cx.error(
                span,
                f"'{fn.name}' is specialised for more than 64 shapes; is its recursion changing "
                "shapes?",
            )
            return None
        facts = self.cx.facts.of(unit)
        param_names = facts.params.get(fn.name, []) if unit is self.cx.program.root else []
        if any(n not in self.cx.param_types for n in param_names):
            return None  # a parameter whose type failed, already reported
        param_types: list[Type] = [self.cx.param_types[n] for n in param_names]
        result = self.resolve.resolve_type(fn.result, cs) if fn.result is not None else None
        if fn.result is not None and result is None:
            return None
        taken = {f.name for f in self.cx.module.functions} | self.cx.reserved
        if force_name is not None:
            name = force_name
        else:
            name = fn.name
            if _is_generic(fn, unit):
                name += "_" + binding_suffix(cs)
            if cs.training:
                name += "_training"
            name = fresh_name(name, taken)
        local: set[str] = set()  # the function's value names
        arg_names = [fresh_name(n, local) for n in [p.name for p in fn.parameters] + param_names]
        ty = FunctionType(tuple(types + param_types), result or TupleType(()))
        ir = self.cx.module.add_function(new_function(name, ty, arg_names))
        inst = Instance(ir, types, param_names, result)
        self.table[key] = inst
        self.lower_instance(ref, inst, cs, FnState(ir, fn.name, result, local))
        return inst

    def lower_instance(self, ref: FnRef, inst: Instance, cs: Scope, state: FnState) -> None:
        cx = self.cx
        fn = ref.function
        saved = (cx.fn, cx.b.block, cx.b.index)
        cx.fn = state
        entry = inst.ir.entry
        assert entry is not None
        args = entry.arguments
        cx.b.at_end(entry)
        body = cs.child()
        for p, a in zip(fn.parameters, args):
            body.values[p.name] = TV(a.type, a, sym=_written_sym(p.type))
        body.params = {n: TV(a.type, a) for n, a in zip(inst.param_names, args[len(inst.params) :])}
        with contextlib.suppress(Abort):
            self.bodies.lower_body(fn, body, state, declared=inst.result is not None)
        inst.done = True
        cx.fn, cx.b.block, cx.b.index = saved
        if inst.result is None:
            inst.result = state.result
        if state.result is not None:
            inst.ir.type = FunctionType(ftype(inst.ir).arguments, state.result)

    def inline_call(
        self,
        ref: FnRef,
        types: list[Type],
        operands: list[Value],
        params: list[str],
        cs: Scope,
        span: ast.Span,
        scope: Scope,
    ) -> Elaborated:
        """A call compiled into the caller. Functions that draw random numbers are inlined so
        that a gradient differentiates the very draws the value was computed with (a
        separately differentiated callee would draw again)."""
        cx = self.cx
        fn = ref.function
        body = cs.child()
        for p, t, operand in zip(fn.parameters, types, operands):
            body.values[p.name] = TV(t, operand, sym=_written_sym(p.type))
        missing = [n for n in params if n not in scope.params]
        if missing:
            return cx.missing_parameter(span, fn.name, missing[0], scope)
        body.params = {n: scope.params[n] for n in params}
        result = self.resolve.resolve_type(fn.result, cs) if fn.result is not None else None
        if isinstance(fn.body, ast.Block):
            frame = InlineFrame(fn.name, result)
            cx.inlining.append(frame)
            try:
                end = self.bodies.block(fn.body, body)
            finally:
                cx.inlining.pop()
            if end is not None:
                return cx.error(fn.body.span, f"'{fn.name}' can end without 'return'")
            if frame.result is None or not frame.returns:
                return POISON
            ty = frame.result
            exit_block = cx.new_block(fn.name + "_result", [(fn.name, ty)])
            for r in frame.returns:
                cx.b.at_end(r.block)
                v = cx.coerce(r.value, ty, r.span, f"the result of '{fn.name}'")
                if isinstance(v, _Poison):
                    return v
                cx.emit("branch", [], r.span, dest=Successor(exit_block, [v]))
            cx.b.at_end(exit_block)
            return TV(ty, exit_block.arguments[0])
        cx.inlining.append(InlineFrame(fn.name, result))
        try:
            tv = self.exprs.lower_expr(fn.body, body)
        finally:
            cx.inlining.pop()
        if not isinstance(tv, TV) or result is None:
            return tv
        v = cx.coerce(tv, result, fn.body.span, f"the result of '{fn.name}'")
        return POISON if isinstance(v, _Poison) else TV(result, v)

    def drop(self, functions: list[Function]) -> None:
        """Forgets the instances whose IR functions are being removed."""
        ids = {id(f) for f in functions}
        for key in [k for k, inst in self.table.items() if id(inst.ir) in ids]:
            del self.table[key]

    # Gradients ----------------------------------------------------------------------------

    def call_gradient(
        self, ref: FnRef, inst: Instance, operands: list[Value], span: ast.Span
    ) -> Elaborated:
        """A call of `grad(f, …)` whose f is inst: an `apply` of a gradient declaration."""
        cx = self.cx
        spec = ref.grad
        assert spec is not None
        fn = ref.function
        if inst.result is None:
            return cx.error(span, f"'{fn.name}' needs a declared result type to be differentiated")
        own = [p.name for p in fn.parameters]
        wrt: list[int] = []
        if spec.wrt is None:
            wrt = [
                i
                for i, t in enumerate(inst.params)
                if isinstance(t, TensorType) and t.dtype.is_float
            ]
        for w in spec.wrt or []:
            index = self.wrt_index(w, fn, own, inst)
            if index is None:
                return POISON
            if index in wrt:
                return cx.error(w.span, "this is already in 'wrt'")
            wrt.append(index)
        args = ftype(inst.ir).arguments
        for w, i in zip(spec.wrt or [], wrt):
            t = args[i]
            if not (isinstance(t, TensorType) and t.dtype.is_float):
                return cx.error(
                    w.span, f"cannot differentiate with respect to {show(t)}: not a float tensor"
                )
        result = inst.result
        if spec.seed is None and not (
            isinstance(result, TensorType) and not result.shape and result.dtype.is_float
        ):
            return cx.error(
                span,
                f"grad of '{fn.name}' needs a float scalar result, found {show(result)}; "
                "pass seed: for a tensor result",
            )
        seed_operand = []
        if spec.seed is not None:
            v = cx.coerce(spec.seed, result, span, "the seed")
            if isinstance(v, _Poison):
                return v
            seed_operand = [v]
        keeping = (0,) if spec.keeping else ()
        key = (id(inst.ir), tuple(wrt), keeping, spec.seed is not None)
        gfn = self.gradients.get(key)
        if gfn is None:
            taken = {f.name for f in cx.module.functions}
            name = fresh_name(inst.ir.name + "_grad", taken)
            try:
                gfn = gradient_declaration(
                    name, inst.ir, tuple(wrt), keeping, spec.seed is not None
                )
            except TypeRuleError as e:
                return cx.error(span, f"cannot differentiate '{fn.name}': {e}")
            cx.module.add_function(gfn)
            self.gradients[key] = gfn
        value = cx.emit("apply", [gfn, *operands, *seed_operand], span)
        if spec.single and not spec.keeping:
            out = cx.emit("extract", [value], span, keys=(ElementKey(index=0),))
            return TV(out.type, out)
        return TV(value.type, value)

    def wrt_index(
        self, w: ast.Expr, fn: ast.Function, own: list[str], inst: Instance
    ) -> int | None:
        if isinstance(w, ast.Number) and isinstance(w.value, int):
            if not 0 <= w.value < len(own):
                self.cx.error(w.span, f"'{fn.name}' has no argument {w.value}")
                return None
            return w.value
        if isinstance(w, ast.Name):
            if w.id in own:
                return own.index(w.id)
            if w.id in self.cx.buffers:
                self.cx.error(
                    w.span,
                    f"'{w.id}' is a buffer; no gradient is taken with respect to a buffer",
                    ["  help: declare it a param to train it"],
                )
                return None
            if w.id in inst.param_names:
                return len(own) + inst.param_names.index(w.id)
            hint = suggest(w.id, own + inst.param_names)
            self.cx.error(
                w.span,
                f"'{w.id}' is neither an argument of '{fn.name}' nor a parameter it uses{hint}",
            )
            return None
        self.cx.error(w.span, "wrt: takes argument names, parameter names or argument positions")
        return None


def binding_suffix(cs: Scope) -> str:
    """What tells a generic function's specialisations apart in their IR names: the bound
    shapes and dimensions, then the element type (`softmax_32x10_f32`)."""
    parts = ["x".join(map(str, shape)) or "s" for shape in cs.rests.values()]
    if cs.dims:
        parts.append("x".join(str(v) for v in cs.dims.values()))
    parts.append(cs.dtype_var.text if cs.dtype_var else "f32")
    if cs.int_var is not None:
        parts.append(cs.int_var.text)
    return "_".join(parts)


def uses_any_int(fn: ast.Function) -> bool:
    """Whether a def's signature has an `int[...]` parameter (any integer type)."""
    return any(
        isinstance(p.type, (ast.TensorType, ast.ScalarType)) and p.type.dtype == ANY_INT
        for p in fn.parameters
    )


def _written_sym(spec: ast.TypeSpec) -> tuple[int | str, ...] | None:
    if isinstance(spec, ast.TensorType) and spec.shape.rest is None:
        return tuple(d.value for d in spec.shape.dims)
    return None


def _is_generic(fn: ast.Function, unit: Unit) -> bool:
    """Whether a def can have several specialisations: its signature leaves an element type
    or a dimension open."""
    if uses_any_int(fn) or any(
        isinstance(p.type, ast.ScalarType) and p.type.dtype == DIM_PARAM for p in fn.parameters
    ):
        return True
    for p in fn.parameters:
        spec = p.type
        if isinstance(spec, ast.TensorType):
            if spec.dtype in (None, ANY_INT) or spec.shape.rest is not None:
                return True
            if any(n not in unit.dims for d in spec.shape.dims for n in d.names()):
                return True
    return False
