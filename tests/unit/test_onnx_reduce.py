"""Reductions with axes as an attribute (before opset 13 for ReduceSum, 18 for the others) and as
an input, keepdims either way, and ArgMax/ArgMin, against ONNX's reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

from onnxlib import check, normal, positive, single  # noqa: E402

X = normal(2, 3, 4)
REDUCTIONS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
              "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSumExp"]  # fmt: skip


@pytest.mark.parametrize("opset", [12, 18])
def test_log_sum(opset):
    x = positive(2, 3, 4)
    if opset < 18:
        check(single("ReduceLogSum", {"x": x}, opset=opset, axes=[1], keepdims=0), {"x": x})
    else:
        axes = {"axes": np.array([0, -1], np.int64)}
        check(single("ReduceLogSum", {"x": x}, axes, opset=opset), {"x": x})


@pytest.mark.parametrize("op", REDUCTIONS)
@pytest.mark.parametrize("keepdims", [0, 1])
def test_axes_as_an_input(op, keepdims):
    axes = {"axes": np.array([0, -1], np.int64)}
    check(single(op, {"x": X}, axes, opset=18, keepdims=keepdims), {"x": X}, rtol=1e-5)


@pytest.mark.parametrize("op", REDUCTIONS)
def test_axes_as_an_attribute(op):
    check(single(op, {"x": X}, opset=12, axes=[1], keepdims=0), {"x": X})


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean"])
def test_every_axis_when_none_are_given(op):
    check(single(op, {"x": X}, opset=18), {"x": X})
    check(single(op, {"x": X}, opset=11, keepdims=0), {"x": X})


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_arg_extremum(op, keepdims):
    x = np.round(positive(3, 5) * 2)  # ties: the first index wins
    check(single(op, {"x": x}, axis=1, keepdims=keepdims), {"x": x})


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_extremum_last_index(op):
    x = np.round(positive(3, 5) * 2)
    check(single(op, {"x": x}, axis=0, select_last_index=1), {"x": x})


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
def test_max_and_min_of_bools(op):
    x = normal(3, 4) > 0.3
    axes = {"axes": np.array([1], np.int64)}
    check(single(op, {"x": x}, axes, opset=20, keepdims=0), {"x": x})
