"""samples/transformer.tel and samples/resnet.tel built into libraries: each trains (a finite
loss that falls), the transformer's logits match a NumPy float64 model of the same network
(embeddings, layer_norm, causal multi-head attention, gelu MLP) for fixed parameters, and the
resnet's infer normalises with the running statistics its train steps keep in buffers (the
NumPy models are tel_reference's)."""

from __future__ import annotations

import importlib.util
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tel_reference as ref

import dlvm

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


def load_driver():
    """samples/transformer_train.py as a module (it is a script, not a package)."""
    spec = importlib.util.spec_from_file_location(
        "transformer_train", SAMPLES / "transformer_train.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- the transformer -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def transformer_path(sample_library):
    return sample_library("transformer")


def test_transformer_logits_match_a_numpy_model(transformer_path):
    rng = np.random.default_rng(3)
    with dlvm.load(transformer_path, seed=0) as model:
        params = {}
        for name, value in model.params.items():
            # Every parameter random, norms' gains and shifts too, so that each one counts.
            fresh = rng.normal(1.0 if name.startswith("norm") else 0.0, 0.3, value.shape)
            model.set_param(name, fresh.astype(np.float32))
            params[name] = model.get_param(name).astype(np.float64)
        ids = rng.integers(0, 32, size=(8, 16)).astype(np.int32)
        got = model.infer(ids=ids)
    expected = ref.transformer({"ids": ids}, params)["logits"]
    assert got.shape == (8, 16, 32)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_transformer_logits_are_causal(transformer_path):
    """Changing the last token changes only the last position's logits."""
    rng = np.random.default_rng(4)
    ids = rng.integers(0, 32, size=(8, 16)).astype(np.int32)
    other = ids.copy()
    other[:, -1] = (other[:, -1] + 1) % 32
    with dlvm.load(transformer_path, seed=1) as model:
        a, b = model.infer(ids=ids), model.infer(ids=other)
    np.testing.assert_array_equal(a[:, :-1], b[:, :-1])
    assert not np.allclose(a[:, -1], b[:, -1])


def test_transformer_learns_the_generated_text(transformer_path):
    driver = load_driver()
    tokens = driver.encode(driver.make_text())
    assert tokens.max() < 32
    with dlvm.load(transformer_path, seed=0) as model:
        losses = driver.train(model, tokens, steps=120, every=0)
    assert np.all(np.isfinite(losses))
    # Predicting every token evenly costs log(V); the model starts there and falls well below.
    assert abs(np.mean(losses[:5]) - math.log(32)) < 0.5
    assert np.mean(losses[-10:]) < math.log(32) - 1.0


# --- the resnet ----------------------------------------------------------------------------


def shapes(batch: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """BATCH noisy 8x8 images of one of four patterns (a horizontal bar, a vertical bar, a
    diagonal, a centred square) and their classes."""
    labels = rng.integers(0, 4, size=batch)
    images = rng.normal(0, 0.2, size=(batch, 1, 8, 8))
    for image, label in zip(images[:, 0], labels):
        row = rng.integers(1, 7)
        if label == 0:
            image[row, :] += 1
        elif label == 1:
            image[:, row] += 1
        elif label == 2:
            image[np.arange(8), np.arange(8)] += 1
        else:
            image[2:6, 2:6] += 1
    return images.astype(np.float32), labels.astype(np.int64)


@pytest.fixture(scope="module")
def resnet_path(sample_library):
    return sample_library("resnet")


def params64(model) -> dict[str, np.ndarray]:
    return {name: value.astype(np.float64) for name, value in model.params.items()}


def test_resnet_learns_the_shapes(resnet_path):
    rng = np.random.default_rng(0)
    with dlvm.load(resnet_path, seed=0) as model:
        losses = [float(model.train_step(*shapes(8, rng))) for _ in range(150)]
        x, labels = shapes(8, np.random.default_rng(99))
        accuracy = np.mean(model.infer(x).argmax(-1) == labels)
    assert np.all(np.isfinite(losses))
    assert np.mean(losses[-20:]) < 0.5 * np.mean(losses[:20])
    assert accuracy >= 0.75


def test_resnet_train_step_updates_the_running_statistics(resnet_path):
    x, labels = shapes(8, np.random.default_rng(5))
    with dlvm.load(resnet_path, seed=2) as model:
        before = params64(model)
        model.train_step(x, labels)
        after = params64(model)
    layers = ref.resnet_layers({"x": x}, before, training=True)
    for i in ("1", "2"):
        mean, var = ref.channel_stats(layers[f"conv{i}"], unbiased=True)  # as PyTorch keeps
        np.testing.assert_allclose(
            after[f"mean{i}"], 0.9 * before[f"mean{i}"] + 0.1 * mean, rtol=1e-4, atol=1e-5
        )
        np.testing.assert_allclose(
            after[f"var{i}"], 0.9 * before[f"var{i}"] + 0.1 * var, rtol=1e-4, atol=1e-5
        )


def test_resnet_infer_uses_the_running_statistics(resnet_path):
    rng = np.random.default_rng(1)
    with dlvm.load(resnet_path, seed=0) as model:
        for _ in range(30):
            model.train_step(*shapes(8, rng))
        params = params64(model)  # the buffers read back with get_param, with the parameters
        assert set(params) >= {"mean1", "var1", "mean2", "var2"}
        np.testing.assert_array_equal(params["mean1"], model.get_param("mean1"))
        x, _ = shapes(8, rng)
        got = model.infer(x)
    running = ref.resnet_layers({"x": x}, params)["y"]
    batch = ref.resnet_layers({"x": x}, params, training=True)["y"]
    np.testing.assert_allclose(got, running, rtol=1e-4, atol=1e-5)
    assert not np.allclose(got, batch, rtol=1e-3, atol=1e-3)  # the statistics do differ


def test_transformer_driver_builds_trains_and_reports(tmp_path):
    """`python samples/transformer_train.py` end to end: it builds with telc, trains, and
    reports a loss well below log(V) (it exits non-zero otherwise)."""
    script = SAMPLES / "transformer_train.py"
    command = [sys.executable, str(script), "--steps", "200", "--out", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "transformer.so").exists()
    last = result.stdout.strip().splitlines()[-1]
    first, final = (float(v) for v in re.findall(r"loss ([0-9.]+) -> ([0-9.]+)", last)[0])
    assert final < math.log(32) - 1.0 < first
