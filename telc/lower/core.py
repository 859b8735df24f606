"""The state of one lowering: the IR module being built, the insertion point, diagnostics,
name lookup, type resolution, and the emission helpers every construct shares (explicit
broadcasting, constants, IR naming)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from dlvm.diagnostics import Diagnostic
from dlvm.ir.builder import Builder
from dlvm.ir.literals import ScalarLiteral
from dlvm.ir.typerules import TypeRuleError
from dlvm.ir.types import DataType, FunctionType, TensorType, TupleType, Type
from dlvm.ir.values import Function, Instruction, LiteralValue, Module, Value, fresh_name
from telc import ast
from telc.lower.values import POISON, TV, Elaborated, FnRef, _Poison
from telc.lower.walk import FunctionFacts
from telc.program import Program, Unit, suggest
from telc.types import DTYPES, fits, numpy_broadcast, shape_str


class Abort(Exception):
    """Stops lowering the current function after an error that leaves no sensible IR."""


@dataclass
class FnState:
    """The IR function being filled in."""

    ir: Function
    tel_name: str
    result: Type | None
    taken: set[str] = field(default_factory=set)


@dataclass
class InlineFrame:
    """A call being inlined: its name, result type (once known) and the `return`s seen, each
    the block it ends and the value it returns (branched to the result block afterwards)."""

    name: str
    result: Type | None
    returns: list[tuple[Any, Any]] = field(default_factory=list)


@dataclass
class Scope:
    """Names visible at one point: locals (or a model's computed declarations), dimension
    variables, the module parameters at hand, and the compile-time `training` flag."""

    unit: Unit
    values: dict[str, Elaborated] = field(default_factory=dict)
    mutable: set[str] = field(default_factory=set)
    dims: dict[str, int] = field(default_factory=dict)
    rests: dict[str, tuple[int, ...]] = field(default_factory=dict)  # `S` of `[S...]`
    params: dict[str, TV] = field(default_factory=dict)
    training: bool = False
    dtype_var: DataType | None = None  # the element type of unannotated signature types
    # Where the model's parameters are not at hand, why, for the message ("const c is a
    # compile-time constant (…)").
    paramless: str | None = None

    def child(self) -> Scope:
        return Scope(
            self.unit,
            dict(self.values),
            set(self.mutable),
            self.dims,
            self.rests,
            self.params,
            self.training,
            self.dtype_var,
            self.paramless,
        )

    @property
    def default_float(self) -> DataType:
        return self.dtype_var if self.dtype_var and self.dtype_var.is_float else self.unit.dtype


class Core:
    """Shared state and helpers; telc.lower.Lowering adds the constructs."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.module = Module(program.root.name)
        self.diags: list[Diagnostic] = []
        self._seen: set[tuple[int, int, str]] = set()
        self.b = Builder()
        self.fn: FnState | None = None
        self.inlining: list[InlineFrame] = []
        self.const_cache: dict[tuple, Any] = {}  # const values, per file and name
        self.instances: dict[tuple, Any] = {}  # (def, argument types, training) -> Instance
        self.gradients: dict[tuple, Function] = {}  # gradient declarations made for grad()
        self.facts: dict[int, FunctionFacts] = {}
        self.dim_values: dict[tuple[int, str], int | None] = {}

    # Diagnostics ----------------------------------------------------------------------------

    def missing_parameter(self, span: ast.Span, fn: str, param: str, scope: Scope) -> _Poison:
        """A call of `fn`, which uses the model's parameter `param`, where none is at hand."""
        if scope.paramless is None:
            return self.error(span, f"internal error: parameter '{param}' is not at hand")
        return self.error(
            span, f"{fn} uses parameter '{param}', which is not at hand: {scope.paramless}"
        )

    def error(self, span: ast.Span, message: str, details: list[str] | None = None) -> _Poison:
        """Records a located error (once per place and message) and returns POISON."""
        key = (id(span.source), span.start, message)
        if key not in self._seen:
            self._seen.add(key)
            notes = tuple(Diagnostic(d, None, "detail") for d in details or ())
            self.diags.append(Diagnostic(message, span.loc, notes=notes))
        return POISON

    # Emission -------------------------------------------------------------------------------

    def emit(self, opname: str, operands: list[Value], span: ast.Span, **attrs: Any) -> Value:
        """One instruction at the insertion point. The checker has already proved it well
        typed, so a refusal here is our bug: reported as an internal error, never a crash."""
        try:
            return self.b.build(opname, operands, None, **attrs)
        except TypeRuleError as e:
            self.error(span, f"internal error: telc produced an ill-typed '{opname}': {e}")
            raise Abort from None

    def name_value(self, value: Value | None, name: str) -> None:
        """Gives an instruction the TEL name it is bound to (unique within the function)."""
        if (
            isinstance(value, Instruction)
            and value.name is None
            and self.fn is not None
            and value.block is not None
            and value.block.function is self.fn.ir
        ):
            value.name = fresh_name(name, self.fn.taken)

    def splat(self, value: int | float | bool, ty: TensorType, span: ast.Span) -> Value:
        """A tensor of one value: a scalar literal for scalars, else a `literal` instruction."""
        lit = LiteralValue(ScalarLiteral(value), ty)
        if not ty.shape:
            return lit
        return self.emit("literal", [lit], span)

    def to_rank(self, value: Value, rank: int, span: ast.Span) -> Value:
        """value with leading unit dimensions added up to rank (NumPy broadcasting made
        explicit; the IR stretches unit dimensions itself)."""
        t = value.type
        assert isinstance(t, TensorType)
        if not t.shape or t.rank >= rank:
            return value
        return self.emit("shapeCast", [value], span, shape=(1,) * (rank - t.rank) + t.shape)

    def broadcast_to(self, value: Value, shape: tuple[int, ...], span: ast.Span) -> Value:
        """value stretched to exactly `shape` (for results that must have it, such as a
        branch of a select or a declaration)."""
        t = value.type
        assert isinstance(t, TensorType)
        if t.shape == shape:
            return value
        if not t.shape:
            zero = self.splat(0, TensorType(shape, t.dtype), span)
            return self.emit("add", [zero, value], span)
        v = self.to_rank(value, len(shape), span)
        if v.type.shape == shape:  # type: ignore[attr-defined]
            return v
        zero = self.splat(0, TensorType(shape, t.dtype), span)
        return self.emit("add", [zero, v], span)

    def coerce(self, tv: TV, ty: Type, span: ast.Span, what: str) -> Value | _Poison:
        """tv as a value of exactly type ty: weak numbers take ty's element type and scalars
        and broadcastable shapes stretch; anything else is an error naming `what`."""
        if isinstance(ty, TupleType) or isinstance(tv.ty, TupleType):
            if tv.ty == ty:
                return tv.ir()
            return self.error(span, f"{what}: expected {show(ty)}, found {show(tv.ty)}")
        assert isinstance(ty, TensorType)
        t = tv.tensor
        assert t is not None
        if tv.weak:
            misfit = weak_misfit(tv, ty.dtype)
            if misfit == "kind":
                return self.error(span, f"{what}: expected {show(ty)}, found the number {tv.const}")
            if misfit is not None:
                return self.error(span, f"{what}: {misfit}")
            if tv.value is None and tv.const is not None:
                return self.splat(tv.const, ty, span)
            return self.broadcast_to(tv.ir(ty.dtype), ty.shape, span)
        if t.dtype is not ty.dtype:
            return self.error(
                span, f"{what}: expected element type {ty.dtype}, found {t.dtype} ({show(t)})"
            )
        if t.shape != ty.shape:
            if numpy_broadcast(t.shape, ty.shape) != ty.shape:
                return self.error(
                    span,
                    f"{what}: expected shape {shape_str(ty.shape)}, found {shape_str(t.shape)}",
                )
            return self.broadcast_to(tv.ir(), ty.shape, span)
        return tv.ir()

    # Names ----------------------------------------------------------------------------------

    def visible_names(self, scope: Scope) -> list[str]:
        names = list(scope.values) + list(scope.dims) + ["training"]
        for unit in [scope.unit, *scope.unit.uses]:
            names += list(unit.functions) + list(unit.dims) + list(unit.consts)
        names += list(scope.unit.declarations)
        return names

    def imported(self, unit: Unit, name: str, span: ast.Span) -> object | None | _Poison:
        """What `name` means through the modules `unit` uses: None if nothing, POISON if two
        modules both define it."""
        found = [(u, u.own(name)) for u in unit.uses if u.own(name) is not None]
        if len(found) > 1:
            where = " and ".join(f"'{u.name}'" for u, _ in found)
            return self.error(span, f"'{name}' is defined in both {where}; rename one of them")
        if found:
            u, what = found[0]
            return (u, what)
        return None

    def dim_value(self, unit: Unit, decl: ast.DimDecl) -> int | None:
        """The value of a module-level `dim` (or its -D override), checked once."""
        key = (id(unit), decl.name)
        if key in self.dim_values:
            return self.dim_values[key]
        self.dim_values[key] = None  # a dim defined through itself stays None
        value: int | None = None
        override = self.program.defines.get(decl.name)
        if override is not None:
            if isinstance(override, int) and override > 0 and fits(override, DataType.I64):
                value = override
            if value is None:
                self.error(
                    decl.span,
                    f"-D {decl.name}={override}: a dim must be a positive integer below 2**63",
                )
        else:
            tv = self.constant_of(decl.value, Scope(unit, paramless=constant(f"dim {decl.name}")))
            if tv is not None:
                if isinstance(tv, bool) or not isinstance(tv, int) or tv <= 0:
                    self.error(
                        decl.value.span, f"dim {decl.name} must be a positive integer, found {tv}"
                    )
                else:
                    value = tv
        self.dim_values[key] = value
        return value

    def constant_of(self, expr: ast.Expr, scope: Scope) -> int | float | bool | None:
        """The compile-time value of an expression of numbers, dims and consts, or None
        (after an error) when it has none."""
        tv = self.lower_expr(expr, scope)  # type: ignore[attr-defined]
        if isinstance(tv, _Poison):
            return None
        if not isinstance(tv, TV) or tv.const is None:
            self.error(expr.span, "expected a constant (a number, a dim or a const)")
            return None
        return tv.const

    def lookup_dim(self, name: str, scope: Scope) -> int | None:
        """A dimension name in a written shape: a bound dimension variable or a module dim."""
        if name in scope.dims:
            return scope.dims[name]
        for unit in [scope.unit, *scope.unit.uses]:
            decl = unit.dims.get(name)
            if decl is not None:
                return self.dim_value(unit, decl)
        return None

    # Types ----------------------------------------------------------------------------------

    def resolve_shape(self, shape: ast.Shape, scope: Scope) -> tuple[int, ...] | None:
        """A written shape with every name bound; None after an error."""
        if shape.rest is not None:
            bound = scope.rests.get(shape.rest)
            if bound is not None:
                return bound
            self.error(shape.span, f"shape variable {shape.rest}... is not bound here")
            return None
        out: list[int] = []
        for d in shape.dims:
            if isinstance(d.value, int):
                if d.value <= 0:
                    self.error(d.span, "a dimension must be a positive integer")
                    return None
                out.append(d.value)
                continue
            v = self.lookup_dim(d.value, scope)
            if v is None:
                if not self._dim_failed(d, scope):
                    hint = suggest(d.value, self.dim_names(scope))
                    self.error(d.span, f"unknown dimension '{d.value}'{hint}")
                return None
            out.append(v)
        if math.prod(out) >= 1 << 63:
            self.error(shape.span, f"a tensor of shape {shape_str(tuple(out))} has more elements "
                       "than an i64 can count")  # fmt: skip
            return None
        return tuple(out)

    def _dim_failed(self, d: ast.Dim, scope: Scope) -> bool:
        """Whether d names a module dim whose own definition failed (already reported)."""
        return any(
            isinstance(d.value, str) and d.value in u.dims for u in [scope.unit, *scope.unit.uses]
        )

    def dim_names(self, scope: Scope) -> list[str]:
        names = list(scope.dims)
        for unit in [scope.unit, *scope.unit.uses]:
            names += list(unit.dims)
        return names

    def resolve_dtype(self, name: str | None, span: ast.Span, scope: Scope) -> DataType | None:
        if name is None:
            return scope.dtype_var or scope.unit.dtype
        dt = DTYPES.get(name)
        if dt is None:
            self.error(span, f"unknown element type '{name}'{suggest(name, DTYPES)}")
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
        return TensorType(shape, dt)

    def facts_for(self, unit: Unit) -> FunctionFacts:
        facts = self.facts.get(id(unit))
        if facts is None:
            imported_training = {
                name for u in unit.uses for name in u.functions if self.facts_for(u).training[name]
            }
            imported_random = {
                name for u in unit.uses for name in u.functions if self.facts_for(u).random[name]
            }
            params = (
                [d.name for d in unit.declarations.values() if d.role == "param"]
                if unit is self.program.root
                else []
            )
            facts = FunctionFacts(unit.functions, params, imported_training, imported_random)
            self.facts[id(unit)] = facts
        return facts


def constant(what: str) -> str:
    """The `Scope.paramless` of a compile-time constant."""
    return f"{what} is a compile-time constant (numbers, dims and consts only)"


def ftype(fn: Function) -> FunctionType:
    """An IR function's type (Value.type is typed as any Type)."""
    t = fn.type
    assert isinstance(t, FunctionType)
    return t


def weak_misfit(tv: TV, dtype: DataType) -> str | None:
    """Why a weak number cannot take the element type dtype (None when it can): the kinds
    differ, or the number is out of the type's range."""
    c = tv.const
    if isinstance(c, bool):
        return None if dtype.is_bool else "kind"
    if c is None or not dtype.is_numeric or (isinstance(c, float) and not dtype.is_float):
        return "kind"
    if not fits(c, dtype):
        return f"the number {c} does not fit in {dtype}"
    return None


def show(ty: Type) -> str:
    """A type for messages: `f32[32 x 64]`, `f32` for a scalar."""
    if isinstance(ty, TensorType):
        return ty.dtype.text + (shape_str(ty.shape) if ty.shape else "")
    if isinstance(ty, TupleType):
        return "(" + ", ".join(show(t) for t in ty.elements) + ")"
    return str(ty)


__all__ = ["POISON", "TV", "Abort", "Core", "FnRef", "FnState", "Scope", "show"]
