"""Spatial operators: pooling with dilations, ceil_mode and MaxPool's Indices, LpPool, and the
rest of the spatial family, imported and run against ONNX's reference evaluator (or NumPy where
the reference is wrong), and one model of them all through a compiled library."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

from irlib import ir_library  # noqa: E402
from onnx import helper  # noqa: E402
from onnxlib import check, model, normal, run, single  # noqa: E402

import dlvm  # noqa: E402
from dlvm.diagnostics import DiagnosticError  # noqa: E402
from dlvm.interp import run_function  # noqa: E402
from dlvm.ir import module_text  # noqa: E402
from dlvm.onnx import import_model  # noqa: E402

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


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_space_to_depth_and_back(mode):
    x = normal(2, 8, 4, 6)
    check(single("DepthToSpace", {"x": x}, blocksize=2, mode=mode), {"x": x})
    if mode == "DCR":  # SpaceToDepth has a mode only from opset 25 on
        check(single("SpaceToDepth", {"x": x}, blocksize=2), {"x": x})


def test_instance_and_group_normalization():
    x = normal(2, 4, 3, 5)
    per_channel = {"s": normal(4, seed=1), "b": normal(4, seed=2)}
    check(single("InstanceNormalization", {"x": x}, per_channel, epsilon=1e-3), {"x": x}, atol=1e-5)
    m = single("GroupNormalization", {"x": x}, per_channel, opset=21, num_groups=2)
    check(m, {"x": x}, atol=1e-5)


def test_mean_variance_normalization():
    x = normal(2, 3, 4, 5)
    check(single("MeanVarianceNormalization", {"x": x}), {"x": x}, atol=1e-5)
    check(single("MeanVarianceNormalization", {"x": x}, axes=[1, 3]), {"x": x}, atol=1e-5)


@pytest.mark.parametrize("mode", ["edge", "reflect", "wrap"])
def test_pad_modes(mode):
    x = normal(2, 3, 4)
    pads = {"pads": np.array([0, 2, 3, 0, 1, 5], np.int64)}
    check(single("Pad", {"x": x}, pads, opset=19, mode=mode), {"x": x})
    old = single("Pad", {"x": x}, opset=6, mode=mode, pads=[0, 1, 0, 1, 2, 3])
    check(old, {"x": x})


@pytest.mark.parametrize("lengths", [[3, 8], [6, 2], [5, 5]])
def test_center_crop_pad(lengths):
    x = normal(2, 5, 4)
    shape = {"shape": np.array(lengths, np.int64)}
    check(single("CenterCropPad", {"x": x}, shape, opset=18, axes=[1, -1]), {"x": x})


@pytest.mark.parametrize(
    "attrs",
    [{}, {"strides": [2, 1], "pads": [1, 0, 1, 1]}, {"dilations": [2, 1]}],
)
def test_col2im(attrs):
    image, block = np.array([5, 4], np.int64), np.array([2, 3], np.int64)
    strides, dilations = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    pads = attrs.get("pads", [0, 0, 0, 0])
    count = 1
    for i in range(2):
        span = dilations[i] * (block[i] - 1) + 1
        count *= (image[i] + pads[i] + pads[i + 2] - span) // strides[i] + 1
    x = normal(2, 3 * 6, int(count))
    m = single("Col2Im", {"x": x}, {"image": image, "block": block}, opset=18, **attrs)
    check(m, {"x": x})


def test_max_unpool_of_max_pool_indices():
    x = normal(1, 2, 5, 5)
    pool = helper.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[3, 3], strides=[1, 1])
    unpool = helper.make_node("MaxUnpool", ["p", "i"], ["y"], kernel_shape=[3, 3], strides=[1, 1])
    m = model([pool, unpool], {"x": x}, ["p", "i", "y"], opset=18)
    p, i, y = run(import_model(m), {"x": x})
    # Compared with NumPy: onnx 1.23's reference MaxUnpool writes values at other places.
    # Overlapping windows share maxima: indices repeat, and each value is written once.
    expected = np.zeros(x.size, np.float32)
    expected[i.ravel()] = p.ravel()
    assert len(set(i.ravel())) < i.size
    np.testing.assert_array_equal(y, expected.reshape(x.shape))


def test_max_unpool_into_a_larger_output_shape():
    x, ids = normal(1, 1, 2, 2), np.array([[[[5, 7], [13, 15]]]], np.int64)
    shape = {"shape": np.array([1, 1, 5, 5], np.int64)}
    node = helper.make_node(
        "MaxUnpool", ["x", "ids", "shape"], ["y"], kernel_shape=[2, 2], strides=[2, 2]
    )
    check(model([node], {"x": x, "ids": ids}, ["y"], shape, opset=18), {"x": x, "ids": ids})


def f32(*values: float) -> np.ndarray:
    return np.array(values, np.float32)


RESIZE = [
    ({"mode": "cubic"}, {"scales": f32(1, 1, 0.6, 1.7)}),
    (
        {"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1},
        {"scales": f32(1, 1, 2, 0.5)},
    ),
    (
        {"mode": "cubic", "coordinate_transformation_mode": "align_corners"},
        {"sizes": np.array([2, 3, 7, 3], np.int64)},
    ),
    ({"mode": "linear", "antialias": 1}, {"scales": f32(1, 1, 0.5, 0.6)}),
    ({"mode": "cubic", "antialias": 1}, {"sizes": np.array([2, 3, 3, 2], np.int64)}),
    (
        {"mode": "linear", "coordinate_transformation_mode": "half_pixel_symmetric"},
        {"scales": f32(1, 1, 1.7, 0.6)},
    ),
    (
        {"mode": "nearest", "keep_aspect_ratio_policy": "not_larger", "axes": [2, 3]},
        {"sizes": np.array([7, 8], np.int64)},
    ),
    (
        {"mode": "nearest", "keep_aspect_ratio_policy": "not_smaller", "axes": [3, 2]},
        {"sizes": np.array([8, 3], np.int64)},
    ),
]


@pytest.mark.parametrize("attrs, given", RESIZE)
def test_resize(attrs, given):
    x = normal(2, 3, 4, 5)
    inputs = ["x", "", "scales" if "scales" in given else "", "sizes" if "sizes" in given else ""]
    node = helper.make_node("Resize", inputs, ["y"], **attrs)
    check(model([node], {"x": x}, ["y"], given, opset=19), {"x": x}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_tf_crop_and_resize(mode):
    x = normal(1, 2, 4, 5)
    given = {"roi": f32(0.4, -0.2, 0.9, 0.7), "sizes": np.array([3, 4], np.int64)}
    attrs = {"coordinate_transformation_mode": "tf_crop_and_resize", "axes": [2, 3]}
    node = helper.make_node(
        "Resize", ["x", "roi", "", "sizes"], ["y"], mode=mode, extrapolation_value=7.0, **attrs
    )
    check(model([node], {"x": x}, ["y"], given, opset=19), {"x": x}, rtol=1e-4, atol=1e-5)


GRID_SAMPLE = [
    {"mode": mode, "padding_mode": padding, "align_corners": aligned}
    for mode in ("nearest", "linear", "cubic")
    for padding in ("zeros", "border", "reflection")
    for aligned in (0, 1)
]


@pytest.mark.parametrize("attrs", GRID_SAMPLE)
def test_grid_sample(attrs):
    x = normal(2, 3, 4, 5)
    # Coordinates well past the input, for every padding mode to act; none at a half, where
    # nearest would round by the float error.
    grid = np.random.default_rng(1).uniform(-1.7, 1.7, (2, 3, 6, 2)).astype(np.float32)
    m = single("GridSample", {"x": x, "grid": grid}, opset=20, **attrs)
    check(m, {"x": x, "grid": grid}, rtol=1e-4, atol=1e-5)


def test_grid_sample_3d():
    x, grid = normal(1, 2, 3, 4, 5), normal(1, 2, 3, 2, 3, seed=1)
    m = single("GridSample", {"x": x, "grid": grid}, opset=20, mode="linear")
    check(m, {"x": x, "grid": grid}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("aligned", [0, 1])
@pytest.mark.parametrize("size", [[2, 3, 4, 5], [2, 3, 2, 4, 3]])
def test_affine_grid(aligned, size):
    r = len(size) - 2
    theta = normal(2, r, r + 1)
    known = {"size": np.array(size, np.int64)}
    m = single("AffineGrid", {"theta": theta}, known, opset=20, align_corners=aligned)
    check(m, {"theta": theta}, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("transform", ["half_pixel", "output_half_pixel"])
def test_roi_align(mode, transform):
    x = normal(2, 3, 6, 7)
    rois = np.array([[0.5, 1, 5, 4.5], [-2, 2, 3, 9], [2, 0.2, 2.4, 0.6]], np.float32)
    ids = np.array([1, 0, 1], np.int64)
    attrs = {"mode": mode, "coordinate_transformation_mode": transform}
    inputs = {"x": x, "rois": rois, "ids": ids}
    m = single(
        "RoiAlign",
        inputs,
        opset=16,
        output_height=3,
        output_width=2,
        sampling_ratio=2,
        spatial_scale=0.9,
        **attrs,
    )
    check(m, inputs, rtol=1e-4, atol=1e-5)


def test_refused_attributes_are_located_diagnostics():
    x, rois, ids = normal(1, 1, 4, 4), np.zeros((1, 4), np.float32), np.zeros(1, np.int64)
    inputs = {"x": x, "rois": rois, "ids": ids}
    m = single("RoiAlign", inputs, opset=16)  # sampling_ratio 0: adaptive
    with pytest.raises(DiagnosticError) as e:
        import_model(m)
    assert [d.render() for d in e.value.diagnostics] == [
        "error: <onnx model>: node 'the_roialign' (RoiAlign, opset 16): not supported: "
        "sampling_ratio=0 (adaptive: the number of samples would depend on each roi's size; "
        "give a fixed sampling_ratio)"
    ]


@pytest.mark.parametrize(
    "attrs",
    [
        {},
        {"group": 2, "offset_group": 2, "strides": [2, 1], "pads": [1, 0, 1, 1]},
        {"dilations": [2, 1], "offset_group": 4},
    ],
)
def test_deform_conv(attrs):
    x = normal(2, 4, 5, 6)
    groups, offset_groups = attrs.get("group", 1), attrs.get("offset_group", 1)
    w = normal(6, 4 // groups, 2, 3, seed=1)
    sh, sw = attrs.get("strides", [1, 1])
    dh, dw = attrs.get("dilations", [1, 1])
    top, left, bottom, right = attrs.get("pads", [0, 0, 0, 0])
    oh = (5 + top + bottom - (dh + 1)) // sh + 1
    ow = (6 + left + right - (2 * dw + 1)) // sw + 1
    offset = normal(2, offset_groups * 6 * 2, oh, ow, seed=2) * 1.5
    mask = np.random.default_rng(3).uniform(0, 1, (2, offset_groups * 6, oh, ow))
    inputs = {"x": x, "w": w, "offset": offset}
    known = {"b": normal(6, seed=4), "mask": mask.astype(np.float32)}
    m = single("DeformConv", inputs, known, opset=19, kernel_shape=[2, 3], **attrs)
    check(m, inputs, rtol=1e-4, atol=1e-5)


def test_the_spatial_operators_compile(tmp_path):
    """One model of them all, through a compiled library, against the interpreter."""
    x = normal(2, 4, 6, 6)
    grid = np.random.default_rng(1).uniform(-1.2, 1.2, (2, 3, 4, 2)).astype(np.float32)
    rois = np.array([[0.5, 1, 5, 4.5], [2, 0, 6, 3]], np.float32)
    ids = np.array([1, 0], np.int64)
    offset = normal(2, 2 * 4 * 2, 5, 5, seed=2)
    n = helper.make_node
    nodes = [
        n("MaxPool", ["x"], ["dilated"], kernel_shape=[2, 2], dilations=[2, 1], pads=[1, 1, 1, 1]),
        n("MaxPool", ["x"], ["mp", "mi"], kernel_shape=[3, 2], strides=[1, 2]),
        n("MaxUnpool", ["mp", "mi"], ["unpooled"], kernel_shape=[3, 2], strides=[1, 2]),
        n("LpPool", ["x"], ["lp"], kernel_shape=[3, 3], strides=[2, 2], p=3),
        n("AveragePool", ["x"], ["avg"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
        n("Resize", ["x", "", "scales"], ["cubic"], mode="cubic", antialias=1),
        n("GridSample", ["x", "grid"], ["sampled"], mode="cubic", padding_mode="reflection"),
        n("RoiAlign", ["x", "rois", "ids"], ["aligned"], sampling_ratio=2, output_height=2),
        n("DeformConv", ["x", "w", "offset"], ["deformed"], kernel_shape=[2, 2], offset_group=2),
        n("Pad", ["x", "pads"], ["reflected"], mode="reflect"),
        n("SpaceToDepth", ["x"], ["depth"], blocksize=2),
        n("GroupNormalization", ["x", "scale", "bias"], ["normed"], num_groups=2),
        n("Col2Im", ["cols", "image", "block"], ["image_out"]),
    ]
    known = {
        "scales": np.array([1, 1, 0.5, 0.7], np.float32),
        "w": normal(3, 4, 2, 2, seed=3),
        "pads": np.array([0, 0, 2, 1, 0, 0, 1, 3], np.int64),
        "scale": normal(4, seed=4),
        "bias": normal(4, seed=5),
        "image": np.array([4, 5], np.int64),
        "block": np.array([2, 2], np.int64),
    }
    inputs = {
        "x": x,
        "grid": grid,
        "rois": rois,
        "ids": ids,
        "offset": offset,
        "cols": normal(2, 8, 12, seed=6),
    }
    outs = [
        "dilated",
        "mp",
        "mi",
        "unpooled",
        "lp",
        "avg",
        "cubic",
        "sampled",
        "aligned",
        "deformed",
        "reflected",
        "depth",
        "normed",
        "image_out",
    ]
    imp = import_model(model(nodes, inputs, outs, known, opset=22), name="spatial")
    lib = dlvm.load(ir_library(module_text(imp.module), "spatial", tmp_path))
    args = [inputs[name] for name, _ in imp.inputs] + [p.value for p in imp.params]
    got = lib.spatial(*args)
    want = run_function(imp.module, "spatial", args)
    assert len(got) == len(want) == len(outs)
    for g, w, name in zip(got, want, outs):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-4, atol=1e-5, err_msg=name)
