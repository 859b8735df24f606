"""What cannot be imported, found before anything is lowered (docs/onnx.md, "Unsupported
nodes"): every node of an op type without a handler (one of another domain is looked up as
`domain.OpType`), of an opset outside its handler's range, with an attribute or input its
handler refuses, or with a tensor of an element type DLVM IR lacks, each a diagnostic naming
the node, its op type, opset and the reason."""

from __future__ import annotations

from dlvm.diagnostics import Diagnostic
from dlvm.onnx.dtypes import ir_type_of, onnx_type_name
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops import HANDLERS, opset_text


def unsupported(nodes: list[Node], facts: Facts) -> list[Diagnostic]:
    """One diagnostic per reason, nodes in graph order."""
    diags = []
    for node in nodes:
        diags += [Diagnostic(f"{node.describe()}: {why}") for why in reasons(node, facts)]
    return diags


def reasons(node: Node, facts: Facts) -> list[str]:
    handler = HANDLERS.find(node.kind, node.opset)
    if handler is None:
        ranges = HANDLERS.ranges(node.kind)
        if not ranges and node.domain:
            return [f"operators of the domain '{node.domain}' are not supported"]
        if not ranges:
            return [f"the operator {node.op_type} is not supported"]
        return [f"{node.kind} is supported at opsets {opset_text(ranges)} only"]
    found = list(handler.check(node, facts)) if handler.check is not None else []
    for name in (*node.inputs, *node.outputs):
        elem = facts.elem_types.get(name) if name else None
        if elem is not None and elem != 0 and ir_type_of(elem) is None:
            found.append(
                f"tensor '{name}' has element type {onnx_type_name(elem)}, which DLVM IR does "
                "not have"
            )
    return [f"not supported: {why}" for why in found]
