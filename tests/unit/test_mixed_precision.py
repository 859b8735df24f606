"""`--precision bf16` (dlvm/transforms/mixed_precision.py): a train step's products and the
activations after them in bf16, sums, the loss and the C ABI in f32. The transformed module in
the interpreter is the oracle of the library's values; digits and the samples that learn reach
what they reach in f32."""

from __future__ import annotations

import math

import numpy as np
import pytest
from click.testing import CliRunner
from telhelp import (
    build_distributed_sample,
    build_sample,
    compiled_sample,
    inputs_for,
    library_and_interpreter_step,
    run_train_step,
)
from test_cuda_library import build_emulated, fake_driver, on_fake_gpu  # noqa: F401 (fixtures)
from test_model_samples import load_driver, shapes

import dlvm
from dlvm.ir.types import DataType, TensorType
from telc import demo
from telc.cli import cli
from telc.driver import BuildOptions, objectives

# Every sample with a train step that draws no random numbers (the autoencoder's noise is the
# library's own stream, not the interpreter's) and builds in a few seconds.
CHECKED = ["cnn", "digits", "ffnn", "lstm", "mnist", "resnet", "rnn", "xor"]


def dtypes(fn, opcode: str, comb: str | None = None) -> set[str]:
    return {
        i.type.dtype.text
        for i in fn.instructions()
        if i.opcode == opcode and (comb is None or i.attrs["comb"] == comb)
    }


def test_products_compute_in_bf16_and_sums_in_f32():
    compiled = compiled_sample("digits", precision="bf16")
    [name] = objectives(compiled.interface)
    fn = compiled.module.function_named(name)
    assert dtypes(fn, "dot") == {"bf16"}
    assert dtypes(fn, "reduce", "add") == {"f32"}  # softmax's sums, the loss
    assert dtypes(fn, "reduce", "max") == {"bf16"}  # exact: one of the logits
    assert all(a.type.dtype is DataType.F32 for a in fn.arguments)
    assert fn.type.result == TensorType((), DataType.F32)  # the loss


def test_the_library_interface_stays_f32():
    """Parameters, inputs, outputs and states: what the C ABI sees does not change."""
    for name in ("digits", "resnet"):
        assert compiled_sample(name, precision="bf16").spec == compiled_sample(name).spec


def test_infer_stays_f32():
    compiled = compiled_sample("digits", precision="bf16")
    infer = compiled.module.function_named("infer")
    assert not any("bf16" in str(i.type) for i in infer.instructions())


@pytest.mark.parametrize("name", CHECKED)
def test_train_step_matches_the_interpreter(name, tmp_path):
    compiled = compiled_sample(name, precision="bf16")
    [train] = [e for e in compiled.interface.entries if e.kind == "train"]
    with dlvm.load(build_sample(name, tmp_path, precision="bf16"), seed=1) as lib:
        params = lib.params
        got, loss, new_params = library_and_interpreter_step(compiled, train, lib)
        after = lib.params
    # Both round each bf16 result once: what differs is the order of a product's f32 sums,
    # which moves a bf16 result by an ulp (2^-8 relative) now and then.
    np.testing.assert_allclose(np.asarray(got).reshape(-1)[0], loss, rtol=2**-7)
    for p, value in new_params.items():
        step = np.abs(np.asarray(value) - params[p]).max()
        np.testing.assert_allclose(after[p], value, rtol=1e-6, atol=2**-7 * step, err_msg=p)


def test_the_train_step_tracks_the_f32_step():
    """One step from the same parameters: the bf16 loss within a few bf16 ulps of f32's."""
    losses = {}
    for precision in ("f32", "bf16"):
        compiled = compiled_sample("ffnn", precision=precision)
        [train] = [e for e in compiled.interface.entries if e.kind == "train"]
        rng = np.random.default_rng(0)
        params = {n: rng.normal(0, 0.3, t.shape).astype(np.float32)
                  for n, t in compiled.interface.params}  # fmt: skip
        states = [np.zeros(t.shape, np.float32) for _, _, t in train.states]
        inputs = inputs_for(train.inputs, 3)
        losses[precision] = run_train_step(compiled, train, inputs, params, states, 1, False)[0]
    assert losses["bf16"] != losses["f32"]
    assert losses["bf16"] == pytest.approx(losses["f32"], rel=2**-6)


def test_digits_reaches_the_f32_accuracy(tmp_path):
    """`make demo`'s model, 30 epochs: test accuracy within 0.5 points (one image of 357 is
    0.28), the last epoch's mean loss within 1 %."""
    data = demo.load_data()
    history = {}
    for precision in ("f32", "bf16"):
        built = demo.build(tmp_path / precision, precision=precision)
        with dlvm.load(built.library, seed=0) as model:
            history[precision] = demo.train(model, data, epochs=30, seed=0)
    f32, bf16 = history["f32"], history["bf16"]
    assert abs(bf16.test_accuracy[-1] - f32.test_accuracy[-1]) <= 0.005
    assert bf16.test_accuracy[-1] >= 0.97
    assert bf16.loss[-1] == pytest.approx(f32.loss[-1], rel=0.01)


def test_resnet_learns_the_shapes_as_in_f32(tmp_path):
    """test_model_samples' resnet training, in both precisions (batch norm's statistics and
    running averages are f32 sums)."""
    result = {}
    for precision in ("f32", "bf16"):
        rng = np.random.default_rng(0)
        path = build_sample("resnet", tmp_path / precision, precision=precision)
        with dlvm.load(path, seed=0) as model:
            losses = [float(model.train_step(*shapes(8, rng))) for _ in range(150)]
            test = np.random.default_rng(99)
            batches = [shapes(8, test) for _ in range(8)]  # 64 images, the batch is 8
            accuracy = np.mean([model.infer(x).argmax(-1) == y for x, y in batches])
        result[precision] = (np.mean(losses[-20:]), accuracy)
    (f32_loss, f32_acc), (bf16_loss, bf16_acc) = result["f32"], result["bf16"]
    assert abs(bf16_acc - f32_acc) <= 0.05  # 3 images of 64
    assert bf16_loss == pytest.approx(f32_loss, rel=0.1, abs=0.02)


def test_transformer_learns_the_text_as_in_f32(tmp_path):
    driver = load_driver()
    tokens = driver.encode(driver.make_text())
    final = {}
    for precision in ("f32", "bf16"):
        path = build_sample("transformer", tmp_path / precision, precision=precision)
        with dlvm.load(path, seed=0) as model:
            losses = driver.train(model, tokens, steps=120, every=0)
        assert np.all(np.isfinite(losses))
        final[precision] = float(np.mean(losses[-10:]))
    assert final["bf16"] < math.log(32) - 1.0
    assert final["bf16"] == pytest.approx(final["f32"], rel=0.05)


def test_distributed_halves_sum_f32_gradients(tmp_path):
    """--distributed: the grads half's outputs stay f32 for the all-reduce, and two equal
    ranks still train exactly as one."""
    compiled = compiled_sample("xor", distributed=True, precision="bf16")
    [train] = [e for e in compiled.interface.entries if e.kind == "train"]
    assert train.parts is not None
    assert {t.dtype for _, t in train.parts[0].outputs} == {DataType.F32}
    library = build_distributed_sample("xor", tmp_path, precision="bf16")
    xor = {
        "x": np.array([[0, 0], [0, 1], [1, 0], [1, 1]], np.float32),
        "labels": np.array([[0], [1], [1], [0]], np.float32),
    }
    blocks: list[np.dtype] = []

    def doubling(block: np.ndarray) -> None:
        blocks.append(block.dtype)
        block *= 2

    with dlvm.load(library, seed=3) as plain, dlvm.load(library, seed=3) as ranked:
        ranked.set_allreduce(doubling, ranks=2)
        for _ in range(4):
            assert ranked.train_step(**xor) == plain.train_step(**xor)
        for name, value in plain.params.items():
            np.testing.assert_array_equal(ranked.params[name], value)
    assert blocks == [np.dtype(np.float32)] * 4


def test_a_cuda_build_trains_on_the_gpu_as_on_the_cpu(on_fake_gpu, tmp_path):  # noqa: F811
    """--target cuda: the bf16 train step's kernels (emulated) give the CPU's step."""
    compiled = compiled_sample("digits", precision="bf16")
    library, kernels = build_emulated(compiled, "digits", tmp_path)
    on_fake_gpu(kernels)
    [train] = [e for e in compiled.interface.entries if e.kind == "train"]
    inputs = inputs_for(train.inputs, 3)
    with dlvm.load(library, seed=7) as cpu, dlvm.load(library, device="cuda:0", seed=7) as gpu:
        for _ in range(3):
            want, got = cpu.train_step(**inputs), gpu.train_step(**inputs)
            np.testing.assert_allclose(got, want, rtol=2**-7)
        for p in cpu.params:
            np.testing.assert_allclose(gpu.params[p], cpu.params[p], rtol=2**-7, atol=1e-4)


def test_precision_is_an_option_and_in_the_cache_key(tmp_path):
    assert "--precision=bf16" in BuildOptions(precision="bf16").flags()
    assert not any("precision" in f for f in BuildOptions().flags())
    runner = CliRunner()
    result = runner.invoke(cli, ["build", "samples/xor.tel", "--precision", "fp8"])
    assert result.exit_code != 0
    assert "Invalid value for '--precision'" in result.output and "'bf16'" in result.output
    help_text = runner.invoke(cli, ["build", "--help"]).output
    assert "--precision [f32|bf16]" in help_text
    out = tmp_path / "xor.ll"
    ok = runner.invoke(cli, ["build", "samples/xor.tel", "--precision", "bf16", "--emit",
                             "optimized", "-o", str(out)])  # fmt: skip
    assert ok.exit_code == 0, ok.output
    text = out.read_text() if out.exists() else ok.output
    assert "bf16" in text
