"""The generated C glue, header and manifest (dlvm.codegen.glue) and the Python loader
(dlvm.load), on a real library: a hand-written C "compiled model" (a linear model y = x . W + b
with a squared loss and momentum SGD), the generated glue and the runtime, linked with cc."""

from __future__ import annotations

import dataclasses
import json
import pickle
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dlvm
import dlvm.loader
from dlvm.codegen.glue import (
    c_string,
    c_string_lines,
    glue_source,
    header_source,
    manifest_json,
)
from dlvm.codegen.spec import EntrySpec, LibrarySpec, StateSpec, TensorSpec, c_identifier
from dlvm.loader import LibraryError, elf_exported_functions
from dlvm.runtime import Status, build_runtime

ROOT = Path(__file__).resolve().parents[2]
DLRT_H = ROOT / "runtime" / "include" / "dlrt.h"
CC = shutil.which("cc")
needs_cc = pytest.mark.skipif(CC is None or sys.platform != "linux", reason="needs cc on Linux")

X = TensorSpec("x", "f32", (4, 3))
SPEC = LibrarySpec(
    name="tiny",
    compiler="telc 0.1.0",
    params=(TensorSpec("W", "f32", (3, 2)), TensorSpec("b", "f32", (2,))),
    states=(StateSpec("W_v", "W", "f32", (3, 2)), StateSpec("b_v", "b", "f32", (2,))),
    init="init",
    entries=(
        EntrySpec("infer", "infer", "infer", (X,), (TensorSpec("y", "f32", (4, 2)),), ("W", "b")),
        EntrySpec(
            "train_step",
            "train",
            "train_step",
            inputs=(X, TensorSpec("t", "f32", (4, 2))),
            outputs=(TensorSpec("loss", "f32", ()),),
            params=("W", "b"),
            states=("W_v", "b_v"),
            step=True,
        ),
        # An export whose name and input are C keywords, and whose host has no parameters.
        EntrySpec(
            "double",
            "export",
            "double",
            inputs=(TensorSpec("int", "i32", (3,)),),
            outputs=(TensorSpec("r", "i32", (3,)), TensorSpec("n", "i64", ())),
        ),
    ),
)

# The "compiled model": host functions with the convention of docs/c-abi.md section 5.
HOST_C = r"""
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "dlrt.h"

typedef struct dl_context { dlrt_arena *arena; uint64_t seed; uint64_t counter; } dl_context;

/* Uniform in [-0.5, 0.5): splitmix64 of (seed, counter++). */
static float draw(dl_context *ctx) {
    uint64_t z = ctx->seed * 0x9E3779B97F4A7C15ull + ctx->counter++ * 0xD1B54A32D192ED03ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) / 16777216.0f - 0.5f;
}

int32_t dl_init(dl_context *ctx, void *W, void *b) {
    float *w = W, *bb = b;
    for (int i = 0; i < 6; ++i) w[i] = draw(ctx);
    for (int i = 0; i < 2; ++i) bb[i] = draw(ctx);
    return DLRT_OK;
}

static void forward(const float *x, const float *W, const float *b, float *y) {
    for (int n = 0; n < 4; ++n)
        for (int j = 0; j < 2; ++j) {
            float s = b[j];
            for (int k = 0; k < 3; ++k) s += x[n * 3 + k] * W[k * 2 + j];
            y[n * 2 + j] = s;
        }
}

int32_t dl_infer(dl_context *ctx, const void *x, const void *W, const void *b, void *y) {
    float *tmp = dlrt_arena_push(ctx->arena, 8 * sizeof(float));
    if (tmp == NULL) return DLRT_ERR_OUT_OF_MEMORY;
    forward(x, W, b, tmp);
    memcpy(y, tmp, 8 * sizeof(float));
    return DLRT_OK;
}

/* loss = mean((y - t)^2); v' = 0.9 v + grad; p' = p - lr v' with lr = 0.1 / step (1-based). */
int32_t dl_train_step(dl_context *ctx, const void *xp, const void *tp, const void *Wp,
                      const void *bp, const void *Wvp, const void *bvp, const void *stepp,
                      void *lossp, void *W2p, void *b2p, void *Wv2p, void *bv2p) {
    const float *x = xp, *t = tp, *W = Wp, *b = bp, *Wv = Wvp, *bv = bvp;
    float *W2 = W2p, *b2 = b2p, *Wv2 = Wv2p, *bv2 = bv2p, y[8], dy[8], loss = 0;
    float lr = 0.1f / *(const float *)stepp;
    /* Scribble on the new buffers before failing: the glue must not swap them in. */
    for (int i = 0; i < 6; ++i) W2[i] = Wv2[i] = 1e9f;
    (void)draw(ctx); /* a failed step must give back its random draws too */
    for (int i = 0; i < 12; ++i)
        if (isnan(x[i]))
            return dlrt_error(DLRT_ERR_INVALID_ARGUMENT, "dl_train_step: x holds a NaN");
    forward(x, W, b, y);
    for (int i = 0; i < 8; ++i) {
        loss += (y[i] - t[i]) * (y[i] - t[i]) / 8.0f;
        dy[i] = 2.0f * (y[i] - t[i]) / 8.0f;
    }
    for (int k = 0; k < 3; ++k)
        for (int j = 0; j < 2; ++j) {
            float g = 0;
            for (int n = 0; n < 4; ++n) g += x[n * 3 + k] * dy[n * 2 + j];
            Wv2[k * 2 + j] = 0.9f * Wv[k * 2 + j] + g;
            W2[k * 2 + j] = W[k * 2 + j] - lr * Wv2[k * 2 + j];
        }
    for (int j = 0; j < 2; ++j) {
        float g = 0;
        for (int n = 0; n < 4; ++n) g += dy[n * 2 + j];
        bv2[j] = 0.9f * bv[j] + g;
        b2[j] = b[j] - lr * bv2[j];
    }
    *(float *)lossp = loss;
    return DLRT_OK;
}

/* r = 2 a and n = the random-draw counter; a negative element fails without a message. */
int32_t dl_double(dl_context *ctx, const void *ap, void *rp, void *np) {
    const int32_t *a = ap;
    int32_t *r = rp;
    for (int i = 0; i < 3; ++i) {
        if (a[i] < 0) return DLRT_ERR_INTERNAL;
        r[i] = 2 * a[i];
    }
    *(int64_t *)np = (int64_t)ctx->counter;
    return DLRT_OK;
}
"""

# A C program using the generated header: every error path of section 1 that Python cannot reach.
CLIENT_C = r"""
#include <stdio.h>
#include <string.h>

#include "tiny.h"

static void report(const char *what, dlrt_status s) {
    printf("%s: %d %s\n", what, (int)s, s == DLRT_OK ? "" : dlrt_last_error());
}

int main(void) {
    tiny_model *m = NULL;
    float x[12] = {0}, y[8], loss, w[6];
    int32_t a[3] = {1, 2, 3}, r[3];
    int64_t n;
    report("out", tiny_create("cpu", 0, NULL));
    report("tpu", tiny_create("tpu", 0, &m));
    report("tpu-out", m == NULL ? DLRT_OK : DLRT_ERR_INTERNAL);
    report("cuda:0", tiny_create("cuda:0", 0, &m));
    report("cuda:", tiny_create("cuda:", 0, &m));
    report("cuda:1x", tiny_create("cuda:1x", 0, &m));
    report("null-device", tiny_create(NULL, 7, &m));
    tiny_destroy(m);
    report("create", tiny_create("cpu", 7, &m));
    report("infer-m", tiny_infer(NULL, x, y));
    report("infer-x", tiny_infer(m, NULL, y));
    report("infer-y", tiny_infer(m, x, NULL));
    report("train-t", tiny_train_step(m, x, NULL, &loss));
    report("train-loss", tiny_train_step(m, x, x, NULL));
    report("double-int", tiny_double(m, NULL, r, &n));
    report("double-n", tiny_double(m, a, r, NULL));
    report("double", tiny_double(m, a, r, &n));
    printf("r: %d %d %d\n", (int)r[0], (int)r[1], (int)r[2]);
    report("get-unknown", tiny_get_param(m, "nope", w));
    report("get-name", tiny_get_param(m, NULL, w));
    report("get-out", tiny_get_param(m, "W", NULL));
    report("set-data", tiny_set_param(m, "W", NULL));
    report("set-m", tiny_set_param(NULL, "W", w));
    report("save-path", tiny_save(m, NULL));
    report("load-m", tiny_load(NULL, "x"));
    report("load-missing", tiny_load(m, "/nonexistent/dir/file.safetensors"));
    printf("manifest: %.9s\n", tiny_manifest());
    tiny_destroy(m);
    tiny_destroy(NULL);
    return 0;
}
"""


def cc(*args: str | Path, cwd: Path | None = None) -> None:
    assert CC is not None
    result = subprocess.run(
        [CC, *map(str, args)], cwd=cwd, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


def write_sources(spec: LibrarySpec, directory: Path) -> tuple[Path, Path]:
    """The glue and the header of `spec` next to a copy of dlrt.h, as the build lays them out."""
    shutil.copy(DLRT_H, directory / "dlrt.h")
    glue = directory / f"{spec.c_name}_glue.c"
    header = directory / f"{spec.c_name}.h"
    glue.write_text(glue_source(spec))
    header.write_text(header_source(spec))
    return glue, header


STRICT = ("-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic")


@pytest.fixture(scope="module")
def runtime_objects() -> list[str]:
    if CC is None or sys.platform != "linux":
        pytest.skip("needs cc on Linux")
    return [str(p) for p in build_runtime()]


def build_library(spec: LibrarySpec, host_c: str, d: Path, runtime: list[str]) -> Path:
    """`spec`'s library from the host functions in `host_c`, built as `telc build` does."""
    glue, _ = write_sources(spec, d)
    (d / "host.c").write_text(host_c)
    flags = ("-O1", "-fPIC", f"-I{d}")
    cc(*STRICT, *flags, "-fvisibility=hidden", "-c", glue, "-o", d / "glue.o")
    # Default visibility, as LLVM emits the host functions: the glue's declarations hide them.
    cc("-std=c11", *flags, "-c", d / "host.c", "-o", d / "host.o")
    out = d / f"{spec.c_name}.so"
    cc("-shared", "-o", out, d / "glue.o", d / "host.o", *runtime, "-lm", "-pthread")
    return out


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory, runtime_objects: list[str]) -> Path:
    return build_library(SPEC, HOST_C, tmp_path_factory.mktemp("tiny"), runtime_objects)


@pytest.fixture
def model(library: Path):
    with dlvm.load(library, seed=7) as m:
        yield m


def data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(4, 3)).astype(np.float32), rng.normal(size=(4, 2)).astype(np.float32)


def reference_step(params: dict[str, np.ndarray], states: dict[str, np.ndarray], x, t, step):
    """One step of HOST_C's training in NumPy: (new params, new states, loss)."""
    W, b = params["W"].astype(np.float64), params["b"].astype(np.float64)
    y = x @ W + b
    dy = 2 * (y - t) / y.size
    Wv = 0.9 * states["W_v"] + x.T @ dy
    bv = 0.9 * states["b_v"] + dy.sum(0)
    lr = 0.1 / step
    return {"W": W - lr * Wv, "b": b - lr * bv}, {"W_v": Wv, "b_v": bv}, ((y - t) ** 2).mean()


# -- the generated text --


def test_generation_is_deterministic():
    assert glue_source(SPEC) == glue_source(SPEC)
    assert header_source(SPEC) == header_source(SPEC)
    assert manifest_json(SPEC) == manifest_json(SPEC)


def test_manifest_matches_the_spec_in_the_documented_key_order():
    doc = json.loads(manifest_json(SPEC))
    assert list(doc) == ["abi", "name", "compiler", "devices", "params", "states", "entries"]
    assert doc["abi"] == 1 and doc["name"] == "tiny" and doc["devices"] == ["cpu"]
    assert doc["params"] == [
        {"name": "W", "dtype": "f32", "shape": [3, 2]},
        {"name": "b", "dtype": "f32", "shape": [2]},
    ]
    assert doc["states"][0] == {"name": "W_v", "param": "W", "dtype": "f32", "shape": [3, 2]}
    assert [(e["name"], e["kind"], e["symbol"]) for e in doc["entries"]] == [
        ("infer", "infer", "tiny_infer"),
        ("train_step", "train", "tiny_train_step"),
        ("double", "export", "tiny_double"),
    ]
    assert doc["entries"][1]["outputs"] == [{"name": "loss", "dtype": "f32", "shape": []}]
    assert list(doc["entries"][0]) == ["name", "kind", "symbol", "inputs", "outputs"]


def test_header_names_dtypes_and_shapes_every_argument():
    header = header_source(SPEC)
    assert '#include "dlrt.h"' in header
    assert "    const float *x, /* input 'x': f32[4, 3] */" in header
    assert "    float *loss /* output 'loss': f32[] */);" in header
    assert "    const int32_t *int_, /* input 'int': i32[3] */" in header  # a C keyword
    for fn in ("create", "destroy", "save", "load", "get_param", "set_param", "manifest"):
        assert f" tiny_{fn}(" in header or f"*tiny_{fn}(" in header


def test_header_defines_every_argument_s_and_parameter_s_size_and_dims():
    header = header_source(SPEC)
    for line in [
        "#define TINY_INFER_X_SIZE 12",
        "#define TINY_INFER_X_DIMS {4, 3}",
        "#define TINY_TRAIN_STEP_LOSS_SIZE 1",  # a scalar: a size, no dims
        "#define TINY_DOUBLE_INT_SIZE 3",
        "#define TINY_PARAM_W_DIMS {3, 2}",
    ]:
        assert line + "\n" in header
    assert "TINY_TRAIN_STEP_LOSS_DIMS" not in header


def test_c_identifiers_and_c_string_escaping():
    assert c_identifier("my-model.v2") == "my_model_v2"
    assert c_identifier("2layers") == "m_2layers"
    assert c_identifier("") == "m_"
    assert c_string('a"b\\c??=d\n\u00e9') == '"a\\"b\\\\c\\?\\?=d\\012\\303\\251"'
    text = '{"name": "odd \\"quoted\\" ??/ name", "x": "' + "y" * 200 + '"}'
    lines = c_string_lines(text, width=40)
    assert all(len(line) <= 40 + 2 for line in lines)
    decoded = b"".join(_decode_c_literal(line) for line in lines)
    assert decoded.decode() == text


def _decode_c_literal(literal: str) -> bytes:
    """The bytes of one C string literal using the escapes c_string emits."""
    assert literal[0] == literal[-1] == '"'
    body, out, i = literal[1:-1], bytearray(), 0
    while i < len(body):
        if body[i] != "\\":
            out += body[i].encode()
            i += 1
        elif body[i + 1] in "01234567":
            out.append(int(body[i + 1 : i + 4], 8))
            i += 4
        else:
            out += body[i + 1].encode()
            i += 2
    return bytes(out)


ODD_NAMES = LibrarySpec(
    name='my "model" \\ ??= é',
    compiler="telc 0.1.0",
    params=(TensorSpec('w "1"', "f32", (2,)),),
    init="init",
    entries=(
        EntrySpec("at step", "infer", "at.step", (), (TensorSpec("s", "i32", ()),), step=True),
    ),
)

ODD_HOST_C = r"""
#include <stdint.h>
typedef struct dl_context dl_context;
int32_t dl_init(dl_context *ctx, void *w) {
    (void)ctx;
    ((float *)w)[0] = 1.0f;
    ((float *)w)[1] = 2.0f;
    return 0;
}
int32_t dl_at_step(dl_context *ctx, const void *step, void *s) {
    (void)ctx;
    *(int32_t *)s = (int32_t)*(const float *)step + 40; /* the next step: 1 */
    return 0;
}
"""


def test_odd_names_make_valid_manifests():
    doc = json.loads(manifest_json(ODD_NAMES))
    assert doc["name"] == ODD_NAMES.name and doc["params"][0]["name"] == 'w "1"'
    assert ODD_NAMES.c_name == "my__model_________"
    assert doc["entries"][0]["symbol"] == "my__model__________at_step"


def test_odd_names_survive_the_c_library(runtime_objects: list[str], tmp_path: Path):
    path = build_library(ODD_NAMES, ODD_HOST_C, tmp_path, runtime_objects)
    with dlvm.load(path) as m:
        assert m.manifest == json.loads(manifest_json(ODD_NAMES))
        np.testing.assert_array_equal(m.params['w "1"'], [1, 2])
        assert m.entries["at step"]() == 41  # a step-taking infer entry; no attribute name
        assert not hasattr(m, "at step")


@pytest.mark.parametrize(
    "entry, message",
    [
        (EntrySpec("save", "export", "f"), "clashes with tiny_save"),
        (EntrySpec("f", "train", "f", params=("nope",)), "unknown parameter 'nope'"),
        (EntrySpec("f", "eval", "f"), "unknown kind 'eval'"),
        (EntrySpec("f", "train", "f", step=True, step_dtype="f16"), "step dtype 'f16'"),
        (EntrySpec("f", "infer", "f", (X,), (X,)), "argument names must be unique"),
        (EntrySpec("f", "infer", "infer"), "two different signatures"),
        (EntrySpec("infer_dl", "export", "f"), "generated names clash: tiny_infer_dl"),
    ],
)
def test_bad_specs_are_refused(entry, message):
    bad = dataclasses.replace(SPEC, entries=(*SPEC.entries, entry))
    with pytest.raises(ValueError, match=message):
        glue_source(bad)


ODD_SPECS = [
    ODD_NAMES,
    LibrarySpec(name="empty", compiler="t"),
    LibrarySpec(  # parameters without init or training; every dtype; an empty tensor
        name="kinds",
        compiler="t",
        params=tuple(
            TensorSpec(f"p_{d}", d, (2, 0) if d == "i8" else (3,))
            for d in ("bool", "i8", "i16", "i32", "i64", "f16", "f32", "f64")
        ),
        entries=(
            EntrySpec("go", "infer", "go", (TensorSpec("Bad Name", "f16", ()),), (), ("p_f32",)),
        ),
    ),
    LibrarySpec(  # a train entry that updates one of two parameters, with an i64 step
        name="9lives",
        compiler="t",
        params=(TensorSpec("a", "f64", ()), TensorSpec("frozen", "f64", (2,))),
        init="model.init",
        entries=(EntrySpec("fit", "train", "fit", (), (), ("a",), step=True, step_dtype="i64"),),
    ),
]


@needs_cc
@pytest.mark.parametrize("spec", ODD_SPECS, ids=lambda s: s.c_name)
def test_glue_and_header_of_odd_specs_compile_cleanly(spec: LibrarySpec, tmp_path: Path):
    glue, header = write_sources(spec, tmp_path)
    cc(*STRICT, "-fsyntax-only", glue)
    cc(*STRICT, "-fsyntax-only", "-x", "c", header)


@needs_cc
def test_the_header_compiles_strictly(tmp_path: Path):
    _, header = write_sources(SPEC, tmp_path)
    cc(*STRICT, "-fsyntax-only", "-x", "c", header)
    if shutil.which("c++"):
        subprocess.run(
            ["c++", "-std=c++11", "-Wall", "-Werror", "-fsyntax-only", "-x", "c++", str(header)],
            check=True,
        )


# -- the library, through dlvm.load --


def test_only_the_documented_symbols_are_exported(library: Path):
    out = subprocess.run(
        ["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True
    ).stdout
    names = {line.split()[-1] for line in out.splitlines() if line.strip()}
    api = ("create", "destroy", "infer", "train_step", "double", "save", "load")
    api += ("get_param", "set_param", "set_allreduce", "manifest")
    api += ("infer_dl", "train_step_dl", "double_dl")
    assert names - {"_init", "_fini"} == {f"tiny_{n}" for n in api} | {"dlrt_last_error"}
    assert set(elf_exported_functions(str(library)) or ()) == names - {"_init", "_fini"}


def test_manifest_of_the_library(model):
    assert model.manifest == json.loads(manifest_json(SPEC))
    assert list(model.entries) == ["infer", "train_step", "double"]
    text = repr(model)
    assert "  infer(x: f32[4, 3]) -> y: f32[4, 2]  (infer)\n" in text
    assert "  train_step(x: f32[4, 3], t: f32[4, 2]) -> loss: f32[]  (train)\n" in text
    assert "  double(int: i32[3]) -> r: i32[3], n: i64[]  (export)\n" in text
    assert "  params W: f32[3, 2], b: f32[2]>" in text


def test_create_is_deterministic_per_seed(library: Path, model):
    with dlvm.load(library, seed=7) as same, dlvm.load(library, seed=8) as other:
        for name, value in model.params.items():
            np.testing.assert_array_equal(same.params[name], value)
            assert not np.array_equal(other.params[name], value)


def test_infer_is_x_W_plus_b(model):
    x, _ = data()
    p = model.params
    y = model.infer(x)
    assert y.dtype == np.float32 and y.shape == (4, 2)
    np.testing.assert_allclose(y, x @ p["W"] + p["b"], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(model.infer(x=x), y)
    # A float64, non-contiguous view is cast (same kind) and copied.
    wide = np.asfortranarray(x.astype(np.float64))
    np.testing.assert_array_equal(model.infer(wide), y)


def test_train_steps_update_params_states_and_step(model):
    x, t = data()
    params = {k: v.astype(np.float64) for k, v in model.params.items()}
    states = {"W_v": np.zeros((3, 2)), "b_v": np.zeros(2)}
    for step in (1, 2, 3):
        loss = model.train_step(x, t)
        params, states, expected = reference_step(params, states, x, t, step)
        assert isinstance(loss, np.float32)
        assert loss == pytest.approx(expected, rel=1e-5)
        for name, value in model.params.items():
            np.testing.assert_allclose(value, params[name], rtol=1e-5, atol=1e-6)


def test_a_failed_train_step_changes_nothing(model, library: Path):
    x, t = data()
    before = model.params
    bad = x.copy()
    bad[1, 1] = np.nan
    with pytest.raises(LibraryError) as e:
        model.train_step(bad, t)
    assert e.value.status == 1
    assert e.value.message == "tiny_train_step: dl_train_step: x holds a NaN"
    assert e.value.status is Status.INVALID_ARGUMENT and str(e.value).endswith("[INVALID_ARGUMENT]")
    assert pickle.loads(pickle.dumps(e.value)).message == e.value.message
    for name, value in model.params.items():
        np.testing.assert_array_equal(value, before[name])
    # The step count, the states and the random stream are unchanged too: the next step is the
    # first step of a fresh model.
    with dlvm.load(library, seed=7) as fresh:
        assert model.train_step(x, t) == fresh.train_step(x, t)
        assert model.double([1, 2, 3])[1] == fresh.double([1, 2, 3])[1] == 8 + 1
        for name, value in model.params.items():
            np.testing.assert_array_equal(value, fresh.params[name])


def test_a_host_failure_without_a_message_gets_one(model):
    r, n = model.double(np.array([1, 2, 3], np.int32))
    np.testing.assert_array_equal(r, [2, 4, 6])
    assert n.dtype == np.int64 and n.shape == ()
    with pytest.raises(LibraryError, match="tiny_double: dl_double failed with status 6"):
        model.double([1, -2, 3])


def test_save_and_load_round_trip(model, library: Path, tmp_path: Path):
    x, t = data()
    model.train_step(x, t)
    model.train_step(x, t)
    path = tmp_path / "ckpt.safetensors"
    model.save(path)
    header = read_safetensors_header(path)
    assert list(header) == ["__metadata__", "W", "b", "W_v", "b_v", "__step__"]
    assert header["__metadata__"] == {"format": "dlvm", "model": "tiny"}
    assert header["__step__"]["dtype"] == "I64" and header["__step__"]["shape"] == []
    with dlvm.load(library, seed=99) as other:
        other.load(path)
        for name, value in model.params.items():
            np.testing.assert_array_equal(other.params[name], value)
        np.testing.assert_array_equal(other.infer(x), model.infer(x))
        # States and step came along: the next steps agree exactly.
        assert other.train_step(x, t) == model.train_step(x, t)
        np.testing.assert_array_equal(other.params["W"], model.params["W"])


def read_safetensors_header(path: Path) -> dict:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n])


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    codes = {np.dtype(np.float32): "F32", np.dtype(np.int64): "I64"}
    header: dict = {"__metadata__": {"format": "dlvm", "model": "tiny"}}
    blob, offset = b"", 0
    for name, arr in tensors.items():
        raw = arr.tobytes()
        header[name] = {
            "dtype": codes[arr.dtype],
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        blob += raw
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + blob)


def test_bad_checkpoints_leave_the_model_unchanged(model, tmp_path: Path):
    before = model.params
    good = tmp_path / "good.safetensors"
    model.save(good)
    bad = {
        "truncated": None,
        "missing": {"W": np.ones((3, 2), np.float32)},
        "extra": {"W": before["W"], "b": before["b"], "zz": before["b"]},
        "transposed": {"W": np.ones((2, 3), np.float32), "b": before["b"]},
    }
    for name, tensors in bad.items():
        path = tmp_path / f"{name}.safetensors"
        if tensors is None:
            path.write_bytes(good.read_bytes()[:-5])
        else:
            write_safetensors(path, tensors)
    cases = [("truncated", 5, ""), ("missing", 5, "'b'"), ("extra", 5, "'zz'")]
    cases += [("transposed", 5, "'W'"), ("absent", 4, "absent")]
    for name, status, words in cases:
        with pytest.raises(LibraryError) as e:
            model.load(tmp_path / f"{name}.safetensors")
        assert e.value.status == status, e.value.message
        assert e.value.message.startswith("tiny_load: ") and words in e.value.message
        for param, value in model.params.items():
            np.testing.assert_array_equal(value, before[param])


def test_states_and_step_are_optional_in_a_checkpoint(model, tmp_path: Path):
    path = tmp_path / "params.safetensors"
    W, b = np.full((3, 2), 0.5, np.float32), np.array([1, -1], np.float32)
    write_safetensors(path, {"W": W, "b": b})
    model.load(path)
    np.testing.assert_array_equal(model.params["W"], W)
    np.testing.assert_array_equal(model.params["b"], b)


def test_get_and_set_param(model):
    W = np.arange(6, dtype=np.float32).reshape(3, 2)
    model.set_param("W", W)
    model.set_param("b", [0.5, -0.5])  # a list of Python floats is cast to f32
    np.testing.assert_array_equal(model.params["W"], W)
    x = np.ones((4, 3), np.float32)
    np.testing.assert_allclose(model.infer(x), np.ones((4, 3)) @ W + [0.5, -0.5])
    got = model.params["W"]
    got[0, 0] = 100  # a copy
    assert model.params["W"][0, 0] == 0
    with pytest.raises(ValueError, match=r"no parameter 'nope' \(known: W, b\)"):
        model.set_param("nope", W)
    with pytest.raises(ValueError, match=r"parameter 'W' must have shape \[3, 2\]"):
        model.set_param("W", W.T)


def test_results_into_given_arrays(model):
    x, _ = data()
    y = model.infer(x)
    out = np.full((4, 2), np.nan, np.float32)
    assert model.infer(x, out=out) is out
    np.testing.assert_array_equal(out, y)
    out[:] = np.nan  # by name, which the quick path (positional inputs) leaves to the full call
    assert model.infer(x=x, out=out) is out
    np.testing.assert_array_equal(out, y)
    # A read-only input takes the slow path and gives the same result.
    frozen = x.copy()
    frozen.flags.writeable = False
    np.testing.assert_array_equal(model.infer(frozen), y)


@pytest.mark.parametrize(
    "out, error, message",
    [
        (np.zeros((4, 3), np.float32), TypeError, r"out 'y' must be a writable C-contiguous"
         r" f32\[4, 2\] array, got float32\[4, 3\]"),
        (np.zeros((4, 2), np.float64), TypeError, r"got float64\[4, 2\]"),
        (np.zeros((2, 4), np.float32).T, TypeError, r"got float32\[4, 2\] not C-contiguous"),
        ([[0.0] * 2] * 4, TypeError, "got list"),
        ((np.zeros((4, 2), np.float32),) * 2, TypeError, r"out= needs 1 array\(s\)"),
    ],
)  # fmt: skip
def test_bad_outputs_are_refused(model, out, error, message):
    x, _ = data()
    with pytest.raises(error, match=message):
        model.infer(x, out=out)


def test_an_output_may_not_overlap_an_input(model):
    x, _ = data()
    buf = np.zeros(4 * 3 + 8, np.float32)
    inside = buf[:12].reshape(4, 3)
    inside[:] = x
    with pytest.raises(ValueError, match="out 'y' overlaps an input"):
        model.infer(inside, out=buf[4:12].reshape(4, 2))
    read_only = np.zeros((4, 2), np.float32)
    read_only.flags.writeable = False
    with pytest.raises(TypeError, match="read-only"):
        model.infer(x, out=read_only)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (
            lambda m: m.infer(np.zeros((4, 4), np.float32)),
            ValueError,
            r"tiny.infer: input 'x' must"
            r" have shape \[4, 3\] \(f32\), got \[4, 4\]",
        ),
        (lambda m: m.infer(np.zeros((4, 3), np.complex64)), TypeError, "input 'x' must be f32"),
        (lambda m: m.double([1.5, 2, 3]), TypeError, r"input 'int' must be i32\[3\], got dtype"),
        (lambda m: m.double([2**40, 0, 0]), ValueError, "values do not fit in i32"),
        (lambda m: m.infer(), TypeError, r"tiny.infer\(\) is missing input\(s\) 'x'"),
        (lambda m: m.infer(1, 2), TypeError, r"takes 1 input\(s\) \(x\), got 2"),
        (lambda m: m.infer(z=1), TypeError, r"has no input 'z' \(inputs: x\)"),
        (lambda m: m.infer(1, x=1), TypeError, "got input 'x' by position and by name"),
        (lambda m: m.train_step(t=np.zeros((4, 2))), TypeError, "missing input"),
        (lambda m: m.infer(["a", "b"]), TypeError, "input 'x' must be f32"),
    ],
)
def test_argument_errors_are_clear(model, call, error, message):
    with pytest.raises(error, match=message):
        call(model)


class OnlyDLPack:
    """An array known only through the DLPack protocol."""

    def __init__(self, arr: np.ndarray) -> None:
        self.arr = arr

    def __dlpack__(self, **kwargs):
        return self.arr.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()


def test_dlpack_inputs_and_keyword_inputs(model):
    x, t = data()
    y = model.infer(x)
    np.testing.assert_array_equal(model.infer(OnlyDLPack(x)), y)
    assert model.entries["train_step"](t=t, x=OnlyDLPack(x)) > 0


def test_bad_devices_and_seeds(library: Path):
    with pytest.raises(LibraryError, match="this library has no CUDA kernels") as e:
        dlvm.load(library, device="cuda:0")
    assert e.value.status == 3
    with pytest.raises(LibraryError, match="unknown device 'tpu'") as e:
        dlvm.load(library, device="tpu")
    assert e.value.status == 1
    with pytest.raises(ValueError, match="seed"):
        dlvm.load(library, seed=-1)


def test_close_context_manager_and_repr(library: Path):
    m = dlvm.load(library)
    assert "<dlvm.Model 'tiny'" in repr(m)
    m.close()
    m.close()
    assert m.closed and "closed" in repr(m)
    with pytest.raises(ValueError, match="model 'tiny' is closed"):
        m.infer(np.zeros((4, 3), np.float32))
    with pytest.raises(ValueError, match="model 'tiny' is closed"):  # the quick path's too
        m.infer(np.zeros((4, 3), np.float32), out=np.zeros((4, 2), np.float32))
    with dlvm.load(library) as m2:
        pass
    assert m2.closed


def test_the_model_name_does_not_depend_on_the_file_name(library: Path, tmp_path: Path):
    renamed = tmp_path / "renamed.so"
    shutil.copy(library, renamed)
    with dlvm.load(renamed) as m, dlvm.load(renamed, name="tiny") as n:
        assert m.c_name == n.c_name == "tiny"
    with pytest.raises(ValueError, match="has no function nope_manifest"):
        dlvm.load(renamed, name="nope")


def test_without_elf_symbols_the_name_is_the_file_stem(library: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setattr(dlvm.loader, "elf_exported_functions", lambda path: None)
    with dlvm.load(library) as m:
        assert m.c_name == "tiny"
    renamed = tmp_path / "libother.so"
    shutil.copy(library, renamed)
    with pytest.raises(ValueError, match="not a dlvm model library"):
        dlvm.load(renamed)
    shutil.copy(library, tmp_path / "libtiny.so")
    with dlvm.load(tmp_path / "libtiny.so") as m:
        assert m.c_name == "tiny"


@needs_cc
def test_every_c_error_path(library: Path, tmp_path: Path):
    (tmp_path / "client.c").write_text(CLIENT_C)
    shutil.copy(DLRT_H, tmp_path / "dlrt.h")
    (tmp_path / "tiny.h").write_text(header_source(SPEC))
    exe = tmp_path / "client"
    cc(*STRICT, tmp_path / "client.c", library, f"-Wl,-rpath,{library.parent}", "-o", exe)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    lines = dict(line.split(": ", 1) for line in out.splitlines())
    expected = {
        "out": "1 tiny_create: argument 'out' is NULL",
        "tpu": '1 tiny_create: unknown device \'tpu\' (expected "cpu" or "cuda:N")',
        "tpu-out": "0 ",
        "cuda:0": "3 tiny_create: device 'cuda:0': this library has no CUDA kernels",
        "cuda:": '1 tiny_create: unknown device \'cuda:\' (expected "cpu" or "cuda:N")',
        "cuda:1x": '1 tiny_create: unknown device \'cuda:1x\' (expected "cpu" or "cuda:N")',
        "null-device": "0 ",
        "create": "0 ",
        "infer-m": "1 tiny_infer: argument 'm' is NULL",
        "infer-x": "1 tiny_infer: argument 'x' is NULL",
        "infer-y": "1 tiny_infer: argument 'y' is NULL",
        "train-t": "1 tiny_train_step: argument 't' is NULL",
        "train-loss": "1 tiny_train_step: argument 'loss' is NULL",
        "double-int": "1 tiny_double: argument 'int' is NULL",
        "double-n": "1 tiny_double: argument 'n' is NULL",
        "double": "0 ",
        "r": "2 4 6",
        "get-unknown": "1 tiny_get_param: unknown parameter 'nope' (known: W, b)",
        "get-name": "1 tiny_get_param: argument 'name' is NULL",
        "get-out": "1 tiny_get_param: argument 'out' is NULL",
        "set-data": "1 tiny_set_param: argument 'data' is NULL",
        "set-m": "1 tiny_set_param: argument 'm' is NULL",
        "save-path": "1 tiny_save: argument 'path' is NULL",
        "load-m": "1 tiny_load: argument 'm' is NULL",
        "manifest": '{"abi": 1',
    }
    assert {k: v for k, v in lines.items() if k != "load-missing"} == expected
    assert lines["load-missing"].startswith("4 ")
