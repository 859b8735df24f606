"""OptionalHasElement and OptionalGetElement on what DLVM IR has: a tensor (an optional that
holds one) or no input at all (an empty optional). Optional-typed values themselves are refused
with the model's inputs and outputs."""

from __future__ import annotations

import numpy as np

from dlvm.onnx.context import Lowering
from dlvm.onnx.graph import Node
from dlvm.onnx.ops.registry import HANDLERS


@HANDLERS.register("OptionalHasElement", since=15)
def has_element(cx: Lowering, node: Node) -> None:
    """True for a tensor, false for an omitted input."""
    cx.define(node.out(0), cx.literal(np.array(bool(node.input(0)))))


@HANDLERS.register("OptionalGetElement", since=15)
def get_element(cx: Lowering, node: Node) -> None:
    """The tensor itself (ONNX's checker refuses an omitted input here)."""
    cx.define(node.out(0), cx.value(node.input(0)))
