"""Training through the shipped library: samples/digits.tel built by telc learns scikit-learn's
bundled 8x8 digits to at least 95% test accuracy, and the same seed gives bit-identical
parameters twice; the model also survives save and load into a fresh object."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_digits
from telhelp import compiled_sample

import dlvm
from dlvm.codegen.build import build_library

BATCH = 32
EPOCHS = 20


@pytest.fixture(scope="module")
def digits_library(tmp_path_factory):
    compiled = compiled_sample("digits")
    path = tmp_path_factory.mktemp("digits") / "digits.so"
    build_library(compiled.module, compiled.spec, path)
    return path


def data():
    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[d.target]
    order = np.random.default_rng(0).permutation(len(x))
    x, y = x[order], y[order]
    return (x[:1440], y[:1440]), (x[1440:], y[1440:])


def train(model, x, y) -> list[float]:
    losses = []
    rng = np.random.default_rng(1)
    for _ in range(EPOCHS):
        order = rng.permutation(len(x))
        for i in range(0, len(x) - BATCH + 1, BATCH):
            batch = order[i : i + BATCH]
            losses.append(float(model.train_step(x[batch], y[batch])))
    return losses


def accuracy(model, x, y) -> float:
    right = 0
    for i in range(0, len(x), BATCH):
        xb = x[i : i + BATCH]
        n = len(xb)
        padded = np.zeros((BATCH, 64), np.float32)
        padded[:n] = xb
        probs = model.infer(padded)[:n]
        right += int(np.sum(np.argmax(probs, 1) == np.argmax(y[i : i + n], 1)))
    return right / len(x)


def test_digits_trains_to_95_percent_and_is_deterministic(digits_library, tmp_path):
    (xtr, ytr), (xte, yte) = data()
    with dlvm.load(digits_library, seed=3) as a, dlvm.load(digits_library, seed=3) as b:
        losses = train(a, xtr, ytr)
        assert np.mean(losses[-20:]) < np.mean(losses[:20]) / 4
        acc = accuracy(a, xte, yte)
        assert acc >= 0.95, f"test accuracy {acc:.3f}"
        train(b, xtr, ytr)
        for name, value in a.params.items():
            assert np.array_equal(value, b.params[name]), name
        path = tmp_path / "digits.safetensors"
        a.save(path)
    with dlvm.load(digits_library, seed=99) as fresh:
        fresh.load(path)
        assert accuracy(fresh, xte, yte) == acc
