"""What a name, a written shape or a written type means at one point of a program: the names
visible there, the modules' dims and consts (each evaluated once, -D overrides first), and
types and shapes with every dimension and element type known."""

from __future__ import annotations

import math

from dlvm.ir.types import DataType, TensorType, TupleType, Type
from telc import ast
from telc.limits import too_large
from telc.lower.context import Abort, Context, Scope, compile_time
from telc.lower.interfaces import ExprLowering
from telc.lower.values import POISON, TV, Elaborated, _Poison, show
from telc.program import Unit, suggest
from telc.types import ANY_INT, DIM_PARAM, DTYPES, fits, shape_str


class Resolver:
    """Names, dims, consts and written types. Dims and consts are expressions, evaluated
    through the expression lowering given to `connect`."""

    exprs: ExprLowering

    def __init__(self, cx: Context) -> None:
        self.cx = cx
        self.const_values: dict[tuple[int, str], Elaborated] = {}  # per file and name
        self.dim_values: dict[tuple[int, str], int | None] = {}
        # The dims and consts being evaluated, innermost last: one named again is a cycle.
        self.pending: list[tuple[tuple[int, str], str]] = []

    def connect(self, exprs: ExprLowering) -> None:
        self.exprs = exprs

    # Names ----------------------------------------------------------------------------------

    def visible_names(self, scope: Scope) -> list[str]:
        names = list(scope.values) + list(scope.dims) + ["training"]
        for unit in [scope.unit, *scope.unit.uses]:
            names += list(unit.functions) + list(unit.dims) + list(unit.consts)
        names += list(scope.unit.declarations)
        return names

    def imported(
        self, unit: Unit, name: str, span: ast.Span
    ) -> tuple[Unit, object] | None | _Poison:
        """What `name` means through the modules `unit` uses (the module and its definition):
        None if nothing, POISON if two modules both define it."""
        found = [(u, u.own(name)) for u in unit.uses if u.own(name) is not None]
        if len(found) > 1:
            where = " and ".join(f"'{u.name}'" for u, _ in found)
            return self.cx.error(span, f"'{name}' is defined in both {where}; rename one of them")
        if found:
            return found[0]
        return None

    def const_value(self, unit: Unit, decl: ast.ConstDecl) -> Elaborated:
        """The value of a module-level `const` (or its -D override), evaluated once."""
        override = self.cx.program.defines.get(decl.name)
        if override is not None:
            return TV(TensorType((), DataType.I64 if isinstance(override, int) else unit.dtype),
                      weak=True, const=override)  # fmt: skip
        key = (id(unit), decl.name)
        cached = self.const_values.get(key)
        if cached is not None:
            return cached
        if self._cycle(key, decl):
            return POISON
        self.pending.append((key, f"const {decl.name}"))
        scope = Scope(unit, paramless=compile_time(f"const {decl.name}"))
        tv = self._evaluate(decl.value, scope, "a const must be a number known at compile time")
        if isinstance(tv, TV) and tv.const is None:
            tv = self.cx.error(decl.value.span, "a const must be a number known at compile time")
        self.pending.pop()
        self.const_values[key] = tv
        return tv

    def _cycle(self, key: tuple[int, str], decl: ast.DimDecl | ast.ConstDecl) -> bool:
        """Whether the dim or const `decl` is already being evaluated: a cycle, reported once
        at the declaration it starts from, listing the dims and consts it goes through."""
        keys = [k for k, _ in self.pending]
        if key not in keys:
            return False
        path = [what for _, what in self.pending[keys.index(key) :]]
        if len({what.split()[0] for what in path}) == 1:  # all dims or all consts: names say it
            path = [path[0]] + [what.split()[1] for what in path[1:]]
            names = [what.split()[-1] for what in path]
        else:
            names = path
        through = "" if len(path) == 1 else ": " + " -> ".join([*names, names[0]])
        self.cx.error(decl.span, f"{path[0]} depends on itself{through}")
        return True

    def check_constants(self, unit: Unit) -> None:
        """Evaluates every dim and const of unit, so that `telc check` reports their errors
        even where nothing uses them."""
        for dim in unit.dims.values():
            self.dim_value(unit, dim)
        for const in unit.consts.values():
            self.const_value(unit, const)

    def dim_value(self, unit: Unit, decl: ast.DimDecl) -> int | None:
        """The value of a module-level `dim` (or its -D override), checked once."""
        key = (id(unit), decl.name)
        if key in self.dim_values:
            return self.dim_values[key]
        if self._cycle(key, decl):
            return None
        self.pending.append((key, f"dim {decl.name}"))
        try:
            value = self._dim_decl_value(unit, decl)
        finally:
            self.pending.pop()
        self.dim_values[key] = value
        return value

    def _dim_decl_value(self, unit: Unit, decl: ast.DimDecl) -> int | None:
        value: int | None = None
        override = self.cx.program.defines.get(decl.name)
        if override is not None:
            if isinstance(override, int) and override > 0 and fits(override, DataType.I64):
                value = override
            if value is None:
                self.cx.error(
                    decl.span,
                    f"-D {decl.name}={override}: a dim must be a positive integer below 2**63",
                )
        else:
            scope = Scope(unit, paramless=compile_time(f"dim {decl.name}"))
            arithmetic = self._dim_expression(decl.value, scope)
            if arithmetic is not None:  # exact division, as in a shape
                return self.dim_size(arithmetic, scope, f"dim {decl.name}")
            tv = self.constant_of(decl.value, scope)
            if tv is not None:
                if isinstance(tv, bool) or not isinstance(tv, int) or tv <= 0:
                    self.cx.error(
                        decl.value.span, f"dim {decl.name} must be a positive integer, found {tv}"
                    )
                else:
                    value = tv
        return value

    def _dim_expression(self, e: ast.Expr, scope: Scope) -> ast.Dim | None:
        """e as a dimension when it is one: integers and dims with + - * / (a dim's value
        is then computed as a shape's dimension is); None for any other expression."""
        if isinstance(e, ast.Number) and isinstance(e.value, int) and not isinstance(e.value, bool):
            return ast.Dim(e.span, e.value)
        if isinstance(e, ast.Name):
            dims = [scope.unit, *scope.unit.uses]
            return ast.Dim(e.span, e.id) if any(e.id in u.dims for u in dims) else None
        if isinstance(e, ast.Binary) and e.op in ast.DIM_OPS:
            left = self._dim_expression(e.left, scope)
            right = self._dim_expression(e.right, scope)
            if left is not None and right is not None:
                return ast.dim_binary(e.span, e.op, left, right)
        return None

    def constant_of(self, expr: ast.Expr, scope: Scope) -> int | float | bool | None:
        """The compile-time value of an expression of numbers, dims and consts, or None
        (after an error) when it has none."""
        tv = self._evaluate(expr, scope, "expected a constant (a number, a dim or a const)")
        if isinstance(tv, _Poison):
            return None
        if not isinstance(tv, TV) or tv.const is None:
            self.cx.error(expr.span, "expected a constant (a number, a dim or a const)")
            return None
        return tv.const

    def _evaluate(self, expr: ast.Expr, scope: Scope, refusal: str) -> Elaborated:
        with self.cx.compile_time(refusal):
            try:
                return self.exprs.lower_expr(expr, scope)
            except Abort:
                return POISON  # already reported

    def lookup_dim(self, name: str, scope: Scope) -> int | None:
        """A dimension name in a written shape: a bound dimension variable or a module dim."""
        if name in scope.dims:
            return scope.dims[name]
        for unit in [scope.unit, *scope.unit.uses]:
            decl = unit.dims.get(name)
            if decl is not None:
                return self.dim_value(unit, decl)
        return None

    def dim_names(self, scope: Scope) -> list[str]:
        names = list(scope.dims)
        for unit in [scope.unit, *scope.unit.uses]:
            names += list(unit.dims)
        return names

    # Types ----------------------------------------------------------------------------------

    def resolve_shape(self, shape: ast.Shape, scope: Scope) -> tuple[int, ...] | None:
        """A written shape with every name bound; None after an error."""
        if shape.rest is not None:
            bound = scope.rests.get(shape.rest)
            if bound is not None:
                return bound
            self.cx.error(shape.span, f"shape variable {shape.rest}... is not bound here")
            return None
        out: list[int] = []
        for d in shape.dims:
            v = self.dim_size(d, scope)
            if v is None:
                return None
            out.append(v)
        if math.prod(out) >= 1 << 63:
            self.cx.error(shape.span, f"a tensor of shape {shape_str(tuple(out))} has more "
                          "elements than an i64 can count")  # fmt: skip
            return None
        return tuple(out)

    def dim_size(self, d: ast.Dim, scope: Scope, what: str = "") -> int | None:
        """The value of a written dimension (`64`, `H`, `4 * H`): a positive integer, with
        `/` only where it divides exactly; None after an error, reported at the part of d at
        fault with the values of its names. `what` names a dim's declaration in messages."""
        value = self._dim_arithmetic(d, scope)
        if value is None:
            return None
        if value <= 0:
            if what:
                message = f"{what} must be a positive integer, found {value}"
            elif d.op is not None:
                message = f"dimension {d.value} is {value}: a dimension must be a positive integer"
            else:
                message = "a dimension must be a positive integer"
            self.cx.error(d.span, message, self._dim_values_of(d, scope))
            return None
        return value

    def _dim_arithmetic(self, d: ast.Dim, scope: Scope) -> int | None:
        """d's integer value (of any sign); None after an error. Each level counts towards
        MAX_DEPTH, as an expression's does: a dim's name evaluates that dim here."""
        with self.cx.deeper(d.span) as within:
            return self._dim_level(d, scope) if within else None

    def _dim_level(self, d: ast.Dim, scope: Scope) -> int | None:
        if d.op is None:
            if isinstance(d.value, int):
                return d.value
            v = self.lookup_dim(d.value, scope)
            if v is None and not self._dim_failed(d.value, scope):
                hint = suggest(d.value, self.dim_names(scope))
                self.cx.error(d.span, f"unknown dimension '{d.value}'{hint}")
            return v
        left, right = (self._dim_arithmetic(x, scope) for x in d.operands)
        if left is None or right is None:
            return None
        if d.op == "/":
            if right == 0 or left % right:
                problem = "is a division by zero" if right == 0 else "does not divide exactly"
                self.cx.error(
                    d.span,
                    f"{left} / {right} {problem}",
                    self._dim_values_of(d, scope),
                )
                return None
            value = left // right
        else:
            value = left + right if d.op == "+" else left - right if d.op == "-" else left * right
        if not fits(value, DataType.I64):
            self.cx.error(
                d.span,
                f"dimension {d.value} is {value}, which does not fit in i64",
                self._dim_values_of(d, scope),
            )
            return None
        return value

    def _dim_values_of(self, d: ast.Dim, scope: Scope) -> list[str]:
        """`  where H = 7, N = 2`: the values of the names a dimension uses."""
        values = [f"{n} = {self.lookup_dim(n, scope)}" for n in d.names()]
        return ["  where " + ", ".join(values)] if values else []

    def _dim_failed(self, name: str, scope: Scope) -> bool:
        """Whether name is a module dim whose own definition failed (already reported)."""
        return any(name in u.dims for u in [scope.unit, *scope.unit.uses])

    def resolve_dtype(self, name: str | None, span: ast.Span, scope: Scope) -> DataType | None:
        if name is None:
            return scope.dtype_var or scope.unit.dtype
        if name == DIM_PARAM:
            return DataType.I64
        if name == ANY_INT:
            if scope.int_var is None:
                self.cx.error(
                    span,
                    "element type 'int' (any integer type) is only for the parameters of a def",
                    ["  help: write an integer type: i8, i16, i32 or i64"],
                )
            return scope.int_var
        dt = DTYPES.get(name)
        if dt is None:
            self.cx.error(span, f"unknown element type '{name}'{suggest(name, DTYPES)}")
        return dt

    def resolve_type(self, spec: ast.TypeSpec, scope: Scope) -> Type | None:
        """A written type with every dimension and element type known; None after an error."""
        if isinstance(spec, ast.TupleType):
            parts = [self.resolve_type(e, scope) for e in spec.elements]
            if any(p is None for p in parts):
                return None
            return TupleType(tuple(p for p in parts if p is not None))
        if isinstance(spec, ast.ScalarType):
            dt = self.resolve_dtype(spec.dtype, spec.span, scope)
            return TensorType((), dt) if dt else None
        dt = self.resolve_dtype(spec.dtype, spec.span, scope)
        shape = self.resolve_shape(spec.shape, scope)
        if dt is None or shape is None:
            return None
        ty = TensorType(shape, dt)
        error = too_large(dt.size, shape, lambda: show(ty))
        if error is not None:
            self.cx.error(spec.span, error)
            return None
        return ty
