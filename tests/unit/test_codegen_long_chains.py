"""Chains of instructions far longer than Python's recursion limit go through the whole back end:
compute generation, the CPU kernels, differentiation and training, the CUDA kernels. Each of
these walked a fused chain recursively, and a sum of ~330 terms ended in an internal error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import dlvm
from dlvm.codegen.build import LibraryBuild, Target, build_library
from telc.driver import compile_text, optimize

# Coefficients of the chain's terms: distinct, so that no pass folds the chain into one product.
COEFFICIENTS = [1.0 + (i % 7) / 8 for i in range(3000)]


def chain(n: int) -> str:
    """`h * c0 + h * c1 + …`: one fused kernel of 2n instructions."""
    return " + ".join(f"h * {c}" for c in COEFFICIENTS[:n])


def built(text: str, directory: Path) -> Path:
    compiled = compile_text("chain.tel", text)
    optimize(compiled.module)
    path = directory / "chain.so"
    build_library(compiled.module, compiled.spec, path)
    return path


def test_a_fused_chain_of_six_thousand_instructions_computes_as_numpy(tmp_path: Path) -> None:
    text = f"x: in[3 x 5]\nh: hidden[3 x 5] = x * 0.5\ny: out[3 x 5] = {chain(3000)}\n"
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    with dlvm.load(built(text, tmp_path)) as model:
        y = model.infer(x)
    expected = 0.5 * x.astype(np.float64) * sum(COEFFICIENTS[:3000])
    np.testing.assert_allclose(y, expected, rtol=1e-4)


def test_a_long_chain_trains_as_numpy(tmp_path: Path) -> None:
    n = 1500
    text = (
        "use optim\nx: in[4 x 2]\nW: param[2 x 2] = 0.25\nh: hidden[4 x 2] = x . W\n"
        f"y: out[4 x 2] = {chain(n)}\nloss: out[] = mean(y * y)\n"
        "train minimizing loss using sgd(rate: 0.001)\n"
    )
    x = np.random.default_rng(1).standard_normal((4, 2))
    s = sum(COEFFICIENTS[:n])
    w = np.full((2, 2), 0.25)
    y = s * (x @ w)
    grad = x.T @ (2 * y * s / y.size)
    with dlvm.load(built(text, tmp_path)) as model:
        loss = model.train_step(x.astype(np.float32))
        np.testing.assert_allclose(loss, np.mean(y * y), rtol=1e-4)
        np.testing.assert_allclose(model.get_param("W"), w - 0.001 * grad, rtol=1e-4)


def test_a_long_chain_of_declarations_trains_as_numpy(tmp_path: Path) -> None:
    n = 1500
    lines = ["use optim", "x: in[4 x 2]", "W: param[2 x 2] = 0.5", "h0: hidden[4 x 2] = x . W"]
    lines += [
        f"h{i}: hidden[4 x 2] = h{i - 1} - h{i - 1} * h{i - 1} * h{i - 1} * 0.001 + 0.0005"
        for i in range(1, n)
    ]
    lines += [f"loss: out[] = mean(h{n - 1} * h{n - 1})"]
    lines += ["train minimizing loss using sgd(rate: 0.01)"]
    x = np.random.default_rng(2).standard_normal((4, 2)) * 0.1
    w = np.full((2, 2), 0.5)
    hs = [x @ w]
    for _ in range(1, n):
        hs.append(hs[-1] - hs[-1] ** 3 * 0.001 + 0.0005)  # bounded: towards 0.5 ** (1 / 3)
    g = 2 * hs[-1] / hs[-1].size
    for h in reversed(hs[:-1]):
        g = g * (1 - 0.003 * h * h)
    with dlvm.load(built("\n".join(lines) + "\n", tmp_path)) as model:
        loss = model.train_step(x.astype(np.float32))
        assert np.isfinite(hs[-1]).all()
        np.testing.assert_allclose(loss, np.mean(hs[-1] ** 2), rtol=1e-3)
        np.testing.assert_allclose(model.get_param("W"), w - 0.01 * (x.T @ g), rtol=1e-3)


@pytest.mark.parametrize("train", [False, True])
def test_a_long_chain_compiles_to_ptx(train: bool, tmp_path: Path) -> None:
    text = "use optim\nx: in[4 x 2]\nW: param[2 x 2] = 0.5\nh: hidden[4 x 2] = x . W\n"
    text += f"y: out[4 x 2] = {chain(1500 if train else 3000)}\n"
    if train:
        text += "loss: out[] = mean(y * y)\ntrain minimizing loss using sgd(rate: 0.01)\n"
    compiled = compile_text("chain.tel", text)
    optimize(compiled.module)
    build = LibraryBuild(compiled.module, compiled.spec, tmp_path / "chain.so", Target(cuda=True))
    assert build.device is not None
    assert f".visible .entry dlk_{'train_step' if train else 'infer'}" in build.device.ptx
