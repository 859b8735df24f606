"""The built-in functions of docs/tel.md: one entry each, holding its argument rules, shape
rule and IR lowering together."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from dlvm.ir.compose import permute
from dlvm.ir.literals import ScalarLiteral
from dlvm.ir.types import BOOL, DataType, TensorType
from dlvm.ir.values import LiteralValue, Value
from telc import ast
from telc.lower import exprs
from telc.lower.calls import Calls, make_grad
from telc.lower.core import Scope, show, weak_misfit
from telc.lower.exprs import describe
from telc.lower.values import POISON, TV, Elaborated, ShapeVal, _Poison
from telc.program import suggest
from telc.types import DTYPES, shape_str

Builtin = Callable[[Calls, ast.Call, Scope], Elaborated]
BUILTINS: dict[str, Builtin] = {}

_MISSING = object()


class Args:
    """A built-in's arguments matched to its parameter names (positional or keyword)."""

    def __init__(
        self, lw: Calls, e: ast.Call, scope: Scope, names: list[str], defaults: dict[str, Any]
    ):
        self.lw, self.e, self.scope = lw, e, scope
        self.values: dict[str, Any] = {}
        self.spans: dict[str, ast.Span] = {}
        self.ok = True
        fname = e.callee.span.text()
        pos = e.positional
        variadic = names and names[0].startswith("*")
        if variadic:
            self.values[names[0][1:]] = [self.eval(a) for a in pos]
            self.spans[names[0][1:]] = e.span
        elif len(pos) > len(names):
            most = len(names)
            plural = "s" if most != 1 else ""
            lw.error(
                pos[most].span,
                f"{fname} takes at most {most} argument{plural}, {len(pos)} given",
            )
            self.ok = False
            return
        else:
            for n, a in zip(names, pos):
                self.values[n] = self.eval(a, n)
                self.spans[n] = a.span
        for kw in e.keywords:
            if kw.name not in names or (variadic and kw.name == names[0][1:]):
                lw.error(kw.span, f"{fname} has no option '{kw.name}'{suggest(kw.name, names)}")
                self.ok = False
                continue
            if kw.name in self.values:
                lw.error(kw.span, f"'{kw.name}' is given twice")
                self.ok = False
                continue
            self.values[kw.name] = self.eval(kw.value, kw.name)
            self.spans[kw.name] = kw.value.span
        for n in names:
            key = n.lstrip("*")
            if key not in self.values:
                d = defaults.get(key, _MISSING)
                if d is _MISSING:
                    lw.error(e.span, f"{fname} needs the argument '{key}'")
                    self.ok = False
                else:
                    self.values[key] = d
        for v in self.values.values():
            if isinstance(v, _Poison) or (
                isinstance(v, list) and any(isinstance(x, _Poison) for x in v)
            ):
                self.ok = False

    def eval(self, a: ast.Expr, name: str = "") -> Any:
        if name == "shape" and isinstance(a, ast.Concat) and a.axis is None:
            # `shape: [4]`, `shape: [N]`: a one-dimensional shape, not a concatenation
            parts = [self.lw.lower_expr(x, self.scope) for x in a.elements]
            if all(isinstance(p, TV) and _is_int_const(p) for p in parts):
                dims = tuple(int(p.const) for p in parts)  # type: ignore[union-attr,arg-type]
                if all(d > 0 for d in dims):
                    return ShapeVal(dims)
        if isinstance(a, ast.Tuple):  # `(2, 2)`: integers known at compile time, no IR
            parts = [self.lw.lower_expr(x, self.scope) for x in a.elements]
            if all(isinstance(p, TV) and _is_int_const(p) for p in parts):
                return tuple(int(p.const) for p in parts)  # type: ignore[union-attr,arg-type]
        return self.lw.lower_expr(a, self.scope)

    def span(self, name: str) -> ast.Span:
        return self.spans.get(name, self.e.span)

    def tensor(self, name: str) -> TV | None:
        v = self.values[name]
        if isinstance(v, TV) and isinstance(v.ty, TensorType):
            return v
        if not isinstance(v, _Poison):
            self.lw.error(self.span(name), f"'{name}' must be a tensor, found {describe(v)}")
        return None

    def ints(self, name: str, count: int | None = None) -> tuple[int, ...] | None:
        """A compile-time integer or tuple of integers (`axis: 1`, `stride: (2, 2)`)."""
        v = self.values[name]
        if v is None:
            return None
        items: tuple[int, ...] | None = None
        if isinstance(v, tuple):
            items = v
        elif isinstance(v, TV) and _is_int_const(v):
            items = (int(v.const),)  # type: ignore[arg-type]
        elif isinstance(v, _Poison):
            self.ok = False
            return None
        if items is None:
            self.lw.error(self.span(name), f"'{name}' must be an integer or a tuple of integers")
            self.ok = False
            return None
        if count is not None and len(items) == 1:
            items = items * count
        if count is not None and len(items) != count:
            self.lw.error(self.span(name), f"'{name}' needs {count} integers, found {len(items)}")
            self.ok = False
            return None
        return items

    def _node(self, name: str) -> ast.Expr | None:
        for kw in self.e.keywords:
            if kw.name == name:
                return kw.value
        return None

    def flag(self, name: str) -> bool:
        v = self.values[name]
        if isinstance(v, bool):
            return v
        if isinstance(v, TV) and isinstance(v.const, bool):
            return v.const
        self.lw.error(self.span(name), f"'{name}' must be true or false")
        self.ok = False
        return False


def builtin(*names: str):
    def register(fn: Builtin) -> Builtin:
        for n in names:
            BUILTINS[n] = fn
            exprs.BUILTIN_NAMES.add(n)
        return fn

    return register


def _is_int_const(tv: TV) -> bool:
    return tv.const is not None and not isinstance(tv.const, bool | float) and not tv.shape


def _name(e: ast.Call) -> str:
    return e.callee.id if isinstance(e.callee, ast.Name) else "?"


def materialise(lw: Calls, tv: TV, scope: Scope, float_only: bool = False) -> TV:
    """A weak number as a typed scalar (the module's float type for decimals or float_only)."""
    if not tv.weak:
        return tv
    dt = scope.default_float if (float_only or isinstance(tv.const, float)) else tv.dtype
    return TV(TensorType((), dt), tv.ir(dt), const=tv.const)


# Elementwise ----------------------------------------------------------------------------------

UNARY_FLOAT = "exp log sqrt rsqrt tanh sinh cosh sin cos tan asin acos atan erf".split()  # noqa: SIM905


@builtin(*UNARY_FLOAT)
def unary_float(lw: Calls, e: ast.Call, scope: Scope) -> Elaborated:
    a = Args(lw, e, scope, ["x"], {})
    x = a.tensor("x") if a.ok else None
    if x is None:
        return POISON
    x = materialise(lw, x, scope, float_only=True)
    if not x.dtype.is_float:
        return lw.error(
            e.span, f"{_name(e)} needs a float tensor, found {show(x.ty)}; cast it first"
        )
    v = lw.emit(_name(e), [x.ir()], e.span)
    return TV(v.type, v, sym=x.sym)


@builtin("sign", "floor", "ceil", "round", "abs")
def unary_numeric(lw: Calls, e: ast.Call, scope: Scope) -> Elaborated:
    a = Args(lw, e, scope, ["x"], {})
    x = a.tensor("x") if a.ok else None
    if x is None:
        return POISON
    x = materialise(lw, x, scope)
    if not x.dtype.is_numeric:
        return lw.error(e.span, f"{_name(e)} needs numbers, found {show(x.ty)}")
    name = _name(e)
    if name == "abs":  # |x| = x · sign(x), whose derivative is sign(x)
        v = lw.emit("multiply", [x.ir(), lw.emit("sign", [x.ir()], e.span)], e.span)
    else:
        v = lw.emit(name, [x.ir()], e.span)
    return TV(v.type, v, sym=x.sym)


@builtin("pow", "mod")
def classic_binary(lw: Calls, e: ast.Call, scope: Scope) -> Elaborated:
    """The classic DLVM TEL intrinsics: pow(a, b) is a ** b and mod(a, b) is a % b."""
    a = Args(lw, e, scope, ["a", "b"], {})
    x, y = (a.tensor("a"), a.tensor("b")) if a.ok else (None, None)
    if x is None or y is None:
        return POISON
    op = "**" if _name(e) == "pow" else "%"
    return lw.elementwise(op, x, y, e.span, e.positional[0], e.positional[1])


@builtin("max", "min", "sum", "mean", "prod")
def reduction(lw: Calls, e: ast.Call, scope: Scope) -> Elaborated:
    name = _name(e)
    if name in ("max", "min") and len(e.positional) == 2:
        a = Args(lw, e, scope, ["a", "b"], {})
        x, y = (a.tensor("a"), a.tensor("b")) if a.ok else (None, None)
        if x is None or y is None:
            return POISON
        return lw.elementwise(name, x, y, e.span, e.positional[0], e.positional[1])
    a = Args(lw, e, scope, ["x", "axis", "keepdims"], {"axis": None, "keepdims": False})
    x = a.tensor("x") if a.ok else None
    if x is None:
        return POISON
    x = materialise(lw, x, scope)
    rank = len(x.shape)
    axes = a.ints("axis")
    keep = a.flag("keepdims")
    if not a.ok:
        return POISON
    dims = list(range(rank)) if axes is None else _axes(lw, a, axes, x)
    if dims is None:
        return POISON
    if x.dtype.is_bool:
        return lw.error(e.span, f"{name} needs numbers, found {show(x.ty)}")
    if not dims:
        return x
    comb, init = {
        "sum": ("add", 0),
        "mean": ("add", 0),
        "prod": ("multiply", 1),
        "max": ("max", -math.inf if x.dtype.is_float else -(2 ** (x.dtype.bits - 1))),
        "min": ("min", math.inf if x.dtype.is_float else 2 ** (x.dtype.bits - 1) - 1),
    }[name]
    init_value = LiteralValue(ScalarLiteral(init), TensorType((), x.dtype))
    v = lw.emit("reduce", [x.ir(), init_value], e.span, comb=comb, dims=tuple(sorted(dims)))
    if name == "mean":
        if not x.dtype.is_float:
            return lw.error(e.span, f"mean needs a float tensor, found {show(x.ty)}")
        count = math.prod(x.shape[d] for d in dims)
        v = lw.emit(
            "divide", [v, LiteralValue(ScalarLiteral(count), TensorType((), x.dtype))], e.span
        )
    if keep:
        kept = tuple(1 if i in dims else n for i, n in enumerate(x.shape))
        v = lw.emit("shapeCast", [v], e.span, shape=kept)
    return TV(v.type, v)


@builtin("transpose")
def transpose(lw: Calls, e: ast.Call, scope: Scope) -> Elaborated:
    a = Args(lw, e, scope, ["x", "perm"], {"perm": None})
    x = a.tensor("x") if a.ok else None
    if x is None:
        return POISON
    perm = a.ints("perm")
    rank = len(x.shape)
    if perm is None or tuple(perm) == tuple(reversed(range(rank))):
        if rank < 2:
            return x
        v = lw.emit("transpose", [x.ir()], e.span)
        return TV(v.type, v)
    axes = tuple(p + rank if p < 0 else p for p in perm)
    if sorted(axes) != list(range(rank)):
        return lw.error(
            a.span("perm"),
            f"transpose: {tuple(perm)} is not a permutation of the {rank} axes of {show(x.ty)}",
        )
    v = permute(lambda name, *vs, **attrs: lw.emit(name, list(vs), e.span, **attrs), x.ir(), axes)
    return TV(v.type, v)


def _axes(lw: Calls, a: Args, axes: tuple[int, ...], x: TV) -> list[int] | None:
    """The `axis:` argument as dimensions of x (negative ones count from the end); None after
    an error for one out of range or repeated."""
    rank = len(x.shape)
    dims: list[int] = []
    for ax in axes:
        d = ax + rank if ax < 0 else ax
        if not 0 <= d < rank:
            lw.error(a.span("axis"), f"axis {ax} is out of range for {show(x.ty)}")
            return None
        if d in dims:
            lw.error(a.span("axis"), f"axis {ax} is repeated")
            return None
        dims.append(d)
    return dims


@builtin("reverse")
def reverse(lw: Calls, e: ast.Call, scope: Scope) -> Elaborated:
    a = Args(lw, e, scope, ["x", "axis"], {})
    x = a.tensor("x") if a.ok else None
    axes = a.ints("axis") if x is not None else None
    if x is None or axes is None:
        return POISON
    dims = _axes(lw, a, axes, x)
    if dims is None:
        return POISON
    v = lw.emit("reverse", [x.ir()], e.span, dims=tuple(sorted(dims)))
    return TV(v.type, v)


@builtin("concat")
def concat(lw: Calls, e: ast.Call, scope: Scope) -> Elaborated:
    a = Args(lw, e, scope, ["*xs", "axis"], {"axis": None})
    if not a.ok:
        return POISON
    parts = a.values["xs"]
    if not parts:
        return lw.error(e.span, "concat needs at least one tensor")
    tvs = []
    for p, node in zip(parts, e.positional):
        if not isinstance(p, TV) or not isinstance(p.ty, TensorType):
            return lw.error(node.span, f"concat takes tensors, found {describe(p)}")
        tvs.append(p)
    axes = a.ints("axis") or (0,)
    return lw.concatenate(tvs, list(e.positional), axes[0], e.span)


@builtin("cast")
def cast(lw: Calls, e: ast.Call, scope: Scope) -> Elaborated:
    pos = e.positional
    if len(pos) != 2 or e.keywords:
        return lw.error(e.span, "cast takes a tensor and an element type: cast(x, f64)")
    x = lw.tensor_of(pos[0], scope, "the operand of cast")
    if isinstance(x, _Poison):
        return x
    if not isinstance(pos[1], ast.Name) or pos[1].id not in DTYPES:
        text = pos[1].span.text()
        return lw.error(pos[1].span, f"unknown element type '{text}'{suggest(text, DTYPES)}")
    to = DTYPES[pos[1].id]
    if x.weak:
        misfit = weak_misfit(x, to)
        if misfit is not None:
            return lw.error(
                e.span, f"cannot cast {x.const} to {to}" if misfit == "kind" else misfit
            )
        return TV(TensorType((), to), x.ir(to), const=x.const)
    if x.dtype is to:
        return x
    if x.dtype.is_bool:  # a flag as a number: 1 where true
        one = LiteralValue(ScalarLiteral(1), TensorType((), to))
        zero = LiteralValue(ScalarLiteral(0), TensorType((), to))
        v = lw.emit("select", [one, zero, x.ir()], e.span)
        return TV(v.type, v, sym=x.sym)
    if not x.dtype.can_cast_to(to):
        why = "DLVM IR converts only within a base (float to float, int to wider int)"
        return lw.error(e.span, f"cannot cast {show(x.ty)} to {to}: {why}")
    v = lw.emit("dataTypeCast", [x.ir()], e.span, dtype=to)
    return TV(v.type, v, sym=x.sym)


@builtin("select")
def select(lw: Calls, e: ast.Call, scope: Scope) -> Elaborated:
    a = Args(lw, e, scope, ["c", "a", "b"], {})
    c, x, y = (a.tensor("c"), a.tensor("a"), a.tensor("b")) if a.ok else (None, None, None)
    if c is None or x is None or y is None:
        return POISON
    if c.dtype is not DataType.BOOL:
        return lw.error(a.span("c"), f"the condition of select must be bool, found {show(c.ty)}")
    return lw.select(c, x, y, e.span)


# Convolution and pooling ---------------------------------------------------------------------


@builtin("conv2d")
def conv2d(lw: Calls, e: ast.Call, scope: Scope) -> Elaborated:
    a = Args(
        lw,
        e,
        scope,
        ["x", "k", "stride", "padding", "dilation", "groups"],
        {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": (1,)},
    )
    x, k = (a.tensor("x"), a.tensor("k")) if a.ok else (None, None)
    if x is None or k is None:
        return POISON
    stride, padding, dilation = a.ints("stride", 2), a.ints("padding", 2), a.ints("dilation", 2)
    groups = a.ints("groups", 1)
    if not a.ok or stride is None or padding is None or dilation is None or groups is None:
        return POISON
    g = groups[0]
    if len(x.shape) != 4 or len(k.shape) != 4:
        return lw.error(
            e.span,
            f"conv2d takes an NCHW input and an OIHW kernel (rank 4), found {show(x.ty)} and "
            f"{show(k.ty)}",
        )
    if x.dtype is not k.dtype:
        return lw.error(e.span, f"conv2d of different element types: {show(x.ty)} and {show(k.ty)}")
    if not x.dtype.is_float:
        return lw.error(e.span, f"conv2d needs float tensors, found {show(x.ty)}")
    n, c, h, w = x.shape
    o, ci, kh, kw = k.shape
    if g <= 0 or c % g or o % g or ci * g != c:
        return lw.error(
            e.span,
            f"conv2d: the input has {c} channels, the kernel expects {ci} per group × {g} groups",
        )
    out = []
    for size, kern, s, p, d in (
        (h, kh, stride[0], padding[0], dilation[0]),
        (w, kw, stride[1], padding[1], dilation[1]),
    ):
        if s <= 0 or d <= 0 or p < 0:
            return lw.error(
                e.span, "conv2d: strides and dilations must be positive, padding not negative"
            )
        span_k = (kern - 1) * d + 1
        if size + 2 * p < span_k:
            return lw.error(
                e.span,
                f"conv2d: the kernel ({kern} wide) is larger than the padded input "
                f"({size + 2 * p})",
            )
        out.append((size + 2 * p - span_k) // s + 1)
    v = lw.emit(
        "convolve",
        [x.ir(), k.ir()],
        e.span,
        strides=tuple(stride),
        padding=((padding[0], padding[0]), (padding[1], padding[1])),
        leftDilation=(1, 1),
        rightDilation=tuple(dilation),
        groups=g,
    )
    return TV(v.type, v)


@builtin("maxpool2d", "avgpool2d")
def pool2d(lw: Calls, e: ast.Call, scope: Scope) -> Elaborated:
    a = Args(lw, e, scope, ["x", "window", "stride"], {"window": (2, 2), "stride": None})
    x = a.tensor("x") if a.ok else None
    if x is None:
        return POISON
    window = a.ints("window", 2)
    stride = a.ints("stride", 2) if a.values["stride"] is not None else window
    if not a.ok or window is None or stride is None:
        return POISON
    if len(x.shape) != 4:
        return lw.error(e.span, f"{_name(e)} takes an NCHW tensor (rank 4), found {show(x.ty)}")
    if not x.dtype.is_float:
        return lw.error(e.span, f"{_name(e)} needs a float tensor, found {show(x.ty)}")
    for size, win in zip(x.shape[2:], window):
        if win <= 0 or win > size:
            return lw.error(
                a.span("window"), f"the window {tuple(window)} does not fit {show(x.ty)}"
            )
    if any(s <= 0 for s in stride):
        return lw.error(a.span("stride"), "strides must be positive")
    is_max = _name(e) == "maxpool2d"
    init = LiteralValue(ScalarLiteral(-math.inf if is_max else 0), TensorType((), x.dtype))
    v = lw.emit(
        "reduceWindow",
        [x.ir(), init],
        e.span,
        comb="max" if is_max else "add",
        dims=(1, 1, *window),
        strides=(1, 1, *stride),
        padding="none",
    )
    if not is_max:
        count = LiteralValue(ScalarLiteral(window[0] * window[1]), TensorType((), x.dtype))
        v = lw.emit("divide", [v, count], e.span)
    return TV(v.type, v)


# Constructors -------------------------------------------------------------------------------


def _shape_arg(lw: Calls, a: Args, required: bool = True) -> tuple[int, ...] | None:
    v = a.values.get("shape")
    if isinstance(v, ShapeVal):
        return v.shape
    if v is None and not required:
        return None
    if not isinstance(v, _Poison):
        lw.error(
            a.span("shape"),
            f"{_name(a.e)} needs shape: [d x d …], found "
            f"{describe(v) if v is not None else 'nothing'}",
        )
    return None


def _bounds(
    lw: Calls, a: Args, names: tuple[str, str], scope: Scope
) -> tuple[Value, Value, DataType] | None:
    lo, hi = a.tensor(names[0]), a.tensor(names[1])
    if lo is None or hi is None:
        return None
    if lo.shape or hi.shape:
        lw.error(a.e.span, f"the {names[0]} and {names[1]} of {_name(a.e)} must be scalars")
        return None
    dtype = (
        hi.dtype if lo.weak and not hi.weak else lo.dtype if not lo.weak else scope.default_float
    )
    if not dtype.is_float:
        lw.error(a.e.span, f"{_name(a.e)} makes float tensors; found bounds of {dtype}")
        return None
    return lo.ir(dtype), hi.ir(dtype), dtype


def uniform(lw: Calls, lo: Value, hi: Value, shape: tuple[int, ...], span: ast.Span) -> Value:
    return lw.emit("random", [lo, hi], span, shape=shape)


def gaussian(
    lw: Calls, mean: Value, std: Value, shape: tuple[int, ...], dtype: DataType, span: ast.Span
) -> Value:
    """mean + std·z with z standard normal, by the Box–Muller transform of two uniforms."""

    def c(x: float) -> Value:
        return LiteralValue(ScalarLiteral(x), TensorType((), dtype))

    tiny = 1e-7 if dtype is not DataType.F64 else 1e-300
    u1 = uniform(lw, c(tiny), c(1.0), shape, span)
    u2 = uniform(lw, c(0.0), c(1.0), shape, span)
    r = lw.emit("sqrt", [lw.emit("multiply", [c(-2.0), lw.emit("log", [u1], span)], span)], span)
    z = lw.emit(
        "multiply",
        [r, lw.emit("cos", [lw.emit("multiply", [c(2 * math.pi), u2], span)], span)],
        span,
    )
    return lw.emit("add", [mean, lw.emit("multiply", [std, z], span)], span)


@builtin("random", "normal")
def random_tensor(lw: Calls, e: ast.Call, scope: Scope) -> Elaborated:
    """`random(lo, hi, shape:)` (uniform) and `normal(mean, std, shape:)` (Gaussian); in a
    parameter's initialiser the shape is the parameter's."""
    uniform_draw = _name(e) == "random"
    bounds = ("lo", "hi") if uniform_draw else ("mean", "std")
    a = Args(lw, e, scope, [*bounds, "shape"], {"shape": None})
    if not a.ok:
        return POISON
    shape = _shape_arg(lw, a, required=scope.values.get("<declared shape>") is None)
    shape = shape if shape is not None else _declared_shape(scope)
    b = _bounds(lw, a, bounds, scope)
    if shape is None or b is None:
        return POISON
    if uniform_draw:
        v = uniform(lw, b[0], b[1], shape, e.span)
    else:
        v = gaussian(lw, b[0], b[1], shape, b[2], e.span)
    return TV(v.type, v)


def _declared_shape(scope: Scope) -> tuple[int, ...] | None:
    """The shape of the parameter being initialised (initialisers take it implicitly)."""
    tv = scope.values.get("<declared shape>")
    return tv.shape if isinstance(tv, TV) else None


@builtin("zeros", "ones")
def filled(lw: Calls, e: ast.Call, scope: Scope) -> Elaborated:
    a = Args(lw, e, scope, ["shape"], {})
    if not a.ok:
        return POISON
    shape = _shape_arg(lw, a)
    if shape is None:
        return POISON
    ty = TensorType(shape, scope.default_float)
    v = lw.splat(0 if _name(e) == "zeros" else 1, ty, e.span)
    return TV(ty, v)


@builtin("glorot", "he")
def fan_init(lw: Calls, e: ast.Call, scope: Scope) -> Elaborated:
    declared = scope.values.get("<declared shape>")
    if not isinstance(declared, TV):
        return lw.error(e.span, f"{_name(e)}() initialises a parameter: W: param[…] = {_name(e)}()")
    if e.arguments:
        return lw.error(e.span, f"{_name(e)}() takes no arguments")
    shape, dtype = declared.shape, declared.dtype
    fan_in, fan_out = fans(shape)

    def c(x: float) -> Value:
        return LiteralValue(ScalarLiteral(x), TensorType((), dtype))

    if _name(e) == "glorot":
        limit = math.sqrt(6.0 / (fan_in + fan_out))
        v = uniform(lw, c(-limit), c(limit), shape, e.span)
    else:
        v = gaussian(lw, c(0.0), c(math.sqrt(2.0 / fan_in)), shape, dtype, e.span)
    return TV(v.type, v)


def fans(shape: tuple[int, ...]) -> tuple[int, int]:
    """(fan_in, fan_out) of a weight: [I x O] dense, [O x I x kh x kw] convolution kernels."""
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    field = math.prod(shape[2:])
    return shape[1] * field, shape[0] * field


# Indices ---------------------------------------------------------------------------------------


def _iota(lw: Calls, n: int, dtype: DataType, span: ast.Span) -> Value:
    """[0, 1, …, n-1] as a running sum of ones less one: a few instructions whatever n is,
    where a literal would hold n elements."""
    ones = lw.splat(1, TensorType((n,), dtype), span)
    counts = lw.emit("scan", [ones], span, comb="add", dims=(0,))
    one = LiteralValue(ScalarLiteral(1), TensorType((), dtype))
    return lw.emit("subtract", [counts, one], span)


@builtin("onehot")
def onehot(lw: Calls, e: ast.Call, scope: Scope) -> Elaborated:
    a = Args(lw, e, scope, ["i", "n"], {})
    i = a.tensor("i") if a.ok else None
    n = a.ints("n") if i is not None else None
    if i is None or n is None:
        return POISON
    if not i.dtype.is_int:
        return lw.error(a.span("i"), f"onehot takes integer class indices, found {show(i.ty)}")
    count = n[0]
    if count <= 0:
        return lw.error(a.span("n"), "onehot needs a positive number of classes")
    i = materialise(lw, i, scope)
    rank = len(i.shape) + 1
    idx = i.ir()
    if i.shape:
        idx = lw.emit("padShape", [idx], e.span, index=len(i.shape))
    iota = lw.to_rank(_iota(lw, count, i.dtype, e.span), rank, e.span)
    hit = lw.emit("equal", [idx, iota], e.span)
    dtype = scope.default_float
    one = LiteralValue(ScalarLiteral(1), TensorType((), dtype))
    zero = LiteralValue(ScalarLiteral(0), TensorType((), dtype))
    v = lw.emit("select", [one, zero, hit], e.span)
    return TV(v.type, v)


@builtin("argmax")
def argmax(lw: Calls, e: ast.Call, scope: Scope) -> Elaborated:
    a = Args(lw, e, scope, ["x", "axis"], {"axis": (-1,)})
    x = a.tensor("x") if a.ok else None
    axes = a.ints("axis") if x is not None else None
    if x is None or axes is None:
        return POISON
    rank = len(x.shape)
    if rank == 0 or x.dtype.is_bool:
        return lw.error(e.span, f"argmax needs a numeric tensor of rank ≥ 1, found {show(x.ty)}")
    axis = axes[0] + rank if axes[0] < 0 else axes[0]
    if not 0 <= axis < rank:
        return lw.error(a.span("axis"), f"axis {axes[0]} is out of range for {show(x.ty)}")
    n = x.shape[axis]
    low = -math.inf if x.dtype.is_float else -(2 ** (x.dtype.bits - 1))
    init = LiteralValue(ScalarLiteral(low), TensorType((), x.dtype))
    top = lw.emit("reduce", [x.ir(), init], e.span, comb="max", dims=(axis,))
    top = lw.emit("padShape", [top], e.span, index=axis)
    hit = lw.emit("equal", [x.ir(), top], e.span)
    iota = _iota(lw, n, DataType.I64, e.span)
    iota = lw.emit(
        "shapeCast", [iota], e.span, shape=tuple(n if d == axis else 1 for d in range(rank))
    )
    big = LiteralValue(ScalarLiteral(n), TensorType((), DataType.I64))
    cand = lw.emit("select", [iota, big, hit], e.span)
    first = LiteralValue(ScalarLiteral(n), TensorType((), DataType.I64))
    v = lw.emit("reduce", [cand, first], e.span, comb="min", dims=(axis,))
    return TV(v.type, v)


@builtin("grad")
def grad(lw: Calls, e: ast.Call, scope: Scope) -> Elaborated:
    return make_grad(lw, e, scope)


__all__ = ["BUILTINS", "BOOL", "fans", "shape_str"]
