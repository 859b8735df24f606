"""QuantizeLinear, DequantizeLinear and QLinearMatMul on signed integers against ONNX's reference
evaluator: halves rounded to even, saturation, per-tensor and per-axis scales."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

from onnxlib import check, single  # noqa: E402

from dlvm.diagnostics import DiagnosticError  # noqa: E402
from dlvm.onnx import import_model  # noqa: E402

X = np.array([[0.0, 1.0, 2.5, 3.0, -3.0, 300.0], [-500.0, 7.5, -7.5, 0.4, 100.0, 1e9]], np.float32)


@pytest.mark.parametrize("dtype", [np.int8, np.int16])
def test_quantize_rounds_halves_to_even_and_saturates(dtype):
    feeds = {"x": X, "s": np.array(2.0, np.float32), "z": np.array(3, dtype)}
    check(single("QuantizeLinear", feeds, opset=21), feeds)


def test_quantize_and_dequantize_per_axis():
    feeds = {"x": X, "s": np.array([2.0, 0.5], np.float32), "z": np.array([1, -2], np.int8)}
    check(single("QuantizeLinear", feeds, opset=21, axis=0), feeds)
    q = np.array([[-128, 0, 5], [127, -3, 40]], np.int8)
    feeds = {"q": q, "s": np.array([0.5, 2.0, 4.0], np.float32), "z": np.array([1, 0, -1], np.int8)}
    check(single("DequantizeLinear", feeds, opset=21, axis=1), feeds)


@pytest.mark.parametrize("scale_type", [np.float32, np.float16])
def test_qlinear_matmul(scale_type):
    rng = np.random.default_rng(3)
    feeds = {
        "a": rng.integers(-128, 128, (2, 3, 4)).astype(np.int8),
        "sa": np.array([0.0066], scale_type),
        "za": np.array([-14], np.int8),
        "b": rng.integers(-128, 128, (2, 4, 3)).astype(np.int8),
        "sb": np.array([0.00705], scale_type),
        "zb": np.array([-13], np.int8),
        "sy": np.array([0.0107], scale_type),
        "zy": np.array([-9], np.int8),
    }
    check(single("QLinearMatMul", feeds, opset=21), feeds)


def test_blocked_quantisation_is_refused():
    feeds = {"x": X, "s": np.ones((2, 3), np.float32), "z": np.zeros((2, 3), np.int8)}
    m = single("QuantizeLinear", feeds, opset=21, axis=1, block_size=2)
    with pytest.raises(DiagnosticError) as e:
        import_model(m)
    assert [d.render() for d in e.value.diagnostics] == [
        "error: <onnx model>: node 'the_quantizelinear' (QuantizeLinear, opset 21): not "
        "supported: block_size (blocked quantisation)"
    ]
