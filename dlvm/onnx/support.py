"""What cannot be imported, found before anything is lowered (docs/onnx.md, "Unsupported
nodes"): every node of another domain (but for the operators of it the table has), of an op
type without a handler, of an opset outside its handler's range, with an attribute or input its
handler refuses, or with a tensor of an element type DLVM IR lacks, each a diagnostic naming
the node, its op type, opset and the reason. An input a node needs known at import that is a
graph input is one the caller can fix (docs/onnx.md, "Fixed inputs"): its diagnostic says
how."""

from __future__ import annotations

from dlvm.diagnostics import Diagnostic
from dlvm.ir.types import DataType
from dlvm.onnx.dtypes import ir_type_of, onnx_type_name
from dlvm.onnx.fold import NOT_FOLDED
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops import HANDLERS, opset_text
from dlvm.onnx.ops.common import NeedsValue
from dlvm.onnx.reader import help_line


def unsupported(nodes: list[Node], facts: Facts) -> tuple[list[Diagnostic], list[str]]:
    """One diagnostic per reason, nodes in graph order, and the graph inputs whose values some
    node needs at import, in the order first needed (fixing them removes those reasons)."""
    diags = []
    needed: list[str] = []
    producers = {out: node for node in nodes for out in node.outputs if out}
    for node in nodes:
        for why in reasons(node, facts):
            tensor = why.tensor if isinstance(why, NeedsValue) else None
            inputs = _fixable_from(tensor, producers, facts) if tensor else None
            if not inputs:
                diags.append(Diagnostic(f"{node.describe()}: {why}"))
                continue
            needed += [n for n in inputs if n not in needed]
            diags.append(Diagnostic(f"{node.describe()}: {why}", notes=(_fix(tensor, inputs),)))
    return diags, needed


def _fix(tensor: str | None, inputs: list[str]) -> Diagnostic:
    options = " ".join(f"--value {n}=…" for n in inputs)
    mapping = ", ".join(f"'{n}': …" for n in inputs)
    if inputs == [tensor]:
        what = f"'{tensor}' is a graph input: fix its value"
    else:
        names = ", ".join(f"'{n}'" for n in inputs)
        what = f"'{tensor}' is computed from the graph inputs {names} alone: fix their values"
    return help_line(
        f"{what} at build time with `{options}` (telc) or `values={{{mapping}}}` (import_model)"
    )


def _fixable_from(tensor: str, producers: dict[str, Node], facts: Facts) -> list[str] | None:
    """The graph inputs that fixing would make `tensor` known, where that is all it waits for:
    it is a graph input, or the nodes that compute it, all foldable, read only known tensors
    and graph inputs of integer or bool type (shapes, axes, counts; never a float input, the
    data a model computes on). None otherwise."""
    if tensor in facts.inputs:
        return [tensor]
    found: list[str] = []
    seen: set[str] = set()
    todo = [tensor]
    while todo:
        name = todo.pop()
        if not name or name in seen or facts.is_constant(name):
            continue
        seen.add(name)
        if name in facts.inputs:
            if ir_type_of(facts.elem_types.get(name, 0)) in (None, *FLOATS):
                return None
            found.append(name)
            continue
        node = producers.get(name)
        if node is None or node.domain or node.op_type in NOT_FOLDED or len(seen) > MAX_TRACED:
            return None
        todo += reversed(node.inputs)
    return sorted(found, key=facts.inputs.index) if found else None


FLOATS = (DataType.F16, DataType.F32, DataType.F64)
MAX_TRACED = 1000  # tensors a needed value is traced back through, at most


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
