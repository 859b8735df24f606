"""Data-parallel train steps in a shipped library (docs/distributed.md): a library built with
--distributed runs a train step with an all-reduce hook as its grads half, the hook on one
block of sums, and its apply half. Without processes to sum across, a hook that doubles the
block stands for two ranks that computed the same gradients: the step must then equal the plain
step exactly (x + x, times 0.5, is x), and a failing hook must leave the model as it was."""

from __future__ import annotations

import numpy as np
import pytest
from telhelp import build_distributed_sample, build_sample

import dlvm
from dlvm.loader import LibraryError
from dlvm.runtime import Status


@pytest.fixture(scope="module")
def xor(tmp_path_factory):
    return build_distributed_sample("xor", tmp_path_factory.mktemp("dp-xor"))


@pytest.fixture(scope="module")
def resnet(tmp_path_factory):
    return build_distributed_sample("resnet", tmp_path_factory.mktemp("dp-resnet"))


XOR = {
    "x": np.array([[0, 0], [0, 1], [1, 0], [1, 1]], np.float32),
    "labels": np.array([[0], [1], [1], [0]], np.float32),
}


def doubling(calls: list[tuple[np.dtype, int]]):
    """A hook standing for two ranks with the same gradients: each sum is twice the value."""

    def hook(block: np.ndarray) -> None:
        calls.append((block.dtype, block.size))
        block *= 2

    return hook


def test_two_equal_ranks_train_exactly_as_one(xor):
    calls: list[tuple[np.dtype, int]] = []
    with dlvm.load(xor, seed=3) as plain, dlvm.load(xor, seed=3) as ranked:
        ranked.set_allreduce(doubling(calls), ranks=2)
        for _ in range(6):
            want, got = plain.train_step(**XOR), ranked.train_step(**XOR)
            assert got == want
        for name, value in plain.params.items():
            np.testing.assert_array_equal(ranked.params[name], value)
    # One block per step: the loss and every gradient, all f32.
    sizes = {p: int(np.prod(t["shape"])) for p, t in _params(xor).items()}
    assert calls == [(np.dtype(np.float32), 1 + sum(sizes.values()))] * 6


def _params(library) -> dict[str, dict]:
    with dlvm.load(library) as model:
        return {p["name"]: p for p in model.manifest["params"]}


def test_the_loss_is_the_mean_over_the_ranks(xor):
    """Rank B's block (its loss and gradients on another batch) added by rank A's hook: A's step
    returns the mean of the two ranks' losses."""
    other = {"x": 1 - XOR["x"], "labels": XOR["labels"][[1, 0, 3, 2]]}
    with (
        dlvm.load(xor, seed=3) as a,
        dlvm.load(xor, seed=3) as b,
        dlvm.load(xor, seed=3) as ranked,
        dlvm.load(xor, seed=3) as rank_b,
    ):
        losses = a.train_step(**XOR), b.train_step(**other)
        assert losses[0] != pytest.approx(losses[1], rel=1e-3)
        blocks: list[np.ndarray] = []
        rank_b.set_allreduce(lambda block: blocks.append(block.copy()), ranks=1)
        assert rank_b.train_step(**other) == losses[1]
        assert blocks[0][0] == losses[1]
        ranked.set_allreduce(lambda block: block.__iadd__(blocks[0]), ranks=2)
        assert ranked.train_step(**XOR) == pytest.approx(sum(losses) / 2, rel=1e-6)


def test_a_failing_hook_leaves_the_model_as_it_was(xor, tmp_path):
    with dlvm.load(xor, seed=3) as plain, dlvm.load(xor, seed=3) as ranked:
        for model in (plain, ranked):
            model.train_step(**XOR)
        plain.save(tmp_path / "plain.safetensors")

        def broken(block: np.ndarray) -> None:
            block[:] = np.nan  # half-written sums must not reach the parameters
            raise ConnectionError("rank 1 is gone")

        ranked.set_allreduce(broken, ranks=2)
        with pytest.raises(LibraryError, match="all-reduce hook failed") as failed:
            ranked.train_step(**XOR)
        assert failed.value.status == Status.COLLECTIVE
        assert isinstance(failed.value.__cause__, ConnectionError)
        ranked.save(tmp_path / "ranked.safetensors")
        # Parameters, optimiser state and step count: the same file as the model's that never
        # tried the failed step.
        assert (tmp_path / "ranked.safetensors").read_bytes() == (
            tmp_path / "plain.safetensors"
        ).read_bytes()
        ranked.set_allreduce(None)  # the plain step again
        for _ in range(3):
            assert ranked.train_step(**XOR) == plain.train_step(**XOR)


def test_buffers_are_averaged_with_the_gradients(resnet):
    """ResNet's batch-norm statistics (float buffers updated by `<-`) travel in the block."""
    with dlvm.load(resnet, seed=1) as plain, dlvm.load(resnet, seed=1) as ranked:
        calls: list[tuple[np.dtype, int]] = []
        ranked.set_allreduce(doubling(calls), ranks=2)
        rng = np.random.default_rng(5)
        inputs = {
            t.name: rng.uniform(0, 1, t.shape).astype(t.dtype)
            for t in plain.entries["train_step"].inputs
        }
        for _ in range(2):
            assert ranked.train_step(**inputs) == plain.train_step(**inputs)
        params = plain.manifest["params"]
        for name, value in plain.params.items():
            np.testing.assert_array_equal(ranked.params[name], value, err_msg=name)
        buffers = sum(int(np.prod(p["shape"])) for p in params if p.get("kind") == "buffer")
        trained = sum(int(np.prod(p["shape"])) for p in params if p.get("kind") != "buffer")
        assert buffers > 0 and calls[0][1] == 1 + trained + buffers


def test_a_library_built_without_distributed_says_how_to_get_one(tmp_path):
    library = build_sample("xor", tmp_path)
    with dlvm.load(library) as model:
        with pytest.raises(LibraryError, match="built without --distributed") as refused:
            model.set_allreduce(lambda block: None, ranks=2)
        assert refused.value.status == Status.INVALID_ARGUMENT
        model.set_allreduce(None)  # removing no hook is fine


@pytest.mark.parametrize("ranks", [0, -3, 2**31, True, 1.5])
def test_ranks_must_count_processes(xor, ranks):
    with dlvm.load(xor) as model, pytest.raises(ValueError, match="ranks must be"):
        model.set_allreduce(lambda block: None, ranks=ranks)


def test_the_hook_must_be_callable(xor):
    with dlvm.load(xor) as model, pytest.raises(TypeError, match="must be callable"):
        model.set_allreduce("MPI_SUM", ranks=2)  # type: ignore[arg-type]


def test_an_imported_onnx_model_trains_across_ranks_too(tmp_path):
    """`telc build model.onnx --train-loss … --distributed`: the imported graph's train entry
    has halves as a TEL model's does, and `--distributed` is part of the build's cache key."""
    from click.testing import CliRunner

    from telc.cli import cli

    env = {"TELC_CACHE_DIR": str(tmp_path / "cache")}
    args = ["build", "samples/lenet.onnx", "--train-loss", "cross_entropy", "--labels"]
    args += ["labels:1x10", "-q"]
    for name, extra in (("plain", []), ("ranked", ["--distributed"])):
        done = CliRunner().invoke(cli, [*args, *extra, "-o", str(tmp_path / f"{name}.so")], env=env)
        assert done.exit_code == 0, done.output
    rng = np.random.default_rng(0)
    with (
        dlvm.load(tmp_path / "plain.so") as plain,
        dlvm.load(tmp_path / "ranked.so") as ranked,
    ):
        inputs = {t.name: rng.random(t.shape).astype(t.dtype) for t in plain.train_step.inputs}
        with pytest.raises(LibraryError, match="without --distributed"):
            plain.set_allreduce(lambda block: None, 2)
        calls: list[tuple[np.dtype, int]] = []
        ranked.set_allreduce(doubling(calls), ranks=2)
        for _ in range(2):
            assert ranked.train_step(**inputs) == plain.train_step(**inputs)
        for name, value in plain.params.items():
            np.testing.assert_array_equal(ranked.params[name], value, err_msg=name)
        assert len(calls) == 2
