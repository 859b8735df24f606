"""What cannot be imported, found before anything is lowered (docs/onnx.md, "Unsupported
nodes"): every node of another domain (but for the operators of it the table has), of an op
type without a handler, of an opset outside its handler's range, with an attribute or input its
handler refuses, or with a tensor of an element type DLVM IR lacks, each a diagnostic naming
the node, its op type, opset and the reason. An input a node needs known at import that is a
graph input is one the caller can fix (docs/onnx.md, "Fixed inputs"): its diagnostic says
how."""

from __future__ import annotations

from dlvm.diagnostics import Diagnostic
from dlvm.onnx.dtypes import ir_type_of, onnx_type_name
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops import HANDLERS, opset_text
from dlvm.onnx.ops.common import NeedsValue
from dlvm.onnx.reader import help_line


def unsupported(nodes: list[Node], facts: Facts) -> tuple[list[Diagnostic], list[str]]:
    """One diagnostic per reason, nodes in graph order, and the graph inputs whose values some
    node needs at import, in the order first needed (fixing them removes those reasons)."""
    diags = []
    needed: list[str] = []
    for node in nodes:
        for why in reasons(node, facts):
            tensor = why.tensor if isinstance(why, NeedsValue) else None
            if tensor is None or tensor not in facts.inputs:
                diags.append(Diagnostic(f"{node.describe()}: {why}"))
                continue
            if tensor not in needed:
                needed.append(tensor)
            fix = help_line(
                f"'{tensor}' is a graph input: fix its value at build time with "
                f"`--value {tensor}=…` (telc) or `values={{'{tensor}': …}}` (import_model)"
            )
            diags.append(Diagnostic(f"{node.describe()}: {why}", notes=(fix,)))
    return diags, needed


def reasons(node: Node, facts: Facts) -> list[str]:
    op = node.qualified_op
    handler = HANDLERS.find(op, node.opset)
    if handler is None:
        ranges = HANDLERS.ranges(op)
        if node.domain and not ranges:
            return [f"operators of the domain '{node.domain}' are not supported"]
        refused = HANDLERS.refusal(op)
        if refused is not None:
            return [f"the operator {op} is not supported: {refused}"]
        if not ranges:
            return [f"the operator {op} is not supported"]
        return [f"{op} is supported at opsets {opset_text(ranges)} only"]
    found = list(handler.check(node, facts)) if handler.check is not None else []
    for name in (*node.inputs, *node.outputs):
        elem = facts.elem_types.get(name) if name else None
        if elem is not None and elem != 0 and ir_type_of(elem) is None:
            found.append(
                f"tensor '{name}' has element type {onnx_type_name(elem)}, which DLVM IR does "
                "not have"
            )
    return [_not_supported(why) for why in found]


def _not_supported(why: str) -> str:
    text = f"not supported: {why}"
    return NeedsValue(text, why.tensor) if isinstance(why, NeedsValue) else text
