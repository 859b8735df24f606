"""The optimisers of the domain ai.onnx.preview.training (Adagrad, Adam, Momentum): one update
step of each tensor given, elementwise, as ONNX's reference writes it. Inputs: the learning rate
R and the step count T (scalars, possibly computed at run time), then the tensors X1…Xn, their
gradients G1…Gn and the optimiser's states; outputs: the new tensors, then the new states."""

from __future__ import annotations

from collections.abc import Callable

from dlvm.ir.values import Value
from dlvm.onnx.context import Lowering
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops.common import cast, tensor
from dlvm.onnx.ops.registry import HANDLERS

DOMAIN = "ai.onnx.preview.training"
STATES = {"Adagrad": 1, "Adam": 2, "Momentum": 1}  # state tensors per optimised tensor


def _groups(node: Node) -> int:
    return (len(node.inputs) - 2) // (2 + STATES[node.op_type])


def _check(node: Node, facts: Facts) -> list[str]:
    per = 2 + STATES[node.op_type]
    if len(node.inputs) < 2 + per or (len(node.inputs) - 2) % per:
        return [f"{len(node.inputs)} inputs: R, T, then {per} tensors per optimised tensor"]
    if node.op_type == "Momentum" and node.attr("mode") not in ("standard", "nesterov"):
        return [f"mode={node.attr('mode')!r} is not 'standard' or 'nesterov'"]
    return []


class Step:
    """What every update of one node shares: R and T as scalars of the tensors' type, and
    whether T > 0."""

    def __init__(self, cx: Lowering, node: Node, x: Value) -> None:
        self.cx = cx
        self.dt = tensor(x).dtype
        self.rate = cast(cx, cx.value(node.input(0)), self.dt)
        count = cx.value(node.input(1))
        self.t = cast(cx, count, self.dt)
        self.started = cx.emit("greaterThan", count, cx.scalar(0, tensor(count).dtype))

    def c(self, value: float) -> Value:
        return self.cx.scalar(value, self.dt)

    def op(self, name: str, *args: Value) -> Value:
        return self.cx.emit(name, *args)

    def regularized(self, x: Value, g: Value, norm: float) -> Value:
        return g if norm == 0 else self.op("add", self.op("multiply", self.c(norm), x), g)


Update = Callable[..., tuple[Value, ...]]  # (step, node, x, g, states…) -> (x, states…)


def _lower(cx: Lowering, node: Node, update: Update) -> None:
    n = _groups(node)
    per = 2 + STATES[node.op_type]
    names = node.inputs[2:]
    values = [cx.value(name) for name in names]
    step = Step(cx, node, values[0])
    results: list[list[Value]] = [[] for _ in range(per - 1)]
    for i in range(n):
        updated = update(step, node, *(values[k * n + i] for k in range(per)))
        for k, v in enumerate(updated):
            results[k].append(v)
    for k, outs in enumerate(results):
        for i, v in enumerate(outs):
            cx.define(node.out(k * n + i), v)


def _adagrad(s: Step, node: Node, x: Value, g: Value, h: Value) -> tuple[Value, Value]:
    decay, eps = node.attr("decay_factor", 0.0), node.attr("epsilon", 0.0)
    rate = s.op("divide", s.rate, s.op("add", s.c(1), s.op("multiply", s.t, s.c(decay))))
    g = s.regularized(x, g, node.attr("norm_coefficient", 0.0))
    h_new = s.op("add", h, s.op("multiply", g, g))
    root = s.op("add", s.op("sqrt", h_new), s.c(eps))
    x_new = s.op("subtract", x, s.op("divide", s.op("multiply", rate, g), root))
    return x_new, h_new


def _adam(s: Step, node: Node, x: Value, g: Value, v: Value, h: Value) -> tuple[Value, ...]:
    alpha, beta = node.attr("alpha", 0.9), node.attr("beta", 0.999)
    eps = node.attr("epsilon", 1e-6)
    g = s.regularized(x, g, node.attr("norm_coefficient", 0.0))
    v_new = s.op("add", s.op("multiply", s.c(alpha), v), s.op("multiply", s.c(1 - alpha), g))
    h_new = s.op(
        "add",
        s.op("multiply", s.c(beta), h),
        s.op("multiply", s.c(1 - beta), s.op("multiply", g, g)),
    )
    root = s.op("add", s.op("sqrt", h_new), s.c(eps))
    # Bias correction from the first step on: r · sqrt(1 - beta^t) / (1 - alpha^t).
    corrected = s.op(
        "divide",
        s.op(
            "multiply",
            s.rate,
            s.op("sqrt", s.op("subtract", s.c(1), s.op("power", s.c(beta), s.t))),
        ),
        s.op("subtract", s.c(1), s.op("power", s.c(alpha), s.t)),
    )
    rate = s.op("select", corrected, s.rate, s.started)
    x_new = s.op("subtract", x, s.op("multiply", rate, s.op("divide", v_new, root)))
    post = node.attr("norm_coefficient_post", 0.0)
    if post != 0:
        x_new = s.op("multiply", s.c(1 - post), x_new)
    return x_new, v_new, h_new


def _momentum(s: Step, node: Node, x: Value, g: Value, v: Value) -> tuple[Value, Value]:
    alpha, beta = node.attr("alpha"), node.attr("beta")
    g = s.regularized(x, g, node.attr("norm_coefficient", 0.0))
    scale = s.op("select", s.c(beta), s.c(1), s.started)  # the first step takes all of g
    v_new = s.op("add", s.op("multiply", s.c(alpha), v), s.op("multiply", scale, g))
    if node.attr("mode") == "nesterov":
        direction = s.op("add", g, s.op("multiply", s.c(alpha), v_new))
    else:
        direction = v_new
    return s.op("subtract", x, s.op("multiply", s.rate, direction)), v_new


_UPDATES: dict[str, Update] = {"Adagrad": _adagrad, "Adam": _adam, "Momentum": _momentum}


def _handler(op: str) -> Callable[[Lowering, Node], None]:
    def lower(cx: Lowering, node: Node) -> None:
        _lower(cx, node, _UPDATES[op])

    lower.__doc__ = f"{op}: one update step of every tensor given."
    return lower


for _op in STATES:
    HANDLERS.register(f"{DOMAIN}.{_op}", since=1, until=1, check=_check)(_handler(_op))
