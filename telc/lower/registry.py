"""The built-in function registry. Each built-in declares one signature: its parameters (kind,
keyword name, default), or a fixed form with its usage line, and its element-type rule; the
registry matches a call's arguments to it and checks them before the built-in's lowering
runs, which then receives them converted (tensors, integers, flags, axes, shapes)."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from dlvm.ir.types import DataType, TensorType
from dlvm.ir.values import Value
from telc import ast
from telc.lower.context import Context, Scope
from telc.lower.habits import unknown_keyword
from telc.lower.interfaces import ExprLowering
from telc.lower.tensor_ops import TensorOps
from telc.lower.values import (
    POISON,
    TV,
    Elaborated,
    ShapeVal,
    _Poison,
    describe,
    int_const,
    show,
)


class Kind(enum.Enum):
    """What an argument must be, and the stage of checks that converts it."""

    TENSOR = "a tensor (or a number)"
    SHAPE = "a written shape, `shape: [N x M]`"
    INTS = "an integer or a tuple of integers known at compile time"
    AXES = "INTS naming distinct axes of the call's first tensor"
    FLAG = "true or false"
    VALUE = "anything; the built-in checks it"


_MISSING = object()


@dataclass(frozen=True)
class Param:
    """One parameter of a built-in: its keyword name, its kind and its default."""

    name: str
    kind: Kind = Kind.TENSOR
    default: Any = _MISSING  # _MISSING: the argument is required
    count: int | None = None  # INTS: exactly this many (one integer is repeated)

    @property
    def required(self) -> bool:
        return self.default is _MISSING


@dataclass(frozen=True)
class ElementRule:
    """The element types the parameter `param` accepts, and the error otherwise, formatted
    with {name} (the built-in) and {type} (the argument's); reported at the call, or at the
    argument with at_argument. `materialise` first gives a weak number a type: its own, or
    the module's float type."""

    param: str
    accepts: Literal["float", "numeric", "int", "bool"]
    message: str
    at_argument: bool = False
    materialise: Literal["own", "float"] | None = None

    def admits(self, dtype: DataType) -> bool:
        return {
            "float": dtype.is_float,
            "numeric": dtype.is_numeric,
            "int": dtype.is_int,
            "bool": dtype.is_bool,
        }[self.accepts]


@dataclass(frozen=True)
class Signature:
    """A built-in's parameters in order (matched by position or keyword), an optional leading
    variadic one (`concat(*xs, axis:)`), and its element-type rule.

    A fixed signature (`usage` set) takes exactly `positional` unevaluated arguments and no
    keywords unless `keywords` (the built-in then checks them); any other call is the usage
    error. `positional` on a parameter signature selects that form for calls with exactly so
    many positional arguments (`max(a, b)` beside `max(x, axis:)`). `initialiser` built-ins
    exist only in a parameter's initialiser."""

    params: tuple[Param, ...] = ()
    variadic: str | None = None
    rule: ElementRule | None = None
    positional: int | None = None
    usage: str | None = None
    keywords: bool = False
    initialiser: bool = False

    def applies(self, e: ast.Call) -> bool:
        return self.usage is not None or self.positional in (None, len(e.positional))


@dataclass(frozen=True)
class Host:
    """What built-ins lower with: the shared context, expressions, and tensor operations."""

    cx: Context
    exprs: ExprLowering
    ops: TensorOps


Lower = Callable[["Call"], Elaborated]


@dataclass(frozen=True)
class Form:
    """One form of a built-in: its signature and its lowering."""

    signature: Signature
    lower: Lower


class Registry:
    """The built-ins by name; a name may have several forms, the first that applies wins."""

    def __init__(self) -> None:
        self._forms: dict[str, list[Form]] = {}

    def define(self, names: str | Iterable[str], signature: Signature) -> Callable[[Lower], Lower]:
        """Registers the decorated lowering under each name with this signature."""

        def register(fn: Lower) -> Lower:
            for n in [names] if isinstance(names, str) else names:
                self._forms.setdefault(n, []).append(Form(signature, fn))
            return fn

        return register

    def __contains__(self, name: object) -> bool:
        return name in self._forms

    def names(self) -> list[str]:
        return list(self._forms)

    def _form(self, name: str, e: ast.Call) -> Form:
        forms = self._forms[name]
        return next((f for f in forms if f.signature.applies(e)), forms[-1])

    def lower(self, name: str, e: ast.Call, scope: Scope, host: Host) -> Elaborated:
        """A call of the built-in `name`: its arguments checked against the signature, then
        its lowering; POISON after an error."""
        form = self._form(name, e)
        call = Call(host, name, form.signature, e, scope)
        if not call.check():
            return POISON
        return form.lower(call)


# An argument as matched: an elaborated expression, `(2, 2)` of compile-time integers, the
# list of a variadic parameter, or a default.
Arg = Any


@dataclass
class Call:
    """A built-in call as its lowering sees it: the arguments matched to the signature and,
    after check(), converted by kind."""

    host: Host
    name: str
    signature: Signature
    e: ast.Call
    scope: Scope
    values: dict[str, Arg] = field(default_factory=dict)
    spans: dict[str, ast.Span] = field(default_factory=dict)
    given: dict[str, ast.Expr] = field(default_factory=dict)  # the expressions passed

    # Checks ---------------------------------------------------------------------------------

    def check(self) -> bool:
        """Matches and checks the arguments in stages, each stage reporting every problem it
        finds and the first stage with one stopping the call: the arguments given (arity,
        keyword names, defaults); tensors and shapes; integers and flags; axes; the element
        type."""
        sig = self.signature
        if sig.initialiser and not isinstance(self.scope.values.get("<declared shape>"), TV):
            n = self.name
            self.error(f"{n}() initialises a parameter: W: param[…] = {n}()")
            return False
        if sig.usage is not None:
            pos, kws = self.e.positional, self.e.keywords
            if len(pos) != sig.positional or (kws and not sig.keywords):
                self.error(sig.usage.format(name=self.name))
                return False
            return True
        if not self._match() or not self._convert(Kind.TENSOR, Kind.SHAPE):
            return False
        rule = sig.rule
        if rule is not None and rule.materialise is not None:
            x = materialise(self.tensor(rule.param), self.scope, rule.materialise == "float")
            self.values[rule.param] = x
        if not self._convert(Kind.INTS, Kind.AXES, Kind.FLAG):
            return False
        if not all(self._axes(p) for p in sig.params if p.kind is Kind.AXES):
            return False
        return self._element_rule()

    def _match(self) -> bool:
        """Arguments to parameters by position, then by keyword; defaults for the rest."""
        sig, e = self.signature, self.e
        fname = e.callee.span.text()
        names = ([f"*{sig.variadic}"] if sig.variadic else []) + [p.name for p in sig.params]
        params = {p.name: p for p in sig.params}
        pos = e.positional
        ok = True
        if sig.variadic:
            self.values[sig.variadic] = [self._evaluate(a, None) for a in pos]
            self.spans[sig.variadic] = e.span
        elif len(pos) > len(names):
            most = len(names)
            plural = "s" if most != 1 else ""
            self.error(
                f"{fname} takes at most {most} argument{plural}, {len(pos)} given", pos[most].span
            )
            return False
        else:
            for p, a in zip(sig.params, pos):
                self.values[p.name] = self._evaluate(a, p)
                self.spans[p.name] = a.span
                self.given[p.name] = a
        for kw in e.keywords:
            if kw.name not in params:
                hint, helps = unknown_keyword(kw.name, names, fname)
                self.host.cx.error(kw.span, f"{fname} has no option '{kw.name}'{hint}", helps)
                ok = False
                continue
            if kw.name in self.values:
                self.error(f"'{kw.name}' is given twice", kw.span)
                ok = False
                continue
            self.values[kw.name] = self._evaluate(kw.value, params[kw.name])
            self.spans[kw.name] = kw.value.span
            self.given[kw.name] = kw.value
        for p in sig.params:
            if p.name not in self.values:
                if p.required:
                    self.error(f"{fname} needs the argument '{p.name}'")
                    ok = False
                else:
                    self.values[p.name] = p.default
        for v in self.values.values():
            if isinstance(v, _Poison) or (
                isinstance(v, list) and any(isinstance(x, _Poison) for x in v)
            ):
                ok = False
        return ok

    def _evaluate(self, a: ast.Expr, p: Param | None) -> Arg:
        lower = self.host.exprs.lower_expr
        if p is not None and p.kind is Kind.SHAPE and isinstance(a, ast.Concat) and a.axis is None:
            # `shape: [4]`, `shape: [N]`: a one-dimensional shape, not a concatenation
            dims = _int_consts([lower(x, self.scope) for x in a.elements])
            if dims is not None and all(d > 0 for d in dims):
                return ShapeVal(dims)
        if isinstance(a, ast.Tuple):  # `(2, 2)`: integers known at compile time, no IR
            ints = _int_consts([lower(x, self.scope) for x in a.elements])
            if ints is not None:
                return ints
        return lower(a, self.scope)

    def _convert(self, *kinds: Kind) -> bool:
        """Converts the arguments of these kinds, reporting each that does not convert."""
        ok = True
        for p in self.signature.params:
            if p.kind in kinds:
                ok &= self._convert_one(p)
        return ok

    def _convert_one(self, p: Param) -> bool:
        name = p.name
        converted: Arg
        if p.kind is Kind.TENSOR:
            converted = self.check_tensor(name)
        elif p.kind is Kind.SHAPE:
            if not p.required:  # the built-in's to resolve (random's: the parameter's shape)
                return True
            converted = self.check_shape(name)
        elif p.kind is Kind.FLAG:
            converted = self.check_flag(name)
        elif self.values[name] is None:  # INTS or AXES left out
            return True
        else:
            converted = self.check_ints(name, p.count)
        if converted is None:
            return False
        self.values[name] = converted
        return True

    def _axes(self, p: Param) -> bool:
        """An AXES argument as dimensions of the first tensor (negative ones count from the
        end; none given: all of them)."""
        x = self.tensor(next(q.name for q in self.signature.params if q.kind is Kind.TENSOR))
        axes = self.values[p.name]
        rank = len(x.shape)
        if axes is None:
            self.values[p.name] = list(range(rank))
            return True
        dims: list[int] = []
        for ax in axes:
            d = ax + rank if ax < 0 else ax
            if not 0 <= d < rank:
                self.error(f"axis {ax} is out of range for {show(x.ty)}", self.span(p.name))
                return False
            if d in dims:
                self.error(f"axis {ax} is repeated", self.span(p.name))
                return False
            dims.append(d)
        self.values[p.name] = dims
        return True

    def _element_rule(self) -> bool:
        rule = self.signature.rule
        if rule is None:
            return True
        x = self.tensor(rule.param)
        if rule.admits(x.dtype):
            return True
        span = self.span(rule.param) if rule.at_argument else self.e.span
        self.error(rule.message.format(name=self.name, type=show(x.ty)), span)
        return False

    # Conversions (also for built-ins that check some arguments in an order of their own) ----

    def check_tensor(self, name: str) -> TV | None:
        v = self.values[name]
        if isinstance(v, TV) and isinstance(v.ty, TensorType):
            return v
        if not isinstance(v, _Poison):
            self.error(f"'{name}' must be a tensor, found {describe(v)}", self.span(name))
        return None

    def check_ints(self, name: str, count: int | None = None) -> tuple[int, ...] | None:
        """A compile-time integer or tuple of integers (`axis: 1`, `stride: (2, 2)`)."""
        v = self.values[name]
        if v is None:
            return None
        items: tuple[int, ...] | None = None
        if isinstance(v, tuple):
            items = v
        elif isinstance(v, TV):
            i = int_const(v)
            items = (i,) if i is not None else None
        elif isinstance(v, _Poison):
            return None
        if items is None:
            self.error(f"'{name}' must be an integer or a tuple of integers", self.span(name))
            return None
        if count is not None and len(items) == 1:
            items = items * count
        if count is not None and len(items) != count:
            noun = "integer" if count == 1 else "integers"
            self.error(f"'{name}' needs {count} {noun}, found {len(items)}", self.span(name))
            return None
        return items

    def check_flag(self, name: str) -> bool | None:
        v = self.values[name]
        if isinstance(v, bool):
            return v
        if isinstance(v, TV) and isinstance(v.const, bool):
            return v.const
        self.error(f"'{name}' must be true or false", self.span(name))
        return None

    def check_shape(self, name: str, required: bool = True) -> tuple[int, ...] | None:
        """A `shape:` argument; when not required, its absence is None without an error."""
        v = self.values.get(name)
        if isinstance(v, ShapeVal):
            return v.shape
        if v is None and not required:
            return None
        if not isinstance(v, _Poison):
            found = describe(v) if v is not None else "nothing"
            self.error(f"{self.name} needs shape: [d x d …], found {found}", self.span(name))
        return None

    # Checked arguments ----------------------------------------------------------------------

    def tensor(self, name: str) -> TV:
        v = self.values[name]
        assert isinstance(v, TV), f"'{name}' is not a checked tensor"
        return v

    def ints(self, name: str) -> tuple[int, ...]:
        v = self.values[name]
        assert isinstance(v, tuple), f"'{name}' is not checked integers"
        return v

    def optional_ints(self, name: str) -> tuple[int, ...] | None:
        """Checked integers of a parameter whose default is None."""
        v = self.values[name]
        assert v is None or isinstance(v, tuple), f"'{name}' is not checked integers"
        return v

    def axes(self, name: str) -> list[int]:
        v = self.values[name]
        assert isinstance(v, list), f"'{name}' is not checked axes"
        return v

    def flag(self, name: str) -> bool:
        v = self.values[name]
        assert isinstance(v, bool), f"'{name}' is not a checked flag"
        return v

    def shape(self, name: str) -> tuple[int, ...]:
        v = self.values[name]
        assert isinstance(v, tuple), f"'{name}' is not a checked shape"
        return v

    def value(self, name: str) -> Arg:
        """An argument as matched (for VALUE parameters, which the built-in checks)."""
        return self.values[name]

    def expr(self, name: str) -> ast.Expr | None:
        """The expression given for a parameter, if one was."""
        return self.given.get(name)

    def span(self, name: str) -> ast.Span:
        return self.spans.get(name, self.e.span)

    # Emission -------------------------------------------------------------------------------

    @property
    def cx(self) -> Context:
        return self.host.cx

    @property
    def ops(self) -> TensorOps:
        return self.host.ops

    def emit(self, opname: str, operands: list[Value], **attrs: Any) -> Value:
        """An instruction located at the call."""
        return self.host.cx.emit(opname, operands, self.e.span, **attrs)

    def error(self, message: str, span: ast.Span | None = None) -> _Poison:
        """An error at span (default: the call)."""
        return self.host.cx.error(span or self.e.span, message)


def materialise(tv: TV, scope: Scope, float_only: bool = False) -> TV:
    """A weak number as a typed scalar (the module's float type for decimals or float_only)."""
    if not tv.weak:
        return tv
    dt = scope.default_float if (float_only or isinstance(tv.const, float)) else tv.dtype
    return TV(TensorType((), dt), tv.ir(dt), const=tv.const)


def _int_consts(parts: Sequence[Elaborated]) -> tuple[int, ...] | None:
    """The values of scalar integers known at compile time, or None if one is not."""
    out = []
    for p in parts:
        i = int_const(p) if isinstance(p, TV) else None
        if i is None:
            return None
        out.append(i)
    return tuple(out)
