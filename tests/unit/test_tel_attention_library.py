"""nn's attention layers through a built library (CPU): a causal multi-head attention block
with layer_norm and a residual, and plain attention, agree with the float64 NumPy models in
`infer`, and one Adam step of `train` agrees with Adam on the NumPy model's central-difference
gradient; dropout's masks follow the model's seed."""

from __future__ import annotations

import numpy as np
import pytest
import tel_reference as ref
from telhelp import central_gradient, compile_snippet

import dlvm
from dlvm.codegen.build import build_library

BLOCK = """module block
type float64
use nn
use optim

x: in[2 x 4 x 8]
target: in[2 x 4 x 8]
Wq: param[8 x 8] = glorot()
Wk: param[8 x 8] = glorot()
Wv: param[8 x 8] = glorot()
Wo: param[8 x 8] = glorot()
g: param[8] = 1.0
b: param[8] = 0.0

heads: hidden = multi_head_attention(layer_norm(x, g, b), Wq as [8 x 2 x 4], Wk as [8 x 2 x 4],
                                     Wv as [8 x 2 x 4], Wo as [2 x 4 x 8], causal: true)
y: out = x + heads
plain: out = attention(x . Wq, x . Wk, x)
loss: out[] = mse(y, target)

train minimizing loss using adam(rate: 0.01, eps: 0.1)
"""

PARAMS = ["Wq", "Wk", "Wv", "Wo", "g", "b"]


def block_model(x: np.ndarray, p: dict[str, np.ndarray]) -> np.ndarray:
    """y of BLOCK in NumPy float64."""
    split = [p[n].reshape(8, 2, 4) for n in ("Wq", "Wk", "Wv")]
    normed = ref.layer_norm(x, p["g"], p["b"])
    return x + ref.multi_head_attention(normed, *split, p["Wo"].reshape(2, 4, 8), causal=True)


@pytest.fixture(scope="module")
def block_library(tmp_path_factory):
    directory = tmp_path_factory.mktemp("block")
    compiled = compile_snippet(str(directory), BLOCK)
    path = directory / "block.so"
    build_library(compiled.module, compiled.spec, path)
    return path


def test_attention_block_infers_and_takes_one_adam_step_like_numpy(block_library) -> None:
    rng = np.random.default_rng(11)
    x, target = rng.standard_normal((2, 4, 8)), rng.standard_normal((2, 4, 8))
    with dlvm.load(block_library, seed=1) as model:
        params = {n: np.array(v) for n, v in model.params.items()}
        assert sorted(params) == sorted(PARAMS)
        params["g"] = rng.uniform(0.5, 1.5, 8)  # not the trivial initial scale and shift
        params["b"] = 0.1 * rng.standard_normal(8)
        for n in ("g", "b"):
            model.set_param(n, params[n])
        y, plain = model.infer(x)
        np.testing.assert_allclose(y, block_model(x, params), rtol=1e-10, atol=1e-12)
        expected_plain = ref.attention(x @ params["Wq"], x @ params["Wk"], x)
        np.testing.assert_allclose(plain, expected_plain, rtol=1e-10, atol=1e-12)
        loss = model.train_step(x, target)
        np.testing.assert_allclose(loss, ref.mse(block_model(x, params), target), rtol=1e-10)
        for n in PARAMS:

            def objective(v: np.ndarray, n: str = n) -> float:
                return float(ref.mse(block_model(x, {**params, n: v}), target))

            grad = central_gradient(objective, params[n])
            zero = np.zeros_like(grad)
            expected, _, _ = ref.adam(params[n], grad, zero, zero, 1, rate=0.01, eps=0.1)
            np.testing.assert_allclose(model.params[n], expected, rtol=1e-7, atol=1e-9, err_msg=n)


DROPOUT = """module drop
type float64
use nn
use optim

W: param[20 x 20] = 1.0
loss: out[] = sum(dropout(W, p: 0.5))

train minimizing loss using sgd(rate: 1.0)
"""


def test_dropout_masks_follow_the_seed(tmp_path) -> None:
    """With W = 1 one sgd step of rate 1 leaves W - mask / (1 - p): models created with the same
    seed draw the same masks step after step; another seed, or the next step, another one."""
    compiled = compile_snippet(str(tmp_path), DROPOUT)
    path = tmp_path / "drop.so"
    build_library(compiled.module, compiled.spec, path)

    def masks(seed: int) -> list[np.ndarray]:
        with dlvm.load(path, seed=seed) as model:
            found = []
            for _ in range(2):
                model.set_param("W", np.ones((20, 20)))
                model.train_step()
                found.append(model.params["W"] != 1.0)
            return found

    first, again, other = masks(7), masks(7), masks(8)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    assert 0.3 < first[0].mean() < 0.7
    assert not np.array_equal(first[0], first[1])
    assert not np.array_equal(first[0], other[0])
