"""BFLOAT16 models import as the IR's bf16: inputs, initializers and outputs are
ml_dtypes.bfloat16 arrays, products sum in f32 and round once (docs/ir.md#bf16), and a Cast
reaches bf16 from f32 and back. Compiled outputs against NumPy in f32, rounded to bf16."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

import ml_dtypes  # noqa: E402  (a dependency of onnx)
from onnx import TensorProto, helper  # noqa: E402
from onnxlib import compiled_outputs, model, normal  # noqa: E402

from dlvm.ir.types import DataType  # noqa: E402
from dlvm.onnx import import_model  # noqa: E402

BF16 = np.dtype(ml_dtypes.bfloat16)
ULP = 2.0**-7  # one bf16 step near 1, relative


def test_a_bf16_linear_layer_with_its_weights_as_initializers(tmp_path):
    x = normal(4, 24, dtype=BF16)
    w, b = normal(24, 8, seed=1, dtype=BF16), normal(8, seed=2, dtype=BF16)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["xw"]),
        helper.make_node("Add", ["xw", "b"], ["z"]),
        helper.make_node("Relu", ["z"], ["y"]),
    ]
    m = model(nodes, {"x": x}, ["y"], initializers={"w": w, "b": b})
    imp = import_model(m, shapes={"x": x.shape}, name="imported")
    assert [t.dtype for _, t in imp.inputs] == [DataType.BF16]
    assert all(p.value.dtype == BF16 for p in imp.params)
    (got,) = compiled_outputs(m, {"x": x}, tmp_path)
    assert got.dtype == BF16
    xw = (x.astype(np.float32) @ w.astype(np.float32)).astype(BF16)  # rounded once
    want = np.maximum((xw.astype(np.float32) + b.astype(np.float32)).astype(BF16), 0)
    np.testing.assert_allclose(
        got.astype(np.float32), want.astype(np.float32), rtol=2 * ULP, atol=2 * ULP
    )


def test_casts_between_float32_and_bf16_round_to_nearest_even(tmp_path):
    x = np.array([1 + 2**-8, 1 + 3 * 2**-8, -2.5, 3.4e38, 1e-30, np.inf], np.float32)
    nodes = [
        helper.make_node("Cast", ["x"], ["h"], to=TensorProto.BFLOAT16),
        helper.make_node("Cast", ["h"], ["y"], to=TensorProto.FLOAT),
    ]
    m = model(nodes, {"x": x}, ["h", "y"])
    h, y = compiled_outputs(m, {"x": x}, tmp_path)
    assert h.dtype == BF16 and y.dtype == np.float32
    np.testing.assert_array_equal(h.view(np.uint16), x.astype(BF16).view(np.uint16))
    np.testing.assert_array_equal(y, x.astype(BF16).astype(np.float32))


def test_bf16_weights_beyond_float16s_range_compile_exactly(tmp_path):
    """A dense bf16 literal holds bf16 bits (it held float16 bytes, which compiled code read as
    bf16: garbage, and which could not hold 1e30 or 1e-30)."""
    x = np.ones((2, 4), BF16)
    w = np.array([[1e30, -1e-30, 3.0, 1 + 2**-7]] * 2, BF16)
    m = model([helper.make_node("Mul", ["x", "w"], ["y"])], {"x": x}, ["y"], initializers={"w": w})
    (got,) = compiled_outputs(m, {"x": x}, tmp_path)
    np.testing.assert_array_equal(got.view(np.uint16), w.view(np.uint16))


def test_dense_literal_bytes_of_bf16_are_its_bits():
    from dlvm.ir.literals import dense_array, dense_bytes

    values = np.array([1e30, -1e-30, 1 + 2**-8, 1 + 3 * 2**-8, np.inf, np.nan], np.float64)
    data = dense_bytes(values, DataType.BF16)
    np.testing.assert_array_equal(np.frombuffer(data, "<u2"), values.astype(BF16).view(np.uint16))
    want = values.astype(BF16).astype(np.float32)
    np.testing.assert_array_equal(dense_array(data, DataType.BF16), want)
