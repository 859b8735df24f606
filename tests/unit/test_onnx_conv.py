"""Conv (pads, strides, dilations, groups, every auto_pad, 1-D and 2-D, with and without a bias)
and the poolings, imported and run against ONNX's reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from onnxlib import check, normal, run, single  # noqa: E402

from dlvm.onnx import import_model  # noqa: E402

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


TRANSPOSED = [
    {},
    {"strides": [2, 2], "pads": [1, 0, 1, 1], "output_padding": [1, 0]},
    {"strides": [2, 3], "dilations": [2, 1]},
    {"strides": [2, 2], "auto_pad": "SAME_UPPER"},
]


@pytest.mark.parametrize("attrs", TRANSPOSED)
def test_conv_transpose(attrs):
    x, w, b = normal(2, 4, 3, 4), normal(4, 3, 3, 3, seed=1), normal(3, seed=2)
    m = single("ConvTranspose", {"x": x}, {"w": w, "b": b}, **attrs)
    check(m, {"x": x}, rtol=1e-4, atol=1e-5)


def test_conv_transpose_to_an_output_shape_and_in_1d():
    # One image and one channel in: onnx 1.23's reference fails on more with these options.
    x = normal(1, 1, 3, 3)
    m = single(
        "ConvTranspose",
        {"x": x},
        {"w": normal(1, 2, 3, 3, seed=1)},
        strides=[3, 2],
        output_shape=[10, 8],
    )
    check(m, {"x": x}, rtol=1e-4, atol=1e-5)
    x1 = normal(1, 1, 6)
    m1 = single(
        "ConvTranspose", {"x": x1}, {"w": normal(1, 2, 3, seed=2)}, strides=[2], pads=[1, 1]
    )
    check(m1, {"x": x1}, rtol=1e-4, atol=1e-5)


def test_grouped_conv_transpose_is_each_group_side_by_side():
    x, w = normal(1, 4, 5, 5), normal(4, 3, 3, 3, seed=1)
    # Typed by hand: onnx 1.23's reference evaluator fails on a grouped ConvTranspose.
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], group=2, strides=[2, 2])
    graph = helper.make_graph(
        [node],
        "grouped",
        [helper.make_tensor_value_info("x", 1, x.shape)],
        [helper.make_tensor_value_info("y", 1, (1, 6, 11, 11))],
        [numpy_helper.from_array(w, "w")],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    grouped = run(import_model(m), {"x": x})[0]
    halves = []
    for g in (0, 1):
        part = x[:, 2 * g : 2 * g + 2]
        m = single("ConvTranspose", {"x": part}, {"w": w[2 * g : 2 * g + 2]}, strides=[2, 2])
        halves.append(ReferenceEvaluator(m).run(None, {"x": part})[0])
    np.testing.assert_allclose(grouped, np.concatenate(halves, axis=1), rtol=1e-4, atol=1e-5)
