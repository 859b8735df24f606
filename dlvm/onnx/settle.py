"""Shapes inferred again after folding (docs/onnx.md, "Folding"): ONNX's shape inference stops at
a Reshape whose target shape a chain of Div, Cast or Slice on shapes computes (PyTorch's
exported attention does), since its data propagation does not run those. Folding computes the
target; inferring the shapes again, with the folded values as Constant nodes, learns what
follows it, which lets more Shape queries fold; so on until a round folds nothing new."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from dlvm.diagnostics import Diagnostic
from dlvm.onnx.fold import fold
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.reader import infer_shapes, static_shape


def settle(
    onnx: ModuleType,
    model: Any,
    nodes: list[Node],
    facts: Facts,
    opsets: dict[str, int],
    label: str,
) -> tuple[list[Node], list[Diagnostic]]:
    """Folds `nodes` (adding to `facts`), and, while a node left has an output whose shape is
    unknown and the last round folded something, infers the shapes of what is left again and
    folds once more. Returns the nodes left to lower and the diagnostics of folding."""
    left, diags = fold(nodes, facts, opsets)
    folded = len(nodes) - len(left)
    while not diags and folded and _unknown_shapes(left, facts):
        _learn_shapes(_inferred(onnx, model, left, facts, label), facts)
        before = len(left)
        left, diags = fold(left, facts, opsets)
        folded = before - len(left)
    return left, diags


def _unknown_shapes(nodes: list[Node], facts: Facts) -> bool:
    return any(o and o not in facts.shapes for n in nodes for o in n.outputs)


def _inferred(onnx: ModuleType, model: Any, left: list[Node], facts: Facts, label: str) -> Any:
    """The model with only the nodes `left`, the folded values they read as Constant nodes in
    front of them, its shapes inferred."""
    from onnx import helper, numpy_helper

    again = onnx.ModelProto()
    again.CopyFrom(model)
    graph = again.graph
    del graph.node[:]
    del graph.value_info[:]
    initializers = {t.name for t in graph.initializer}
    read = {i for n in left for i in n.inputs} | {o.name for o in graph.output}
    for name in sorted(read):
        if name and name in facts.constants and name not in initializers:
            value = numpy_helper.from_array(facts.constants[name], name)
            graph.node.append(helper.make_node("Constant", [], [name], value=value))
    graph.node.extend(n.proto for n in left)
    inferred, _ = infer_shapes(onnx, again, label)
    return inferred


def _learn_shapes(model: Any, facts: Facts) -> None:
    """The shapes and element types inference found that facts lacks."""
    for v in (*model.graph.value_info, *model.graph.output):
        if v.name in facts.shapes or not v.type.HasField("tensor_type"):
            continue
        facts.elem_types.setdefault(v.name, v.type.tensor_type.elem_type)
        shape = static_shape(v)
        if shape is not None:
            facts.shapes[v.name] = shape
