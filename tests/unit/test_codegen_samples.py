"""Every sample built into a real shared library (telc's pipeline: optimise, compute stages,
LLVM, glue, runtime, link) and run through `dlvm.load`: `infer` and every train step match the
interpreter on the library's own parameters, the outputs for a fixed seed match the checked-in
golden files (tests/golden/NAME.npz; `UPDATE_GOLDEN=1` rewrites them), and a build is
byte-for-byte reproducible."""

from __future__ import annotations

import os

import numpy as np
import pytest
from telhelp import (
    GOLDEN_DIR,
    GOLDEN_SEED,
    build_sample,
    compiled_sample,
    draws_random_numbers,
    entry,
    has_entry,
    inputs_for,
    library_and_interpreter_step,
    run_infer,
    sample_names,
)

import dlvm

GOLDEN = GOLDEN_DIR
SEED = GOLDEN_SEED


@pytest.fixture(scope="module", params=sample_names())
def sample(request, sample_library):
    name = request.param
    with dlvm.load(sample_library(name), seed=SEED) as lib:
        yield name, lib


def test_infer_matches_the_interpreter_and_the_golden_file(sample):
    name, lib = sample
    compiled = compiled_sample(name)
    if not has_entry(compiled.interface, "infer"):
        pytest.skip(f"{name} has no infer entry")
    infer = entry(compiled.interface, "infer")
    inputs = inputs_for(infer.inputs, 1)
    params = lib.params
    expected = run_infer(compiled, inputs, params, float64=False)
    got = lib.infer(**inputs)
    got = got if isinstance(got, tuple) else (got,)
    for (out, _), value in zip(infer.outputs, got):
        np.testing.assert_allclose(value, expected[out], rtol=1e-4, atol=1e-5, err_msg=out)
    golden = GOLDEN / f"{name}.npz"
    arrays = {f"out_{o}": np.asarray(v) for (o, _), v in zip(infer.outputs, got)}
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.mkdir(exist_ok=True)
        np.savez(golden, **arrays)
    assert golden.exists(), f"no golden file {golden}; run with UPDATE_GOLDEN=1 to write it"
    with np.load(golden) as saved:
        for key, value in arrays.items():
            np.testing.assert_allclose(value, saved[key], rtol=1e-4, atol=1e-5, err_msg=key)


def test_train_steps_match_the_interpreter(sample):
    name, lib = sample
    compiled = compiled_sample(name)
    trains = [e for e in compiled.interface.entries if e.kind == "train"]
    if not trains:
        pytest.skip(f"{name} has no train entry")
    for train in trains:
        if draws_random_numbers(compiled.module, train.name):
            # dropout: the library's random stream is not the interpreter's; the step must
            # still give a finite loss and move the parameters.
            before = lib.params
            loss = getattr(lib, train.name)(**inputs_for(train.inputs, 2))
            assert np.isfinite(loss)
            assert any(not np.array_equal(before[p], v) for p, v in lib.params.items())
            continue
        got, loss, new_params = library_and_interpreter_step(compiled, train, lib)
        np.testing.assert_allclose(np.asarray(got).reshape(-1)[0], loss, rtol=1e-4, atol=1e-5)
        after = lib.params
        for p, value in new_params.items():
            np.testing.assert_allclose(after[p], value, rtol=1e-4, atol=1e-5, err_msg=p)


def test_build_is_reproducible(tmp_path):
    first = build_sample("xor", tmp_path / "a").read_bytes()
    second = build_sample("xor", tmp_path / "b").read_bytes()
    assert first == second
