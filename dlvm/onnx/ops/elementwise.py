"""Elementwise operators: arithmetic, comparisons and logic with NumPy broadcasting, the float
functions, activations composed as TEL's stdlib/nn.tel writes them, Clip, Where and Cast."""

from __future__ import annotations

import math

from dlvm.ir.literals import ScalarLiteral
from dlvm.ir.types import DataType
from dlvm.ir.values import LiteralValue, Value
from dlvm.onnx.context import Lowering
from dlvm.onnx.dtypes import ir_type_of, onnx_type_name
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops.common import cast, operands, tensor
from dlvm.onnx.ops.registry import HANDLERS

BINARY = {
    "Add": "add",
    "Sub": "subtract",
    "Mul": "multiply",
    "Div": "divide",
    "Equal": "equal",
    "Less": "lessThan",
    "LessOrEqual": "lessThanOrEqual",
    "Greater": "greaterThan",
    "GreaterOrEqual": "greaterThanOrEqual",
    "And": "and",
    "Or": "or",
}


# The opset each operator appeared in, where that is after 7 (the table's first).
INTRODUCED = {
    "Erf": 9, "Sign": 9, "Sinh": 9, "Cosh": 9, "IsNaN": 9, "Round": 11, "Mod": 10, "Celu": 12,
    "LessOrEqual": 12, "GreaterOrEqual": 12,
}  # fmt: skip


def since(op: str) -> int:
    return INTRODUCED.get(op, 7)


def binary(cx: Lowering, node: Node) -> None:
    a, b = operands(cx, node.inputs[:2])
    cx.define(node.out(0), cx.emit(BINARY[node.op_type], a, b))


for _op in BINARY:
    HANDLERS.register(_op, since=since(_op))(binary)


@HANDLERS.register("Xor")
def xor(cx: Lowering, node: Node) -> None:
    a, b = operands(cx, node.inputs[:2])
    cx.define(node.out(0), cx.emit("notEqual", a, b))


def _check_mod(node: Node, facts: Facts) -> list[str]:
    elem = ir_type_of(facts.elem_types.get(node.input(0), 0))
    if not node.attr("fmod", 0) and elem is not None and elem.is_float:
        return ["fmod=0 on floats (the divisor's sign; only fmod=1 is supported for them)"]
    return []


@HANDLERS.register("Mod", since=10, check=_check_mod)
def mod(cx: Lowering, node: Node) -> None:
    """fmod=1: C's remainder, the sign of the dividend, as the IR's `modulo`; fmod=0 (integers
    only): the sign of the divisor, as Python's %, ((a mod b) + b) mod b."""
    a, b = operands(cx, node.inputs[:2])
    y = cx.emit("modulo", a, b)
    if not node.attr("fmod", 0):
        y = cx.emit("modulo", cx.emit("add", y, b), b)
    cx.define(node.out(0), y)


@HANDLERS.register("Pow")
def power(cx: Lowering, node: Node) -> None:
    """The base's type. An integer base with a float exponent is raised in f64 and truncated
    back, as ONNX's reference computes it (NumPy's power, then astype)."""
    base = cx.dtype(node.input(0))
    exponent = cx.dtype(node.input(1))
    wide = DataType.F64 if base.is_int and exponent.is_float else base
    x, e = operands(cx, node.inputs[:2], wide)
    if isinstance(e, LiteralValue) and e.literal == ScalarLiteral(2.0):
        y = cx.emit("multiply", x, x)  # exact, and cheaper than power
    else:
        y = cx.emit("power", x, e)
    cx.define(node.out(0), cast(cx, y, base))


@HANDLERS.register(("Max", "Min", "Sum", "Mean"))
def variadic(cx: Lowering, node: Node) -> None:
    names = [n for n in node.inputs if n]
    values = operands(cx, names)
    comb = {"Max": "max", "Min": "min", "Sum": "add", "Mean": "add"}[node.op_type]
    acc = values[0]
    for v in values[1:]:
        acc = cx.emit(comb, acc, v)
    if node.op_type == "Mean":
        acc = cx.emit("divide", acc, cx.scalar(len(values), tensor(acc).dtype))
    cx.define(node.out(0), acc)


# Float functions named as the IR's.
UNARY = {
    "Exp": "exp",
    "Log": "log",
    "Sqrt": "sqrt",
    "Tanh": "tanh",
    "Erf": "erf",
    "Softplus": "softplus",
    "Sin": "sin",
    "Cos": "cos",
    "Tan": "tan",
    "Asin": "asin",
    "Acos": "acos",
    "Atan": "atan",
    "Sinh": "sinh",
    "Cosh": "cosh",
    "Neg": "negate",
    "Floor": "floor",
    "Ceil": "ceil",
    "Round": "rint",  # halves to even, as ONNX's Round
    "Sign": "sign",
    "Not": "not",
}


def unary(cx: Lowering, node: Node) -> None:
    cx.define(node.out(0), cx.emit(UNARY[node.op_type], cx.value(node.input(0))))


for _op in UNARY:
    HANDLERS.register(_op, since=since(_op))(unary)


@HANDLERS.register("Identity")
def identity(cx: Lowering, node: Node) -> None:
    cx.define(node.out(0), cx.value(node.input(0)))


@HANDLERS.register("Abs")
def absolute(cx: Lowering, node: Node) -> None:
    # |x| = x · sign(x), as TEL writes it: its derivative is sign(x).
    x = cx.value(node.input(0))
    cx.define(node.out(0), cx.emit("multiply", x, cx.emit("sign", x)))


@HANDLERS.register("Reciprocal")
def reciprocal(cx: Lowering, node: Node) -> None:
    x = cx.value(node.input(0))
    cx.define(node.out(0), cx.emit("divide", cx.scalar(1, tensor(x).dtype), x))


def sigmoid_of(cx: Lowering, x: Value) -> Value:
    """1 / (1 + e^-x) as 0.5 · tanh(x / 2) + 0.5 (stdlib/nn.tel): nothing overflows."""
    dt = tensor(x).dtype
    half = cx.scalar(0.5, dt)
    return cx.emit(
        "add", cx.emit("multiply", half, cx.emit("tanh", cx.emit("multiply", half, x))), half
    )


@HANDLERS.register("Sigmoid")
def sigmoid(cx: Lowering, node: Node) -> None:
    cx.define(node.out(0), sigmoid_of(cx, cx.value(node.input(0))))


@HANDLERS.register("Relu")
def relu(cx: Lowering, node: Node) -> None:
    x = cx.value(node.input(0))
    cx.define(node.out(0), cx.emit("max", x, cx.scalar(0, tensor(x).dtype)))


@HANDLERS.register("LeakyRelu")
def leaky_relu(cx: Lowering, node: Node) -> None:
    x = cx.value(node.input(0))
    dt = tensor(x).dtype
    alpha = node.attr("alpha", 0.01)
    positive = cx.emit("greaterThan", x, cx.scalar(0, dt))
    scaled = cx.emit("multiply", x, cx.scalar(alpha, dt))
    cx.define(node.out(0), cx.emit("select", x, scaled, positive))


@HANDLERS.register("PRelu")
def prelu(cx: Lowering, node: Node) -> None:
    x, slope = operands(cx, node.inputs[:2])
    positive = cx.emit("greaterThan", x, cx.scalar(0, tensor(x).dtype))
    cx.define(node.out(0), cx.emit("select", x, cx.emit("multiply", x, slope), positive))


@HANDLERS.register(("Elu", "Selu"))
@HANDLERS.register("Celu", since=12)
def elu_family(cx: Lowering, node: Node) -> None:
    """Elu: x > 0 ? x : α(eˣ − 1); Selu scales both sides by γ; Celu is max(0, x) +
    min(0, α(e^(x/α) − 1))."""
    x = cx.value(node.input(0))
    dt = tensor(x).dtype
    if node.op_type == "Selu":
        alpha, gamma = (
            node.attr("alpha", 1.67326319217681884765625),
            node.attr("gamma", 1.05070102214813232421875),
        )
    else:
        alpha, gamma = node.attr("alpha", 1.0), 1.0
    inner = x if node.op_type != "Celu" else cx.emit("divide", x, cx.scalar(alpha, dt))
    negative = cx.emit(
        "multiply",
        cx.scalar(alpha, dt),
        cx.emit("subtract", cx.emit("exp", inner), cx.scalar(1, dt)),
    )
    y = cx.emit("select", x, negative, cx.emit("greaterThan", x, cx.scalar(0, dt)))
    if gamma != 1.0:
        y = cx.emit("multiply", y, cx.scalar(gamma, dt))
    cx.define(node.out(0), y)


@HANDLERS.register("HardSigmoid")
def hard_sigmoid(cx: Lowering, node: Node) -> None:
    x = cx.value(node.input(0))
    cx.define(node.out(0), _hard_sigmoid(cx, x, node.attr("alpha", 0.2), node.attr("beta", 0.5)))


def _hard_sigmoid(cx: Lowering, x: Value, alpha: float, beta: float) -> Value:
    dt = tensor(x).dtype
    y = cx.emit("add", cx.emit("multiply", x, cx.scalar(alpha, dt)), cx.scalar(beta, dt))
    return cx.emit("min", cx.emit("max", y, cx.scalar(0, dt)), cx.scalar(1, dt))


@HANDLERS.register("HardSwish", since=14)
def hard_swish(cx: Lowering, node: Node) -> None:
    x = cx.value(node.input(0))
    cx.define(node.out(0), cx.emit("multiply", x, _hard_sigmoid(cx, x, 1 / 6, 0.5)))


@HANDLERS.register("Softsign")
def softsign(cx: Lowering, node: Node) -> None:
    x = cx.value(node.input(0))
    dt = tensor(x).dtype
    denominator = cx.emit("add", cx.scalar(1, dt), cx.emit("multiply", x, cx.emit("sign", x)))
    cx.define(node.out(0), cx.emit("divide", x, denominator))


@HANDLERS.register("Mish", since=18)
def mish(cx: Lowering, node: Node) -> None:
    x = cx.value(node.input(0))
    cx.define(node.out(0), cx.emit("multiply", x, cx.emit("tanh", cx.emit("softplus", x))))


def _gelu_check(node: Node, facts: Facts) -> list[str]:
    if node.attr("approximate", "none") not in ("none", "tanh"):
        return [f"approximate='{node.attr('approximate')}' is not 'none' or 'tanh'"]
    return []


@HANDLERS.register("Gelu", since=20, check=_gelu_check)
def gelu(cx: Lowering, node: Node) -> None:
    x = cx.value(node.input(0))
    dt = tensor(x).dtype
    half = cx.emit("multiply", cx.scalar(0.5, dt), x)
    if node.attr("approximate", "none") == "tanh":
        # 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), stdlib/nn.tel's gelu_tanh
        cube = cx.emit("multiply", cx.emit("multiply", x, x), x)
        inner = cx.emit("add", x, cx.emit("multiply", cx.scalar(0.044715, dt), cube))
        t = cx.emit("tanh", cx.emit("multiply", cx.scalar(math.sqrt(2 / math.pi), dt), inner))
    else:
        t = cx.emit("erf", cx.emit("multiply", x, cx.scalar(0.7071067811865476, dt)))
    cx.define(node.out(0), cx.emit("multiply", half, cx.emit("add", cx.scalar(1, dt), t)))


@HANDLERS.register("Clip", since=6, until=10)
def clip_attributes(cx: Lowering, node: Node) -> None:
    x = cx.value(node.input(0))
    dt = tensor(x).dtype
    y = cx.emit("max", x, cx.scalar(node.attr("min", -math.inf), dt))
    cx.define(node.out(0), cx.emit("min", y, cx.scalar(node.attr("max", math.inf), dt)))


@HANDLERS.register("Clip", since=11)
def clip_inputs(cx: Lowering, node: Node) -> None:
    bounds = [(comb, n) for comb, n in (("max", node.input(1)), ("min", node.input(2))) if n]
    values = operands(cx, [node.input(0)] + [n for _, n in bounds])
    y = values[0]
    for (comb, _), bound in zip(bounds, values[1:]):
        y = cx.emit(comb, y, bound)
    cx.define(node.out(0), y)


@HANDLERS.register("Where", since=9)
def where(cx: Lowering, node: Node) -> None:
    cond, a, b = operands(cx, node.inputs[:3])
    cx.define(node.out(0), cx.emit("select", a, b, cond))


def _target(node: Node, facts: Facts) -> int:
    """The ONNX element type a Cast converts to (`to`), or a CastLike (its second input's)."""
    if node.op_type == "CastLike":
        return facts.elem_types.get(node.input(1), 0)
    return int(node.attr("to", 0))


def _cast_check(node: Node, facts: Facts) -> list[str]:
    to = ir_type_of(_target(node, facts))
    if to is None:
        return [f"a cast to {onnx_type_name(_target(node, facts))}: DLVM IR has no such type"]
    return []


@HANDLERS.register("Cast", since=6, check=_cast_check)
@HANDLERS.register("CastLike", since=15, check=_cast_check)
def cast_op(cx: Lowering, node: Node) -> None:
    """Any pair of the IR's types: floats to integers truncate toward zero (and saturate past
    the range, NaN to 0, where ONNX leaves the result undefined), to bool is != 0."""
    to = ir_type_of(_target(node, cx.facts))
    assert to is not None
    cx.define(node.out(0), cast(cx, cx.value(node.input(0)), to))


@HANDLERS.register("IsNaN", since=9)
@HANDLERS.register("IsInf", since=10)
def is_special(cx: Lowering, node: Node) -> None:
    x = cx.value(node.input(0))
    dt = tensor(x).dtype
    if node.op_type == "IsNaN":
        y = cx.emit("notEqual", x, x)
    else:
        up = cx.emit("equal", x, cx.scalar(math.inf, dt))
        down = cx.emit("equal", x, cx.scalar(-math.inf, dt))
        wanted = [v for v, flag in ((up, "detect_positive"), (down, "detect_negative"))
                  if node.attr(flag, 1)]  # fmt: skip
        y = (
            wanted[0]
            if len(wanted) == 1
            else cx.emit("or", *wanted)
            if wanted
            else cx.emit("and", up, down)
        )
    cx.define(node.out(0), y)


@HANDLERS.register("ThresholdedRelu", since=10)
def thresholded_relu(cx: Lowering, node: Node) -> None:
    x = cx.value(node.input(0))
    dt = tensor(x).dtype
    above = cx.emit("greaterThan", x, cx.scalar(node.attr("alpha", 1.0), dt))
    cx.define(node.out(0), cx.emit("select", x, cx.scalar(0, dt), above))
