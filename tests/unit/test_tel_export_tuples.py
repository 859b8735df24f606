"""Exported functions that return tuples (docs/tel.md, "Entry points"; docs/c-abi.md section 1):
one output per element, named result0, result1…, in the header, the manifest (the compiler's
and the runtime's, byte for byte), dlvm.load (a tuple of arrays) and a C program; gradients with
respect to several parameters against NumPy in float64; and every entry type `telc check`
accepts (entry arguments and results, declarations, an optimiser's step) either builds and runs,
or is rejected by check with a located error."""

from __future__ import annotations

import copy
import ctypes
import json
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
from dlvm.codegen import glue_layout
from dlvm.codegen.build import schedule
from dlvm.codegen.glue import manifest_json
from dlvm.ir.types import TupleType
from telc.lower.entries import STEP_DTYPES, export_outputs

TELC = Path(sys.executable).parent / "telc"

GRADS = """\
module grads
use nn

W1: param[3 x 2] = glorot()
b1: param[1 x 2] = 0.1

def loss(v: [4 x 3], target: [4 x 2]) -> [] = mse(tanh(v . W1 + b1), target)

export def grads(v: [4 x 3], target: [4 x 2]) = grad(loss, wrt: (W1, b1))(v, target)
export def both(v: [4 x 3], target: [4 x 2]) = grad(loss, wrt: (W1, v), keeping: true)(v, target)
"""


@pytest.fixture(scope="module")
def grads_library(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("grads"), GRADS, "grads")


def reference(params: dict[str, np.ndarray], v: np.ndarray, t: np.ndarray) -> dict[str, object]:
    """mse(tanh(v . W1 + b1), t) and its gradients, by hand in float64."""
    w, b = params["W1"].astype(np.float64), params["b1"].astype(np.float64)
    v, t = v.astype(np.float64), t.astype(np.float64)
    a = np.tanh(v @ w + b)
    d = a - t
    dh = 2 * d / d.size * (1 - a * a)
    return {"loss": np.mean(d * d), "W1": v.T @ dh, "b1": dh.sum(0, keepdims=True),
            "v": dh @ w.T}  # fmt: skip


def inputs(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((4, 3)).astype(np.float32),
            rng.standard_normal((4, 2)).astype(np.float32))  # fmt: skip


def test_gradients_with_respect_to_several_parameters_match_numpy(grads_library):
    v, t = inputs(1)
    with dlvm.load(grads_library, seed=3) as m:
        want = reference(m.params, v, t)
        d_w, d_b = m.grads(v, t)
        np.testing.assert_allclose(d_w, want["W1"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(d_b, want["b1"], rtol=1e-5, atol=1e-6)
        d_w, d_v, value = m.both(v, t)
        np.testing.assert_allclose(d_w, want["W1"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(d_v, want["v"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(value, want["loss"], rtol=1e-5)
        # out= takes the tuple's arrays, filled in place.
        given = (np.zeros((3, 2), np.float32), np.zeros((1, 2), np.float32))
        assert m.grads(v, t, out=given) is given
        np.testing.assert_allclose(given[1], want["b1"], rtol=1e-5, atol=1e-6)


def test_the_manifest_lists_each_element_and_the_runtime_writes_the_compilers_bytes(
    grads_library, tmp_path
):
    compiled = compile_snippet(str(tmp_path), GRADS, "grads")
    written = ctypes.CDLL(str(grads_library)).grads_manifest
    written.restype = ctypes.c_char_p
    assert written() == manifest_json(compiled.spec).encode()
    entries = {e["name"]: e for e in json.loads(written())["entries"]}
    assert entries["grads"]["outputs"] == [
        {"name": "result0", "dtype": "f32", "shape": [3, 2]},
        {"name": "result1", "dtype": "f32", "shape": [1, 2]},
    ]
    assert [o["name"] for o in entries["both"]["outputs"]] == ["result0", "result1", "result2"]
    assert entries["both"]["outputs"][2]["shape"] == []


def test_the_header_has_a_result_pointer_per_element(grads_library):
    header = grads_library.with_suffix(".h").read_text()
    assert "float *result0, /* output 'result0': f32[3, 2] */" in header
    assert "float *result1 /* output 'result1': f32[1, 2] */);" in header
    assert "#define GRADS_GRADS_RESULT1_DIMS {1, 2}" in header
    assert "#define GRADS_BOTH_RESULT2_SIZE 1" in header


C_PROGRAM = r"""
#include <stdio.h>
#include "grads.h"

int main(void) {
    float v[GRADS_GRADS_V_SIZE], t[GRADS_GRADS_TARGET_SIZE];
    float dw[GRADS_GRADS_RESULT0_SIZE], db[GRADS_GRADS_RESULT1_SIZE];
    float dv[GRADS_BOTH_RESULT1_SIZE], value;
    for (int i = 0; i < GRADS_GRADS_V_SIZE; i++) v[i] = (float)(i % 5) * 0.25f - 0.5f;
    for (int i = 0; i < GRADS_GRADS_TARGET_SIZE; i++) t[i] = (float)(i % 3) * 0.5f - 0.25f;
    grads_model *m;
    if (grads_create(NULL, 3, &m) != DLRT_OK) return 1;
    if (grads_grads(m, v, t, dw, db) != DLRT_OK) return 2;
    if (grads_both(m, v, t, dw, dv, &value) != DLRT_OK) return 3;
    if (grads_grads(m, v, t, dw, NULL) != DLRT_ERR_INVALID_ARGUMENT) return 4;
    printf("%s\n", dlrt_last_error());
    for (int i = 0; i < GRADS_GRADS_RESULT1_SIZE; i++) printf("%.9g\n", db[i]);
    for (int i = 0; i < GRADS_BOTH_RESULT1_SIZE; i++) printf("%.9g\n", dv[i]);
    printf("%.9g\n", value);
    grads_destroy(m);
    return 0;
}
"""


def test_a_c_program_calls_a_tuple_entry_through_the_header(grads_library, tmp_path):
    source, exe = tmp_path / "main.c", tmp_path / "main"
    source.write_text(C_PROGRAM)
    d = grads_library.parent
    subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", f"-I{d}", str(source),
                    str(grads_library), f"-Wl,-rpath,{d}", "-o", str(exe)], check=True)  # fmt: skip
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    error, *numbers = run.stdout.splitlines()
    assert error == "grads_grads: argument 'result1' is NULL"
    got = np.array([float(x) for x in numbers])
    v = ((np.arange(12) % 5) * 0.25 - 0.5).astype(np.float32).reshape(4, 3)
    t = ((np.arange(8) % 3) * 0.5 - 0.25).astype(np.float32).reshape(4, 2)
    with dlvm.load(grads_library, seed=3) as m:
        want = reference(m.params, v, t)
    expected = np.concatenate([want["b1"].ravel(), want["v"].ravel(), [want["loss"]]])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


# The audit: what an exported function may take and return ----------------------------------

BUILDS = {
    "tensors": (
        "export def f(v: [2], w: [2]) -> ([2], [2]) = (v + w, v * w)",
        lambda v, w: (v + w, v * w),
    ),
    "tensor-and-scalar": (
        "export def f(v: [2], w: [2]) = (v - w, sum(v))",
        lambda v, w: (v - w, np.float32(v.sum())),
    ),
    "booleans": (
        "export def f(v: [2], w: [2]) -> (bool[2], bool) = (v > w, sum(v) > 0.0)",
        lambda v, w: (v > w, v.sum() > 0),
    ),
    "wide-and-narrow-floats": (
        "export def f(v: f64[2], w: [2]) -> (f64[2], f16[2]) = (v * 2.0, cast(w, f16))",
        lambda v, w: (v * 2, w.astype(np.float16)),
    ),
    "tuple-of-one": (
        "def sq(u: [2]) -> [2] = u * u\nexport def f(v: [2], w: [2]) = grad(sq, seed: w)(v)",
        lambda v, w: 2 * v * w,  # one output: dlvm.load returns the array itself
    ),
    "hidden-tuple": (
        "x: in[2]\nh: hidden = (x, x * 2.0)\ny: out = h[0] + h[1]\n"
        "export def f(v: [2], w: [2]) = (v, w)",
        lambda v, w: (v, w),
    ),
    "called-by-a-declaration": (
        "x: in[2]\ny: out = f(x, x)[1]\nexport def f(v: [2], w: [2]) -> ([2], [2]) = (v, v + w)",
        lambda v, w: (v, v + w),
    ),
}

INTEGERS = """\
export def f(k: i32[3], n: i64, b: bool[3]) -> (i32[3], i64, bool[3]) = (k * 2, n + 1, not b)
"""


FLOATS = {"f16": np.float16, "f32": np.float32, "f64": np.float64}


def as_tuple(value: object) -> tuple[object, ...]:
    return value if isinstance(value, tuple) else (value,)


@pytest.mark.parametrize("case", BUILDS)
def test_an_accepted_entry_type_builds_and_runs(case, tmp_path):
    text, numpy = BUILDS[case]
    library = build(tmp_path, f"module m\n{text}\n", "m")
    rng = np.random.default_rng(0)
    with dlvm.load(library) as m:
        (entry,) = [e for e in m.manifest["entries"] if e["name"] == "f"]
        args = [rng.uniform(-2, 2, a["shape"]).astype(FLOATS[a["dtype"]]) for a in entry["inputs"]]
        got, want = m.f(*args), numpy(*args)
        assert isinstance(got, tuple) == isinstance(want, tuple)
        assert len(as_tuple(got)) == len(as_tuple(want))
        for g, w in zip(as_tuple(got), as_tuple(want)):
            assert np.asarray(g).dtype == np.asarray(w).dtype
            np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64),
                                       rtol=1e-3)  # fmt: skip


def test_integer_and_boolean_tuples_build_and_run(tmp_path):
    library = build(tmp_path, "module m\n" + INTEGERS, "m")
    k, b = np.array([1, -2, 3], np.int32), np.array([True, False, True])
    with dlvm.load(library) as m:
        doubled, next_, flipped = m.f(k, np.int64(41), b)
    np.testing.assert_array_equal(doubled, [2, -4, 6])
    assert doubled.dtype == np.int32 and next_ == 42
    np.testing.assert_array_equal(flipped, [False, True, False])


REJECTED = {
    "nested-tuple": (
        "export def f(v: [2]) -> (([2], [2]), [2]) = ((v, v), v)",
        "m.tel:2:25: error: exported function 'f' returns ((f32[2], f32[2]), f32[2]); an entry "
        "point returns a tensor or a tuple of tensors",
        "help: return one flat tuple of tensors, such as (a, b, c)",
    ),
    "nested-tuple-inferred": (
        "export def f(v: [2]) = ((v, v), v)",
        "m.tel:2:12: error: exported function 'f' returns ((f32[2], f32[2]), f32[2])",
        "help: return one flat tuple of tensors",
    ),
    "tuple-argument": (
        "export def f(p: ([2], [2])) -> [2] = p[0] + p[1]",
        "m.tel:2:14: error: exported function 'f' takes the tuple (f32[2], f32[2]) as 'p'; "
        "entry points take tensors and scalars",
        "help: pass its elements as separate arguments",
    ),
    "tuple-output": (
        "x: in[2]\ny: out = (x, x * 2.0)",
        "m.tel:3:10: error: output 'y' is the tuple (f32[2], f32[2]); an output is a tensor",
        "help: declare one per element, such as y0: out = …[0] and y1: out = …[1]",
    ),
    "tuple-output-of-a-train": (
        "use optim\nx: in[2]\np: param[2] = 0.5\nloss: out = sum(x * p)\nz: out = (x, p)\n"
        "train minimizing loss using sgd(rate: 0.1)",
        "m.tel:6:10: error: output 'z' is the tuple (f32[2], f32[2]); an output is a tensor",
        "help: declare one per element",
    ),
    "tuple-typed-output": (
        "x: in[2]\ny: out ([2], [2]) = (x, x)",
        "m.tel:3:8: error: out 'y' is declared (f32[2], f32[2]); a declaration is a tensor",
        "help: declare one per element",
    ),
    "tuple-input": (
        "x: in ([2], [2])\ny: out = x[0]",
        "m.tel:2:7: error: in 'x' is declared (f32[2], f32[2]); a declaration is a tensor",
        "help: declare one input per element, such as x0: in[…] and x1: in[…]",
    ),
    "tuple-typed-hidden": (
        "x: in[2]\nh: hidden ([2], [2]) = (x, x)\ny: out = h[0]",
        "m.tel:3:11: error: hidden 'h' is declared (f32[2], f32[2]); a declaration is a tensor",
        "help: leave the type out (h: hidden = …), or declare one per element",
    ),
    "vector-step": (
        "x: in[2]\np: param[2] = 0.5\nloss: out = sum(x * p)\n"
        "def opt(w: [S...], g: [S...], step: [2]) -> [S...] = w - g * sum(step)\n"
        "train minimizing loss using opt()",
        "m.tel:6:29: error: optimiser 'opt' takes the step count as f32[2]; a step count is a "
        "scalar of i8, i16, i32, i64, f32 or f64",
        "help: declare the optimiser's argument step: [] or step: i64",
    ),
    "tuple-step": (
        "x: in[2]\np: param[2] = 0.5\nloss: out = sum(x * p)\n"
        "def opt(w: [S...], g: [S...], step: ([], [])) -> [S...] = w - g * step[0]\n"
        "train minimizing loss using opt()",
        "m.tel:6:29: error: optimiser 'opt' takes the step count as (f32, f32)",
        "help: declare the optimiser's argument step: [] or step: i64",
    ),
    "f16-step": (
        "use optim\nx: in f16[2]\np: param f16[2] = 0.5\nloss: out = sum(x * p)\n"
        "train minimizing loss using adam()",
        "m.tel:6:29: error: optimiser 'adam' takes the step count as f16",
        "help: train the model in f32, or use an optimiser whose step is declared f32 or i64",
    ),
}


def test_the_step_dtypes_are_those_the_runtime_passes():
    assert STEP_DTYPES == glue_layout.STEP_DTYPES


@pytest.mark.parametrize("case", REJECTED)
def test_an_entry_type_without_a_c_form_is_rejected_by_check(case, tmp_path):
    text, message, fix = REJECTED[case]
    (tmp_path / "m.tel").write_text(f"module m\n{text}\n")
    for command in (["check", "m.tel"], ["build", "m.tel", "-q"]):
        run = subprocess.run([str(TELC), *command], cwd=tmp_path, capture_output=True, text=True,
                             env={"NO_COLOR": "1", "PATH": "/usr/bin:/bin"})  # fmt: skip
        assert run.returncode == 1, run.stderr
        assert message in run.stderr and fix in run.stderr
        assert "internal error" not in run.stderr


def test_an_empty_tuple_has_no_outputs_the_c_abi_can_give():
    assert export_outputs(TupleType(())) is None


def test_a_tuple_entry_runs_on_a_gpu(tmp_path, on_fake_gpu):  # noqa: F811
    text = textwrap.dedent(GRADS)
    library = build(tmp_path, text, "grads", cuda=True)
    compiled = compile_snippet(str(tmp_path), text, "grads")
    Emulator(schedule(copy.deepcopy(compiled.module), cuda=True), tmp_path / "emu")
    on_fake_gpu(tmp_path / "emu" / "kernels.so")
    v, t = inputs(2)
    with dlvm.load(library, seed=5) as cpu, dlvm.load(library, device="cuda:0", seed=5) as gpu:
        assert [e["cuda"] for e in gpu.manifest["entries"]] == ["gpu", "gpu"]
        close(gpu.grads(v, t), cpu.grads(v, t))
        close(gpu.both(v, t), cpu.both(v, t))
