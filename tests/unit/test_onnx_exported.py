"""Graphs written as PyTorch's exporter (TorchScript, opset 17) writes them, which the importer
must take: a Reshape whose target a chain of shape arithmetic computes, which ONNX's own shape
inference does not follow, and a second Reshape whose target is read from the first one's shape,
as exported attention has (shapes inferred again after folding, dlvm/onnx/fold.py); an RNN
whose activations are written out."""

from __future__ import annotations

import pytest

pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

from onnx import TensorProto, helper  # noqa: E402
from onnxlib import check, model, normal  # noqa: E402


def const(name: str, values: list[int]) -> helper.NodeProto:
    value = helper.make_tensor(name, TensorProto.INT64, [len(values)], values)
    return helper.make_node("Constant", [], [name], value=value)


def chained_reshapes() -> helper.ModelProto:
    """x [N x 6] -> [N x 3 x 2] (the 3 as 6 / 2 through a float) -> relu -> [3N x 2] (the 2 read
    from the relu's shape)."""
    nodes = [
        const("halves", [1, 2]),
        const("two", [2]),
        const("minus_one", [-1]),
        const("at2", [2]),
        const("at3", [3]),
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["halves"], ["hf"], to=TensorProto.FLOAT),
        helper.make_node("Div", ["sf", "hf"], ["qf"]),
        helper.make_node("Cast", ["qf"], ["q"], to=TensorProto.INT64),
        helper.make_node("Concat", ["q", "two"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["r"]),
        helper.make_node("Relu", ["r"], ["y"]),
        helper.make_node("Shape", ["y"], ["s2"]),
        helper.make_node("Slice", ["s2", "at2", "at3"], ["last"]),
        helper.make_node("Concat", ["minus_one", "last"], ["target2"], axis=0),
        helper.make_node("Reshape", ["y", "target2"], ["z"]),
    ]
    return model(nodes, {"x": normal(4, 6)}, ["z"], dynamic={"x": ["N", 6]})


def test_a_reshape_after_shape_arithmetic_is_imported():
    imp = check(chained_reshapes(), {"x": normal(4, 6)})
    assert [t.shape for _, t in imp.outputs] == [(12, 2)]


def test_an_rnn_with_its_activations_written_out():
    # PyTorch's nn.RNN exports activations=["Tanh"], a STRINGS attribute (bytes in onnx).
    x, w, r = normal(3, 2, 4), normal(1, 5, 4, seed=1), normal(1, 5, 5, seed=2)
    node = helper.make_node("RNN", ["x", "W", "R"], ["y", "h"], hidden_size=5,
                            activations=["Tanh"])  # fmt: skip
    check(model([node], {"x": x}, ["y", "h"], {"W": w, "R": r}), {"x": x}, rtol=1e-5, atol=1e-6)
