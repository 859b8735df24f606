"""Libraries built for CUDA, run where no GPU is: the runtime loads a stand-in for the NVIDIA
driver (fake_cuda.c, through $DLRT_CUDA_DRIVER) whose device memory is host memory and whose
launches run the kernels' CPU emulation (cuda_emulator.py). So everything but the real driver
and the PTX is exercised: the glue's device paths, the plans, uploads and downloads, the
parameters kept on the device, the CPU fallback of entries without a plan, and every error
a driver or device can cause. Each sample's library gives the same results on "cuda:0" as on
"cpu"."""

from __future__ import annotations

import copy
import ctypes
import functools
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from cuda_emulator import Emulator
from telhelp import compiled_sample, inputs_for, sample_names

import dlvm
from dlvm import runtime as rt
from dlvm.codegen.build import build_library, schedule
from dlvm.loader import LibraryError
from telc.driver import Compiled

FAKE_DRIVER = Path(__file__).with_name("fake_cuda.c")


@pytest.fixture(scope="session")
def fake_driver(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("fake-cuda") / "libcuda.so.1"
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", str(FAKE_DRIVER), "-o", str(path), "-ldl"],
                   check=True)  # fmt: skip
    return path


def transfers(driver: Path) -> list[int]:
    """Kernels run, uploads, downloads and device copies the fake driver has made so far."""
    return counts(driver)[:4]


def counts(driver: Path) -> list[int]:
    """transfers(), then the CUDA graphs launched."""
    values = (ctypes.c_long * 5)()
    ctypes.CDLL(str(driver)).fake_cuda_counts(values)
    return list(values)


def build_emulated(compiled: Compiled, name: str, directory: Path) -> tuple[Path, Path]:
    """DIRECTORY/NAME.so, `compiled`'s library built for CUDA, and its kernels emulated."""
    library = directory / f"{name}.so"
    build_library(compiled.module, compiled.spec, library, cuda=True)
    Emulator(schedule(copy.deepcopy(compiled.module), cuda=True), directory / "emu")
    return library, directory / "emu" / "kernels.so"


@functools.cache
def build(name: str, root: Path) -> tuple[Path, Path]:
    """The sample's library built for CUDA, and its kernels emulated (once per process)."""
    return build_emulated(compiled_sample(name), name, root / f"cuda-lib-{name}")


@pytest.fixture(scope="module", params=sample_names())
def built(request, tmp_path_factory):
    """(name, the sample's library built for CUDA, its emulated kernels)."""
    return request.param, *build(request.param, tmp_path_factory.getbasetemp())


@pytest.fixture(scope="module")
def xor_library(tmp_path_factory):
    return build("xor", tmp_path_factory.getbasetemp())


@pytest.fixture
def on_fake_gpu(monkeypatch, fake_driver):
    def use(kernels: Path) -> None:
        monkeypatch.setenv("DLRT_CUDA_DRIVER", str(fake_driver))
        monkeypatch.setenv("DLVM_FAKE_CUDA_KERNELS", str(kernels))

    return use


def close(got, expected) -> None:
    """Equal up to the rounding of sums taken in another order (an output or a tuple)."""
    if isinstance(expected, tuple):
        assert isinstance(got, tuple) and len(got) == len(expected)
        for g, w in zip(got, expected):
            close(g, w)
        return
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-4, atol=1e-5)


def test_a_sample_computes_the_same_on_cuda_as_on_the_cpu(built, on_fake_gpu, tmp_path):
    name, library, kernels = built
    on_fake_gpu(kernels)
    compiled = compiled_sample(name)
    with dlvm.load(library, seed=7) as cpu, dlvm.load(library, device="cuda:0", seed=7) as gpu:
        manifest = gpu.manifest
        assert manifest["devices"] == ["cpu", "cuda"] and manifest["gpu"] == "sm_90"
        for p in cpu.params:
            close(gpu.params[p], cpu.params[p])  # init ran on the CPU, then was uploaded
        entries = [e for e in compiled.interface.entries if e.kind != "init"]
        for e in entries:
            inputs = inputs_for(e.inputs, 3)
            for _ in range(3 if e.kind == "train" else 1):
                want, got = getattr(cpu, e.name)(**inputs), getattr(gpu, e.name)(**inputs)
                close(got, want)
        for p in cpu.params:
            close(gpu.params[p], cpu.params[p])  # the train steps updated both alike
        gpu.save(tmp_path / "gpu.safetensors")
        cpu.load(tmp_path / "gpu.safetensors")
        gpu.load(tmp_path / "gpu.safetensors")
        for e in entries:
            if e.kind == "infer":
                inputs = inputs_for(e.inputs, 4)
                close(gpu.infer(**inputs), cpu.infer(**inputs))
    plans = [entry["cuda"] for entry in manifest["entries"]]
    assert all(p == "gpu" or p.startswith("cpu: ") for p in plans)
    if name in ("digits", "xor", "mnist", "cnn", "ffnn"):
        assert set(plans) == {"gpu"}, plans  # every entry of these runs its kernels on the GPU


def test_only_inputs_and_outputs_cross_between_host_and_device(xor_library, on_fake_gpu,
                                                              fake_driver):  # fmt: skip
    library, kernels = xor_library
    on_fake_gpu(kernels)
    x = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], np.float32)
    labels = np.array([[0], [1], [1], [0]], np.float32)
    with dlvm.load(library, device="cuda:0") as gpu:
        before = transfers(fake_driver)
        gpu.infer(x)
        launches, uploads, downloads, copies = np.subtract(transfers(fake_driver), before)
        assert (uploads, downloads, copies) == (1, 1, 0) and launches >= 1
        before = transfers(fake_driver)
        gpu.train_step(x, labels)
        launches, uploads, downloads, copies = np.subtract(transfers(fake_driver), before)
        # x, labels and the step go up, the loss comes down; the parameters stay.
        assert (uploads, downloads, copies) == (3, 1, 0) and launches >= 10
        gpu.set_param("b2", np.ones((1, 1), np.float32))  # the host copy is brought down first
        assert gpu.params["b2"][0, 0] == 1.0


def fresh_copy(library: Path, tmp_path: Path) -> Path:
    """A copy of the library: its runtime loads the driver anew (once per loaded library)."""
    target = tmp_path / library.name
    shutil.copyfile(library, target)
    return target


@pytest.mark.parametrize(
    ("env", "device", "message"),
    [
        ({"DLVM_FAKE_CUDA_DEVICES": "0"}, "cuda:0",
         "cuda:0: no such device (this machine has 0 CUDA devices)"),
        ({}, "cuda:1", "cuda:1: no such device (this machine has 1 CUDA device)"),
        ({}, "cuda:99999999", "device 'cuda:99999999': no such device"),
        ({"DLVM_FAKE_CUDA_CC": "80"}, "cuda:0",
         "cuda:0 is an sm_80 GPU, older than sm_90, the architecture this library's kernels were "
         "built for (build with --gpu sm_80)"),
        ({"DLVM_FAKE_CUDA_OLD_PTX": "1"}, "cuda:0",
         "cuda:0: the NVIDIA driver (CUDA 11.2) is too old for this library's kernels (PTX ISA "
         "7.8): update the driver"),
    ],
    ids=["no-devices", "no-such-ordinal", "huge-ordinal", "older-gpu", "old-driver"],
)  # fmt: skip
def test_device_problems_are_reported_clearly(xor_library, on_fake_gpu, monkeypatch, env, device,
                                              message):  # fmt: skip
    library, kernels = xor_library
    on_fake_gpu(kernels)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(LibraryError) as e:
        dlvm.load(library, device=device)
    assert e.value.status == 3
    assert f"xor_create: {message}" in str(e.value)


def test_no_driver_is_a_device_error_and_the_cpu_still_works(xor_library, monkeypatch, tmp_path):
    library, _ = xor_library
    copy_ = fresh_copy(library, tmp_path)
    monkeypatch.setenv("DLRT_CUDA_DRIVER", str(tmp_path / "missing" / "libcuda.so.1"))
    with pytest.raises(LibraryError, match="cannot load the CUDA driver .*missing/libcuda.so.1"):
        dlvm.load(copy_, device="cuda:0")
    with dlvm.load(copy_) as cpu:  # a library with CUDA kernels runs on the CPU without a GPU
        assert cpu.infer(np.zeros((4, 2), np.float32)).shape == (4, 1)


def test_a_bad_device_name_is_an_invalid_argument(xor_library):
    library, _ = xor_library
    for device in ("cuda:", "cuda:x", "gpu:0", "cuda:-1"):
        with pytest.raises(LibraryError, match="unknown device") as e:
            dlvm.load(library, device=device)
        assert e.value.status == 1


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class DeviceArray:
    """A DLPack array in the fake driver's device memory (kDLCUDA, device 0), as CuPy or a
    PyTorch CUDA tensor would hand one over."""

    def __init__(self, driver: Path, array: np.ndarray) -> None:
        self.array = np.ascontiguousarray(array)
        self.driver = ctypes.CDLL(str(driver))
        address = ctypes.c_ulonglong()
        assert self.driver.cuMemAlloc_v2(ctypes.byref(address), max(1, self.array.nbytes)) == 0
        self.address = address.value
        ctypes.memmove(self.address, self.array.ctypes.data, self.array.nbytes)
        self._shape = (ctypes.c_int64 * max(1, self.array.ndim))(*self.array.shape)
        self._managed = rt.DLManagedTensor()
        t = self._managed.dl_tensor
        t.data, t.ndim, t.byte_offset = self.address, self.array.ndim, 0
        t.device = rt.DLDevice(rt.DLDeviceType.CUDA, 0)
        t.dtype = rt.DLDataType.of(rt.DType.from_numpy(self.array.dtype.type))
        t.shape = ctypes.cast(self._shape, ctypes.POINTER(ctypes.c_int64))

    def __dlpack_device__(self) -> tuple[int, int]:
        return (int(rt.DLDeviceType.CUDA), 0)

    def __dlpack__(self, stream=None):
        return _capsule_new(ctypes.addressof(self._managed), b"dltensor", None)

    def numpy(self) -> np.ndarray:
        out = np.empty_like(self.array)
        ctypes.memmove(out.ctypes.data, self.address, out.nbytes)
        return out


XOR_X = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], np.float32)
XOR_LABELS = np.array([[0], [1], [1], [0]], np.float32)


def test_gpu_arrays_are_read_and_written_in_place(xor_library, on_fake_gpu, fake_driver):
    library, kernels = xor_library
    on_fake_gpu(kernels)
    x = DeviceArray(fake_driver, XOR_X)
    y = DeviceArray(fake_driver, np.zeros((4, 1), np.float32))
    with dlvm.load(library, seed=1) as cpu, dlvm.load(library, device="cuda:0", seed=1) as gpu:
        before = transfers(fake_driver)
        assert gpu.infer(x, out=y) is y
        launches, uploads, downloads, copies = np.subtract(transfers(fake_driver), before)
        assert (uploads, downloads, copies) == (0, 0, 0) and launches >= 1
        close(y.numpy(), cpu.infer(XOR_X))
        before = transfers(fake_driver)
        close(gpu.infer(x), cpu.infer(XOR_X))  # an output not given comes back to the host
        assert list(np.subtract(transfers(fake_driver), before)[1:]) == [0, 1, 0]
        labels = DeviceArray(fake_driver, XOR_LABELS)
        before = transfers(fake_driver)
        close(gpu.train_step(x, labels), cpu.train_step(XOR_X, XOR_LABELS))
        # Only the step goes up and the loss comes down.
        assert list(np.subtract(transfers(fake_driver), before)[1:]) == [1, 1, 0]
        close(gpu.params["W1"], cpu.params["W1"])
        with pytest.raises(LibraryError, match="argument 'x' is on cuda:0, but the model runs on"
                           " the CPU") as e:  # fmt: skip
            cpu.infer(x)
        assert e.value.status == 3
        wrong = DeviceArray(fake_driver, np.zeros((3, 2), np.float32))
        with pytest.raises(LibraryError, match="argument 'x' has 3 in dimension 0; it must have 4"):
            gpu.infer(wrong)
        ints = DeviceArray(fake_driver, np.zeros((4, 2), np.int32))
        with pytest.raises(LibraryError, match="argument 'x' has DLPack type code 0 with 32 bits"):
            gpu.infer(ints)


def test_the_dlpack_entry_of_a_cpu_library_takes_host_tensors(sample_library):
    """NAME_<entry>_dl exists in every library; on the CPU it takes kDLCPU tensors in place."""
    from dlvm.loader import _host_tensor

    with dlvm.load(sample_library("xor"), seed=2) as model:
        entry = model.entries["infer"]
        keep: list = []
        y = np.zeros((4, 1), np.float32)
        table = (ctypes.c_void_p * 2)(_host_tensor(entry.inputs[0], XOR_X, keep),
                                      _host_tensor(entry.outputs[0], y, keep))  # fmt: skip
        model._call(model._function("xor_infer_dl", 2), table)
        close(y, model.infer(XOR_X))
        table[0] = None
        with pytest.raises(LibraryError, match="xor_infer_dl: argument 'x' is NULL"):
            model._call(model._function("xor_infer_dl", 2), table)


def test_a_plan_runs_as_one_cuda_graph(xor_library, on_fake_gpu, fake_driver, monkeypatch):
    library, kernels = xor_library
    on_fake_gpu(kernels)
    with dlvm.load(library, device="cuda:0") as gpu:
        first = gpu.infer(XOR_X)  # a new set of pointers: launched one by one, remembered
        before = counts(fake_driver)
        for _ in range(3):
            close(gpu.infer(XOR_X), first)
        kernels_run, *_, graphs = np.subtract(counts(fake_driver), before)
        assert graphs == 3 and kernels_run == 6  # its 2 kernels, captured once, launched whole
        before = counts(fake_driver)
        for _ in range(5):  # new parameters swap buffers: one graph for each of the two sets
            gpu.train_step(XOR_X, XOR_LABELS)
        assert np.subtract(counts(fake_driver), before)[4] == 3  # steps 3, 4 and 5
        before = counts(fake_driver)
        for _ in range(3):  # new device arrays on every call: nothing is worth capturing
            out = DeviceArray(fake_driver, np.zeros((4, 1), np.float32))
            gpu.infer(DeviceArray(fake_driver, XOR_X), out=out)
        assert np.subtract(counts(fake_driver), before)[4] == 0
    monkeypatch.setenv("DLVM_FAKE_CUDA_NO_GRAPHS", "1")  # a driver that refuses to capture
    with dlvm.load(library, device="cuda:0") as gpu:
        before = counts(fake_driver)
        close(gpu.infer(XOR_X), first)
        close(gpu.infer(XOR_X), first)
        kernels_run, *_, graphs = np.subtract(counts(fake_driver), before)
        assert graphs == 0 and kernels_run == 4  # launched one by one


def test_a_staged_function_runs_on_gpu_arrays(on_fake_gpu, fake_driver, tmp_path, monkeypatch):
    """NNKit: arrays in GPU memory make the JIT compile the function for CUDA and run it on
    their GPU, reading them in place; results come back to the host, or into `out=`."""
    from dlvm import nnkit as nk
    from dlvm.transforms.pass_manager import PassManager
    from dlvm.transforms.pipelines import PIPELINES

    monkeypatch.setenv("DLVM_CACHE_DIR", str(tmp_path / "cache"))
    rng = np.random.default_rng(3)
    xh = rng.standard_normal((4, 8)).astype(np.float32)
    wh = rng.standard_normal((8, 3)).astype(np.float32)
    x, w = DeviceArray(fake_driver, xh), DeviceArray(fake_driver, wh)
    f = dlvm.stage(lambda x, w: nk.tanh(x @ w) + 1.0)
    compiled = f.compile(f.specs((x, w)), cuda=True)  # to emulate its kernels before the call
    module = copy.deepcopy(compiled.module)
    PassManager(True).run_pipeline(module, PIPELINES[2])
    Emulator(schedule(module, cuda=True), tmp_path / "emu")
    on_fake_gpu(tmp_path / "emu" / "kernels.so")
    want = np.tanh(xh @ wh) + 1
    before = transfers(fake_driver)
    close(f(x, w), want)
    launches, uploads, downloads, _ = np.subtract(transfers(fake_driver), before)
    assert launches >= 1 and (uploads, downloads) == (0, 1)
    y = DeviceArray(fake_driver, np.zeros((4, 3), np.float32))
    before = transfers(fake_driver)
    assert f(x, w, out=y) is y
    assert list(np.subtract(transfers(fake_driver), before)[1:3]) == [0, 0]
    close(y.numpy(), want)
    close(f(xh, w), want)  # a host array beside a device one goes up
    assert (f.compiled, list(f.compiled_cuda.values())) == ({}, [compiled])
    unsigned = DeviceArray(fake_driver, np.zeros((4, 8), np.float32))
    unsigned._managed.dl_tensor.dtype = rt.DLDataType(rt.DLDataTypeCode.UInt, 32, 1)
    with pytest.raises(TypeError, match="argument 'x': no DLVM element type for DLPack type"):
        f(unsigned, w)
