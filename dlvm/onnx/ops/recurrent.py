"""Recurrent layers: RNN, GRU and LSTM, unrolled over their sequence (its length is static), in
each direction. The input's products with the weights are computed for every step at once; each
step then adds its hidden state's product with the recurrent weights, gate by gate (each gate's
rows of W, R and B are cut once, on their first axis)."""

from __future__ import annotations

from collections.abc import Callable

from dlvm.ir.compose import permute
from dlvm.ir.types import DataType
from dlvm.ir.values import Value
from dlvm.onnx.context import Lowering, LoweringError
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops.common import require_constant, reshape, tensor
from dlvm.onnx.ops.elementwise import sigmoid_of
from dlvm.onnx.ops.registry import HANDLERS

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
DEFAULT_ACTIVATIONS = {
    "RNN": ["Tanh"],
    "GRU": ["Sigmoid", "Tanh"],
    "LSTM": ["Sigmoid", "Tanh", "Tanh"],
}
ACTIVATIONS = ("Sigmoid", "Tanh", "Relu")


def _check(node: Node, facts: Facts) -> list[str]:
    reasons = []
    for name in node.attr("activations", ()):
        if name not in ACTIVATIONS:
            reasons.append(f"the activation {name} (only {', '.join(ACTIVATIONS)})")
    if node.attr("input_forget", 0):
        reasons.append("input_forget=1")
    if node.input(4):
        reasons += require_constant(node, facts, 4)
        lens = facts.value(node.input(4))
        x = facts.shapes.get(node.input(0))
        if lens is not None and x is not None:
            steps = x[1] if node.attr("layout", 0) else x[0]
            if (lens != steps).any():
                reasons.append("sequence_lens shorter than the sequence (ragged batches)")
    return reasons


Activation = Callable[[Value], Value]


def _activation(cx: Lowering, name: str) -> Activation:
    if name == "Sigmoid":
        return lambda v: sigmoid_of(cx, v)
    if name == "Tanh":
        return lambda v: cx.emit("tanh", v)
    return lambda v: cx.emit("max", v, cx.scalar(0, tensor(v).dtype))


@HANDLERS.register(("RNN", "GRU", "LSTM"), since=7, check=_check)
def recurrent(cx: Lowering, node: Node) -> None:
    op = node.op_type
    x = cx.value(node.input(0))
    if node.attr("layout", 0):  # [batch, seq, input] to [seq, batch, input]
        x = _swap01(cx, x)
    steps, batch, _ = tensor(x).shape
    hidden = node.attr("hidden_size")
    direction = node.attr("direction", "forward")
    directions = 2 if direction == "bidirectional" else 1
    names = list(node.attr("activations", ())) or DEFAULT_ACTIVATIONS[op] * directions
    per = len(DEFAULT_ACTIVATIONS[op])
    if len(names) != per * directions:
        raise LoweringError(f"{len(names)} activations for {directions} direction(s) of {op}")
    ys: list[Value] = []
    hs: list[Value] = []
    cs: list[Value | None] = []
    for d in range(directions):
        reverse = direction == "reverse" or d == 1
        acts = [_activation(cx, n) for n in names[d * per : (d + 1) * per]]
        y, h, c = _direction(cx, node, x, d, steps, batch, hidden, reverse, acts)
        ys.append(y)
        hs.append(h)
        cs.append(c)
    out_y = _stack(cx, ys, 1)  # [seq, dirs, batch, hidden]
    out_h = _stack(cx, [reshape(cx, h, (1, batch, hidden)) for h in hs], 0)
    if node.attr("layout", 0):
        out_y = _layout1_y(cx, out_y)
        out_h = _swap01(cx, out_h)
    cx.define(node.out(0), out_y)
    cx.define(node.out(1), out_h)
    if op == "LSTM" and node.out(2):
        out_c = _stack(cx, [reshape(cx, c, (1, batch, hidden)) for c in cs if c is not None], 0)
        cx.define(node.out(2), _swap01(cx, out_c) if node.attr("layout", 0) else out_c)


def _direction(
    cx: Lowering,
    node: Node,
    x: Value,
    d: int,
    steps: int,
    batch: int,
    hidden: int,
    reverse: bool,
    acts: list[Activation],
) -> tuple[Value, Value, Value | None]:
    """One direction: (its outputs [seq, 1, batch, hidden], its last hidden state, its last
    cell state or None)."""
    op = node.op_type
    gates = GATES[op]
    dt = tensor(x).dtype
    w = _row(cx, cx.value(node.input(1)), d)  # [gates·hidden, input]
    r = _row(cx, cx.value(node.input(2)), d)  # [gates·hidden, hidden]
    b = _row(cx, cx.value(node.input(3)), d) if node.input(3) else None  # [2·gates·hidden]
    flat = reshape(cx, x, (steps * batch, tensor(x).shape[2]))
    inputs: list[Value] = []
    recurrent: list[Value] = []
    recurrent_bias: list[Value | None] = []
    for g in range(gates):
        wg = cx.emit("slice", w, lo=g * hidden, hi=(g + 1) * hidden - 1)
        rg = cx.emit("slice", r, lo=g * hidden, hi=(g + 1) * hidden - 1)
        xw = cx.emit("dot", flat, cx.emit("transpose", wg))  # every step's input product
        rb = None
        if b is not None:
            wb = _piece(cx, b, g, hidden)
            rb = _piece(cx, b, gates + g, hidden)
            if not (op == "GRU" and g == 2 and node.attr("linear_before_reset", 0)):
                xw = cx.emit("add", xw, cx.emit("add", wb, rb))
                rb = None
            else:
                xw = cx.emit("add", xw, wb)
        inputs.append(xw)
        recurrent.append(cx.emit("transpose", rg))
        recurrent_bias.append(rb)
    h = _initial(cx, node, 5, d, batch, hidden, dt)
    c = _initial(cx, node, 6, d, batch, hidden, dt) if op == "LSTM" else None
    clip = node.attr("clip")
    # LSTM's peephole weights [3·hidden] of gates i, o, f, each as [1, hidden]; None without.
    peep = None
    if op == "LSTM" and node.input(7):
        p = _row(cx, cx.value(node.input(7)), d)
        peep = [_piece(cx, p, k, hidden) for k in range(3)]
    outs: dict[int, Value] = {}
    for t in range(steps - 1, -1, -1) if reverse else range(steps):
        xs = [cx.emit("slice", v, lo=t * batch, hi=(t + 1) * batch - 1) for v in inputs]
        if op == "RNN":
            h = acts[0](_gate(cx, xs[0], h, recurrent[0], clip))
        elif op == "GRU":
            z = acts[0](_gate(cx, xs[0], h, recurrent[0], clip))
            rr = acts[0](_gate(cx, xs[1], h, recurrent[1], clip))
            if node.attr("linear_before_reset", 0):
                hr = cx.emit("dot", h, recurrent[2])
                if recurrent_bias[2] is not None:
                    hr = cx.emit("add", hr, recurrent_bias[2])
                cand = acts[1](_clip(cx, cx.emit("add", xs[2], cx.emit("multiply", rr, hr)), clip))
            else:
                cand = acts[1](_gate(cx, xs[2], cx.emit("multiply", rr, h), recurrent[2], clip))
            keep = cx.emit("multiply", z, h)
            fresh = cx.emit("multiply", cx.emit("subtract", cx.scalar(1, dt), z), cand)
            h = cx.emit("add", fresh, keep)
        else:  # LSTM: gates i, o, f, c; peepholes add P ⊙ c to i and f (the old c), o (the new)
            assert c is not None
            old = c
            i, f, cell = (
                _gate(cx, xs[k], h, recurrent[k], clip, _peep(cx, peep, k, old)) for k in (0, 2, 3)
            )
            c = cx.emit(
                "add",
                cx.emit("multiply", acts[0](f), c),
                cx.emit("multiply", acts[0](i), acts[1](cell)),
            )
            o = _gate(cx, xs[1], h, recurrent[1], clip, _peep(cx, peep, 1, c))
            h = cx.emit("multiply", acts[0](o), acts[2](c))
        outs[t] = reshape(cx, h, (1, 1, batch, hidden))
    return _stack(cx, [outs[t] for t in range(steps)], 0), h, c


def _gate(
    cx: Lowering,
    x: Value,
    state: Value,
    weights: Value,
    clip: float | None,
    extra: Value | None = None,
) -> Value:
    """A gate's argument at one step: its input product plus the state's (plus a peephole's
    term), clipped."""
    v = cx.emit("add", x, cx.emit("dot", state, weights))
    return _clip(cx, v if extra is None else cx.emit("add", v, extra), clip)


def _peep(cx: Lowering, peep: list[Value] | None, gate: int, cell: Value) -> Value | None:
    """The peephole term of LSTM gate i (0), o (1) or f (2): P ⊙ the cell state."""
    if peep is None or gate == 3:
        return None
    return cx.emit("multiply", peep[gate], cell)


def _row(cx: Lowering, v: Value, d: int) -> Value:
    """Direction d's weights: row d of [directions, …], without its first axis."""
    shape = tensor(v).shape
    if shape[0] > 1:
        v = cx.emit("slice", v, lo=d, hi=d)
    return reshape(cx, v, shape[1:])


def _piece(cx: Lowering, b: Value, k: int, hidden: int) -> Value:
    return reshape(cx, cx.emit("slice", b, lo=k * hidden, hi=(k + 1) * hidden - 1), (1, hidden))


def _initial(
    cx: Lowering, node: Node, slot: int, d: int, batch: int, hidden: int, dt: DataType
) -> Value:
    """The initial hidden (slot 5) or cell (slot 6) state of direction d: zeros by default."""
    if not node.input(slot):
        return cx.splat(
            0, tensor(cx.value(node.input(0))).with_shape((batch, hidden)).with_dtype(dt)
        )
    v = cx.value(node.input(slot))
    if node.attr("layout", 0):
        v = _swap01(cx, v)
    return _row(cx, v, d)


def _clip(cx: Lowering, v: Value, clip: float | None) -> Value:
    if clip is None:
        return v
    dt = tensor(v).dtype
    return cx.emit("min", cx.emit("max", v, cx.scalar(-clip, dt)), cx.scalar(clip, dt))


def _stack(cx: Lowering, parts: list[Value], axis: int) -> Value:
    return parts[0] if len(parts) == 1 else cx.emit("concatenate", *parts, axis=axis)


def _swap01(cx: Lowering, v: Value) -> Value:
    rank = len(tensor(v).shape)
    return permute(lambda n, *vs, **a: cx.emit(n, *vs, **a), v, (1, 0, *range(2, rank)))


def _layout1_y(cx: Lowering, y: Value) -> Value:
    """Y as layout 1 has it: [batch, seq, dirs, hidden] from [seq, dirs, batch, hidden]."""
    return permute(lambda n, *vs, **a: cx.emit(n, *vs, **a), y, (2, 0, 1, 3))
