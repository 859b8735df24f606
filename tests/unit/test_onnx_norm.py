"""BatchNormalization (inference and training), LayerNormalization, Softmax and LogSoftmax on
both sides of opset 13, and Dropout, imported and run against ONNX's reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

from onnx import helper  # noqa: E402
from onnxlib import check, model, normal, positive, run, single  # noqa: E402

from dlvm.onnx import import_model  # noqa: E402

X = normal(2, 3, 4, 5)
STATS = {
    "scale": positive(3, seed=1),
    "bias": normal(3, seed=2),
    "mean": normal(3, seed=3),
    "var": positive(3, seed=4),
}


PER_CHANNEL = (1, 3, 1, 1)


def normalised(mean: np.ndarray, var: np.ndarray, eps: float) -> np.ndarray:
    scale, bias = STATS["scale"].reshape(PER_CHANNEL), STATS["bias"].reshape(PER_CHANNEL)
    return (X - mean) / np.sqrt(var + eps) * scale + bias


@pytest.mark.parametrize("opset", [14, 15])
def test_batch_norm_inference_reads_running_statistics(opset):
    imp = check(single("BatchNormalization", {"x": X}, STATS, opset=opset, epsilon=1e-3), {"x": X})
    assert [(p.name, p.kind) for p in imp.params] == [
        ("scale", "param"),
        ("bias", "param"),
        ("mean", "buffer"),
        ("var", "buffer"),
    ]


def test_batch_norm_before_opset_14():
    # Compared with the formula: onnx 1.23's reference BatchNormalization of opset 9 is not it.
    m = single("BatchNormalization", {"x": X}, STATS, opset=9, epsilon=1e-3)
    y = run(import_model(m), {"x": X})[0]
    expected = normalised(
        STATS["mean"].reshape(PER_CHANNEL), STATS["var"].reshape(PER_CHANNEL), 1e-3
    )
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)


def test_batch_norm_training_uses_the_batch_and_updates_the_statistics():
    node = helper.make_node(
        "BatchNormalization",
        ["x", *STATS],
        ["y", "run_mean", "run_var"],
        training_mode=1,
        momentum=0.8,
    )
    m = model([node], {"x": X}, ["y", "run_mean", "run_var"], STATS, opset=15)
    check(m, {"x": X}, rtol=1e-4, atol=1e-5)


def test_batch_norm_follows_the_importer_in_training():
    m = single("BatchNormalization", {"x": X}, STATS, opset=15)
    y = run(import_model(m, training=True), {"x": X})[0]
    mu, var = X.mean(axis=(0, 2, 3), keepdims=True), X.var(axis=(0, 2, 3), keepdims=True)
    np.testing.assert_allclose(y, normalised(mu, var, 1e-5), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("axis", [-1, 2, 1])
def test_layer_norm(axis):
    shape = X.shape[axis:]
    params = {"g": positive(*shape, seed=1), "b": normal(*shape, seed=2)}
    check(
        single("LayerNormalization", {"x": X}, params, axis=axis, epsilon=1e-4),
        {"x": X},
        rtol=1e-4,
        atol=1e-5,
    )


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [-1, 1])
def test_softmax_along_one_axis_from_opset_13(op, axis):
    check(single(op, {"x": X}, axis=axis), {"x": X})


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [1, 2, -1])
def test_softmax_over_the_trailing_axes_before_opset_13(op, axis):
    # Compared with the specification (the input as a matrix [prod(dims before axis), the
    # rest], normalised along its rows): onnx 1.23's reference applies opset 13's rule.
    y = run(import_model(single(op, {"x": X}, opset=11, axis=axis)), {"x": X})[0]
    rows = X.reshape(int(np.prod(X.shape[:axis])), -1).astype(np.float64)
    shifted = rows - rows.max(axis=1, keepdims=True)
    log = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    expected = (log if op == "LogSoftmax" else np.exp(log)).reshape(X.shape)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)


def test_dropout_is_the_identity_in_inference():
    m = single("Dropout", {"x": X}, {"ratio": np.array(0.3, np.float32)}, opset=13)
    imp = check(m, {"x": X})
    assert imp.params == []  # the ratio is read at import, not a parameter


def test_dropout_in_training_drops_and_rescales():
    m = single("Dropout", {"x": X}, {"ratio": np.array(0.25, np.float32)}, opset=13)
    y = run(import_model(m, training=True), {"x": X})[0]
    kept = y != 0
    np.testing.assert_allclose(y[kept], X[kept] / 0.75, rtol=1e-6)
    assert 0.5 < kept.mean() < 0.95


def test_layer_norm_statistics_outputs():
    params = {"g": positive(4, 5, seed=1), "b": normal(4, 5, seed=2)}
    node = helper.make_node("LayerNormalization", ["x", "g", "b"], ["y", "mu", "inv"], axis=2)
    check(model([node], {"x": X}, ["y", "mu", "inv"], params), {"x": X}, rtol=1e-4, atol=1e-5)


def test_rms_and_lp_normalisation_and_hardmax():
    check(single("RMSNormalization", {"x": X}, {"g": positive(5, seed=1)}, opset=23), {"x": X})
    with_zero = X.copy()
    with_zero[0, 0] = 0  # a zero norm: zeros, not NaN
    check(single("LpNormalization", {"x": with_zero}, axis=1), {"x": with_zero})
    # p=1 on positive numbers: onnx 1.23's reference sums x rather than |x|.
    x = positive(2, 3, 4)
    check(single("LpNormalization", {"x": x}, axis=-1, p=1), {"x": x})
    ties = np.round(X)
    check(single("Hardmax", {"x": ties}, opset=13, axis=1), {"x": ties})


def test_dropout_mask_output_in_inference():
    m = single("Dropout", {"x": X}, opset=13, outputs=2)
    check(m, {"x": X})


@pytest.mark.parametrize("size", [3, 4])
def test_local_response_normalisation(size):
    # Compared with the specification: onnx 1.23's reference sums over the wrong axis's range.
    m = single("LRN", {"x": X}, size=size, alpha=1e-2, beta=0.7, bias=2.0)
    y = run(import_model(m), {"x": X})[0]
    channels = X.shape[1]
    square = np.zeros_like(X)
    for c in range(channels):
        lo, hi = max(0, c - (size - 1) // 2), min(channels - 1, c + -(-(size - 1) // 2))
        square[:, c] = (X[:, lo : hi + 1] ** 2).sum(axis=1)
    np.testing.assert_allclose(y, X / (2.0 + 1e-2 / size * square) ** 0.7, rtol=1e-5)


def test_running_statistics_of_an_inference_export_as_docs_onnx_md_says():
    m = single("BatchNormalization", {"x": X}, STATS, opset=15, momentum=0.9)
    (bn,) = m.graph.node
    bn.attribute.append(helper.make_attribute("training_mode", 1))
    bn.output.extend(["next_mean", "next_var"])
    m.graph.output.extend(
        [helper.make_tensor_value_info(n, 1, [3]) for n in ("next_mean", "next_var")]
    )
    _, next_mean, next_var = run(import_model(m, training=True), {"x": X})
    mu, var = X.mean(axis=(0, 2, 3)), X.var(axis=(0, 2, 3))
    np.testing.assert_allclose(next_mean, 0.9 * STATS["mean"] + 0.1 * mu, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(next_var, 0.9 * STATS["var"] + 0.1 * var, rtol=1e-5, atol=1e-6)
