"""On a real GPU (skipped without one, tests/gpu/conftest.py): every instruction's kernel and
every sample against the interpreter and the CPU, through libraries built for CUDA, and the
digits model trained on the GPU to the CPU's accuracy. With $DLVM_GPU_PREBUILT the libraries
come from that directory (tests/gpu/prebuild.py makes them where the compiler is installed),
so that a GPU machine without our LLVM and libdevice runs them as they are."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from telhelp import compiled_sample, inputs_for, sample_names
from test_codegen_ops import CASES, assert_matches, module_text, random_input

import dlvm
from dlvm.codegen.build import build_library
from dlvm.codegen.spec import module_spec
from dlvm.interp import run_function
from dlvm.ir import parse_module


def built(name: str, directory: Path) -> Path:
    """NAME.so for CUDA: prebuilt, or built into directory (ops: every instruction case)."""
    prebuilt = os.environ.get("DLVM_GPU_PREBUILT")
    if prebuilt:
        return Path(prebuilt) / f"{name}.so"
    path = directory / f"{name}.so"
    if name == "ops":
        module = parse_module(module_text(), "ops.dl")
        build_library(module, module_spec(module, "test"), path, cuda=True)
    else:
        compiled = compiled_sample(name)
        build_library(compiled.module, compiled.spec, path, cuda=True)
    return path


@pytest.fixture(scope="module")
def ops(tmp_path_factory):
    path = built("ops", tmp_path_factory.mktemp("gpu-ops"))
    with dlvm.load(path, device="cuda:0") as lib:
        yield lib, parse_module(module_text(), "ops.dl")


@pytest.mark.parametrize("index, name", list(enumerate(CASES)), ids=list(CASES))
def test_instruction_on_the_gpu_matches_the_interpreter(ops, index, name):
    lib, reference = ops
    args, _, _ = CASES[name]
    rng = np.random.default_rng(index)
    inputs = [random_input(t, rng, name) for t in args]
    expected = np.asarray(run_function(reference, f"f{index}", inputs))
    # libdevice's functions are within 2 ulp (f32) of the correctly rounded result.
    assert_matches(name, np.asarray(getattr(lib, f"f{index}")(*inputs)), expected, f32=1e-5)


@pytest.mark.parametrize("name", sample_names())
def test_a_sample_on_the_gpu_matches_the_cpu(name, tmp_path):
    library = built(name, tmp_path)
    compiled = compiled_sample(name)
    entries = [e for e in compiled.interface.entries if e.kind != "init"]
    with dlvm.load(library, seed=7) as cpu, dlvm.load(library, device="cuda:0", seed=7) as gpu:
        for e in entries:
            inputs = inputs_for(e.inputs, 3)
            for _ in range(3 if e.kind == "train" else 1):
                want, got = getattr(cpu, e.name)(**inputs), getattr(gpu, e.name)(**inputs)
                for w, g in zip(*(r if isinstance(r, tuple) else (r,) for r in (want, got))):
                    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
        for p in cpu.params:
            np.testing.assert_allclose(gpu.params[p], cpu.params[p], rtol=1e-4, atol=1e-5)


def test_digits_trains_on_the_gpu_to_the_cpu_accuracy(tmp_path):
    from telc import demo

    library = built("digits", tmp_path)
    data = demo.load_data()
    accuracy = {}
    for device in ("cpu", "cuda:0"):
        with dlvm.load(library, device=device, seed=0) as model:
            demo.train(model, data, epochs=10, seed=0)
            accuracy[device] = demo.accuracy(demo.predict(model, data.x_test), data.y_test)
    assert accuracy["cuda:0"] >= 0.95
    assert abs(accuracy["cuda:0"] - accuracy["cpu"]) <= 0.01
