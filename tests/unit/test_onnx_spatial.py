"""Spatial operators: pooling with dilations, ceil_mode and MaxPool's Indices, LpPool, and the
rest of the spatial family, imported and run against ONNX's reference evaluator (or NumPy where
the reference is wrong), and one model of them all through a compiled library."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

from onnxlib import check, normal, run, single  # noqa: E402

X = normal(2, 3, 7, 6)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool"])
@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [2, 2], "dilations": [2, 2]},
        {"kernel_shape": [3, 2], "dilations": [2, 3], "strides": [2, 1], "pads": [1, 1, 1, 1]},
    ],
)
def test_dilated_pools(op, attrs):
    check(single(op, {"x": X}, opset=19, **attrs), {"x": X}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("include", [0, 1])
def test_average_pool_ceil_mode(include):
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}
    m = single("AveragePool", {"x": X}, count_include_pad=include, pads=[1, 1, 1, 1], **attrs)
    check(m, {"x": X})


@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool(p):
    m = single("LpPool", {"x": X}, opset=18, p=p, kernel_shape=[2, 3], strides=[1, 2])
    check(m, {"x": X}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("order", [0, 1])
def test_max_pool_indices(order):
    x = normal(2, 2, 5, 4)
    x[0, 0, 0, :2] = 9.0  # equal maxima: the first in row-major order is the one
    attrs = {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 0]}
    m = single("MaxPool", {"x": x}, outputs=2, storage_order=order, **attrs)
    _, idx = run(check(m, {"x": x}), {"x": x})
    assert idx[0, 0, 0, 0] == 0 and idx.dtype == np.int64


def test_pools_before_opset_7():
    m = single("MaxPool", {"x": X}, opset=6, kernel_shape=[2, 2])
    check(m, {"x": X})
