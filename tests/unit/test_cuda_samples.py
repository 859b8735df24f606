"""Every sample's CUDA kernels: PTX that ptxas accepts for every supported architecture (what
CI checks without a GPU), and `infer` and the train steps run with each kernel emulated on
the CPU (cuda_emulator.py) agreeing with the interpreter."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from cuda_emulator import EmulatedInterpreter, Emulator
from telhelp import (
    compiled_sample,
    entry,
    has_entry,
    inputs_for,
    run_infer,
    run_init,
    run_train_step,
    sample_names,
    zero_states,
)

from dlvm.codegen.build import schedule
from dlvm.codegen.cuda import check_ptx, ptx
from dlvm.codegen.gpus import DEFAULT_GPU, GPUS


def scheduled(name: str):
    return schedule(copy.deepcopy(compiled_sample(name).module), cuda=True)


@pytest.mark.parametrize("name", sample_names())
def test_ptx_assembles_for_every_architecture(name):
    module = scheduled(name)
    kernels = [f for f in module.functions if f.compute]
    # Every sample for the default architecture; one of them for every architecture.
    for gpu in GPUS if name == "mnist" else [DEFAULT_GPU]:
        text, launches = ptx(module, gpu)
        assert f".target {gpu}" in text
        assert text.count(".entry ") == len(kernels) == len(launches)
        report = check_ptx(text, gpu)
        assert "spill stores" in report  # ptxas -v described each kernel


@pytest.fixture(scope="module", params=sample_names())
def emulated(request, tmp_path_factory):
    name = request.param
    module = scheduled(name)
    return name, module, Emulator(module, tmp_path_factory.mktemp(f"cuda-{name}"))


def close(got, expected) -> None:
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=2e-4, atol=2e-5)


def test_emulated_kernels_match_the_interpreter(emulated):
    name, module, emulator = emulated
    compiled = compiled_sample(name)
    params = run_init(compiled, seed=3, float64=False)
    checked = 0
    if has_entry(compiled.interface, "infer"):
        infer = entry(compiled.interface, "infer")
        inputs = inputs_for(infer.inputs, 1)
        expected = run_infer(compiled, inputs, params, float64=False)
        args = [inputs[n] for n, _ in infer.inputs] + [params[n] for n in infer.params]
        got = EmulatedInterpreter(module, emulator, seed=0).run(infer.name, args)
        got = got if isinstance(got, tuple) else (got,)
        for (out, _), value in zip(infer.outputs, got):
            close(value, expected[out])
        checked += 1
    for train in [e for e in compiled.interface.entries if e.kind == "train"]:
        inputs = inputs_for(train.inputs, 2)
        states = zero_states(train, np.float32)
        loss, new_params, _ = run_train_step(
            compiled, train, inputs, params, states, 1, float64=False, seed=5
        )
        args = [inputs[n] for n, _ in train.inputs] + [params[n] for n in train.params] + states
        if train.step is not None:
            args.append(np.float32(1))
        got = EmulatedInterpreter(module, emulator, seed=5).run(train.name, args)
        close(got[0], loss)
        for i, n in enumerate(train.params):
            close(got[1 + i], new_params[n])
        checked += 1
    assert checked, f"{name} has no infer or train entry"
    assert emulator.launched, "no kernel ran on the emulator"
