"""Whole models through the ONNX importer: an MLP, a LeNet-like CNN and a residual block with
BatchNormalization, each run by the interpreter against ONNX's reference evaluator; the IR they
become prints and parses back, and names that the IR's text format cannot hold are mapped."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

from onnx import helper  # noqa: E402
from onnxlib import check, model, normal, positive  # noqa: E402

from dlvm.ir import module_text, parse_module  # noqa: E402
from dlvm.ir.types import TupleType  # noqa: E402


def node(op: str, inputs: list[str], outputs: list[str], **attrs) -> object:
    return helper.make_node(op, inputs, outputs, **attrs)


def test_mlp_as_pytorch_exports_it():
    x = normal(4, 8)
    params = {
        "fc1.weight": normal(16, 8, seed=1) * 0.3,
        "fc1.bias": normal(16, seed=2),
        "fc2.weight": normal(3, 16, seed=3) * 0.3,
        "fc2.bias": normal(3, seed=4),
    }
    nodes = [
        node("Gemm", ["input", "fc1.weight", "fc1.bias"], ["/fc1/Gemm_output_0"], transB=1),
        node("Relu", ["/fc1/Gemm_output_0"], ["/relu/Relu_output_0"]),
        node("Gemm", ["/relu/Relu_output_0", "fc2.weight", "fc2.bias"], ["logits"], transB=1),
        node("LogSoftmax", ["logits"], ["output"], axis=1),
    ]
    imp = check(model(nodes, {"input": x}, ["output"], params), {"input": x})
    assert [p.name for p in imp.params] == list(params)
    assert all(p.kind == "param" for p in imp.params)
    assert isinstance(imp.function.type.result, TupleType)
    text = module_text(imp.module)
    assert "%fc1.weight" in text and "%_fc1_Gemm_output_0" in text
    assert module_text(parse_module(text)) == text


def test_lenet_like_cnn():
    x = normal(2, 1, 12, 12)
    params = {
        "c1.w": normal(4, 1, 3, 3, seed=1) * 0.5,
        "c1.b": normal(4, seed=2),
        "c2.w": normal(6, 4, 3, 3, seed=3) * 0.3,
        "c2.b": normal(6, seed=4),
        "fc.w": normal(10, 24, seed=5) * 0.3,
        "fc.b": normal(10, seed=6),
        "shape": np.array([2, -1], np.int64),
    }
    nodes = [
        node("Conv", ["x", "c1.w", "c1.b"], ["c1"], pads=[1, 1, 1, 1]),
        node("Relu", ["c1"], ["r1"]),
        node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        node("Conv", ["p1", "c2.w", "c2.b"], ["c2"]),
        node("Relu", ["c2"], ["r2"]),
        node("MaxPool", ["r2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),
        node("Reshape", ["p2", "shape"], ["flat"]),
        node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], transB=1),
    ]
    imp = check(
        model(nodes, {"x": x}, ["logits"], params, opset=13), {"x": x}, rtol=1e-4, atol=1e-5
    )
    assert [p.name for p in imp.params] == [n for n in params if n != "shape"]


def test_residual_block_with_batch_norm():
    x = normal(2, 4, 6, 6)
    params: dict[str, np.ndarray] = {}
    for i in (1, 2):
        params |= {
            f"conv{i}.w": normal(4, 4, 3, 3, seed=i) * 0.3,
            f"bn{i}.scale": positive(4, seed=10 + i),
            f"bn{i}.bias": normal(4, seed=20 + i),
            f"bn{i}.mean": normal(4, seed=30 + i) * 0.1,
            f"bn{i}.var": positive(4, seed=40 + i),
        }

    def bn(i: int, src: str, dst: str) -> object:
        names = [src] + [f"bn{i}.{k}" for k in ("scale", "bias", "mean", "var")]
        return node("BatchNormalization", names, [dst], epsilon=1e-5)

    nodes = [
        node("Conv", ["x", "conv1.w"], ["c1"], pads=[1, 1, 1, 1]),
        bn(1, "c1", "b1"),
        node("Relu", ["b1"], ["r1"]),
        node("Conv", ["r1", "conv2.w"], ["c2"], pads=[1, 1, 1, 1]),
        bn(2, "c2", "b2"),
        node("Add", ["b2", "x"], ["sum"]),
        node("Relu", ["sum"], ["y"]),
    ]
    imp = check(model(nodes, {"x": x}, ["y"], params, opset=15), {"x": x}, rtol=1e-4, atol=1e-5)
    kinds = {p.name: p.kind for p in imp.params}
    assert kinds["bn1.mean"] == kinds["bn2.var"] == "buffer"
    assert kinds["conv1.w"] == kinds["bn1.scale"] == "param"


def test_several_outputs_in_graph_order_and_an_input_passed_through():
    x = normal(2, 3)
    nodes = [node("Exp", ["x"], ["e"]), node("Neg", ["x"], ["n"])]
    imp = check(model(nodes, {"x": x}, ["n", "x", "e"]), {"x": x})
    assert [name for name, _ in imp.outputs] == ["n", "x", "e"]


def test_names_are_sanitised_distinctly_and_kept_in_imported():
    x = normal(2, 3)
    params = {"a:b": normal(3, seed=1), "a_b": normal(3, seed=2), "0weight": normal(3, seed=3)}
    nodes = [
        node("Add", ["in put", "a:b"], ["s1"]),
        node("Add", ["s1", "a_b"], ["s2"]),
        node("Mul", ["s2", "0weight"], ["onnx::Mul_7"]),
    ]
    imp = check(model(nodes, {"in put": x}, ["onnx::Mul_7"], params), {"in put": x})
    assert [p.name for p in imp.params] == ["a:b", "a_b", "0weight"]
    assert imp.inputs[0][0] == "in put"
    args = [a.name for a in imp.function.arguments]
    assert args == ["in_put", "a_b", "a_b_0", "_0weight"]
    text = module_text(imp.module)
    assert module_text(parse_module(text)) == text
