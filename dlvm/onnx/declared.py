"""What a model declares of its inputs before any shape is fixed (docs/onnx.md): the front ends
that bind dynamic dimensions themselves (TEL's `use ./model.onnx`) read them here."""

from __future__ import annotations

from typing import Any

from dlvm.diagnostics import DiagnosticError
from dlvm.onnx.dtypes import ir_type_of, onnx_type_name
from dlvm.onnx.reader import error, label_of, load, require_onnx


def declared_inputs(
    source: Any, label: str | None = None
) -> list[tuple[str, tuple[int | str, ...], str]]:
    """The graph's inputs that are not initializers, in order: (name, dims, element type),
    a dimension being its size, its `dim_param` name, or "" when it is dynamic and unnamed; the
    element type as the IR names it (`f32`). `label` names the model in messages (default: the
    path, or `<onnx model>`). DiagnosticError for an input of unknown rank or of an element
    type the IR lacks, every one reported."""
    onnx = require_onnx()
    label = label or label_of(source)
    graph = load(onnx, source, label).graph
    initialized = {t.name for t in graph.initializer}
    found = []
    problems = []
    for v in graph.input:
        if v.name in initialized:
            continue
        tensor = v.type.tensor_type if v.type.HasField("tensor_type") else None
        dtype = ir_type_of(tensor.elem_type) if tensor is not None else None
        if tensor is None or not tensor.HasField("shape"):
            problems.append(error(f"{label}: input '{v.name}' is not a tensor of known rank"))
            continue
        if dtype is None:
            name = onnx_type_name(tensor.elem_type)
            problems.append(
                error(f"{label}: input '{v.name}' has element type {name}, which DLVM IR lacks")
            )
            continue
        dims: list[int | str] = []
        for d in tensor.shape.dim:
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append(int(d.dim_value))
            else:
                dims.append(d.dim_param if d.HasField("dim_param") else "")
        found.append((v.name, tuple(dims), dtype.text))
    if problems:
        raise DiagnosticError(problems)
    return found
