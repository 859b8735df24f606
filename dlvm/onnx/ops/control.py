"""Control flow: Scan, Loop and If, whose bodies are graphs. DLVM IR's functions here are
straight-line, so a body is lowered once per step (Scan's sequence length and Loop's trip count
are static, the steps unrolled, as ops/recurrent.py unrolls an LSTM), and If lowers both
branches and selects between their results by the condition."""

from __future__ import annotations

from typing import Any

import numpy as np

from dlvm.ir.compose import slice_along
from dlvm.ir.values import Value
from dlvm.onnx.context import Lowering, LoweringError
from dlvm.onnx.dtypes import IR_TYPES
from dlvm.onnx.fold import fold
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops.common import axis_of, ints, require_constant, reshape, tensor
from dlvm.onnx.ops.registry import HANDLERS
from dlvm.onnx.ops.shape import emitter

Bound = Value | np.ndarray  # a body input: computed by the IR, or known at import time


def body_nodes(owner: Node, graph: Any) -> list[Node]:
    """The nodes of a body graph, each at its owner's opset (a body is of the owner's model)."""
    opsets = {owner.domain: owner.opset}
    return [Node.of(p, i, opsets, owner.label) for i, p in enumerate(graph.node)]


def check_bodies(node: Node, facts: Facts) -> list[str]:
    """A reason for each node of the node's bodies (and theirs) that no handler lowers."""
    reasons = []
    for value in node.attrs.values():
        if not hasattr(value, "node") or not hasattr(value, "output"):
            continue  # not a graph
        for inner in body_nodes(node, value):
            if inner.op_type == "Constant" and not inner.domain:
                continue  # folded
            handler = HANDLERS.find(inner.op_type, inner.opset)
            if inner.domain or handler is None:
                reasons.append(f"its body's {inner.describe()}: {inner.op_type} is not supported")
            else:
                reasons += check_bodies(inner, facts)
    return reasons


def run_body(cx: Lowering, owner: Node, graph: Any, given: list[Bound], step: str) -> list[Bound]:
    """The body graph's outputs for its inputs `given`: what is known folded at import, the rest
    lowered at the insertion point, each value named with `step` after its name."""
    nodes = body_nodes(owner, graph)
    names = [v.name for v in graph.input]
    if len(given) != len(names):
        raise LoweringError(f"its body takes {len(names)} inputs, not {len(given)}")
    outer = cx.facts
    facts = Facts(dict(outer.shapes), dict(outer.elem_types), dict(outer.constants),
                  outer.initializers)  # fmt: skip
    # A name the body defines is defined again at every step: the last step's value goes.
    for name in (*names, *(o for n in nodes for o in n.outputs)):
        cx.values.pop(name, None)
    for name, value in zip(names, given):
        if isinstance(value, np.ndarray):
            facts.constants[name] = value
            facts.shapes[name] = value.shape
        else:
            cx.values[name] = value
    left, diags = fold(nodes, facts, {owner.domain: owner.opset})
    if diags:
        raise LoweringError(f"in its body, {diags[0].message}")
    scope, cx.facts, cx.scope = cx.scope, facts, cx.scope + step
    try:
        for inner in left:
            _learn(cx, facts, inner)
            handler = HANDLERS.find(inner.op_type, inner.opset)
            found = [] if handler is None or handler.check is None else handler.check(inner, facts)
            if handler is None or found:
                why = found[0] if found else "not supported"
                raise LoweringError(f"in its body, {inner.describe()}: {why}")
            handler.lower(cx, inner)
        results: list[Bound] = []
        for o in graph.output:
            known = facts.value(o.name) if o.name not in cx.values else None
            results.append(known if known is not None else cx.value(o.name))
        return results
    finally:
        cx.facts, cx.scope = outer, scope


ONNX_TYPES = {dtype: number for number, dtype in IR_TYPES.items()}


def _learn(cx: Lowering, facts: Facts, node: Node) -> None:
    """The element types and shapes of the node's computed inputs, which shape inference does
    not give inside a body, for its handler's check."""
    for name in node.inputs:
        v = cx.values.get(name)
        if v is not None:
            facts.elem_types[name] = ONNX_TYPES[tensor(v).dtype]
            facts.shapes[name] = tensor(v).shape


def _value(cx: Lowering, v: Bound) -> Value:
    return v if isinstance(v, Value) else cx.literal(np.asarray(v))


def _stack(cx: Lowering, parts: list[Value], axis: int) -> Value:
    """The parts, each of one shape, stacked along a new axis."""
    shape = tensor(parts[0]).shape
    axis = axis_of(axis, len(shape) + 1)
    unit = [reshape(cx, p, shape[:axis] + (1,) + shape[axis:]) for p in parts]
    return unit[0] if len(unit) == 1 else cx.emit("concatenate", *unit, axis=axis)


def _step_of(cx: Lowering, v: Value, axis: int, t: int) -> Value:
    """v's slice t along axis, without that axis."""
    shape = tensor(v).shape
    piece = slice_along(emitter(cx), v, axis, t, t)
    return reshape(cx, piece, shape[:axis] + shape[axis + 1 :])


def _check_scan(node: Node, facts: Facts) -> list[str]:
    reasons = check_bodies(node, facts)
    if node.opset < 9 and node.input(0):
        reasons.append("sequence_lens (the sequences of a batch are all of their full length)")
    return reasons


@HANDLERS.register("Scan", since=9, check=_check_scan)
def scan(cx: Lowering, node: Node) -> None:
    """Scan: the body run once per slice of the scan inputs, the state carried from each step
    to the next; the final states, then each scan output stacked along its axis."""
    inputs = [cx.value(n) for n in node.inputs]
    outputs = _scan(cx, node, inputs, node.attr("scan_input_directions"))
    for name, value in zip(node.outputs, outputs):
        cx.define(name, value)


@HANDLERS.register("Scan", since=8, until=8, check=_check_scan)
def scan_batched(cx: Lowering, node: Node) -> None:
    """Scan of opset 8: every input has a batch axis first (its scan axis is then 1), and the
    body sees one batch element: the opset 9 scan of each element, stacked."""
    inputs = [cx.value(n) for n in node.inputs[1:]]
    batch = tensor(inputs[0]).shape[0]
    per: list[list[Value]] = []
    for b in range(batch):
        parts = [_step_of(cx, v, 0, b) for v in inputs]
        per.append(_scan(cx, node, parts, node.attr("directions"), f".b{b}" if batch > 1 else ""))
    for k, name in enumerate(node.outputs):
        cx.define(name, _stack(cx, [outs[k] for outs in per], 0))


def _scan(
    cx: Lowering, node: Node, inputs: list[Value], directions: Any, tag: str = ""
) -> list[Value]:
    body = node.attr("body")
    m = node.attr("num_scan_inputs")
    n = len(inputs) - m
    states, sequences = inputs[:n], inputs[n:]
    in_axes = list(node.attr("scan_input_axes", [0] * m))
    in_dirs = list(directions or [0] * m)
    sequences = [
        v if not d else cx.emit("reverse", v, dims=(axis_of(a, len(tensor(v).shape)),))
        for v, a, d in zip(sequences, in_axes, in_dirs)
    ]
    axes = [axis_of(a, len(tensor(v).shape)) for v, a in zip(sequences, in_axes)]
    steps = tensor(sequences[0]).shape[axes[0]]
    per_step: list[list[Value]] = []
    for t in range(steps):
        given: list[Bound] = [*states, *(_step_of(cx, v, a, t) for v, a in zip(sequences, axes))]
        out = [_value(cx, v) for v in run_body(cx, node, body, given, f"{tag}.s{t}")]
        states = out[:n]
        per_step.append(out[n:])
    k = len(per_step[0]) if per_step else 0
    out_axes = list(node.attr("scan_output_axes", [0] * k))
    out_dirs = list(node.attr("scan_output_directions", [0] * k))
    stacked = []
    for j in range(k):
        y = _stack(cx, [outs[j] for outs in per_step], out_axes[j])
        if out_dirs[j]:
            y = cx.emit("reverse", y, dims=(axis_of(out_axes[j], len(tensor(y).shape)),))
        stacked.append(y)
    return [*states, *stacked]


def _check_loop(node: Node, facts: Facts) -> list[str]:
    reasons = check_bodies(node, facts)
    if not node.input(0) and not node.input(1):
        reasons.append("a loop with neither a trip count nor a condition (it runs forever)")
    # The trip count and the condition: the loop is unrolled.
    return reasons + require_constant(node, facts, 0, 1)


# The most steps a Loop is unrolled to: its body is lowered once per step.
MAX_LOOP_STEPS = 1024


@HANDLERS.register("Loop", since=1, check=_check_loop)
def loop(cx: Lowering, node: Node) -> None:
    """Loop with a trip count and condition known at import time, unrolled: each step's
    condition must fold to a known value too (a condition computed from the data would decide
    at run time how many steps there are)."""
    body = node.attr("body")
    trip = ints(cx.const(node.input(0)))[0] if node.input(0) else MAX_LOOP_STEPS
    go = bool(np.asarray(cx.const(node.input(1))).item()) if node.input(1) else True
    if trip > MAX_LOOP_STEPS:
        raise LoweringError(f"a trip count of {trip} (at most {MAX_LOOP_STEPS} are unrolled)")
    states: list[Bound] = [cx.value(n) for n in node.inputs[2:]]
    per_step: list[list[Value]] = []
    t = 0
    while go and t < trip:
        given = [np.array(t, np.int64), np.array(go), *states]
        out = run_body(cx, node, body, given, f".i{t}")
        cond = out[0]
        if not isinstance(cond, np.ndarray):
            raise LoweringError("the body's condition is computed at run time, not known")
        go = bool(cond.item())
        states = out[1 : 1 + len(states)]
        per_step.append([_value(cx, v) for v in out[1 + len(states) :]])
        t += 1
    if not node.input(0) and go:
        raise LoweringError(f"the loop's condition still holds after {MAX_LOOP_STEPS} steps")
    if not per_step and len(node.outputs) > len(states):
        raise LoweringError("a loop of no steps has empty scan outputs (DLVM IR has none)")
    results = [_value(cx, v) for v in states]
    for j in range(len(node.outputs) - len(states)):
        results.append(_stack(cx, [outs[j] for outs in per_step], 0))
    for name, value in zip(node.outputs, results):
        cx.define(name, value)


@HANDLERS.register("If", since=1, check=check_bodies)
def if_op(cx: Lowering, node: Node) -> None:
    """If: the branch of a condition known at import alone; otherwise both branches, each
    output selected by the condition (the branches must give outputs of one type)."""
    known = cx.const(node.input(0))
    branches = ("then_branch", "else_branch")
    if known is not None:
        taken = branches[0] if bool(np.asarray(known).item()) else branches[1]
        for name, value in zip(node.outputs, run_body(cx, node, node.attr(taken), [], "")):
            cx.define(name, _value(cx, value))
        return
    then = [_value(cx, v) for v in run_body(cx, node, node.attr(branches[0]), [], ".then")]
    other = [_value(cx, v) for v in run_body(cx, node, node.attr(branches[1]), [], ".else")]
    cond = cx.value(node.input(0))
    for name, a, b in zip(node.outputs, then, other):
        if tensor(a).shape != tensor(b).shape or tensor(a).dtype is not tensor(b).dtype:
            raise LoweringError(
                f"output '{name}' is {tensor(a)} in one branch and {tensor(b)} in the other: "
                "with a condition known only at run time, both must be of one type"
            )
        flag = reshape(cx, cond, ()) if tensor(cond).shape else cond
        cx.define(name, cx.emit("select", a, b, flag))
