"""A graph attribute (FlexAttention's score_mod and prob_mod) lowered in place: its one input
bound to a value of the enclosing function, its initializers known constants (a function of
the scores, not weights to train), its nodes folded where they can be, at the model's opsets,
and the others lowered by their handlers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlvm.ir.types import DataType
from dlvm.ir.values import Value
from dlvm.onnx.context import Lowering, LoweringError
from dlvm.onnx.dtypes import IR_TYPES
from dlvm.onnx.fold import fold
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops.registry import HANDLERS

ONNX_TYPES = {dt: number for number, dt in IR_TYPES.items()}


@dataclass
class Body:
    """A graph attribute ready to lower: the nodes left after folding, what is known of its
    tensors, and the reasons it cannot be lowered (none when it can)."""

    nodes: list[Node]
    facts: Facts
    reasons: list[str]
    input: str
    output: str


def prepare(
    graph: Any, attribute: str, shape: tuple[int, ...], dtype: DataType, opsets: dict[str, int]
) -> Body:
    """The graph of `attribute`, its one input of `shape` and `dtype`."""
    facts = Facts.of(graph)
    facts.opsets = opsets
    facts.constants.update(facts.initializers)
    if len(graph.input) != 1 or len(graph.output) != 1:
        why = f"{attribute}: a graph of {len(graph.input)} inputs and {len(graph.output)} outputs"
        return Body([], facts, [why + " (one of each)"], "", "")
    name = graph.input[0].name
    facts.shapes[name] = shape
    facts.elem_types[name] = ONNX_TYPES[dtype]
    nodes = [Node.of(p, i, opsets, attribute) for i, p in enumerate(graph.node)]
    left, diags = fold(nodes, facts, opsets)
    reasons = [d.message for d in diags]
    for node in left:
        handler = HANDLERS.find(node.qualified_op, node.opset)
        if handler is None:
            reasons.append(f"{node.describe()}: {node.qualified_op} is not supported there")
        elif handler.check is not None:
            reasons += [f"{node.describe()}: {why}" for why in handler.check(node, facts)]
    return Body(left, facts, reasons, name, graph.output[0].name)


def apply(cx: Lowering, body: Body, value: Value) -> Value:
    """The body's output, its input `value`, lowered at cx's insertion point."""
    if body.reasons:
        raise LoweringError("; ".join(body.reasons))
    inner = Lowering(cx.block, body.facts, cx.names, {}, cx.training)
    inner.values[body.input] = value
    for node in body.nodes:
        handler = HANDLERS.find(node.qualified_op, node.opset)
        assert handler is not None  # prepare found none missing
        handler.lower(inner, node)
    return inner.value(body.output)
