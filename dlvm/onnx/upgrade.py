"""Models of opsets older than the handler table's oldest (7), brought up to it by onnx's own
version converter: opset 6 spelled broadcasting with `broadcast`/`axis` attributes and batch
normalization with `is_test`, which the converter rewrites into their opset-7 forms (an
Unsqueeze where `axis` placed the smaller operand). PRelu's one-dimensional slope, applied per
channel before opset 7, the converter leaves alone: it is reshaped here to broadcast the same
way."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from dlvm.diagnostics import DiagnosticError
from dlvm.onnx.graph import DEFAULT_DOMAINS
from dlvm.onnx.reader import error

# The oldest opset of the default domain the handlers are written for.
OLDEST_OPSET = 7


def default_opset(model: Any) -> int:
    """The model's opset of the default domain, 0 where it imports none."""
    for d in model.opset_import:
        if d.domain in DEFAULT_DOMAINS:
            return int(d.version)
    return 0


def upgrade(onnx: ModuleType, model: Any, label: str) -> Any:
    """`model` unchanged at opset 7 or newer; converted to opset 7 where older (a
    DiagnosticError where the converter cannot convert it)."""
    opset = default_opset(model)
    if opset == 0 or opset >= OLDEST_OPSET:
        return model
    from onnx import version_converter

    model = _channel_slopes(model)
    try:
        converted = version_converter.convert_version(model, OLDEST_OPSET)
        onnx.checker.check_model(converted)
    except Exception as e:  # the converter's errors come as several classes, some from C++
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DiagnosticError(
            [
                error(
                    f"{label}: opset {opset} is older than the importer's oldest "
                    f"({OLDEST_OPSET}), and onnx's version converter could not convert the "
                    f"model: {first}",
                    f"convert the model to opset {OLDEST_OPSET} or newer "
                    f"(onnx.version_converter.convert_version) and fix what it reports",
                )
            ]
        ) from None
    return converted


def _channel_slopes(model: Any) -> Any:
    """A copy of `model` where each PRelu slope that is a one-dimensional initializer of as many
    elements as the input has channels (axis 1, rank > 2) has the shape (C, 1, …, 1) that
    broadcasts per channel, as opset 6 applied it; `model` itself where there is none."""
    from onnx import numpy_helper

    graph = model.graph
    ranks = {
        v.name: len(v.type.tensor_type.shape.dim)
        for v in graph.input
        if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape")
    }
    channels = {
        v.name: v.type.tensor_type.shape.dim[1].dim_value
        for v in graph.input
        if ranks.get(v.name, 0) > 2
    }
    users: dict[str, set[str]] = {}
    for node in graph.node:
        for name in node.input:
            users.setdefault(name, set()).add(node.op_type)
    reshape: dict[str, int] = {}
    for node in graph.node:
        if node.op_type != "PRelu" or len(node.input) < 2:
            continue
        x, slope = node.input[0], node.input[1]
        if x in channels and users.get(slope) == {"PRelu"}:
            reshape[slope] = ranks[x]
    found = [t for t in graph.initializer if t.name in reshape and len(t.dims) == 1]
    found = [t for t in found if t.dims[0] > 1]
    if not found:
        return model
    copy = type(model)()
    copy.CopyFrom(model)
    for t in copy.graph.initializer:
        rank = reshape.get(t.name)
        if rank is not None and len(t.dims) == 1 and t.dims[0] > 1:
            value = numpy_helper.to_array(t)
            t.CopyFrom(numpy_helper.from_array(value.reshape((-1,) + (1,) * (rank - 2)), t.name))
    for v in copy.graph.input:
        rank = reshape.get(v.name)
        if rank is not None and len(v.type.tensor_type.shape.dim) == 1:
            for _ in range(rank - 2):
                v.type.tensor_type.shape.dim.add().dim_value = 1
    return copy
