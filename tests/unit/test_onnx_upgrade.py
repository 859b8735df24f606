"""Models older than opset 7 (dlvm/onnx/upgrade.py): converted to opset 7 by onnx's version
converter before import, so opset 6's `broadcast`/`axis` arithmetic and `is_test` batch
normalization, and PRelu's per-channel slope, mean what they meant there."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

from onnx import helper, numpy_helper  # noqa: E402
from onnxlib import normal, run  # noqa: E402

from dlvm.diagnostics import DiagnosticError  # noqa: E402
from dlvm.onnx import import_model  # noqa: E402


def opset6(nodes, inputs, output, shape, inits=None, opset=6):
    ins = [
        helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, v.shape) for n, v in inputs.items()
    ]
    out = helper.make_tensor_value_info(output, onnx.TensorProto.FLOAT, shape)
    inits = [numpy_helper.from_array(v, n) for n, v in (inits or {}).items()]
    graph = helper.make_graph(nodes, "old", ins, [out], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_opset6_add_broadcasts_along_the_axis_it_names():
    a, b = normal(2, 3, 4), normal(2, 3, seed=1)
    node = helper.make_node("Add", ["a", "b"], ["y"], broadcast=1, axis=0)
    imp = import_model(opset6([node], {"a": a, "b": b}, "y", (2, 3, 4)))
    (got,) = run(imp, {"a": a, "b": b})
    np.testing.assert_allclose(got, a + b[:, :, None], rtol=1e-6)


def test_opset6_prelu_applies_a_vector_slope_per_channel():
    x, slope = normal(2, 3, 4, 5), np.array([0.1, 0.2, 0.3], np.float32)
    node = helper.make_node("PRelu", ["x", "slope"], ["y"])
    imp = import_model(opset6([node], {"x": x}, "y", x.shape, {"slope": slope}))
    (got,) = run(imp, {"x": x})
    s = slope[None, :, None, None]
    np.testing.assert_allclose(got, np.where(x < 0, x * s, x), rtol=1e-6)
    assert imp.params[0].value.shape == (3, 1, 1)


def test_opset6_batch_normalization_in_test_mode():
    x = normal(2, 3, 4)
    stats = {n: np.abs(normal(3, seed=i)) + 0.5 for i, n in enumerate("sbmv")}
    node = helper.make_node("BatchNormalization", ["x", *"sbmv"], ["y"], is_test=1, epsilon=1e-5)
    imp = import_model(opset6([node], {"x": x}, "y", x.shape, stats))
    (got,) = run(imp, {"x": x})
    s, b, m, v = (stats[k][None, :, None] for k in "sbmv")
    np.testing.assert_allclose(got, (x - m) / np.sqrt(v + 1e-5) * s + b, rtol=1e-5)


def test_a_model_the_converter_cannot_convert_is_a_located_error():
    # onnx 1.23's converter refuses a legacy broadcast of a vector into the middle axis of a
    # rank-3 tensor (its check compares the wrong dimensions).
    a, b = normal(2, 3, 4), normal(3, seed=1)
    node = helper.make_node("Add", ["a", "b"], ["y"], broadcast=1, axis=1)
    with pytest.raises(DiagnosticError) as e:
        import_model(opset6([node], {"a": a, "b": b}, "y", (2, 3, 4)), label="old.onnx")
    text = str(e.value)
    assert "old.onnx: opset 6 is older than the importer's oldest (7)" in text
    assert "help: convert the model to opset 7 or newer" in text
