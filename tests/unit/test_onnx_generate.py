"""Operators that make a tensor of a shape known at import (ConstantOfShape, EyeLike, Range,
OneHot, the windows) against ONNX's reference evaluator, their shape inputs fed at run time as
the conformance tests feed them."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

import onnx  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from onnxlib import check, single  # noqa: E402

from dlvm.diagnostics import DiagnosticError  # noqa: E402
from dlvm.onnx import import_model  # noqa: E402


def test_constant_of_shape_of_a_run_time_shape():
    shape = np.array([4, 3, 2], np.int64)
    value = numpy_helper.from_array(np.array([7], np.int32))
    check(single("ConstantOfShape", {"s": shape}, opset=25, value=value), {"s": shape})
    check(single("ConstantOfShape", {"s": shape}, opset=20), {"s": shape})


@pytest.mark.parametrize("k, dtype", [(0, None), (1, onnx.TensorProto.DOUBLE), (-2, None)])
def test_eye_like(k, dtype):
    x = np.zeros((4, 5), np.int32)
    attrs = {"k": k} if dtype is None else {"k": k, "dtype": dtype}
    check(single("EyeLike", {"x": x}, opset=22, **attrs), {"x": x})


@pytest.mark.parametrize(
    "start, limit, delta", [(1.0, 5.0, 2.0), (10, 6, -3), (np.float16(0.5), np.float16(3), 0.25)]
)
def test_range_with_run_time_bounds(start, limit, delta):
    dtype = np.asarray(start).dtype if not isinstance(start, int) else np.int32
    feeds = {n: np.array(v, dtype) for n, v in (("s", start), ("l", limit), ("d", delta))}
    check(single("Range", feeds, opset=27), feeds)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot_with_negative_and_out_of_range_indices(axis):
    # Whole numbers: ONNX casts float indices to int64 (truncating, as the import does), where
    # its reference compares them unconverted.
    ids = np.array([[0, -2, 7], [4, -9, 2]], np.float32)
    feeds = {"i": ids, "depth": np.array(5.0, np.float32), "v": np.array([2, 9], np.int64)}
    check(single("OneHot", feeds, opset=11, axis=axis), feeds)


@pytest.mark.parametrize("op", ["BlackmanWindow", "HammingWindow", "HannWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
def test_windows(op, periodic):
    # The size decides the output's shape: an input fixed at import (ops/spectral.py).
    size = np.array(10, np.int32)
    imp = check(
        single(op, {"n": size}, opset=17, periodic=periodic), {"n": size}, values={"n": size}
    )
    assert not imp.inputs


def test_a_range_of_unknown_length_is_refused():
    nodes = [helper.make_node("Range", ["s", "l", "d"], ["y"], name="r")]
    scalar = [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, []) for n in "sld"]
    out = [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["n"])]
    graph = helper.make_graph(nodes, "g", scalar, out)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(DiagnosticError) as e:
        import_model(m)
    assert [d.render() for d in e.value.diagnostics] == [
        "error: <onnx model>: node 'r' (Range, opset 17): not supported: the shape of output "
        "'y' must be known at import (declared, or inferred from inputs known then)"
    ]
