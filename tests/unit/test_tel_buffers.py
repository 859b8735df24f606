"""Buffers (docs/tel.md, "Buffers"): non-trainable state a train entry assigns with `<-` after
the step, read before it everywhere, never differentiated nor given to the optimiser; saved,
loaded, got and set like parameters and marked "kind": "buffer" in the manifest (docs/c-abi.md).
BatchNorm with running statistics (stdlib nn) against NumPy in float64, on the CPU and on the
emulated GPU; the misuses `telc check` reports."""

from __future__ import annotations

import copy
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from cuda_emulator import Emulator
from telhelp import build_snippet as build
from telhelp import compile_snippet
from test_cuda_library import close, fake_driver, on_fake_gpu  # noqa: F401 (fixtures)

import dlvm
from dlvm.codegen.build import build_library, schedule
from dlvm.codegen.glue import manifest_json

TELC = Path(sys.executable).parent / "telc"

DOCS = Path(__file__).resolve().parents[2] / "docs" / "tel.md"


def docs_example(module: str) -> str:
    """The ```tel example of docs/tel.md that declares `module NAME`."""
    blocks = DOCS.read_text(encoding="utf-8").split("```tel\n")[1:]
    return next(b.split("```")[0] for b in blocks if b.startswith(f"module {module}\n"))


# The documented BatchNorm example: this file checks what tel.md says of it.
BN = docs_example("batchnorm")


@pytest.fixture(scope="module")
def bn_library(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("bn"), BN, "bn")


def batches(seed: int, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [(rng.normal(1.5, 2.0, (8, 3)).astype(np.float32),
             rng.standard_normal((8, 1)).astype(np.float32)) for _ in range(n)]  # fmt: skip


def normalised(x, mu, var, p) -> np.ndarray:
    f = {k: v.astype(np.float64) for k, v in p.items()}
    return ((x - mu) / np.sqrt(var + 1e-5) * f["gamma"] + f["beta"]) @ f["W"]


def test_train_updates_the_buffers_as_numpy_and_adam_only_the_params(bn_library):
    with dlvm.load(bn_library, seed=3) as m:
        run_mean = np.zeros((1, 3))
        run_var = np.ones((1, 3))
        for x, t in batches(1, 4):
            before = m.params
            x64 = x.astype(np.float64)
            mu, var = x64.mean(0, keepdims=True), x64.var(0, keepdims=True)
            loss = np.mean((normalised(x64, mu, var, before) - t) ** 2)
            np.testing.assert_allclose(m.train_step(x, t), loss, rtol=1e-4)
            run_mean = 0.9 * run_mean + 0.1 * mu
            run_var = 0.8 * run_var + 0.2 * var
            # Exactly the moving averages: Adam's update would move them elsewhere.
            np.testing.assert_allclose(m.get_param("run_mean"), run_mean, rtol=1e-5)
            np.testing.assert_allclose(m.get_param("run_var"), run_var, rtol=1e-5)
            after = m.params
            for p in ("W", "gamma", "beta"):
                assert not np.array_equal(after[p], before[p]), f"{p} was not trained"
        # infer normalises with the running statistics.
        x, _ = batches(9, 1)[0]
        want = normalised(x.astype(np.float64), run_mean, run_var, m.params)
        np.testing.assert_allclose(m.infer(x), want, rtol=1e-4, atol=1e-5)


def test_the_manifest_lists_buffers_and_entries_take_the_inputs_they_read(bn_library):
    with dlvm.load(bn_library) as m:
        kinds = {p["name"]: p.get("kind") for p in m.manifest["params"]}
        assert kinds == {"W": None, "gamma": None, "beta": None, "run_mean": "buffer",
                         "run_var": "buffer"}  # fmt: skip
        assert m.manifest["states"] and all(s["param"] in ("W", "gamma", "beta")
                                            for s in m.manifest["states"])  # fmt: skip
        inputs = {e["name"]: [i["name"] for i in e["inputs"]] for e in m.manifest["entries"]}
        assert inputs == {"infer": ["x"], "train_step": ["x", "target"]}


def test_the_compilers_manifest_is_the_runtimes(bn_library, tmp_path):
    compiled = compile_snippet(str(tmp_path), BN, "bn")
    with dlvm.load(bn_library) as m:
        import json

        assert json.loads(manifest_json(compiled.spec)) == m.manifest


def test_buffers_are_saved_loaded_and_set_like_params(bn_library, tmp_path):
    x, t = batches(4, 1)[0]
    with dlvm.load(bn_library, seed=1) as m, dlvm.load(bn_library, seed=2) as other:
        m.train_step(x, t)
        m.save(tmp_path / "bn.safetensors")
        other.load(tmp_path / "bn.safetensors")
        for name, value in m.params.items():
            np.testing.assert_array_equal(other.get_param(name), value)
        np.testing.assert_array_equal(other.infer(x), m.infer(x))
        other.set_param("run_var", np.full((1, 3), 4.0, np.float32))
        np.testing.assert_array_equal(other.get_param("run_var"), np.full((1, 3), 4.0))
        assert not np.allclose(other.infer(x), m.infer(x))


READ_IN_LOSS = """\
module read_in_loss
use nn
use optim

x: in[4 x 2]
target: in[4 x 1]
W: param[2 x 1] = 0.5
shift: buffer[1 x 1] = 0.25
steps: buffer[] = 0.0

loss: out[] = mse(x . W + shift, target)
steps <- steps + 1.0

train minimizing loss using sgd(rate: 0.1)
"""


def test_no_gradient_flows_into_a_buffer_the_loss_reads(tmp_path):
    compiled = compile_snippet(str(tmp_path), READ_IN_LOSS, "read_in_loss")
    library = tmp_path / "read_in_loss.so"
    build_library(compiled.module, compiled.spec, library)
    rng = np.random.default_rng(0)
    x, t = rng.standard_normal((4, 2)), rng.standard_normal((4, 1))
    with dlvm.load(library) as m:
        for k in range(3):
            w = m.get_param("W").astype(np.float64)
            d = x @ w + 0.25 - t
            m.train_step(x.astype(np.float32), t.astype(np.float32))
            np.testing.assert_allclose(m.get_param("W"), w - 0.1 * x.T @ (2 * d / 4), rtol=1e-5)
            np.testing.assert_array_equal(m.get_param("shift"), np.full((1, 1), 0.25))
            assert m.get_param("steps") == k + 1


BN2D = """\
module bn2d
use nn
use optim

x: in[2 x 3 x 2 x 2]
target: in[2 x 3 x 2 x 2]
gamma: param[1 x 3 x 1 x 1] = 1.0
beta: param[1 x 3 x 1 x 1] = 0.0
run_mean: buffer[1 x 3 x 1 x 1] = 0.0
run_var: buffer[1 x 3 x 1 x 1] = 1.0

y: out = batch_norm2d(x, gamma, beta, run_mean, run_var)
loss: out[] = mse(y, target)

run_mean <- running(run_mean, batch_mean2d(x))
run_var <- running(run_var, batch_var2d(x))

train minimizing loss using sgd(rate: 0.1)
"""


def test_nchw_batch_norm_keeps_statistics_per_channel(tmp_path):
    library = build(tmp_path, BN2D, "bn2d")
    rng = np.random.default_rng(5)
    x = rng.normal(2.0, 3.0, (2, 3, 2, 2)).astype(np.float32)
    t = np.zeros_like(x)
    with dlvm.load(library) as m:
        m.train_step(x, t)
        x64 = x.astype(np.float64)
        mu, var = x64.mean((0, 2, 3), keepdims=True), x64.var((0, 2, 3), keepdims=True)
        np.testing.assert_allclose(m.get_param("run_mean"), 0.1 * mu, rtol=1e-5)
        np.testing.assert_allclose(m.get_param("run_var"), 0.9 + 0.1 * var, rtol=1e-5)
        p = m.params
        want = (x64 - 0.1 * mu) / np.sqrt(0.9 + 0.1 * var + 1e-5) * p["gamma"] + p["beta"]
        np.testing.assert_allclose(m.infer(x), want, rtol=1e-4, atol=1e-5)


UNBIASED = """module unbiased
type float32
use nn
use optim

x: in[4 x 3]
images: in[2 x 3 x 2 x 2]
w: param[] = 1.0
rows: buffer[1 x 3] = 0.0
channels: buffer[1 x 3 x 1 x 1] = 0.0

loss: out[] = sum(w * x)

rows <- batch_var(x, unbiased: true)
channels <- batch_var2d(images, unbiased: true)

train minimizing loss using sgd(rate: 0.1)
"""


def test_batch_var_unbiased_divides_by_the_count_less_one(tmp_path):
    library = build(tmp_path, UNBIASED, "unbiased")
    rng = np.random.default_rng(3)
    x = rng.normal(1.0, 2.0, (4, 3)).astype(np.float32)
    images = rng.normal(-1.0, 3.0, (2, 3, 2, 2)).astype(np.float32)
    with dlvm.load(library) as m:
        m.train_step(x, images)
        x64, i64 = x.astype(np.float64), images.astype(np.float64)
        np.testing.assert_allclose(m.get_param("rows"), x64.var(0, ddof=1)[None], rtol=1e-5)
        want = i64.var((0, 2, 3), keepdims=True, ddof=1)
        np.testing.assert_allclose(m.get_param("channels"), want, rtol=1e-5)


def test_a_model_with_buffers_trains_on_the_emulated_gpu(tmp_path, on_fake_gpu):  # noqa: F811
    library = build(tmp_path, BN, "bn", cuda=True)
    compiled = compile_snippet(str(tmp_path), BN, "bn")
    Emulator(schedule(copy.deepcopy(compiled.module), cuda=True), tmp_path / "emu")
    on_fake_gpu(tmp_path / "emu" / "kernels.so")
    with dlvm.load(library, seed=5) as cpu, dlvm.load(library, device="cuda:0", seed=5) as gpu:
        for x, t in batches(3, 2):
            close(gpu.train_step(x, t), cpu.train_step(x, t))
        for name in ("run_mean", "run_var", "W"):
            close(gpu.get_param(name), cpu.get_param(name))
        close(gpu.infer(x), cpu.infer(x))


def test_ptx_builds_for_a_model_with_buffers(tmp_path):
    (tmp_path / "bn.tel").write_text(BN)
    run = subprocess.run([str(TELC), "build", "bn.tel", "--emit", "ptx"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert ".entry" in run.stdout


HEAD = """\
module m
use nn
use optim

x: in[4 x 2]
W: param[2 x 2] = 0.5
b: buffer[1 x 2] = 0.0
h: hidden = x . W
loss: out[] = mean(h)
"""
TRAIN = "train minimizing loss using sgd()\n"

MISUSES = [
    ("a-param", "W <- W * 2.0\n" + TRAIN, "m.tel:10:1: error: 'W' is a parameter; only a buffer",
     "help: parameters are updated by the optimiser"),
    ("an-input", "x <- x\n" + TRAIN, "m.tel:10:1: error: 'x' is an input; only a buffer",
     "help: inputs are given by the caller"),
    ("twice", "b <- b\nb <- 2.0 * b\n" + TRAIN,
     "m.tel:11:1: error: buffer 'b' is already assigned on line 10", "help: combine"),
    ("wrong-shape", "b <- h\n" + TRAIN,
     "m.tel:10:6: error: the new value of buffer 'b' is f32[4 x 2]; it is declared f32[1 x 2]",
     ""),
    ("no-train", "b <- b + 1.0\n",
     "m.tel:10:1: error: '<-' assigns a buffer at the end of each train step", "help: add a train"),
    ("unknown", "bb <- b\n" + TRAIN, "m.tel:10:1: error: unknown buffer 'bb'", "'b'"),
    ("in-a-def", "def f(v: [1 x 2]) -> [1 x 2] {\n    b <- v\n    return v\n}\n" + TRAIN,
     "m.tel:11:", ""),
    ("a-buffer-without-type", "c: buffer = 1.0\n" + TRAIN,
     "m.tel:10:1: error: buffer 'c' needs a type", ""),
]  # fmt: skip


@pytest.mark.parametrize(("name", "tail", "message", "fix"), MISUSES, ids=[m[0] for m in MISUSES])
def test_misused_buffers_are_located_errors(tmp_path, name, tail, message, fix):
    (tmp_path / "m.tel").write_text(HEAD + tail)
    run = subprocess.run([str(TELC), "check", "m.tel"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert run.returncode == 1, run.stderr
    assert message in run.stderr and fix in run.stderr, run.stderr
    assert "internal error" not in run.stderr and "Traceback" not in run.stderr


def test_the_gradient_is_never_taken_with_respect_to_a_buffer(tmp_path):
    compiled = compile_snippet(str(tmp_path), textwrap.dedent(READ_IN_LOSS), "r")
    train = next(e for e in compiled.interface.entries if e.kind == "train")
    assert train.params == ["W", "shift", "steps"]
    assert [n for n, _ in train.outputs] == ["loss", "W", "shift", "steps"]


GRAD = """\
module g
use nn

W: param[2 x 1] = 0.5
shift: buffer[1 x 1] = 0.25

def f(v: [4 x 2]) -> [] = mean(v . W + shift)

export def dall(v: [4 x 2]) = grad(f)(v)
"""


def test_a_gradient_with_respect_to_a_buffer_is_an_error(tmp_path):
    compiled = compile_snippet(str(tmp_path), GRAD, "g")
    export = next(e for e in compiled.interface.entries if e.kind == "export")
    assert [str(t) for _, t in export.outputs] == ["<4 x 2 x f32>"]  # the argument's only
    (tmp_path / "m.tel").write_text(GRAD + "export def ds(v: [4 x 2]) = grad(f, wrt: shift)(v)\n")
    run = subprocess.run([str(TELC), "check", "m.tel"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert run.returncode == 1
    assert "m.tel:10:" in run.stderr and "'shift' is a buffer" in run.stderr, run.stderr
