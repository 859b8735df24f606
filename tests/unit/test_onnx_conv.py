"""Conv (pads, strides, dilations, groups, every auto_pad, 1-D and 2-D, with and without a bias)
and the poolings, imported and run against ONNX's reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

from onnxlib import check, normal, single  # noqa: E402

CONV = [
    {},
    {"pads": [1, 1, 1, 1]},
    {"pads": [0, 1, 2, 1], "strides": [2, 1]},
    {"dilations": [2, 2], "pads": [2, 2, 2, 2]},
    {"auto_pad": "VALID", "strides": [2, 2]},
    {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
    {"auto_pad": "SAME_LOWER", "strides": [2, 2]},
]


@pytest.mark.parametrize("attrs", CONV)
def test_conv2d(attrs):
    x, w, b = normal(2, 4, 7, 6), normal(6, 4, 3, 3, seed=1), normal(6, seed=2)
    check(single("Conv", {"x": x}, {"w": w, "b": b}, **attrs), {"x": x}, rtol=1e-4, atol=1e-5)


def test_grouped_and_depthwise_conv():
    x = normal(1, 4, 6, 6)
    grouped = normal(6, 2, 3, 3, seed=1)
    check(
        single("Conv", {"x": x}, {"w": grouped}, group=2, pads=[1] * 4),
        {"x": x},
        rtol=1e-4,
        atol=1e-5,
    )
    depthwise = normal(4, 1, 3, 3, seed=2)
    check(single("Conv", {"x": x}, {"w": depthwise}, group=4), {"x": x}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "attrs", [{}, {"pads": [1, 2], "strides": [2]}, {"auto_pad": "SAME_UPPER"}]
)
def test_conv1d(attrs):
    x, w, b = normal(2, 3, 9), normal(4, 3, 3, seed=1), normal(4, seed=2)
    check(single("Conv", {"x": x}, {"w": w, "b": b}, **attrs), {"x": x}, rtol=1e-4, atol=1e-5)


POOL = [
    {"kernel_shape": [2, 2], "strides": [2, 2]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 3], "pads": [1, 0, 1, 0], "strides": [1, 2]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
]
# A window that is not square, padding that differs before and after an axis: onnx 1.23's
# reference MaxPool gets its output shape wrong for either, so only the average is compared.
UNEVEN = {"kernel_shape": [3, 2], "pads": [1, 0, 1, 1]}


@pytest.mark.parametrize("attrs", POOL)
def test_maxpool(attrs):
    x = normal(2, 3, 7, 6)
    check(single("MaxPool", {"x": x}, **attrs), {"x": x})


def test_maxpool_ceil_mode():
    x = normal(1, 2, 7, 7)
    check(single("MaxPool", {"x": x}, kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1), {"x": x})


@pytest.mark.parametrize("attrs", [*POOL, UNEVEN])
@pytest.mark.parametrize("include", [0, 1])
def test_average_pool(attrs, include):
    x = normal(2, 3, 7, 6)
    check(single("AveragePool", {"x": x}, count_include_pad=include, **attrs), {"x": x})


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pooling(op):
    x = normal(2, 3, 5, 4)
    check(single(op, {"x": x}), {"x": x})


def test_pool_1d():
    x = normal(2, 3, 9)
    check(single("MaxPool", {"x": x}, kernel_shape=[3], strides=[2], pads=[1, 1]), {"x": x})
    assert np.isfinite(x).all()
