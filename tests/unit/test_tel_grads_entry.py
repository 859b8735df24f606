"""`export def NAME = grad(LOSS, wrt: …)` (docs/tel.md, "Entry points"): an entry point whose
inputs are the `in` declarations LOSS needs and whose outputs are LOSS's gradients with respect
to the parameters named, against NumPy in float64 (an MLP, rank-3 products) and against what one
SGD step changes the parameters by; its manifest, its PTX, and the located errors of the form."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from telhelp import build_snippet as build
from telhelp import compile_snippet

import dlvm
from telc.cli import cli

TELC = Path(sys.executable).parent / "telc"

MLP = """\
module mlp
use nn
use optim

x: in[4 x 3]
y: in[4 x 2]
W1: param[3 x 5] = glorot()
b1: param[1 x 5] = 0.1
W2: param[5 x 2] = glorot()
b2: param[1 x 2] = 0.0
h: hidden = tanh(x . W1 + b1)
logits: out = h . W2 + b2
loss: out[] = softmax_cross_entropy(logits, y)

train minimizing loss using sgd(rate: 1.0)

export def grads = grad(loss, wrt: (W1, b1))
export def every = grad(loss)
export def second = grad(loss, wrt: W2)
export def value_and_grads = grad(loss, wrt: (b2, W1), keeping: true)
"""

PRODUCTS = """\
module products

a: in[2 x 4 x 3]
t: in[2 x 4 x 4]
W: param[3 x 5] = glorot()
k: param[2 x 5 x 4] = normal(0.0, 0.5)
h: hidden = tanh(a . W)
z: hidden = h . k
loss: out[] = mean((z - t) * (z - t))

export def grads = grad(loss, wrt: (W, k))
"""


@pytest.fixture(scope="module")
def mlp(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("mlp"), MLP, "mlp")


def mlp_inputs(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    y = np.eye(2, dtype=np.float32)[rng.integers(0, 2, 4)]
    return x, y


def mlp_reference(params: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> dict:
    """The loss and its gradients by hand in float64."""
    p = {n: v.astype(np.float64) for n, v in params.items()}
    x, y = x.astype(np.float64), y.astype(np.float64)
    h = np.tanh(x @ p["W1"] + p["b1"])
    z = h @ p["W2"] + p["b2"]
    e = np.exp(z - z.max(1, keepdims=True))
    s = e / e.sum(1, keepdims=True)
    loss = -np.mean(np.sum(y * np.log(s), 1))
    dz = (s - y) / len(x)
    dpre = dz @ p["W2"].T * (1 - h * h)
    return {"loss": loss, "W1": x.T @ dpre, "b1": dpre.sum(0, keepdims=True),
            "W2": h.T @ dz, "b2": dz.sum(0, keepdims=True)}  # fmt: skip


def close(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_the_gradients_of_an_mlp_match_numpy(mlp):
    x, y = mlp_inputs(1)
    with dlvm.load(mlp, seed=3) as m:
        want = mlp_reference(m.params, x, y)
        d_w1, d_b1 = m.grads(x, y)
        close(d_w1, want["W1"])
        close(d_b1, want["b1"])
        every = m.every(x, y)
        assert len(every) == 4
        for got, name in zip(every, ["W1", "b1", "W2", "b2"]):
            close(got, want[name])
        d_w2 = m.second(x, y)  # one parameter: the array itself
        assert isinstance(d_w2, np.ndarray)
        close(d_w2, want["W2"])
        d_b2, d_w1, loss = m.value_and_grads(x, y)
        close(d_b2, want["b2"])
        close(d_w1, want["W1"])
        np.testing.assert_allclose(loss, want["loss"], rtol=1e-5)


def test_the_gradients_are_what_one_sgd_step_of_rate_one_takes_away(mlp):
    x, y = mlp_inputs(2)
    with dlvm.load(mlp, seed=4) as m:
        before = {n: v.copy() for n, v in m.params.items()}
        grads = dict(zip(["W1", "b1", "W2", "b2"], m.every(x, y)))
        m.train_step(x, y)
        for name, g in grads.items():
            close(before[name] - m.get_param(name), g)


def test_the_manifest_lists_the_inputs_loss_needs_and_one_output_per_gradient(mlp):
    with dlvm.load(mlp) as m:
        entries = {e["name"]: e for e in m.manifest["entries"]}
    grads = entries["grads"]
    assert [(i["name"], i["shape"]) for i in grads["inputs"]] == [("x", [4, 3]), ("y", [4, 2])]
    assert grads["outputs"] == [
        {"name": "result0", "dtype": "f32", "shape": [3, 5]},
        {"name": "result1", "dtype": "f32", "shape": [1, 5]},
    ]
    assert entries["second"]["outputs"] == [{"name": "result", "dtype": "f32", "shape": [5, 2]}]
    assert [o["name"] for o in entries["value_and_grads"]["outputs"]] == [
        "result0", "result1", "result2"
    ]  # fmt: skip
    assert [i["name"] for i in entries["train_step"]["inputs"]] == ["x", "y"]


def test_the_gradients_of_rank_3_products_match_numpy(tmp_path):
    library = build(tmp_path, PRODUCTS, "products")
    rng = np.random.default_rng(5)
    a = rng.standard_normal((2, 4, 3)).astype(np.float32)
    t = rng.standard_normal((2, 4, 4)).astype(np.float32)
    with dlvm.load(library, seed=6) as m:
        w, k = (m.params[n].astype(np.float64) for n in ("W", "k"))
        d_w, d_k = m.grads(a, t)
    h = np.tanh(a.astype(np.float64) @ w)
    z = h @ k
    dz = 2 * (z - t) / z.size
    dh = np.einsum("bik,bjk->bij", dz, k) * (1 - h * h)
    close(d_k, np.einsum("bij,bik->bjk", h, dz))
    close(d_w, np.einsum("bti,btj->ij", a, dh))


def test_the_entry_generates_ptx(tmp_path):
    src = tmp_path / "mlp.tel"
    src.write_text(MLP)
    out = tmp_path / "mlp.ptx"
    args = ["build", str(src), "--target", "cuda", "--emit", "ptx", "-o", str(out), "-q"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert ".visible .entry dlk_" in out.read_text()


def test_the_entry_lowers_the_loss_as_trains_objective(tmp_path):
    ir = compile_snippet(str(tmp_path), MLP, "mlp").module
    names = [f.name for f in ir.functions]
    assert "grads_objective" in names and "grads" in names
    assert "train_step_objective" in names


HEAD = """\
module m
use nn
x: in[4 x 3]
y: in[4 x 2]
W1: param[3 x 2] = glorot()
h: hidden = x . W1
logits: out = tanh(h)
loss: out[] = mse(logits, y)
def f(v: [4 x 3]) -> [] = sum(v . W1)
"""

REJECTED = {
    "wrt-an-input": (
        "export def g = grad(loss, wrt: (W1, x))",
        "m.tel:10:37: error: 'x' is an input of the model, not a parameter; grad of 'loss' is "
        "taken with respect to parameters",
        "help: differentiate a def, which takes the input as an argument",
    ),
    "wrt-a-hidden": (
        "export def g = grad(loss, wrt: h)",
        "m.tel:10:32: error: 'h' is a hidden of the model, not a parameter",
        "",
    ),
    "wrt-unknown": (
        "export def g = grad(loss, wrt: W2)",
        "m.tel:10:32: error: unknown parameter 'W2'",
        "help: the parameters are W1",
    ),
    "wrt-twice": (
        "export def g = grad(loss, wrt: (W1, W1))",
        "m.tel:10:37: error: this is already in 'wrt'",
        "",
    ),
    "wrt-a-number": (
        "export def g = grad(loss, wrt: 0)",
        "m.tel:10:32: error: wrt: takes the names of parameters here",
        "",
    ),
    "non-scalar-loss": (
        "export def g = grad(logits, wrt: W1)",
        "m.tel:10:21: error: the loss 'logits' of grad must be a float scalar, found f32[4 x 2]",
        "help: reduce it to a scalar (sum(…), mean(…)), or differentiate a def with seed: …",
    ),
    "grad-of-a-function": (
        "export def g = grad(f, wrt: W1)",
        "m.tel:10:21: error: 'f' is a function; without a parameter list, grad takes a "
        "declaration of the model",
        "help: give the entry point its arguments: `export def g(x: …) = grad(f, wrt: …)(x)`",
    ),
    "grad-of-an-expression": (
        "export def g = grad(loss * 2.0, wrt: W1)",
        "m.tel:10:21: error: this is not a declaration; without a parameter list, grad takes a "
        "declaration of the model",
        "help: declare the loss, such as `loss: out[] = mean(…)`, and name it here",
    ),
    "grad-of-an-unknown-name": (
        "export def g = grad(los, wrt: W1)",
        "m.tel:10:21: error: unknown declaration 'los'",
        "did you mean 'loss'",
    ),
    "grad-of-an-input": (
        "export def g = grad(x, wrt: W1)",
        "m.tel:10:21: error: 'x' is an input of the model; grad differentiates a loss computed "
        "from the parameters",
        "",
    ),
    "seed": (
        "export def g = grad(loss, wrt: W1, seed: 1.0)",
        "m.tel:10:36: error: grad of the declaration 'loss' has no option 'seed'",
        "help: differentiate a def",
    ),
    "not-grad": (
        "export def g = W1 * 2.0",
        "m.tel:10:12: error: 'g' has no parameter list; only `export def NAME = grad(LOSS, wrt: "
        "(W1, b1))` is written without one",
        "help: write `def g(…)`, with its parameters (or `()` for none)",
    ),
    "called": (
        "export def g = grad(loss, wrt: W1)\nz: out = g()",
        "m.tel:11:10: error: 'g' is an entry point of gradients (a def without a parameter "
        "list); it cannot be called",
        "help: to call a gradient, differentiate a def taking the loss's inputs",
    ),
    "differentiated": (
        "export def g = grad(loss, wrt: W1)\nexport def k(v: [4 x 3]) = grad(g)()",
        "m.tel:11:28: error: 'g' is an entry point of gradients",
        "help: to call a gradient",
    ),
    "not-exported": (
        "def g = grad(loss, wrt: W1)",
        "m.tel:10:5: error: 'g' has no parameter list",
        "help: export it: `export def g = …`, or write `def g(…)`",
    ),
}


@pytest.mark.parametrize("case", REJECTED)
def test_a_malformed_gradient_entry_is_a_located_error(case, tmp_path):
    text, message, fix = REJECTED[case]
    (tmp_path / "m.tel").write_text(f"{HEAD}{text}\n")
    run = subprocess.run([str(TELC), "check", "m.tel"], cwd=tmp_path, capture_output=True,
                         text=True, env={"NO_COLOR": "1", "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert run.returncode == 1, run.stderr
    assert message in run.stderr and fix in run.stderr, run.stderr
    assert "internal error" not in run.stderr and "Traceback" not in run.stderr


BUFFERS = """\
module scaled
use nn
use optim

x: in[4 x 3]
y: in[4 x 2]
W: param[3 x 2] = 0.5
scale: buffer[1 x 2] = 2.0
run: buffer[1 x 2] = 0.0
h: hidden = x . W * scale
loss: out[] = mse(h, y)
run <- running(run, batch_mean(h))

train minimizing loss using sgd(rate: 1.0)

export def grads = grad(loss, wrt: W)
export def every = grad(loss)
"""


def test_a_gradient_entry_reads_buffers_and_never_differentiates_one(tmp_path):
    x, y = mlp_inputs(3)
    w, s = np.full((3, 2), 0.5), np.full((1, 2), 2.0)
    h = x.astype(np.float64) @ w * s
    want = x.T @ (2 * (h - y) / h.size * s)
    with dlvm.load(build(tmp_path, BUFFERS, "scaled")) as model:
        close(model.grads(x, y), want)
        close(model.every(x, y), want)  # every parameter: W alone, no buffer
        (every,) = [e for e in model.manifest["entries"] if e["name"] == "every"]
        assert [o["name"] for o in every["outputs"]] == ["result0"]  # a tuple of one
        model.train_step(x, y)  # updates `run`, which the gradients never change
        close(model.get_param("run"), 0.1 * h.mean(axis=0, keepdims=True))
        close(model.get_param("scale"), s)


def test_grad_with_respect_to_a_buffer_is_a_located_error(tmp_path):
    text = BUFFERS.replace("grad(loss, wrt: W)", "grad(loss, wrt: scale)")
    (tmp_path / "m.tel").write_text(text)
    run = subprocess.run([str(TELC), "check", "m.tel"], cwd=tmp_path, capture_output=True,
                         text=True, env={"NO_COLOR": "1", "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert run.returncode == 1, run.stderr
    assert "m.tel:16:36: error: 'scale' is a buffer of the model, not a parameter" in run.stderr
    assert "internal error" not in run.stderr and "Traceback" not in run.stderr
