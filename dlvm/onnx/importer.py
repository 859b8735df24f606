"""`import_model` (docs/onnx.md): an ONNX model as one IR function, through the stages read,
fix the input shapes, infer shapes, fold, find what is unsupported, lower, verify."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dlvm.diagnostics import Diagnostic, DiagnosticError
from dlvm.ir.builder import tuple_literal
from dlvm.ir.typerules import TypeRuleError
from dlvm.ir.types import FunctionType, TensorType, TupleType
from dlvm.ir.values import Argument, Block, Function, Module
from dlvm.ir.verifier import verify
from dlvm.onnx.context import Lowering, LoweringError
from dlvm.onnx.dtypes import ir_type_of
from dlvm.onnx.fixed import ValuesNeeded, fix_values
from dlvm.onnx.fold import fold_graph
from dlvm.onnx.graph import DEFAULT_DOMAINS, Facts, Node
from dlvm.onnx.imported import Imported, ImportedTensor
from dlvm.onnx.names import Names, identifier
from dlvm.onnx.ops import HANDLERS
from dlvm.onnx.ops.common import tensor
from dlvm.onnx.ops.registry import NEWEST_OPSET
from dlvm.onnx.reader import (
    error,
    fix_input_shapes,
    infer_shapes,
    label_of,
    load,
    require_onnx,
)
from dlvm.onnx.support import unsupported
from dlvm.onnx.upgrade import upgrade


def import_model(
    source: Any,
    shapes: Mapping[str, Sequence[int]] | None = None,
    name: str = "model",
    training: bool = False,
    label: str | None = None,
    values: Mapping[str, Any] | None = None,
) -> Imported:
    """The model at `source` (a path, bytes or an onnx.ModelProto) as the function `@name` of a
    new module at stage raw: (inputs…, params…) -> (outputs…). `shapes` fixes the inputs'
    dynamic dimensions; `training` makes BatchNormalization use the batch's statistics and
    Dropout drop; `label` names the model in messages (default: the path, or `<onnx model>`);
    `values` fixes graph inputs to values (docs/onnx.md, "Fixed inputs"): each is a constant of
    the graph, no longer an input of the function. Every problem is a DiagnosticError: a
    ValuesNeeded, naming the inputs, where nodes need the values of graph inputs at import."""
    onnx = require_onnx()
    label = label or label_of(source)
    model = upgrade(onnx, load(onnx, source, label), label)
    opsets = {
        ("" if d.domain in DEFAULT_DOMAINS else d.domain): int(d.version)
        for d in model.opset_import
    }
    if opsets.get("", 0) > NEWEST_OPSET:
        raise DiagnosticError(
            [error(f"{label}: opset {opsets['']} is newer than the importer's {NEWEST_OPSET}")]
        )
    given = {k: tuple(int(n) for n in v) for k, v in (shapes or {}).items()}
    fixed = fix_values(model, values or {}, label)
    _agree(given, fixed, label)
    inputs = fix_input_shapes(model, given, label)
    model, complaint = infer_shapes(onnx, model, label)
    graph = model.graph
    facts = Facts.of(graph)
    for n in fixed:  # constants, never parameters
        facts.constants[n] = facts.initializers.pop(n)
    facts.opsets = opsets
    nodes = [Node.of(p, i, opsets, label) for i, p in enumerate(graph.node)]
    left, diags = fold_graph(model, nodes, facts, opsets)
    refused, needed = unsupported(left, facts)
    diags += refused
    if needed:
        raise ValuesNeeded(diags, needed)
    if diags:
        raise DiagnosticError(diags)

    names = Names()
    arguments = []
    for i in inputs:
        dtype = ir_type_of(i.elem_type)
        assert dtype is not None  # fix_input_shapes refused the others
        arguments.append(Argument(names(i.name), TensorType(i.shape, dtype)))
    block = Block("entry", arguments)
    cx = Lowering(block, facts, names, _param_kinds(left, facts), training)
    for i, arg in zip(inputs, arguments):
        cx.values[i.name] = arg
    for node in left:
        handler = HANDLERS.find(node.qualified_op, node.opset)
        assert handler is not None  # unsupported() found none missing
        try:
            handler.lower(cx, node)
        except (LoweringError, TypeRuleError) as e:
            raise DiagnosticError([_lowering_error(node, e, complaint)]) from None
    order = [t.name for t in graph.initializer if t.name in cx.params]
    updated = [n for n in order if n in cx.updates]
    try:
        results = [cx.value(o.name) for o in graph.output]
    except LoweringError as e:
        raise DiagnosticError([error(f"{label}: an output: {e}")]) from None
    results += [cx.updates[n] for n in updated]
    cx.emit("return", cx.emit("literal", tuple_literal(results)))

    params = [cx.params[n] for n in order]
    block.arguments = arguments + params
    fn = Function(
        identifier(name),
        FunctionType(
            tuple(a.type for a in block.arguments), TupleType(tuple(v.type for v in results))
        ),
    )
    fn.add_block(block)
    module = Module(identifier(name))
    module.add_function(fn)
    problems = verify(module)
    if problems:
        raise DiagnosticError([Diagnostic(f"{label}: the imported IR does not verify"), *problems])
    kinds = cx.param_kinds
    return Imported(
        module,
        fn,
        [(i.name, tensor(a)) for i, a in zip(inputs, arguments)],
        [(o.name, tensor(v)) for o, v in zip(graph.output, results[: len(graph.output)])],
        [
            ImportedTensor(n, tensor(cx.params[n]), facts.initializers[n], kinds[n])  # type: ignore[arg-type]
            for n in order
        ],
        any(node.op_type in TRAINING_OPS for node in left),
        updated,
        fixed,
    )


# The operators whose result depends on training (`import_model(…, training=True)`).
TRAINING_OPS = frozenset({"BatchNormalization", "Dropout"})


def _agree(shapes: dict[str, tuple[int, ...]], fixed: dict[str, Any], label: str) -> None:
    """A shape given for a fixed input must be its value's; the fixed inputs leave `shapes`."""
    diags = [
        error(
            f"{label}: input '{n}' is given the shape {list(shapes[n])} and a value of shape "
            f"{list(v.shape)}"
        )
        for n, v in fixed.items()
        if n in shapes and tuple(shapes[n]) != v.shape
    ]
    if diags:
        raise DiagnosticError(diags)
    for n in fixed:
        shapes.pop(n, None)


def _param_kinds(nodes: list[Node], facts: Facts) -> dict[str, str]:
    """Every float initializer: a `buffer` where BatchNormalization reads it as its mean or
    variance, a `param` otherwise."""
    buffers = {
        node.input(i) for node in nodes if node.op_type == "BatchNormalization" for i in (3, 4)
    }
    return {
        n: "buffer" if n in buffers else "param"
        for n, v in facts.initializers.items()
        if v.dtype.kind == "f"
    }


def _lowering_error(node: Node, e: Exception, complaint: str | None) -> Diagnostic:
    notes = (Diagnostic(f"  note: shape inference said: {complaint}", None, "detail"),)
    return Diagnostic(f"{node.describe()}: {e}", notes=notes if complaint else ())
