"""Calls: built-ins through their registry; for a `def`, its arguments matched to its
parameters, dimension variables and element types bound at the call site, and the call of
the specialisation (or gradient) that binding selects."""

from __future__ import annotations

from dlvm.ir.types import DataType, TensorType, Type
from dlvm.ir.values import Value
from telc import ast
from telc.lower.builtins import BUILTINS
from telc.lower.context import Context, Scope, compile_time
from telc.lower.exprs import ExprLowerer
from telc.lower.habits import unknown_keyword
from telc.lower.instances import Instances, uses_any_int
from telc.lower.registry import Host
from telc.lower.resolve import Resolver
from telc.lower.values import POISON, TV, Elaborated, FnRef, _Poison, describe, int_const, show
from telc.program import stdlib_help, stdlib_home, suggest
from telc.types import ANY_INT, DIM_PARAM, shape_str


class CallLowerer:
    """Calls of built-ins, defs and gradients."""

    def __init__(
        self, cx: Context, exprs: ExprLowerer, resolve: Resolver, instances: Instances
    ) -> None:
        self.cx = cx
        self.exprs = exprs
        self.resolve = resolve
        self.instances = instances
        self.host = Host(cx, exprs, exprs.ops)

    def lower_call(self, e: ast.Call, scope: Scope) -> Elaborated:
        if isinstance(e.callee, ast.Name):
            name = e.callee.id
            local = scope.values.get(name)
            user = scope.unit.own(name) is not None or (
                self.resolve.imported(scope.unit, name, e.callee.span) is not None
            )
            if local is None and not user and name not in scope.params and name in BUILTINS:
                return BUILTINS.lower(name, e, scope, self.host)
            if local is None and not user and name not in scope.params:
                if stdlib_home(name) is not None:
                    return self.cx.error(
                        e.callee.span, f"unknown function '{name}'", stdlib_help(name)
                    )
                names = self.resolve.visible_names(scope) + BUILTINS.names()
                return self.cx.error(
                    e.callee.span, f"unknown function '{name}'{suggest(name, names)}"
                )
        callee = self.exprs.lower_expr(e.callee, scope)
        if isinstance(callee, _Poison):
            return callee
        if not isinstance(callee, FnRef):
            return self.cx.error(e.callee.span, f"{describe(callee)} is not a function")
        return self.call(callee, e, scope)

    def call(self, ref: FnRef, e: ast.Call, scope: Scope) -> Elaborated:
        """A call of a def (or a gradient): arguments by position, then by keyword, then the
        defaults (compile-time constants of the def's file)."""
        if ref.function.bare:
            fix = "to call a gradient, differentiate a def taking the loss's inputs: "
            fix += "`grad(f, wrt: …)(x)`"
            return self.cx.error(
                e.callee.span,
                f"'{ref.function.name}' is an entry point of gradients (a def without a "
                "parameter list); it cannot be called",
                [f"  help: {fix}"],
            )
        names = [p.name for p in ref.function.parameters]
        given: dict[str, tuple[TV, ast.Span]] = {}
        bad = False
        for i, a in enumerate(e.positional):
            tv = self.exprs.lower_expr(a, scope)
            if i >= len(names):
                n = len(names)
                return self.cx.error(
                    a.span,
                    f"{ref.function.name} takes {n} argument{'s' if n != 1 else ''}, "
                    f"{len(e.positional)} given",
                )
            bad |= not self.check_argument(tv, a.span)
            if isinstance(tv, TV):
                given[names[i]] = (tv, a.span)
        for kw in e.keywords:
            tv = self.exprs.lower_expr(kw.value, scope)
            if kw.name not in names:
                hint, helps = unknown_keyword(kw.name, names, ref.function.name)
                return self.cx.error(
                    kw.span, f"{ref.function.name} has no parameter '{kw.name}'{hint}", helps
                )
            if kw.name in given:
                return self.cx.error(kw.span, f"argument '{kw.name}' is given twice")
            bad |= not self.check_argument(tv, kw.value.span)
            if isinstance(tv, TV):
                given[kw.name] = (tv, kw.value.span)
        if bad:
            return POISON
        for p in ref.function.parameters:
            if p.name in given:
                continue
            if p.default is None:
                return self.cx.error(e.span, f"missing argument '{p.name}' of {ref.function.name}")
            fixed = compile_time(f"the default of argument '{p.name}'")
            d = self.exprs.lower_expr(p.default, Scope(ref.unit, paramless=fixed))
            if not self.check_argument(d, p.default.span) or not isinstance(d, TV):
                return POISON
            given[p.name] = (d, p.default.span)
        args = [given[n][0] for n in names]
        spans = [given[n][1] for n in names]
        return self.call_with(ref, args, spans, e.span, scope)

    def check_argument(self, tv: Elaborated, span: ast.Span) -> bool:
        if isinstance(tv, _Poison):
            return False
        if not isinstance(tv, TV):
            self.cx.error(span, f"an argument must be a value, found {describe(tv)}")
            return False
        return True

    def call_with(
        self, ref: FnRef, args: list[TV], spans: list[ast.Span], span: ast.Span, scope: Scope
    ) -> Elaborated:
        """Calls ref (a def or a gradient) with checked arguments."""
        fn, unit = ref.function, ref.unit
        facts = self.cx.facts.of(unit)
        callee_scope = Scope(unit, training=scope.training and facts.training[fn.name])
        ok = True
        for p, tv, s in zip(fn.parameters, args, spans):
            ok &= self.bind(p, tv, s, fn, callee_scope)
        if not ok:
            return POISON
        if callee_scope.dtype_var is None:
            callee_scope.dtype_var = unit.dtype
        if callee_scope.int_var is None and uses_any_int(fn):
            callee_scope.int_var = DataType.I64
        types: list[Type] = []
        for p in fn.parameters:
            t = self.resolve.resolve_type(p.type, callee_scope)
            if t is None:
                return POISON
            types.append(t)
        operands: list[Value] = []
        for p, tv, s, t in zip(fn.parameters, args, spans, types):
            v = self.cx.coerce(tv, t, s, f"argument '{p.name}' of {fn.name}")
            if isinstance(v, _Poison):
                return v
            operands.append(v)
        # An imported graph's def is compiled into its caller too: its call is one `apply`,
        # and in training the buffers it updates are then the caller's to return.
        imported = isinstance(fn.body, ast.Imported)
        inline = ref.grad is None and (facts.random.get(fn.name, False) or imported)
        if inline and not any(f.name == fn.name for f in self.cx.inlining):
            params = facts.params.get(fn.name, []) if unit is self.cx.program.root else []
            return self.instances.inline_call(
                ref, types, operands, params, callee_scope, span, scope
            )
        inst = self.instances.instance(ref, types, callee_scope, span)
        if inst is None:
            return POISON
        for name in inst.param_names:
            if name not in scope.params:
                return self.cx.missing_parameter(span, fn.name, name, scope)
            operands.append(scope.params[name].ir())
        if ref.grad is not None:
            return self.instances.call_gradient(ref, inst, operands, span)
        if inst.result is None:
            if inst.done:  # its body failed, and said why
                return POISON
            return self.cx.error(
                span,
                f"'{fn.name}' calls itself before its result type is known; declare it: -> TYPE",
            )
        value = self.cx.emit("apply", [inst.ir, *operands], span)
        return TV(value.type, value)

    # Binding -------------------------------------------------------------------------------

    def shared(
        self, first: DataType | None, tv: TV, span: ast.Span, what: str, cast: bool = False
    ) -> DataType | None:
        """The element type that one type variable of a signature stands for: tv's, which must
        be `first`, the type the arguments before it gave (if any); None after a located error
        (with `cast`, a help line naming the cast to `first`)."""
        if first is None or first is tv.dtype:
            return tv.dtype
        helps = [f"  help: cast(…, {first}) converts it"] if cast else []
        message = f"{what} {tv.dtype} differs from the {first} of the arguments before it"
        self.cx.error(span, message, helps)
        return None

    def bind(self, p: ast.Parameter, tv: TV, span: ast.Span, fn: ast.Function, cs: Scope) -> bool:
        """Binds the dimension variables and element type of p's written type to tv's type."""
        spec = p.type
        what = f"argument '{p.name}' of {fn.name}"
        if isinstance(spec, ast.TupleType):
            return True  # checked against the resolved type by coerce
        if not isinstance(tv.ty, TensorType):
            self.cx.error(span, f"{what}: expected a tensor, found {describe(tv)}")
            return False
        if spec.dtype is None and not tv.weak:
            cs.dtype_var = self.shared(cs.dtype_var, tv, span, f"{what}: element type")
            if cs.dtype_var is None:
                return False
        if spec.dtype == ANY_INT and not (tv.weak and tv.dtype.is_int):
            if not tv.dtype.is_int:
                self.cx.error(
                    span,
                    f"{what}: expected an integer tensor, found {show(tv.ty)}",
                    ["  help: cast(…, i64) converts it"],
                )
                return False
            cs.int_var = self.shared(cs.int_var, tv, span, f"{what}: integer type", cast=True)
            if cs.int_var is None:
                return False
        if isinstance(spec, ast.ScalarType) and spec.dtype == DIM_PARAM:
            n = int_const(tv)
            if n is None or n <= 0:
                self.cx.error(
                    span,
                    f"{what}: expected a positive integer known at compile time (a dimension), "
                    f"found {describe(tv)}",
                )
                return False
            cs.dims[p.name] = n
            return True
        if isinstance(spec, ast.ScalarType):
            if tv.shape:
                self.cx.error(span, f"{what}: expected a scalar {spec.dtype}, found {show(tv.ty)}")
                return False
            return True
        shape = spec.shape
        actual = tv.shape
        if shape.rest is not None:
            bound = cs.rests.get(shape.rest)
            if bound is None:
                cs.rests[shape.rest] = actual
            elif bound != actual and not tv.weak:
                self.cx.error(
                    span,
                    f"{what}: expected shape {shape.rest}... = {shape_str(bound)}, found "
                    f"{shape_str(actual)}",
                )
                return False
            return True
        if tv.weak and not actual:
            return True  # a number stretches to the parameter's shape

        def mismatch() -> bool:
            self.cx.error(
                span,
                f"{what}: expected {_written(shape)}, found {shape_str(actual)}",
                _bound_details(cs),
            )
            return False

        if len(shape.dims) != len(actual):
            return mismatch()
        arithmetic = [(d, n) for d, n in zip(shape.dims, actual) if d.op is not None]
        for d, n in zip(shape.dims, actual):
            if d.op is not None:
                continue  # once this parameter's plain dims are bound
            if isinstance(d.value, int):
                expected: int | None = d.value
            elif d.value in cs.dims:
                expected = cs.dims[d.value]
            else:
                expected = self.resolve.lookup_dim(d.value, cs)
                if expected is None:  # a dimension variable, bound here
                    cs.dims[d.value] = n
                    continue
            if expected != n:
                return mismatch()
        for d, n in arithmetic:
            unbound = [x for x in d.names() if self.resolve.lookup_dim(x, cs) is None]
            if unbound:
                self.cx.error(
                    d.span,
                    f"dimension variable '{unbound[0]}' is not bound where {d.value} needs it",
                    [f"  help: a variable is bound by a dimension that is its name alone, as in "
                     f"[{unbound[0]} x …], in this parameter or an earlier one"],
                )  # fmt: skip
                return False
            expected = self.resolve.dim_size(d, cs)
            if expected is None:
                return False
            if expected != n:
                return mismatch()
        return True


def _bound_details(cs: Scope) -> list[str]:
    if not cs.dims:
        return []
    return ["  where " + ", ".join(f"{k} = {v}" for k, v in cs.dims.items())]


def _written(shape: ast.Shape) -> str:
    if shape.rest is not None:
        return f"[{shape.rest}...]"
    return shape_str(tuple(d.value for d in shape.dims))
