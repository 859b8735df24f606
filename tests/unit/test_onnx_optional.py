"""OptionalHasElement and OptionalGetElement of a tensor and of an omitted input, against
ONNX's reference evaluator (compiled too)."""

from __future__ import annotations

import pytest

pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

from onnx import helper  # noqa: E402
from onnxlib import check, check_compiled, model, normal  # noqa: E402


def test_has_and_get_element_of_a_tensor(tmp_path):
    x = normal(4)
    nodes = [
        helper.make_node("OptionalHasElement", ["x"], ["has"]),
        helper.make_node("OptionalGetElement", ["x"], ["got"]),
        helper.make_node("Neg", ["got"], ["y"]),
    ]
    m = model(nodes, {"x": x}, ["has", "y"], opset=18)
    check(m, {"x": x})
    check_compiled(m, {"x": x}, tmp_path)


def test_an_omitted_input_has_no_element():
    node = helper.make_node("OptionalHasElement", [""], ["has"])
    check(model([node], {}, ["has"], opset=18), {})
