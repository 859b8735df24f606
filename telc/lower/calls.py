"""Calls: argument matching, binding dimension variables and element types at the call site,
one IR function per distinct binding (monomorphisation), and `grad(…)` as IR gradient
declarations."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from dlvm.ir.typerules import TypeRuleError, gradient_type
from dlvm.ir.types import FunctionType, TensorType, TupleType, Type
from dlvm.ir.values import (
    Argument,
    Block,
    ElementKey,
    Function,
    GradientDecl,
    Successor,
    fresh_name,
)
from telc import ast
from telc.lower.core import Abort, FnState, InlineFrame, Scope, constant, ftype, show
from telc.lower.exprs import Exprs, describe
from telc.lower.values import POISON, TV, Elaborated, FnRef, GradSpec, _Poison
from telc.program import Unit, stdlib_home, suggest
from telc.types import shape_str


@dataclass
class Instance:
    """One specialisation of a `def`: its IR function and TEL parameter types."""

    ir: Function
    params: list[Type]
    param_names: list[str]  # module parameters it takes after its own arguments
    result: Type | None
    done: bool = False


class Calls(Exprs):
    """Function calls, instances and gradients."""

    def x_call(self, e: ast.Call, scope: Scope) -> Elaborated:
        from telc.lower.builtins import BUILTINS

        callee: Elaborated
        if isinstance(e.callee, ast.Name):
            name = e.callee.id
            local = scope.values.get(name)
            user = scope.unit.own(name) is not None or (
                not isinstance(self.imported(scope.unit, name, e.callee.span), type(None))
            )
            if local is None and not user and name not in scope.params and name in BUILTINS:
                return BUILTINS[name](self, e, scope)
            if local is None and not user and name not in scope.params:
                home = stdlib_home(name)
                if home is not None:
                    return self.error(
                        e.callee.span,
                        f"unknown function '{name}'; it is in the standard module '{home}': "
                        f"add `use {home}`",
                    )
                names = self.visible_names(scope) + list(BUILTINS)
                return self.error(e.callee.span, f"unknown function '{name}'{suggest(name, names)}")
        callee = self.lower_expr(e.callee, scope)
        if isinstance(callee, _Poison):
            return callee
        if not isinstance(callee, FnRef):
            return self.error(e.callee.span, f"{describe(callee)} is not a function")
        return self.call(callee, e, scope)

    def call(self, ref: FnRef, e: ast.Call, scope: Scope) -> Elaborated:
        args: list[TV] = []
        names = [p.name for p in ref.function.parameters]
        given: dict[str, tuple[TV, ast.Span]] = {}
        bad = False
        for i, a in enumerate(e.positional):
            tv = self.lower_expr(a, scope)
            if i >= len(names):
                n = len(names)
                return self.error(
                    a.span,
                    f"{ref.function.name} takes {n} argument{'s' if n != 1 else ''}, "
                    f"{len(e.positional)} given",
                )
            bad |= not self.check_argument(tv, a.span)
            if isinstance(tv, TV):
                given[names[i]] = (tv, a.span)
        for kw in e.keywords:
            tv = self.lower_expr(kw.value, scope)
            if kw.name not in names:
                hint = suggest(kw.name, names)
                return self.error(
                    kw.span, f"{ref.function.name} has no parameter '{kw.name}'{hint}"
                )
            if kw.name in given:
                return self.error(kw.span, f"argument '{kw.name}' is given twice")
            bad |= not self.check_argument(tv, kw.value.span)
            if isinstance(tv, TV):
                given[kw.name] = (tv, kw.value.span)
        if bad:
            return POISON
        for p in ref.function.parameters:
            if p.name in given:
                continue
            if p.default is None:
                return self.error(e.span, f"missing argument '{p.name}' of {ref.function.name}")
            fixed = constant(f"the default of argument '{p.name}'")
            d = self.lower_expr(p.default, Scope(ref.unit, paramless=fixed))  # type: ignore[arg-type]
            if not isinstance(d, TV):
                return POISON
            given[p.name] = (d, p.default.span)
        args = [given[n][0] for n in names]
        spans = [given[n][1] for n in names]
        return self.call_with(ref, args, spans, e.span, scope)

    def check_argument(self, tv: Elaborated, span: ast.Span) -> bool:
        if isinstance(tv, _Poison):
            return False
        if not isinstance(tv, TV):
            self.error(span, f"an argument must be a value, found {describe(tv)}")
            return False
        return True

    def call_with(
        self, ref: FnRef, args: list[TV], spans: list[ast.Span], span: ast.Span, scope: Scope
    ) -> Elaborated:
        """Calls ref (a def or a gradient) with checked arguments."""
        fn = ref.function
        unit: Unit = ref.unit  # type: ignore[assignment]
        callee_scope = Scope(
            unit, training=scope.training and self.facts_for(unit).training[fn.name]
        )
        ok = True
        for p, tv, s in zip(fn.parameters, args, spans):
            ok &= self.bind(p, tv, s, fn, callee_scope)
        if not ok:
            return POISON
        if callee_scope.dtype_var is None:
            callee_scope.dtype_var = unit.dtype
        types: list[Type] = []
        for p in fn.parameters:
            t = self.resolve_type(p.type, callee_scope)
            if t is None:
                return POISON
            types.append(t)
        operands = []
        for p, tv, s, t in zip(fn.parameters, args, spans, types):
            v = self.coerce(tv, t, s, f"argument '{p.name}' of {fn.name}")
            if isinstance(v, _Poison):
                return v
            operands.append(v)
        facts = self.facts_for(unit)
        inline = ref.grad is None and facts.random.get(fn.name, False)
        if inline and not any(f.name == fn.name for f in self.inlining):
            params = facts.params.get(fn.name, []) if unit is self.program.root else []
            return self.inline_call(ref, types, operands, params, callee_scope, span, scope)
        inst = self.instance(ref, types, callee_scope, span)
        if inst is None:
            return POISON
        for name in inst.param_names:
            if name not in scope.params:
                return self.missing_parameter(span, fn.name, name, scope)
            operands.append(scope.params[name].ir())
        if ref.grad is not None:
            return self.call_gradient(ref, inst, operands, span, scope)
        if inst.result is None:
            if inst.done:  # its body failed, and said why
                return POISON
            return self.error(
                span,
                f"'{fn.name}' calls itself before its result type is known; declare it: -> TYPE",
            )
        value = self.emit("apply", [inst.ir, *operands], span)
        return TV(value.type, value)

    # Binding -------------------------------------------------------------------------------

    def bind(self, p: ast.Parameter, tv: TV, span: ast.Span, fn: ast.Function, cs: Scope) -> bool:
        """Binds the dimension variables and element type of p's written type to tv's type."""
        spec = p.type
        what = f"argument '{p.name}' of {fn.name}"
        if isinstance(spec, ast.TupleType):
            return True  # checked against the resolved type by coerce
        if not isinstance(tv.ty, TensorType):
            self.error(span, f"{what}: expected a tensor, found {describe(tv)}")
            return False
        written = spec.dtype if isinstance(spec, ast.ScalarType | ast.TensorType) else None
        if written is None and not tv.weak:
            if cs.dtype_var is None:
                cs.dtype_var = tv.dtype
            elif cs.dtype_var is not tv.dtype:
                self.error(
                    span,
                    f"{what}: element type {tv.dtype} differs from the {cs.dtype_var} of the "
                    "arguments before it",
                )
                return False
        if isinstance(spec, ast.ScalarType):
            if tv.shape:
                self.error(span, f"{what}: expected a scalar {spec.dtype}, found {show(tv.ty)}")
                return False
            return True
        assert isinstance(spec, ast.TensorType)
        shape = spec.shape
        actual = tv.shape
        if shape.rest is not None:
            bound = cs.rests.get(shape.rest)
            if bound is None:
                cs.rests[shape.rest] = actual
            elif bound != actual and not tv.weak:
                self.error(
                    span,
                    f"{what}: expected shape {shape.rest}... = {shape_str(bound)}, found "
                    f"{shape_str(actual)}",
                )
                return False
            return True
        if tv.weak and not actual:
            return True  # a number stretches to the parameter's shape
        if len(shape.dims) != len(actual):
            self.error(
                span,
                f"{what}: expected {_written(shape)}, found {shape_str(actual)}",
                self.bound_details(cs),
            )
            return False
        for d, n in zip(shape.dims, actual):
            if isinstance(d.value, int):
                expected: int | None = d.value
            elif d.value in cs.dims:
                expected = cs.dims[d.value]
            else:
                expected = self.lookup_dim(d.value, cs)
                if expected is None:  # a dimension variable, bound here
                    cs.dims[d.value] = n
                    continue
            if expected != n:
                self.error(
                    span,
                    f"{what}: expected {_written(shape)}, found {shape_str(actual)}",
                    self.bound_details(cs),
                )
                return False
        return True

    def bound_details(self, cs: Scope) -> list[str]:
        if not cs.dims:
            return []
        return ["  where " + ", ".join(f"{k} = {v}" for k, v in cs.dims.items())]

    # Instances -----------------------------------------------------------------------------

    def instance(
        self,
        ref: FnRef,
        types: list[Type],
        cs: Scope,
        span: ast.Span,
        force_name: str | None = None,
    ) -> Instance | None:
        fn = ref.function
        unit: Unit = ref.unit  # type: ignore[assignment]
        key = (id(fn), tuple(types), cs.training)
        inst = self.instances.get(key)
        if inst is not None:
            return inst
        if sum(1 for k in self.instances if k[0] == id(fn)) >= 64:
            self.error(
                span,
                f"'{fn.name}' is specialised for more than 64 shapes; is its recursion changing "
                "shapes?",
            )
            return None
        facts = self.facts_for(unit)
        param_names = facts.params.get(fn.name, []) if unit is self.program.root else []
        param_types = [self.param_type(n) for n in param_names]
        result = self.resolve_type(fn.result, cs) if fn.result is not None else None
        if fn.result is not None and result is None:
            return None
        taken = {f.name for f in self.module.functions} | set(self.reserved_names)
        if force_name is not None:
            name = force_name
        else:
            name = fn.name
            if _is_generic(fn, unit, self):
                name += "_" + binding_suffix(cs)
            if cs.training:
                name += "_training"
            name = fresh_name(name, taken)
        ir = Function(name, FunctionType(tuple(types + param_types), result or TupleType(())))
        self.module.add_function(ir)
        inst = Instance(ir, types, param_names, result)
        self.instances[key] = inst
        self.lower_instance(ref, inst, cs)
        return inst

    def lower_instance(self, ref: FnRef, inst: Instance, cs: Scope) -> None:
        fn = ref.function
        saved = (self.fn, self.b.block, self.b.index)
        state = FnState(inst.ir, fn.name, inst.result)
        self.fn = state
        args = []
        for p, t in zip(fn.parameters, inst.params):
            args.append(Argument(fresh_name(p.name, state.taken), t))
        for n, t in zip(inst.param_names, ftype(inst.ir).arguments[len(inst.params) :]):
            args.append(Argument(fresh_name(n, state.taken), t))
        entry = Block("entry", args)
        inst.ir.add_block(entry)
        self.b.at_end(entry)
        body = cs.child()
        for p, a in zip(fn.parameters, args):
            sym = _written_sym(p.type, cs)
            body.values[p.name] = TV(a.type, a, sym=sym)
        body.params = {n: TV(a.type, a) for n, a in zip(inst.param_names, args[len(inst.params) :])}
        with contextlib.suppress(Abort):
            self.lower_body(fn, body, state, inst)  # type: ignore[attr-defined]
        inst.done = True
        self.fn, self.b.block, self.b.index = saved
        if inst.result is None:
            inst.result = state.result
        if state.result is not None:
            inst.ir.type = FunctionType(ftype(inst.ir).arguments, state.result)

    def inline_call(
        self,
        ref: FnRef,
        types: list[Type],
        operands: list,
        params: list[str],
        cs: Scope,
        span: ast.Span,
        scope: Scope,
    ) -> Elaborated:
        """A call compiled into the caller. Functions that draw random numbers are inlined so
        that a gradient differentiates the very draws the value was computed with (a
        separately differentiated callee would draw again)."""
        fn = ref.function
        body = cs.child()
        for p, t, v in zip(fn.parameters, types, operands):
            body.values[p.name] = TV(t, v, sym=_written_sym(p.type, cs))
        missing = [n for n in params if n not in scope.params]
        if missing:
            return self.missing_parameter(span, fn.name, missing[0], scope)
        body.params = {n: scope.params[n] for n in params}
        result = self.resolve_type(fn.result, cs) if fn.result is not None else None
        if isinstance(fn.body, ast.Block):
            frame = InlineFrame(fn.name, result)
            self.inlining.append(frame)
            try:
                end = self.block(fn.body, body)  # type: ignore[attr-defined]
            finally:
                self.inlining.pop()
            if end is not None:
                return self.error(fn.body.span, f"'{fn.name}' can end without 'return'")
            if frame.result is None or not frame.returns:
                return POISON
            ty = frame.result
            exit_block = self.new_block(fn.name + "_result", [(fn.name, ty)])
            for blk, (tv, s) in frame.returns:
                self.b.at_end(blk)
                v = self.coerce(tv, ty, s, f"the result of '{fn.name}'")
                if isinstance(v, _Poison):
                    return v
                self.emit("branch", [], s, dest=Successor(exit_block, [v]))
            self.b.at_end(exit_block)
            return TV(ty, exit_block.arguments[0])
        self.inlining.append(InlineFrame(fn.name, result))
        try:
            tv = self.lower_expr(fn.body, body)
        finally:
            self.inlining.pop()
        if not isinstance(tv, TV) or result is None:
            return tv
        v = self.coerce(tv, result, fn.body.span, f"the result of '{fn.name}'")
        return POISON if isinstance(v, _Poison) else TV(result, v)

    def param_type(self, name: str) -> Type:
        return self.param_types[name]  # type: ignore[attr-defined,no-any-return]

    @property
    def reserved_names(self) -> list[str]:
        return []

    # Gradients ----------------------------------------------------------------------------

    def call_gradient(
        self, ref: FnRef, inst: Instance, operands: list, span: ast.Span, scope: Scope
    ) -> Elaborated:
        spec = ref.grad
        assert spec is not None
        fn = ref.function
        if inst.result is None:
            return self.error(
                span, f"'{fn.name}' needs a declared result type to be differentiated"
            )
        own = [p.name for p in fn.parameters]
        wrt: list[int] = []
        if spec.wrt is None:
            wrt = [
                i
                for i, t in enumerate(inst.params)
                if isinstance(t, TensorType) and t.dtype.is_float
            ]
        for w in spec.wrt or []:
            index = self.wrt_index(w, fn, own, inst, scope)
            if index is None:
                return POISON
            if index in wrt:
                return self.error(w.span, "this is already in 'wrt'")
            wrt.append(index)
        args = ftype(inst.ir).arguments
        for w, i in zip(spec.wrt or [], wrt):
            t = args[i]
            if not (isinstance(t, TensorType) and t.dtype.is_float):
                return self.error(
                    w.span, f"cannot differentiate with respect to {show(t)}: not a float tensor"
                )
        result = inst.result
        if spec.seed is None and not (
            isinstance(result, TensorType) and not result.shape and result.dtype.is_float
        ):
            return self.error(
                span,
                f"grad of '{fn.name}' needs a float scalar result, found {show(result)}; "
                "pass seed: for a tensor result",
            )
        seed_operand = []
        if spec.seed is not None:
            v = self.coerce(spec.seed, result, span, "the seed")
            if isinstance(v, _Poison):
                return v
            seed_operand = [v]
        keeping = (0,) if spec.keeping else ()
        key = ("grad", id(inst.ir), tuple(wrt), keeping, spec.seed is not None)
        gfn = self.gradients.get(key)
        if gfn is None:
            try:
                ty = gradient_type(ftype(inst.ir), None, tuple(wrt), keeping, spec.seed is not None)
            except TypeRuleError as e:
                return self.error(span, f"cannot differentiate '{fn.name}': {e}")
            taken = {f.name for f in self.module.functions}
            gfn = Function(fresh_name(inst.ir.name + "_grad", taken), ty)
            gfn.declaration = GradientDecl(
                inst.ir, None, tuple(wrt), keeping, spec.seed is not None
            )
            self.module.add_function(gfn)
            self.gradients[key] = gfn
        value = self.emit("apply", [gfn, *operands, *seed_operand], span)
        if spec.single and not spec.keeping:
            out = self.emit("extract", [value], span, keys=(ElementKey(index=0),))
            return TV(out.type, out)
        return TV(value.type, value)

    def wrt_index(
        self, w: ast.Expr, fn: ast.Function, own: list[str], inst: Instance, scope: Scope
    ) -> int | None:
        if isinstance(w, ast.Number) and isinstance(w.value, int):
            if not 0 <= w.value < len(own):
                self.error(w.span, f"'{fn.name}' has no argument {w.value}")
                return None
            return w.value
        if isinstance(w, ast.Name):
            if w.id in own:
                return own.index(w.id)
            if w.id in inst.param_names:
                return len(own) + inst.param_names.index(w.id)
            hint = suggest(w.id, own + inst.param_names)
            self.error(
                w.span,
                f"'{w.id}' is neither an argument of '{fn.name}' nor a parameter it uses{hint}",
            )
            return None
        self.error(w.span, "wrt: takes argument names, parameter names or argument positions")
        return None


def make_grad(lw: Calls, e: ast.Call, scope: Scope) -> Elaborated:
    """The `grad(f, wrt: …, keeping: …, seed: …)` built-in."""
    pos = e.positional
    if len(pos) != 1:
        return lw.error(e.span, "grad takes one function: grad(f, wrt: …)")
    f = lw.lower_expr(pos[0], scope)
    if isinstance(f, _Poison):
        return f
    if isinstance(f, FnRef) and f.grad is not None:
        return lw.error(
            pos[0].span,
            "grad of a gradient: name the inner one first, as in "
            f"`def d{f.function.name}(x: …) -> … = grad({f.function.name}, wrt: x)(x)`, "
            f"then take grad(d{f.function.name}, …)",
        )
    if not isinstance(f, FnRef):
        return lw.error(
            pos[0].span, f"grad needs a function defined with 'def', found {describe(f)}"
        )
    spec = GradSpec(None, False, False, None)
    for kw in e.keywords:
        if kw.name == "wrt":
            if isinstance(kw.value, ast.Tuple):
                spec.wrt = list(kw.value.elements)
            else:
                spec.wrt, spec.single = [kw.value], True
        elif kw.name == "keeping":
            k = lw.lower_expr(kw.value, scope)
            if not isinstance(k, TV) or not isinstance(k.const, bool):
                return lw.error(kw.value.span, "keeping: takes true or false")
            spec.keeping = bool(k.const)
        elif kw.name == "seed":
            s = lw.lower_expr(kw.value, scope)
            if isinstance(s, _Poison):
                return s
            if not isinstance(s, TV):
                return lw.error(kw.value.span, f"the seed must be a tensor, found {describe(s)}")
            spec.seed = s
        else:
            hint = suggest(kw.name, ["wrt", "keeping", "seed"])
            return lw.error(kw.span, f"grad has no option '{kw.name}'{hint}")
    return FnRef(f.function, f.unit, spec, e.span)


def binding_suffix(cs: Scope) -> str:
    """What tells a generic function's specialisations apart in their IR names: the bound
    shapes and dimensions, then the element type (`softmax_32x10_f32`)."""
    parts = ["x".join(map(str, shape)) or "s" for shape in cs.rests.values()]
    if cs.dims:
        parts.append("x".join(str(v) for v in cs.dims.values()))
    return "_".join(parts + [cs.dtype_var.text if cs.dtype_var else "f32"])


def _written(shape: ast.Shape) -> str:
    if shape.rest is not None:
        return f"[{shape.rest}...]"
    return shape_str(tuple(d.value for d in shape.dims))


def _written_sym(spec: ast.TypeSpec, cs: Scope) -> tuple | None:
    if isinstance(spec, ast.TensorType) and spec.shape.rest is None:
        return tuple(d.value for d in spec.shape.dims)
    return None


def _is_generic(fn: ast.Function, unit: Unit, core: Calls) -> bool:
    """Whether a def can have several specialisations: its signature leaves an element type
    or a dimension open."""
    for p in fn.parameters:
        spec = p.type
        if isinstance(spec, ast.TensorType):
            if spec.dtype is None or spec.shape.rest is not None:
                return True
            if any(isinstance(d.value, str) and d.value not in unit.dims for d in spec.shape.dims):
                return True
    return False


__all__ = ["Calls", "Instance", "make_grad"]
