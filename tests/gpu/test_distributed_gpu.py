"""On a real GPU with CuPy and NCCL (skipped elsewhere): the digits model built with
--distributed for CUDA, trained on "cuda:0" with NCCL summing each step's device block across
one rank (NcclCommunicator(0, 1)), against the same model trained without a hook. With
$DLVM_GPU_PREBUILT the library is prebuilt (tests/gpu/prebuild.py, as digits_distributed.so),
so nothing here needs LLVM."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import dlvm
from dlvm.loader import DeviceBuffer, LibraryError
from dlvm.runtime import Status

NAME = "digits_distributed"


def built_distributed(directory: Path) -> Path:
    """samples/digits.tel built with --distributed for CUDA: prebuilt, or built into
    directory."""
    prebuilt = os.environ.get("DLVM_GPU_PREBUILT")
    if prebuilt:
        return Path(prebuilt) / f"{NAME}.so"
    from telhelp import compiled_sample

    from dlvm.codegen.build import build_library

    compiled = compiled_sample("digits", distributed=True)
    library = directory / f"{NAME}.so"
    build_library(compiled.module, compiled.spec, library, cuda=True)
    return library


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    return built_distributed(tmp_path_factory.mktemp("gpu-distributed"))


@pytest.fixture(scope="module")
def nccl():
    """One rank of NCCL on cuda:0."""
    pytest.importorskip("cupy", reason="NCCL is reached through CuPy (cupy-cuda12x/13x)")
    from dlvm.distributed.nccl import NcclCommunicator

    comm = NcclCommunicator(0, 1, device=0)
    yield comm
    comm.close()


def batches(model: dlvm.Model, steps: int) -> list[dict[str, np.ndarray]]:
    """Random train_step inputs of the model's shapes: x in [0, 1), one-hot labels."""
    rng = np.random.default_rng(0)
    x, labels = model.entries["train_step"].inputs
    out = []
    for _ in range(steps):
        classes = rng.integers(0, labels.shape[1], labels.shape[0])
        out.append(
            {
                x.name: rng.uniform(0, 1, x.shape).astype(np.float32),
                labels.name: np.eye(labels.shape[1], dtype=np.float32)[classes],
            }
        )
    return out


def test_nccl_sums_the_device_block_of_each_step(library, nccl):
    given: list[object] = []

    def hook(buffer: np.ndarray | DeviceBuffer) -> None:
        given.append(buffer)
        nccl.allreduce(buffer)

    with (
        dlvm.load(library, device="cuda:0", seed=0) as plain,
        dlvm.load(library, device="cuda:0", seed=0) as gpu,
    ):
        gpu.set_allreduce(hook, ranks=nccl.size)
        for inputs in batches(gpu, 20):
            np.testing.assert_allclose(gpu.train_step(**inputs), plain.train_step(**inputs),
                                       rtol=1e-5)  # fmt: skip
        for p in plain.params:
            np.testing.assert_allclose(gpu.params[p], plain.params[p], rtol=1e-5, atol=1e-6)
        block = 1 + sum(int(np.prod(s.shape)) for s in gpu.param_specs.values())
    assert len(given) == 20
    assert all(isinstance(b, DeviceBuffer) for b in given), given[:1]
    assert {(b.count, b.dtype, b.device) for b in given} == {(block, np.dtype(np.float32), 0)}


def test_digits_trains_with_nccl_as_without(library, nccl):
    from telc import demo

    data = demo.load_data()
    trained = {}
    for hooked in (False, True):
        with dlvm.load(library, device="cuda:0", seed=0) as model:
            if hooked:
                model.set_allreduce(nccl.allreduce, ranks=nccl.size)
            demo.train(model, data, epochs=3, seed=0)
            trained[hooked] = dict(model.params)
            accuracy = demo.accuracy(demo.predict(model, data.x_test), data.y_test)
            assert accuracy >= 0.9, (hooked, accuracy)
    for p in trained[False]:
        np.testing.assert_allclose(trained[True][p], trained[False][p], rtol=1e-5, atol=1e-6)


def test_a_failing_hook_leaves_the_model_unchanged(library, nccl, tmp_path):
    def fails(buffer: np.ndarray | DeviceBuffer) -> None:
        nccl.allreduce(buffer)
        raise TimeoutError("rank 1 did not answer")

    with dlvm.load(library, device="cuda:0", seed=0) as gpu:
        (inputs,) = batches(gpu, 1)
        gpu.train_step(**inputs)
        gpu.save(tmp_path / "before.safetensors")
        gpu.set_allreduce(fails, ranks=nccl.size)
        with pytest.raises(LibraryError, match="the all-reduce hook failed") as e:
            gpu.train_step(**inputs)
        assert e.value.status == Status.COLLECTIVE
        gpu.save(tmp_path / "after.safetensors")
    before = (tmp_path / "before.safetensors").read_bytes()
    assert (tmp_path / "after.safetensors").read_bytes() == before


def test_broadcast_barrier_and_host_arrays_on_one_rank(nccl):
    values = np.arange(10, dtype=np.float64).reshape(2, 5)
    nccl.allreduce(values)  # the slow path: up to the GPU and back
    np.testing.assert_array_equal(values, np.arange(10).reshape(2, 5))
    ints = np.arange(7, dtype=np.int32)
    nccl.broadcast(ints, root=0)
    np.testing.assert_array_equal(ints, np.arange(7))
    nccl.barrier()
    assert (nccl.rank, nccl.size) == (0, 1)
