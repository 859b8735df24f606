"""Bit operators (BitShift, BitwiseAnd/Or/Xor/Not, BitCast) against ONNX's reference evaluator,
shift amounts past the width and negative ones included."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

import onnx  # noqa: E402
from onnxlib import check, single  # noqa: E402

from dlvm.diagnostics import DiagnosticError  # noqa: E402
from dlvm.onnx import import_model  # noqa: E402

A = np.array([[5, -5, 127, -128, 1, 64]], np.int8)
AMOUNTS = np.array([[1, 1, 9, 7, -1, 2]], np.int8)


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_bit_shift_defines_every_amount(direction, dtype):
    a, b = A.astype(dtype), AMOUNTS.astype(dtype)
    check(single("BitShift", {"a": a, "b": b}, opset=28, direction=direction), {"a": a, "b": b})


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
def test_bitwise_binary_broadcasts(op):
    a = np.array([[12, -1, 5], [0, 7, -100]], np.int16)
    b = np.array([[10, 3, -6]], np.int16)
    check(single(op, {"a": a, "b": b}, opset=18), {"a": a, "b": b})


def test_bitwise_not_and_bit_cast():
    a = np.array([[12, -1, 5], [0, 7, -100]], np.int32)
    check(single("BitwiseNot", {"a": a}, opset=18), {"a": a})
    x = np.array([1.0, -2.5, np.inf], np.float32)
    check(single("BitCast", {"x": x}, opset=26, to=onnx.TensorProto.INT32), {"x": x})
    check(single("BitCast", {"x": a}, opset=26, to=onnx.TensorProto.FLOAT), {"x": a})


def test_a_shift_direction_other_than_left_or_right_is_refused():
    a = np.array([1, 2], np.int32)
    m = single("BitShift", {"a": a, "b": a}, opset=28, direction="LEFT")
    m.graph.node[0].attribute[0].s = b"UP"
    with pytest.raises(DiagnosticError) as e:
        import_model(m)
    assert [d.render() for d in e.value.diagnostics] == [
        "error: <onnx model>: node 'the_bitshift' (BitShift, opset 28): not supported: "
        "direction='UP' is not 'LEFT' or 'RIGHT'"
    ]
