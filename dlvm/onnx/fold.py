"""Folding at import time (docs/onnx.md, "Folding"): a node whose inputs are all known (Constant
nodes, initializers that are not floats, earlier folded nodes) is computed once with ONNX's own
reference implementation, and so is Shape (or Size) of any tensor whose shape is inferred, and
CastLike of a known value like any tensor whose element type is known. The shape-computing
subgraphs exporters emit (Shape, Gather, Concat, Unsqueeze, Reshape's target)
disappear; float initializers stay parameters, never folded, so that they can be trained."""

from __future__ import annotations

from typing import Any

import numpy as np

from dlvm.diagnostics import Diagnostic
from dlvm.onnx.dtypes import ir_type_of
from dlvm.onnx.graph import Facts, Node

# Operators whose result is not a function of their inputs, or depends on training: never
# folded.
NOT_FOLDED = frozenset(
    {
        "RandomNormal",
        "RandomUniform",
        "RandomNormalLike",
        "RandomUniformLike",
        "Multinomial",
        "Bernoulli",
        "Dropout",
        "If",
        "Loop",
        "Scan",
    }
)
SHAPE_QUERIES = frozenset({"Shape", "Size"})
# Inputs an operator reads only for their element type: known when that type is, so that
# CastLike of a constant to a computed tensor's type (the pad value of Attention's function
# body) folds.
TYPE_ONLY = {"CastLike": 1}


def fold_graph(
    model: Any, nodes: list[Node], facts: Facts, opsets: dict[str, int]
) -> tuple[list[Node], list[Diagnostic]]:
    """Folds what can be folded. Where a Shape (or Size) waits for a shape ONNX's inference did
    not find (its data propagation stops at operators such as Div on a shape), the shapes are
    inferred again with what was folded as initializers, and folding goes on, while that finds
    more."""
    left, diags = fold(nodes, facts, opsets)
    while not diags and any(_waits_for_a_shape(n, facts) for n in left):
        known = len(facts.shapes)
        _infer_again(model, left, facts)
        if len(facts.shapes) == known:
            break
        left, diags = fold(left, facts, opsets)
    return left, diags


def _waits_for_a_shape(node: Node, facts: Facts) -> bool:
    source = node.input(0)
    return (
        node.op_type in SHAPE_QUERIES
        and not facts.is_constant(source)
        and source not in facts.shapes
    )


def _infer_again(model: Any, left: list[Node], facts: Facts) -> None:
    """Shape inference over the nodes left, the constants folded so far as initializers; what
    it finds is added to facts."""
    from onnx import ModelProto, numpy_helper, shape_inference

    from dlvm.onnx.reader import static_shape

    again = ModelProto()
    again.CopyFrom(model)
    graph = again.graph
    del graph.node[:]
    graph.node.extend(n.proto for n in left)
    del graph.value_info[:]
    present = {t.name for t in graph.initializer}
    graph.initializer.extend(
        numpy_helper.from_array(v, n) for n, v in facts.constants.items() if n not in present
    )
    try:
        inferred = shape_inference.infer_shapes(again, data_prop=True).graph
    except Exception:  # the first inference succeeded; this one only adds what it can
        return
    for v in (*inferred.value_info, *inferred.output):
        shape = static_shape(v)
        if shape is not None and v.name not in facts.shapes:
            facts.shapes[v.name] = shape
            facts.elem_types.setdefault(v.name, v.type.tensor_type.elem_type)


def fold(
    nodes: list[Node], facts: Facts, opsets: dict[str, int]
) -> tuple[list[Node], list[Diagnostic]]:
    """Folds what can be folded, in graph order, adding the results to facts.constants; returns
    the nodes left to lower and a diagnostic for each node that should fold but failed to."""
    left: list[Node] = []
    diags: list[Diagnostic] = []
    for node in nodes:
        inputs = _known_inputs(node, facts)
        if inputs is None:
            left.append(node)
            continue
        try:
            results = _evaluate(node, inputs, opsets)
        except Exception as e:  # the reference implementation's errors, whatever their class
            text = (str(e).strip() or type(e).__name__).splitlines()[0]
            diags.append(Diagnostic(f"{node.describe()}: cannot compute it at import: {text}"))
            continue
        for name, value in zip(node.outputs, results):
            if name:
                facts.constants[name] = np.asarray(value)
                facts.shapes[name] = np.asarray(value).shape
    return left, diags


def _known_inputs(node: Node, facts: Facts) -> list[Any] | None:
    """The node's inputs as the reference evaluator takes them, None when it is not folded."""
    if node.domain or node.op_type in NOT_FOLDED:
        return None
    if node.op_type in SHAPE_QUERIES and node.input(0) and not facts.is_constant(node.input(0)):
        shape = facts.shapes.get(node.input(0))
        elem = facts.elem_types.get(node.input(0))
        if shape is None or elem is None:
            return None
        from onnx import helper

        dtype = helper.tensor_dtype_to_np_dtype(elem)
        # A view of one element with the inferred shape: Shape and Size read nothing else.
        return [np.broadcast_to(np.zeros((), dtype), shape)]
    values: list[Any] = []
    for i, name in enumerate(node.inputs):
        if not name:
            values.append(None)
        elif TYPE_ONLY.get(node.op_type) == i and facts.elem_types.get(name):
            from onnx import helper

            values.append(np.zeros((), helper.tensor_dtype_to_np_dtype(facts.elem_types[name])))
        elif name in facts.constants:
            values.append(facts.constants[name])
        elif node.op_type == "CastLike" and i == 1 and _has_ir_type(facts, name):
            from onnx import helper

            # CastLike reads only the element type of its second input.
            values.append(np.zeros((), helper.tensor_dtype_to_np_dtype(facts.elem_types[name])))
        else:
            return None
    if not node.inputs and node.op_type != "Constant":
        return None  # an operator of no inputs other than Constant makes something new
    return values


def _has_ir_type(facts: Facts, name: str) -> bool:
    return ir_type_of(facts.elem_types.get(name, 0)) is not None


def _evaluate(node: Node, inputs: list[Any], opsets: dict[str, int]) -> list[Any]:
    """The node's outputs, by the reference evaluator running a model of that node alone at
    the model's opset (a bare node would be run at the newest one)."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    names = [f"in{i}" if v is not None else "" for i, v in enumerate(inputs)]
    outputs = [f"out{i}" if n else "" for i, n in enumerate(node.outputs)]
    proto = helper.make_node(node.op_type, names, outputs)
    proto.attribute.extend(node.proto.attribute)
    feeds = {n: np.asarray(v) for n, v in zip(names, inputs) if n}
    graph = helper.make_graph(
        [proto],
        "fold",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for n, v in feeds.items()
        ],
        [helper.make_empty_tensor_value_info(n) for n in outputs if n],
    )
    versions = [helper.make_opsetid(d, v) for d, v in opsets.items() if not d]
    model = helper.make_model(graph, opset_imports=versions or None)
    results = ReferenceEvaluator(model).run(None, feeds)
    it = iter(results)
    return [next(it) if n else None for n in outputs]
