"""Every sample's library called from C: a small C program generated from the library's
description (LibrarySpec) and compiled against the header telc wrote creates the model with the
golden files' seed, reads each entry point's inputs from raw binary files, calls `infer`, then
every train entry for a few steps, then `infer` again, reads every parameter back with
`get_param` after creation and after each step, and writes every output to a raw binary file,
checking each status (and printing dlrt_last_error() when one is not OK). Its results are
bit-for-bit those of the same calls through `dlvm.load`; its first inference matches the golden
file (tests/golden/NAME.npz) and the interpreter, and its first train step the interpreter. A
small IR library with bool, integer, f64 and scalar inputs and outputs checks the program
generator on the dtypes the samples do not have."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from telhelp import (
    GOLDEN_DIR,
    GOLDEN_SEED,
    compiled_sample,
    draws_random_numbers,
    inputs_for,
    run_infer,
    run_train_step,
    sample_names,
)

import dlvm
from dlvm.codegen.build import build_library
from dlvm.codegen.spec import EntrySpec, LibrarySpec, c_identifier, module_spec
from dlvm.interp import run_function
from dlvm.ir import parse_module
from telc.driver import library_spec

CC = shutil.which(os.environ.get("CC", "cc"))
pytestmark = pytest.mark.skipif(
    CC is None or sys.platform != "linux", reason="needs a C compiler on Linux"
)

TRAIN_STEPS = 3
TOL = {"rtol": 1e-4, "atol": 1e-5}  # as test_codegen_samples.py

# dtype → (C type, NumPy type), as docs/c-abi.md section 1 says a pointer argument points to.
DTYPES: dict[str, tuple[str, type]] = {
    "bool": ("uint8_t", np.bool_),
    "i8": ("int8_t", np.int8),
    "i16": ("int16_t", np.int16),
    "i32": ("int32_t", np.int32),
    "i64": ("int64_t", np.int64),
    "f16": ("uint16_t", np.float16),
    "f32": ("float", np.float32),
    "f64": ("double", np.float64),
}


# -- what the C program does, and the same through dlvm.load ----------------------------------


@dataclass(frozen=True)
class Call:
    """Call entry `entry` (its inputs come from the file of the entry); outputs are `label`."""

    label: str
    entry: EntrySpec


@dataclass(frozen=True)
class Params:
    """Read every parameter back, as `label`."""

    label: str


Event = Call | Params


def plan(spec: LibrarySpec, steps: int) -> list[Event]:
    """The calls of a run: every other entry (infer, exports), then every train entry `steps`
    times with the parameters read after each step, then every other entry again. Labels are
    distinct."""
    others = [e for e in spec.entries if e.kind != "train"]
    events: list[Event] = [Params("created")]
    events += [Call(f"{e.name}.before", e) for e in others]
    for e in spec.entries:
        if e.kind == "train":
            for k in range(1, steps + 1):
                events += [Call(f"{e.name}.{k}", e), Params(f"{e.name}.{k}.params")]
    events += [Call(f"{e.name}.after", e) for e in others]
    return events


def size(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64))


def c_literal(text: str) -> str:
    """A C string literal of printable ASCII `text`."""
    assert re.fullmatch(r"[ -~]*", text), text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("?", "\\?") + '"'


def c_program(spec: LibrarySpec, events: list[Event], seed: int, header: str) -> str:
    """A C11 program `main INPUTS OUTPUTS` including `header`: reads entry i's input j from
    INPUTS/in.i.j.bin and writes event k's output j to OUTPUTS/k.j.bin (a parameter snapshot:
    parameter j)."""
    name = spec.c_name
    index = {e.name: i for i, e in enumerate(spec.entries)}
    out = [
        "#include <stdint.h>",
        "#include <stdio.h>",
        f"#include {c_literal(header)}",
        "",
        "#define CHECK(call) do { dlrt_status s_ = (call); if (s_ != DLRT_OK) { \\",
        '    fprintf(stderr, "%s failed (status %d): %s\\n", #call, (int)s_, \\',
        "            dlrt_last_error()); goto done; } } while (0)",
        "#define TRY(ok) do { if (!(ok)) goto done; } while (0)",
        "",
        "static int transfer(const char *dir, const char *file, void *data, size_t bytes,",
        "                    int write) {",
        "    char path[4096];",
        '    snprintf(path, sizeof path, "%s/%s", dir, file);',
        '    FILE *f = fopen(path, write ? "wb" : "rb");',
        '    if (!f) { fprintf(stderr, "cannot open %s\\n", path); return 0; }',
        "    size_t moved = write ? fwrite(data, 1, bytes, f) : fread(data, 1, bytes, f);",
        "    int extra = write ? EOF : fgetc(f);",
        "    if (fclose(f) != 0 || moved != bytes || extra != EOF) {",
        '        fprintf(stderr, "%s: not %zu bytes\\n", path, bytes);',
        "        return 0;",
        "    }",
        "    return 1;",
        "}",
        "",
    ]

    def transfer(file: str, var: str, shape: tuple[int, ...], write: bool) -> str:
        where = "argv[2]" if write else "argv[1]"
        bytes_ = f"sizeof {var}[0] * {size(shape)}"
        return f'    TRY(transfer({where}, "{file}", {var}, {bytes_}, {int(write)}));'

    def buffer(var: str, dtype: str, shape: tuple[int, ...]) -> str:
        return f"static {DTYPES[dtype][0]} {var}[{max(1, size(shape))}]; /* {dtype}{list(shape)} */"

    for i, e in enumerate(spec.entries):
        out += [buffer(f"in_{i}_{j}", t.dtype, t.shape) for j, t in enumerate(e.inputs)]
        out += [buffer(f"out_{i}_{j}", t.dtype, t.shape) for j, t in enumerate(e.outputs)]
    out += [buffer(f"param_{j}", p.dtype, p.shape) for j, p in enumerate(spec.params)]
    out += [
        "",
        "int main(int argc, char **argv) {",
        "    int status = 1;",
        f"    {name}_model *m = NULL;",
        "    if (argc != 3) {",
        '        fprintf(stderr, "usage: %s INPUTS OUTPUTS\\n", argv[0]);',
        "        return 2;",
        "    }",
        f'    CHECK({name}_create("cpu", UINT64_C({seed}), &m));',
    ]
    for i, e in enumerate(spec.entries):
        for j, t in enumerate(e.inputs):
            out.append(transfer(f"in.{i}.{j}.bin", f"in_{i}_{j}", t.shape, write=False))
    for k, ev in enumerate(events):
        out.append(f"    /* {ev.label} */")
        if isinstance(ev, Params):
            for j, p in enumerate(spec.params):
                out.append(f"    CHECK({name}_get_param(m, {c_literal(p.name)}, param_{j}));")
                out.append(transfer(f"{k}.{j}.bin", f"param_{j}", p.shape, write=True))
            continue
        i = index[ev.entry.name]
        args = [f"in_{i}_{j}" for j in range(len(ev.entry.inputs))]
        args += [f"out_{i}_{j}" for j in range(len(ev.entry.outputs))]
        out.append(f"    CHECK({name}_{c_identifier(ev.entry.name)}({', '.join(['m', *args])}));")
        for j, t in enumerate(ev.entry.outputs):
            out.append(transfer(f"{k}.{j}.bin", f"out_{i}_{j}", t.shape, write=True))
    out += [
        "    status = 0;",
        "done:",
        f"    {name}_destroy(m);",
        '    if (status == 0) printf("ok\\n");',
        "    return status;",
        "}",
        "",
    ]
    return "\n".join(out)


Results = dict[tuple[str, str], np.ndarray]  # (event label, output or parameter name) → value


def run_c(
    library: Path,
    spec: LibrarySpec,
    events: list[Event],
    inputs: dict[str, dict[str, np.ndarray]],
    seed: int,
    work: Path,
) -> Results:
    """The C program of `events` compiled against library's header, run on `inputs` (by entry
    and input name, in the entries' dtypes); its outputs by event label and name."""
    source, exe = work / "main.c", work / "main"
    source.write_text(c_program(spec, events, seed, library.with_suffix(".h").name))
    d = library.parent
    compile_ = subprocess.run(
        [CC, "-std=c11", "-Wall", "-Wextra", "-Wpedantic", "-Werror", f"-I{d}", str(source),
         str(library), f"-Wl,-rpath,{d}", "-o", str(exe)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert compile_.returncode == 0, f"the C program does not compile:\n{compile_.stderr}"
    ins, outs = work / "in", work / "out"
    ins.mkdir()
    outs.mkdir()
    for i, e in enumerate(spec.entries):
        for j, t in enumerate(e.inputs):
            value = inputs[e.name][t.name]
            assert value.dtype == DTYPES[t.dtype][1] and value.shape == t.shape, t
            (ins / f"in.{i}.{j}.bin").write_bytes(np.ascontiguousarray(value).tobytes())
    run = subprocess.run([str(exe), str(ins), str(outs)], capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert run.returncode == 0 and run.stdout == "ok\n", (
        f"the C program failed ({run.returncode}):\n{run.stderr}"
    )
    results: Results = {}
    for k, ev in enumerate(events):
        tensors = spec.params if isinstance(ev, Params) else ev.entry.outputs
        for j, t in enumerate(tensors):
            data = (outs / f"{k}.{j}.bin").read_bytes()
            assert (ev.label, t.name) not in results
            results[ev.label, t.name] = np.frombuffer(data, DTYPES[t.dtype][1]).reshape(t.shape)
    return results


def run_loader(
    library: Path,
    spec: LibrarySpec,
    events: list[Event],
    inputs: dict[str, dict[str, np.ndarray]],
    seed: int,
) -> Results:
    """The same calls through dlvm.load."""
    results: Results = {}
    with dlvm.load(library, seed=seed) as lib:
        for ev in events:
            if isinstance(ev, Params):
                results.update({(ev.label, p): v for p, v in lib.params.items()})
                continue
            got = lib.entries[ev.entry.name](**inputs[ev.entry.name])
            got = got if isinstance(got, tuple) else (got,)
            for t, value in zip(ev.entry.outputs, got, strict=True):
                results[ev.label, t.name] = np.asarray(value)
    return results


def assert_bit_identical(c: Results, py: Results) -> None:
    assert c.keys() == py.keys()
    for key, value in c.items():
        other = py[key]
        assert value.dtype == other.dtype and value.shape == other.shape, key
        if value.tobytes() != other.tobytes():
            diff = np.abs(value.astype(np.float64) - other.astype(np.float64))
            pytest.fail(f"{key}: C and dlvm.load differ (max |difference| {np.nanmax(diff)})")


# -- the samples ------------------------------------------------------------------------------


@dataclass
class SampleRun:
    name: str
    spec: LibrarySpec
    inputs: dict[str, dict[str, np.ndarray]]
    c: Results
    py: Results


def sample_inputs(name: str, spec: LibrarySpec) -> dict[str, dict[str, np.ndarray]]:
    """The inputs test_codegen_samples.py gives each entry (seed 2 for a train entry, 1 for the
    others), in the entry's dtypes."""
    interface = {e.name: e for e in compiled_sample(name).interface.entries}
    out = {}
    for e in spec.entries:
        values = inputs_for(interface[e.name].inputs, 2 if e.kind == "train" else 1)
        out[e.name] = {t.name: values[t.name].astype(DTYPES[t.dtype][1]) for t in e.inputs}
    return out


@pytest.fixture(scope="module", params=sample_names())
def sample_run(request, sample_library, tmp_path_factory):
    name = request.param
    library = sample_library(name)
    spec = library_spec(compiled_sample(name).interface)
    events = plan(spec, TRAIN_STEPS)
    inputs = sample_inputs(name, spec)
    work = tmp_path_factory.mktemp(f"c-{name}")
    c = run_c(library, spec, events, inputs, GOLDEN_SEED, work)
    py = run_loader(library, spec, events, inputs, GOLDEN_SEED)
    return SampleRun(name, spec, inputs, c, py)


def test_c_program_matches_dlvm_load_bit_for_bit(sample_run):
    assert_bit_identical(sample_run.c, sample_run.py)


def test_c_inference_matches_the_golden_file_and_the_interpreter(sample_run):
    name, c = sample_run.name, sample_run.c
    infer = [e for e in sample_run.spec.entries if e.kind == "infer"]
    if not infer:
        pytest.skip(f"{name} has no infer entry")
    (e,) = infer
    params = {p.name: c["created", p.name] for p in sample_run.spec.params}
    expected = run_infer(compiled_sample(name), sample_run.inputs[e.name], params, float64=False)
    for t in e.outputs:
        got = c[f"{e.name}.before", t.name]
        np.testing.assert_allclose(got, expected[t.name], **TOL, err_msg=t.name)
    if os.environ.get("UPDATE_GOLDEN"):
        return  # test_codegen_samples.py is rewriting the golden files
    with np.load(GOLDEN_DIR / f"{name}.npz") as saved:
        assert set(saved.files) == {f"out_{t.name}" for t in e.outputs}, saved.files
        for t in e.outputs:
            got = c[f"{e.name}.before", t.name]
            np.testing.assert_allclose(got, saved[f"out_{t.name}"], **TOL, err_msg=t.name)


def test_c_train_steps_match_the_interpreter(sample_run):
    name, spec, c = sample_run.name, sample_run.spec, sample_run.c
    compiled = compiled_sample(name)
    trains = [e for e in compiled.interface.entries if e.kind == "train"]
    if not trains:
        pytest.skip(f"{name} has no train entry")
    params = {p.name: c["created", p.name] for p in spec.params}
    # The first step of the first train entry, from the created parameters and zero state
    # (later steps and entries are checked against dlvm.load, bit for bit).
    train = trains[0]
    loss_name = next(e for e in spec.entries if e.name == train.name).outputs[0].name
    for k in range(1, TRAIN_STEPS + 1):
        assert np.isfinite(c[f"{train.name}.{k}", loss_name]), k
    after = {p.name: c[f"{train.name}.1.params", p.name] for p in spec.params}
    if draws_random_numbers(compiled.module, train.name):
        # dropout: the library's random stream is not the interpreter's; the step must still
        # move the parameters.
        assert any(not np.array_equal(params[p], v) for p, v in after.items())
        return
    states = [np.zeros(t.shape, np.float32) for _, _, t in train.states]
    loss, new_params, _ = run_train_step(
        compiled, train, sample_run.inputs[train.name], params, states, step=1, float64=False
    )
    np.testing.assert_allclose(c[f"{train.name}.1", loss_name].reshape(-1)[0], loss, **TOL)
    for p, value in new_params.items():
        np.testing.assert_allclose(after[p], value, **TOL, err_msg=p)


# -- dtypes the samples do not have -----------------------------------------------------------

DTYPES_MODULE = """module "dtypes"
stage raw

func @mix: (<5 x bool>, <5 x i32>, i64, <2 x 3 x f64>, f32) -> (<5 x i32>, <5 x bool>, i64, <2 x 3 x f64>, f32) {
'entry(%p: <5 x bool>, %k: <5 x i32>, %n: i64, %d: <2 x 3 x f64>, %s: f32):
    %k3 = multiply %k: <5 x i32>, 3: i32
    %r = select %k3: <5 x i32>, 0: i32 by %p: <5 x bool>
    %q = not %p: <5 x bool>
    %n1 = add %n: i64, 1: i64
    %dd = multiply %d: <2 x 3 x f64>, %d: <2 x 3 x f64>
    %ss = multiply %s: f32, %s: f32
    %t = literal (%r: <5 x i32>, %q: <5 x bool>, %n1: i64, %dd: <2 x 3 x f64>, %ss: f32): (<5 x i32>, <5 x bool>, i64, <2 x 3 x f64>, f32)
    return %t: (<5 x i32>, <5 x bool>, i64, <2 x 3 x f64>, f32)
}
"""  # noqa: E501


def test_c_program_handles_bool_integer_f64_and_scalar_arguments(tmp_path):
    module = parse_module(DTYPES_MODULE, "dtypes.dl")
    spec = module_spec(module, "test")
    library = tmp_path / "lib" / "dtypes.so"
    build_library(module, spec, library)
    (e,) = spec.entries
    assert [t.dtype for t in e.inputs] == ["bool", "i32", "i64", "f64", "f32"]
    rng = np.random.default_rng(3)
    inputs = {
        e.name: {
            "p": rng.integers(0, 2, 5).astype(np.bool_),
            "k": rng.integers(-1000, 1000, 5).astype(np.int32),
            "n": np.asarray(2**40 + 5, np.int64),
            "d": rng.normal(size=(2, 3)),
            "s": np.asarray(1.5, np.float32),
        }
    }
    events = plan(spec, TRAIN_STEPS)
    assert events == [Params("created"), Call("mix.before", e), Call("mix.after", e)]
    c = run_c(library, spec, events, inputs, 0, tmp_path)
    py = run_loader(library, spec, events, inputs, 0)
    assert_bit_identical(c, py)
    reference = parse_module(DTYPES_MODULE, "dtypes.dl")
    expected = run_function(reference, "mix", list(inputs[e.name].values()))
    for t, value in zip(e.outputs, expected, strict=True):
        got = c[f"{e.name}.before", t.name]
        assert got.dtype == DTYPES[t.dtype][1] and got.shape == t.shape, t
        np.testing.assert_array_equal(got, value, err_msg=t.name)
