"""Data-parallel train steps on a GPU, where no GPU is: samples built with --distributed for
CUDA, run on "cuda:0" through the stand-in driver of test_cuda_library.py (device memory is
host memory, kernels emulated on the CPU). With an all-reduce hook the step runs its grads half
on the device into a device block, hands the hook a DeviceBuffer (never a host array), and runs
its apply half on the device; the block never comes down to the host, and a failing hook
leaves the model as it was."""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import numpy as np
import pytest
import test_cuda_library
from telhelp import compiled_sample, inputs_for
from test_cuda_library import XOR_LABELS, XOR_X, DeviceArray, build_emulated, close, transfers

import dlvm
from dlvm.loader import DeviceBuffer, LibraryError
from dlvm.runtime import Status

# The stand-in driver, built once, and the fixture that points the runtime at it.
fake_driver = test_cuda_library.fake_driver
on_fake_gpu = test_cuda_library.on_fake_gpu

STEPS = 4


@functools.cache
def build(name: str, root: Path) -> tuple[Path, Path]:
    """The sample's --distributed library built for CUDA, and its kernels emulated."""
    directory = root / f"cuda-distributed-{name}"
    return build_emulated(compiled_sample(name, distributed=True), name, directory)


@pytest.fixture(scope="module", params=["xor", "digits"])
def sample(request, tmp_path_factory):
    """(name, the sample's --distributed library for CUDA, its emulated kernels)."""
    return request.param, *build(request.param, tmp_path_factory.getbasetemp())


@pytest.fixture(scope="module")
def xor(tmp_path_factory):
    return build("xor", tmp_path_factory.getbasetemp())


def device_array(buffer: DeviceBuffer) -> np.ndarray:
    """The buffer as a NumPy array: on the stand-in driver a device address is a host one."""
    raw = (ctypes.c_char * (buffer.count * buffer.dtype.itemsize)).from_address(buffer.pointer)
    return np.frombuffer(memoryview(raw), buffer.dtype, buffer.count)


class Doubling:
    """The all-reduce of 2 ranks that computed the same sums: each element doubled in place.
    It records what it was given."""

    def __init__(self) -> None:
        self.given: list[np.ndarray | DeviceBuffer] = []

    def __call__(self, buffer: np.ndarray | DeviceBuffer) -> None:
        self.given.append(buffer)
        assert isinstance(buffer, DeviceBuffer), "a model on a GPU sums in the GPU's memory"
        device_array(buffer)[:] *= 2


def train_inputs(name: str, seed: int) -> dict[str, np.ndarray]:
    entries = compiled_sample(name, distributed=True).interface.entries
    (train,) = [e for e in entries if e.kind == "train"]
    return inputs_for(train.inputs, seed)


def test_a_step_on_the_gpu_sums_its_block_in_device_memory(sample, on_fake_gpu, fake_driver):
    name, library, kernels = sample
    on_fake_gpu(kernels)
    hook = Doubling()
    with (
        dlvm.load(library, seed=3) as cpu,
        dlvm.load(library, device="cuda:0", seed=3) as plain,
        dlvm.load(library, device="cuda:0", seed=3) as gpu,
    ):
        gpu.set_allreduce(hook, ranks=2)
        for seed in range(STEPS):
            inputs = train_inputs(name, seed)
            before = transfers(fake_driver)
            want = plain.train_step(**inputs)
            _, plain_up, plain_down, plain_copies = np.subtract(transfers(fake_driver), before)
            before = transfers(fake_driver)
            got = gpu.train_step(**inputs)
            _, up, down, copies = np.subtract(transfers(fake_driver), before)
            assert got == want  # doubled, then scaled by 1/2: exact
            close(got, cpu.train_step(**inputs))
            # The block stays on the device: only the scale goes up besides the plain step's
            # uploads, and only the loss comes down, as in a plain step.
            assert (up, down, copies) == (plain_up + 1, plain_down, plain_copies) == (up, 1, 0)
        for p in cpu.params:
            assert np.array_equal(gpu.params[p], plain.params[p]), p
            close(gpu.params[p], cpu.params[p])
    # One call per step, on the whole block: the loss and every gradient (f32), at one address.
    assert len(hook.given) == STEPS
    block = 1 + sum(int(np.prod(s.shape)) for s in cpu.param_specs.values())
    assert {(b.count, b.dtype, b.device) for b in hook.given} == {(block, np.dtype(np.float32), 0)}
    assert len({b.pointer for b in hook.given}) == 1


def test_a_failing_hook_leaves_the_gpu_model_unchanged(xor, on_fake_gpu, tmp_path):
    library, kernels = xor
    on_fake_gpu(kernels)

    def fails(buffer: np.ndarray | DeviceBuffer) -> None:
        assert isinstance(buffer, DeviceBuffer)
        device_array(buffer)[:] = np.nan  # a collective that wrote half its result, then died
        raise TimeoutError("the other ranks did not answer")

    with (
        dlvm.load(library, device="cuda:0", seed=5) as gpu,
        dlvm.load(library, device="cuda:0", seed=5) as plain,
    ):
        plain.train_step(XOR_X, XOR_LABELS)
        gpu.train_step(XOR_X, XOR_LABELS)
        gpu.save(tmp_path / "before.safetensors")
        gpu.set_allreduce(fails, ranks=2)
        with pytest.raises(LibraryError, match="the all-reduce hook failed") as e:
            gpu.train_step(XOR_X, XOR_LABELS)
        assert e.value.status == Status.COLLECTIVE
        assert isinstance(e.value.__cause__, TimeoutError)
        gpu.save(tmp_path / "after.safetensors")  # parameters, Adam's states and the step
        before = (tmp_path / "before.safetensors").read_bytes()
        assert (tmp_path / "after.safetensors").read_bytes() == before
        # The next step is the one the failed step would have been.
        gpu.set_allreduce(Doubling(), ranks=2)
        assert gpu.train_step(XOR_X, XOR_LABELS) == plain.train_step(XOR_X, XOR_LABELS)
        for p in plain.params:
            assert np.array_equal(gpu.params[p], plain.params[p]), p


def test_device_arrays_take_the_distributed_path(xor, on_fake_gpu, fake_driver):
    library, kernels = xor
    on_fake_gpu(kernels)
    hook = Doubling()
    x, labels = DeviceArray(fake_driver, XOR_X), DeviceArray(fake_driver, XOR_LABELS)
    with (
        dlvm.load(library, device="cuda:0", seed=1) as plain,
        dlvm.load(library, device="cuda:0", seed=1) as gpu,
    ):
        gpu.set_allreduce(hook, ranks=2)
        for _ in range(3):
            want = plain.train_step(x, labels)
            before = transfers(fake_driver)
            assert gpu.train_step(x, labels) == want
            # The scale and the step go up, the loss comes down; the inputs are read in place.
            assert list(np.subtract(transfers(fake_driver), before)[1:]) == [2, 1, 0]
        for p in plain.params:
            assert np.array_equal(gpu.params[p], plain.params[p]), p
    assert len(hook.given) == 3
