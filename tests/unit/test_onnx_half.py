"""f16 products, convolutions and softmax match ONNX's reference (NumPy, which sums them in
f32 and rounds once) in compiled code, to the conformance suite's tolerance: computed in f32
and rounded once by the importer (ops/common.in_f32)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

from onnx import helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from onnxlib import compiled_outputs, model, normal  # noqa: E402

H = np.float16


def test_half_precision_attention_matches_the_reference(tmp_path):
    q, k, v = (
        normal(2, 8, 64, dtype=H),
        normal(2, 64, 8, seed=1, dtype=H),
        normal(2, 8, 64, seed=2, dtype=H),
    )
    nodes = [
        helper.make_node("MatMul", ["q", "k"], ["s"]),
        helper.make_node("Softmax", ["s"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["y"]),
    ]
    inputs = {"q": q, "k": k, "v": v}
    m = model(nodes, inputs, ["s", "p", "y"], opset=13)
    want = ReferenceEvaluator(m).run(None, inputs)
    for g, w in zip(compiled_outputs(m, inputs, tmp_path), want):
        assert g.dtype == np.float16
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-7)


def test_half_precision_convolution_matches_the_reference(tmp_path):
    x, w = normal(1, 8, 9, 9, dtype=H), normal(4, 8, 3, 3, seed=1, dtype=H)
    inputs = {"x": x, "w": w}
    m = model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], inputs, ["y"])
    want = ReferenceEvaluator(m).run(None, inputs)[0]
    got = compiled_outputs(m, inputs, tmp_path)[0]
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-7)
