"""The built-in functions of docs/tel.md: one entry each, holding its signature (which the
registry checks before it runs), its shape rule and its IR lowering together."""

from __future__ import annotations

import math

from dlvm.ir import ops
from dlvm.ir.builder import constant
from dlvm.ir.compose import permute
from dlvm.ir.types import DataType, TensorType
from dlvm.ir.values import Value
from telc import ast
from telc.lower.context import Scope
from telc.lower.registry import (
    Call,
    ElementRule,
    Kind,
    Param,
    Registry,
    Signature,
    materialise,
)
from telc.lower.values import (
    POISON,
    TV,
    Elaborated,
    FnRef,
    GradSpec,
    _Poison,
    describe,
    show,
    weak_misfit,
)
from telc.program import suggest
from telc.types import DTYPES

BUILTINS = Registry()

X = Param("x")
TWO_TENSORS = Signature((Param("a"), Param("b")))
FLOAT_X = ElementRule(
    "x", "float", "{name} needs a float tensor, found {type}; cast it first", materialise="float"
)
NUMERIC_X = ElementRule("x", "numeric", "{name} needs numbers, found {type}", materialise="own")


def scalar(value: int | float, dtype: DataType) -> Value:
    return constant(value, TensorType((), dtype))


# Elementwise ----------------------------------------------------------------------------------

# The IR's float functions, less those TEL does not offer: docs/tel.md does not list lgamma,
# digamma or erfc among the language's built-ins (offering one is a change to the language: a
# row in docs/tel.md and a test).
UNARY_FLOAT = [n for n in ops.UNARY_FLOAT if n not in ("lgamma", "digamma", "erfc")]


@BUILTINS.define(UNARY_FLOAT, Signature((X,), rule=FLOAT_X))
def unary_float(c: Call) -> Elaborated:
    x = c.tensor("x")
    v = c.emit(c.name, [x.ir()])
    return TV(v.type, v, sym=x.sym)


@BUILTINS.define(("sign", "floor", "ceil", "round", "abs"), Signature((X,), rule=NUMERIC_X))
def unary_numeric(c: Call) -> Elaborated:
    x = c.tensor("x")
    if c.name == "abs":  # |x| = x · sign(x), whose derivative is sign(x)
        v = c.emit("multiply", [x.ir(), c.emit("sign", [x.ir()])])
    else:
        v = c.emit(c.name, [x.ir()])
    return TV(v.type, v, sym=x.sym)


@BUILTINS.define(("pow", "mod"), TWO_TENSORS)
def classic_binary(c: Call) -> Elaborated:
    """The classic DLVM TEL intrinsics: pow(a, b) is a ** b and mod(a, b) is a % b."""
    op = "**" if c.name == "pow" else "%"
    return c.ops.elementwise(op, c.tensor("a"), c.tensor("b"), c.e.span, c.expr("a"), c.expr("b"))


@BUILTINS.define(("max", "min"), Signature(TWO_TENSORS.params, positional=2))
def extremum(c: Call) -> Elaborated:
    """max(a, b) and min(a, b): elementwise over broadcast operands."""
    a, b = c.tensor("a"), c.tensor("b")
    return c.ops.elementwise(c.name, a, b, c.e.span, c.expr("a"), c.expr("b"))


@BUILTINS.define(
    ("max", "min", "sum", "mean", "prod"),
    Signature(
        (X, Param("axis", Kind.AXES, None), Param("keepdims", Kind.FLAG, False)),
        rule=NUMERIC_X,
    ),
)
def reduction(c: Call) -> Elaborated:
    x, dims, name = c.tensor("x"), c.axes("axis"), c.name
    if not dims:
        return x
    comb, init = {
        "sum": ("add", 0),
        "mean": ("add", 0),
        "prod": ("multiply", 1),
        "max": ("max", -math.inf if x.dtype.is_float else -(2 ** (x.dtype.bits - 1))),
        "min": ("min", math.inf if x.dtype.is_float else 2 ** (x.dtype.bits - 1) - 1),
    }[name]
    v = c.emit("reduce", [x.ir(), scalar(init, x.dtype)], comb=comb, dims=tuple(sorted(dims)))
    if name == "mean":
        if not x.dtype.is_float:
            return c.error(f"mean needs a float tensor, found {show(x.ty)}")
        count = math.prod(x.shape[d] for d in dims)
        v = c.emit("divide", [v, scalar(count, x.dtype)])
    if c.flag("keepdims"):
        kept = tuple(1 if i in dims else n for i, n in enumerate(x.shape))
        v = c.emit("shapeCast", [v], shape=kept)
    return TV(v.type, v)


@BUILTINS.define("transpose", Signature((X, Param("perm", Kind.VALUE, None))))
def transpose(c: Call) -> Elaborated:
    x = c.tensor("x")
    perm = c.check_ints("perm")  # after an error in perm, x is transposed as without one
    rank = len(x.shape)
    if perm is None or tuple(perm) == tuple(reversed(range(rank))):
        if rank < 2:
            return x
        v = c.emit("transpose", [x.ir()])
        return TV(v.type, v)
    axes = tuple(p + rank if p < 0 else p for p in perm)
    if sorted(axes) != list(range(rank)):
        return c.error(
            f"transpose: {tuple(perm)} is not a permutation of the {rank} axes of {show(x.ty)}",
            c.span("perm"),
        )
    v = permute(lambda name, *vs, **attrs: c.emit(name, list(vs), **attrs), x.ir(), axes)
    return TV(v.type, v)


@BUILTINS.define("reverse", Signature((X, Param("axis", Kind.AXES))))
def reverse(c: Call) -> Elaborated:
    v = c.emit("reverse", [c.tensor("x").ir()], dims=tuple(sorted(c.axes("axis"))))
    return TV(v.type, v)


@BUILTINS.define("swap_axes", Signature((X, Param("axes", Kind.AXES, (-2, -1)))))
def swap_axes(c: Call) -> Elaborated:
    """NumPy's swapaxes: the two axes exchanged (the last two by default, which transposes
    each matrix of a stack), for a tensor of any rank."""
    x, given = c.tensor("x"), c.axes("axes")  # distinct axes: the registry checks it
    if len(given) != 2:
        return c.error(f"swap_axes takes two axes, found {len(given)}", c.span("axes"))
    a, b = given
    axes = list(range(len(x.shape)))
    axes[a], axes[b] = b, a
    v = permute(lambda name, *vs, **attrs: c.emit(name, list(vs), **attrs), x.ir(), tuple(axes))
    return TV(v.type, v)


@BUILTINS.define("size", Signature((X, Param("axis", Kind.AXES, (-1,), count=1))))
def size(c: Call) -> Elaborated:
    """The length of one axis of x, a number known at compile time (like a dim)."""
    n = c.tensor("x").shape[c.axes("axis")[0]]
    return TV(TensorType((), DataType.I64), weak=True, const=n)


@BUILTINS.define("concat", Signature((Param("axis", Kind.VALUE, None),), variadic="xs"))
def concat(c: Call) -> Elaborated:
    parts = c.value("xs")
    if not parts:
        return c.error("concat needs at least one tensor")
    tvs = []
    for p, node in zip(parts, c.e.positional):
        if not isinstance(p, TV) or not isinstance(p.ty, TensorType):
            return c.error(f"concat takes tensors, found {describe(p)}", node.span)
        tvs.append(p)
    axes = c.check_ints("axis") or (0,)  # after an error in axis, along axis 0
    return c.ops.concatenate(tvs, list(c.e.positional), axes[0], c.e.span)


@BUILTINS.define(
    "cast", Signature(positional=2, usage="cast takes a tensor and an element type: cast(x, f64)")
)
def cast(c: Call) -> Elaborated:
    operand, dtype_name = c.e.positional
    x = c.host.exprs.tensor_of(operand, c.scope, "the operand of cast")
    if isinstance(x, _Poison):
        return x
    if not isinstance(dtype_name, ast.Name) or dtype_name.id not in DTYPES:
        text = dtype_name.span.text()
        return c.error(f"unknown element type '{text}'{suggest(text, DTYPES)}", dtype_name.span)
    to = DTYPES[dtype_name.id]
    if x.weak:
        misfit = weak_misfit(x, to)
        if misfit is not None:
            return c.error(f"cannot cast {x.const} to {to}" if misfit == "kind" else misfit)
        return TV(TensorType((), to), x.ir(to), const=x.const)
    if x.dtype is to:
        return x
    if x.dtype.is_bool:  # a flag as a number: 1 where true
        v = c.emit("select", [scalar(1, to), scalar(0, to), x.ir()])
        return TV(v.type, v, sym=x.sym)
    if not x.dtype.can_cast_to(to):
        why = "DLVM IR converts only within a base (float to float, int to wider int)"
        return c.error(f"cannot cast {show(x.ty)} to {to}: {why}")
    v = c.emit("dataTypeCast", [x.ir()], dtype=to)
    return TV(v.type, v, sym=x.sym)


@BUILTINS.define(
    "select",
    Signature(
        (Param("c"), Param("a"), Param("b")),
        rule=ElementRule(
            "c", "bool", "the condition of select must be bool, found {type}", at_argument=True
        ),
    ),
)
def select(c: Call) -> Elaborated:
    return c.ops.select(c.tensor("c"), c.tensor("a"), c.tensor("b"), c.e.span)


# Convolution and pooling ---------------------------------------------------------------------


@BUILTINS.define(
    "conv2d",
    Signature(
        (
            X,
            Param("k"),
            Param("stride", Kind.INTS, (1, 1), count=2),
            Param("padding", Kind.INTS, (0, 0), count=2),
            Param("dilation", Kind.INTS, (1, 1), count=2),
            Param("groups", Kind.INTS, (1,), count=1),
        )
    ),
)
def conv2d(c: Call) -> Elaborated:
    x, k = c.tensor("x"), c.tensor("k")
    stride, padding, dilation = c.ints("stride"), c.ints("padding"), c.ints("dilation")
    g = c.ints("groups")[0]
    if len(x.shape) != 4 or len(k.shape) != 4:
        return c.error(
            f"conv2d takes an NCHW input and an OIHW kernel (rank 4), found {show(x.ty)} and "
            f"{show(k.ty)}"
        )
    if x.dtype is not k.dtype:
        return c.error(f"conv2d of different element types: {show(x.ty)} and {show(k.ty)}")
    if not x.dtype.is_float:
        return c.error(f"conv2d needs float tensors, found {show(x.ty)}")
    n, ch, h, w = x.shape
    o, ci, kh, kw = k.shape
    if g <= 0 or ch % g or o % g or ci * g != ch:
        return c.error(
            f"conv2d: the input has {ch} channels, the kernel expects {ci} per group × {g} groups"
        )
    for size, kern, s, p, d in (
        (h, kh, stride[0], padding[0], dilation[0]),
        (w, kw, stride[1], padding[1], dilation[1]),
    ):
        if s <= 0 or d <= 0 or p < 0:
            return c.error("conv2d: strides and dilations must be positive, padding not negative")
        span_k = (kern - 1) * d + 1
        if size + 2 * p < span_k:
            return c.error(
                f"conv2d: the kernel ({kern} wide) is larger than the padded input ({size + 2 * p})"
            )
    v = c.emit(
        "convolve",
        [x.ir(), k.ir()],
        strides=tuple(stride),
        padding=((padding[0], padding[0]), (padding[1], padding[1])),
        leftDilation=(1, 1),
        rightDilation=tuple(dilation),
        groups=g,
    )
    return TV(v.type, v)


@BUILTINS.define(
    ("maxpool2d", "avgpool2d"),
    Signature(
        (
            X,
            Param("window", Kind.INTS, (2, 2), count=2),
            Param("stride", Kind.INTS, None, count=2),
            Param("padding", Kind.INTS, (0, 0), count=2),
        )
    ),
)
def pool2d(c: Call) -> Elaborated:
    """reduceWindow over the last two axes. Padding is concatenated around the input first:
    -inf for max (it never wins), zeros for avg, whose divisor is always the window's area
    (PyTorch's default count_include_pad=True)."""
    x, window, padding = c.tensor("x"), c.ints("window"), c.ints("padding")
    stride = c.optional_ints("stride")
    if stride is None:
        stride = window
    if len(x.shape) != 4:
        return c.error(f"{c.name} takes an NCHW tensor (rank 4), found {show(x.ty)}")
    if not x.dtype.is_float:
        return c.error(f"{c.name} needs a float tensor, found {show(x.ty)}")
    if any(w <= 0 for w in window):
        return c.error(f"the window {tuple(window)} must be positive", c.span("window"))
    if any(s <= 0 for s in stride):
        return c.error("strides must be positive", c.span("stride"))
    for win, pad in zip(window, padding):
        if pad < 0 or 2 * pad > win:
            return c.cx.error(
                c.span("padding"),
                f"{c.name}: the padding {tuple(padding)} must be between 0 and half the window "
                f"{tuple(window)}",
                ["  help: as in PyTorch, so that every window holds an element of the input"],
            )
    for size, win, pad in zip(x.shape[2:], window, padding):
        if win > size + 2 * pad:
            return c.error(
                f"the window {tuple(window)} does not fit {show(x.ty)}"
                + (f" padded by {tuple(padding)}" if any(padding) else ""),
                c.span("window"),
            )
    is_max = c.name == "maxpool2d"
    fill = -math.inf if is_max else 0
    v = x.ir()
    for axis, pad in ((2, padding[0]), (3, padding[1])):
        if pad:
            v = _pad_both(c, v, axis, pad, fill)
    v = c.emit(
        "reduceWindow",
        [v, scalar(fill, x.dtype)],
        comb="max" if is_max else "add",
        dims=(1, 1, *window),
        strides=(1, 1, *stride),
        padding="none",
    )
    if not is_max:
        v = c.emit("divide", [v, scalar(window[0] * window[1], x.dtype)])
    return TV(v.type, v)


def _pad_both(c: Call, v: Value, axis: int, pad: int, fill: float) -> Value:
    """v with `pad` entries of `fill` before and after it along axis."""
    t = v.type
    assert isinstance(t, TensorType)
    side = c.cx.splat(
        fill, TensorType(t.shape[:axis] + (pad,) + t.shape[axis + 1 :], t.dtype), c.e.span
    )
    return c.emit("concatenate", [side, v, side], axis=axis)


# Indices ---------------------------------------------------------------------------------------


def _iota(c: Call, n: int, dtype: DataType) -> Value:
    """[0, 1, …, n-1] as a running sum of ones less one: a few instructions whatever n is,
    where a literal would hold n elements."""
    ones = c.cx.splat(1, TensorType((n,), dtype), c.e.span)
    counts = c.emit("scan", [ones], comb="add", dims=(0,))
    return c.emit("subtract", [counts, scalar(1, dtype)])


@BUILTINS.define(
    "onehot",
    Signature(
        (Param("i"), Param("n", Kind.INTS)),
        rule=ElementRule(
            "i", "int", "onehot takes integer class indices, found {type}", at_argument=True
        ),
    ),
)
def onehot(c: Call) -> Elaborated:
    count = c.ints("n")[0]
    if count <= 0:
        return c.error("onehot needs a positive number of classes", c.span("n"))
    i = materialise(c.tensor("i"), c.scope)
    rank = len(i.shape) + 1
    idx = i.ir()
    if i.shape:
        idx = c.emit("padShape", [idx], index=len(i.shape))
    iota = c.cx.to_rank(_iota(c, count, i.dtype), rank, c.e.span)
    hit = c.emit("equal", [idx, iota])
    dtype = c.scope.default_float
    v = c.emit("select", [scalar(1, dtype), scalar(0, dtype), hit])
    return TV(v.type, v)


@BUILTINS.define("iota", Signature((X, Param("axis", Kind.AXES, (-1,), count=1))))
def iota(c: Call) -> Elaborated:
    """An i64 tensor of x's shape whose every element is its own index along `axis` (x's
    values are not read): with two of them, masks such as the causal one of attention."""
    x = c.tensor("x")
    axis, rank = c.axes("axis")[0], len(x.shape)
    n = x.shape[axis]
    v = _iota(c, n, DataType.I64)
    v = c.emit("shapeCast", [v], shape=tuple(n if d == axis else 1 for d in range(rank)))
    v = c.cx.broadcast_to(v, x.shape, c.e.span)
    return TV(v.type, v)


@BUILTINS.define("argmax", Signature((X, Param("axis", Kind.INTS, (-1,)))))
def argmax(c: Call) -> Elaborated:
    x, axes = c.tensor("x"), c.ints("axis")
    rank = len(x.shape)
    if rank == 0 or x.dtype.is_bool:
        return c.error(f"argmax needs a numeric tensor of rank ≥ 1, found {show(x.ty)}")
    axis = axes[0] + rank if axes[0] < 0 else axes[0]
    if not 0 <= axis < rank:
        return c.error(f"axis {axes[0]} is out of range for {show(x.ty)}", c.span("axis"))
    n = x.shape[axis]
    low = -math.inf if x.dtype.is_float else -(2 ** (x.dtype.bits - 1))
    top = c.emit("reduce", [x.ir(), scalar(low, x.dtype)], comb="max", dims=(axis,))
    top = c.emit("padShape", [top], index=axis)
    hit = c.emit("equal", [x.ir(), top])
    iota = _iota(c, n, DataType.I64)
    iota = c.emit("shapeCast", [iota], shape=tuple(n if d == axis else 1 for d in range(rank)))
    cand = c.emit("select", [iota, scalar(n, DataType.I64), hit])
    v = c.emit("reduce", [cand, scalar(n, DataType.I64)], comb="min", dims=(axis,))
    return TV(v.type, v)


@BUILTINS.define(
    "take",
    Signature(
        (Param("table"), Param("ids"), Param("axis", Kind.INTS, (0,))),
        rule=ElementRule("ids", "int", "take takes integer ids, found {type}", at_argument=True),
    ),
)
def take(c: Call) -> Elaborated:
    """NumPy's take: the ids (each in [0, n), checked when the program runs) select along one
    axis of the table, their shape in place of that axis."""
    table, ids = materialise(c.tensor("table"), c.scope), materialise(c.tensor("ids"), c.scope)
    rank, given = len(table.shape), c.ints("axis")[0]
    if rank == 0:
        return c.error(f"take needs a table of rank ≥ 1, found {show(table.ty)}", c.span("table"))
    axis = given + rank if given < 0 else given
    if not 0 <= axis < rank:
        return c.error(f"axis {given} is out of range for {show(table.ty)}", c.span("axis"))
    v = c.emit("gather", [table.ir(), ids.ir()], axis=axis)
    return TV(v.type, v)


# Gradients -------------------------------------------------------------------------------------

GRAD_OPTIONS = ["wrt", "keeping", "seed"]


@BUILTINS.define(
    "grad", Signature(positional=1, keywords=True, usage="grad takes one function: grad(f, wrt: …)")
)
def grad(c: Call) -> Elaborated:
    """`grad(f, wrt: …, keeping: …, seed: …)`: a function, called like f. Its options are
    checked here, in the order given, since `wrt:` names arguments rather than values."""
    lower = c.host.exprs.lower_expr
    (fn,) = c.e.positional
    f = lower(fn, c.scope)
    if isinstance(f, _Poison):
        return f
    if isinstance(f, FnRef) and f.grad is not None:
        return c.error(
            "grad of a gradient: name the inner one first, as in "
            f"`def d{f.function.name}(x: …) -> … = grad({f.function.name}, wrt: x)(x)`, "
            f"then take grad(d{f.function.name}, …)",
            fn.span,
        )
    if not isinstance(f, FnRef):
        return c.error(f"grad needs a function defined with 'def', found {describe(f)}", fn.span)
    spec = GradSpec(None, False, False, None)
    for kw in c.e.keywords:
        if kw.name == "wrt":
            if isinstance(kw.value, ast.Tuple):
                spec.wrt = list(kw.value.elements)
            else:
                spec.wrt, spec.single = [kw.value], True
        elif kw.name == "keeping":
            k = lower(kw.value, c.scope)
            if not isinstance(k, TV) or not isinstance(k.const, bool):
                return c.error("keeping: takes true or false", kw.value.span)
            spec.keeping = bool(k.const)
        elif kw.name == "seed":
            s = lower(kw.value, c.scope)
            if isinstance(s, _Poison):
                return s
            if not isinstance(s, TV):
                return c.error(f"the seed must be a tensor, found {describe(s)}", kw.value.span)
            spec.seed = s
        else:
            hint = suggest(kw.name, GRAD_OPTIONS)
            return c.error(f"grad has no option '{kw.name}'{hint}", kw.span)
    return FnRef(f.function, f.unit, spec, c.e.span)


# Constructors ---------------------------------------------------------------------------------


def _bounds(c: Call, names: tuple[str, str]) -> tuple[Value, Value, DataType] | None:
    lo, hi = c.check_tensor(names[0]), c.check_tensor(names[1])
    if lo is None or hi is None:
        return None
    if lo.shape or hi.shape:
        c.error(f"the {names[0]} and {names[1]} of {c.name} must be scalars")
        return None
    dtype = (
        hi.dtype if lo.weak and not hi.weak else lo.dtype if not lo.weak else c.scope.default_float
    )
    if not dtype.is_float:
        c.error(f"{c.name} makes float tensors; found bounds of {dtype}")
        return None
    return lo.ir(dtype), hi.ir(dtype), dtype


def uniform(c: Call, lo: Value, hi: Value, shape: tuple[int, ...]) -> Value:
    return c.emit("random", [lo, hi], shape=shape)


def gaussian(c: Call, mean: Value, std: Value, shape: tuple[int, ...], dtype: DataType) -> Value:
    """mean + std·z with z standard normal, by the Box–Muller transform of two uniforms."""
    tiny = 1e-7 if dtype is not DataType.F64 else 1e-300
    u1 = uniform(c, scalar(tiny, dtype), scalar(1.0, dtype), shape)
    u2 = uniform(c, scalar(0.0, dtype), scalar(1.0, dtype), shape)
    r = c.emit("sqrt", [c.emit("multiply", [scalar(-2.0, dtype), c.emit("log", [u1])])])
    angle = c.emit("multiply", [scalar(2 * math.pi, dtype), u2])
    z = c.emit("multiply", [r, c.emit("cos", [angle])])
    return c.emit("add", [mean, c.emit("multiply", [std, z])])


def _declared_shape(scope: Scope) -> tuple[int, ...] | None:
    """The shape of the parameter being initialised (initialisers take it implicitly)."""
    tv = scope.values.get("<declared shape>")
    return tv.shape if isinstance(tv, TV) else None


def _random(bounds: tuple[str, str]) -> Signature:
    return Signature((Param(bounds[0], Kind.VALUE), Param(bounds[1], Kind.VALUE),
                      Param("shape", Kind.SHAPE, None)))  # fmt: skip


@BUILTINS.define("normal", _random(("mean", "std")))
@BUILTINS.define("random", _random(("lo", "hi")))
def random_tensor(c: Call) -> Elaborated:
    """`random(lo, hi, shape:)` (uniform) and `normal(mean, std, shape:)` (Gaussian); in a
    parameter's initialiser the shape is the parameter's. Both the shape and the bounds are
    checked before either error stops the call."""
    uniform_draw = c.name == "random"
    bounds = ("lo", "hi") if uniform_draw else ("mean", "std")
    shape = c.check_shape("shape", required=_declared_shape(c.scope) is None)
    shape = shape if shape is not None else _declared_shape(c.scope)
    b = _bounds(c, bounds)
    if shape is None or b is None:
        return POISON
    if uniform_draw:
        v = uniform(c, b[0], b[1], shape)
    else:
        v = gaussian(c, b[0], b[1], shape, b[2])
    return TV(v.type, v)


@BUILTINS.define(("zeros", "ones"), Signature((Param("shape", Kind.SHAPE),)))
def filled(c: Call) -> Elaborated:
    ty = TensorType(c.shape("shape"), c.scope.default_float)
    v = c.cx.splat(0 if c.name == "zeros" else 1, ty, c.e.span)
    return TV(ty, v)


@BUILTINS.define(
    ("glorot", "he"),
    Signature(positional=0, usage="{name}() takes no arguments", initialiser=True),
)
def fan_init(c: Call) -> Elaborated:
    declared = c.scope.values["<declared shape>"]
    assert isinstance(declared, TV)
    shape, dtype = declared.shape, declared.dtype
    fan_in, fan_out = fans(shape)
    if c.name == "glorot":
        limit = math.sqrt(6.0 / (fan_in + fan_out))
        v = uniform(c, scalar(-limit, dtype), scalar(limit, dtype), shape)
    else:
        v = gaussian(c, scalar(0.0, dtype), scalar(math.sqrt(2.0 / fan_in), dtype), shape, dtype)
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


__all__ = ["BUILTINS", "UNARY_FLOAT", "fans"]
