"""The graph as the importer's stages see it: each node with its attributes read once and a
description for messages, and what is known about each tensor before lowering (inferred shapes
and element types, constant values, initializers)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dlvm.onnx.reader import static_shape

DEFAULT_DOMAINS = ("", "ai.onnx")


@dataclass(frozen=True)
class Node:
    """One NodeProto: its op type, inputs (`""` for an omitted optional one), outputs and
    attributes as Python values, and the opset of its domain in the model."""

    index: int
    name: str
    op_type: str
    domain: str
    opset: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: dict[str, Any] = field(repr=False)
    label: str = field(repr=False)
    proto: Any = field(repr=False, compare=False)

    @staticmethod
    def of(proto: Any, index: int, opsets: dict[str, int], label: str) -> Node:
        from onnx import helper

        domain = "" if proto.domain in DEFAULT_DOMAINS else proto.domain
        attrs = {a.name: helper.get_attribute_value(a) for a in proto.attribute}
        attrs = {k: _text(v) for k, v in attrs.items()}
        return Node(
            index,
            proto.name,
            proto.op_type,
            domain,
            opsets.get(domain, 0),
            tuple(proto.input),
            tuple(proto.output),
            attrs,
            label,
            proto,
        )

    def describe(self) -> str:
        """`model.onnx: node 'conv1' (Conv, opset 13)`; an unnamed node by its position and
        first output."""
        who = f"node '{self.name}'" if self.name else f"node #{self.index} (output '{self.out(0)}')"
        return f"{self.label}: {who} ({self.qualified_op}, opset {self.opset})"

    @property
    def qualified_op(self) -> str:
        """The op type, after its domain where that is not ONNX's own
        (`ai.onnx.preview.FlexAttention`): the handler table's key."""
        return self.op_type if not self.domain else f"{self.domain}.{self.op_type}"

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def input(self, i: int) -> str:
        """The name of input i, `""` where it is omitted or past the end."""
        return self.inputs[i] if i < len(self.inputs) else ""

    def out(self, i: int) -> str:
        return self.outputs[i] if i < len(self.outputs) else ""


def _text(value: Any) -> Any:
    """A STRING attribute as str and a STRINGS one as a list of str (onnx gives bytes: PyTorch
    exports an RNN's `activations` as [b'Tanh'])."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list) and value and all(isinstance(v, bytes) for v in value):
        return [v.decode() for v in value]
    return value


@dataclass
class Facts:
    """What is known before lowering: each tensor's inferred static shape and element type
    (where inference found them), the constants (Constant nodes, folded nodes, initializers that
    are not floats, fixed inputs), every initializer's value, and the graph inputs the function
    takes (those neither initializers nor fixed)."""

    shapes: dict[str, tuple[int, ...]]
    elem_types: dict[str, int]
    constants: dict[str, np.ndarray]
    initializers: dict[str, np.ndarray]
    inputs: tuple[str, ...] = ()  # in the graph's order
    # The model's opset of each domain ("" for ONNX's own), for the nodes of a graph attribute.
    opsets: dict[str, int] = field(default_factory=dict)

    @staticmethod
    def of(graph: Any) -> Facts:
        from onnx import numpy_helper

        shapes: dict[str, tuple[int, ...]] = {}
        elem_types: dict[str, int] = {}
        for v in (*graph.input, *graph.value_info, *graph.output):
            if v.type.HasField("tensor_type"):
                elem_types[v.name] = v.type.tensor_type.elem_type
                shape = static_shape(v)
                if shape is not None:
                    shapes[v.name] = shape
        initializers = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        for name, value in initializers.items():
            shapes[name] = value.shape
        elem_types.update({t.name: t.data_type for t in graph.initializer})
        constants = {n: v for n, v in initializers.items() if v.dtype.kind not in "fc"}
        inputs = tuple(v.name for v in graph.input if v.name not in initializers)
        return Facts(shapes, elem_types, constants, initializers, inputs)

    def is_constant(self, name: str) -> bool:
        """Whether a tensor's value is known at import time: a constant or an initializer."""
        return name in self.constants or name in self.initializers

    def value(self, name: str) -> np.ndarray | None:
        """The value known at import time, None where the graph computes it."""
        if name in self.constants:
            return self.constants[name]
        return self.initializers.get(name)
