"""A small model library of every element type, built without LLVM (a hand-written C "compiled
model", the generated glue and the runtime, linked with cc): the checkpoint and C-entry tests and
fuzzers load it. Parameters of each dtype (a scalar and an empty tensor among them), momentum
states, a train entry with a step, an infer entry and an export entry of integer types."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

from dlvm.codegen.glue import glue_source, header_source
from dlvm.codegen.spec import EntrySpec, LibrarySpec, StateSpec, TensorSpec
from dlvm.runtime import build_runtime, runtime_dir

X = TensorSpec("x", "f32", (3,))
SPEC = LibrarySpec(
    name="zoo",
    compiler="test 1",
    params=(
        TensorSpec("W", "f32", (3, 2)),
        TensorSpec("b", "f64", (2,)),
        TensorSpec("k", "i32", ()),
        TensorSpec("mask", "bool", (4,)),
        TensorSpec("h", "f16", (2, 2)),
        TensorSpec("c", "i8", (3,)),
        TensorSpec("n", "i16", (2,)),
        TensorSpec("z", "f32", (0, 2)),
    ),
    states=(StateSpec("W_v", "W", "f32", (3, 2)), StateSpec("b_v", "b", "f64", (2,))),
    init="init",
    entries=(
        EntrySpec("infer", "infer", "infer", (X,), (TensorSpec("y", "f32", (2,)),), ("W", "b")),
        EntrySpec(
            "train",
            "train",
            "train",
            (X,),
            (TensorSpec("loss", "f32", ()),),
            params=("W", "b"),
            states=("W_v", "b_v"),
            step=True,
        ),
        EntrySpec(
            "mix",
            "export",
            "mix",
            (TensorSpec("a", "i64", (2, 2)), TensorSpec("m", "bool", (2,))),
            (TensorSpec("r", "i64", (2,)), TensorSpec("s", "i16", ())),
        ),
    ),
)

# The host functions, with the convention of docs/c-abi.md section 5.
HOST_C = r"""
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "dlrt.h"

typedef struct dl_context { dlrt_arena *arena; uint64_t seed; uint64_t counter; } dl_context;

static uint64_t draw(dl_context *ctx) {
    uint64_t z = ctx->seed * 0x9E3779B97F4A7C15ull + ctx->counter++ * 0xD1B54A32D192ED03ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float uniform(dl_context *ctx) { return (float)(draw(ctx) >> 40) / 16777216.0f - 0.5f; }

int32_t dl_init(dl_context *ctx, void *W, void *b, void *k, void *mask, void *h, void *c,
                void *n, void *z) {
    (void)z;
    for (int i = 0; i < 6; ++i) ((float *)W)[i] = uniform(ctx);
    for (int i = 0; i < 2; ++i) ((double *)b)[i] = uniform(ctx);
    *(int32_t *)k = (int32_t)(draw(ctx) >> 40);
    for (int i = 0; i < 4; ++i) ((uint8_t *)mask)[i] = (uint8_t)(draw(ctx) & 1);
    for (int i = 0; i < 4; ++i) ((uint16_t *)h)[i] = (uint16_t)(0x3C00 + (draw(ctx) & 0x3FF));
    for (int i = 0; i < 3; ++i) ((int8_t *)c)[i] = (int8_t)draw(ctx);
    for (int i = 0; i < 2; ++i) ((int16_t *)n)[i] = (int16_t)draw(ctx);
    return DLRT_OK;
}

int32_t dl_infer(dl_context *ctx, const void *xp, const void *Wp, const void *bp, void *yp) {
    const float *x = xp, *W = Wp;
    const double *b = bp;
    float *y = yp;
    (void)ctx;
    for (int j = 0; j < 2; ++j) {
        float s = (float)b[j];
        for (int i = 0; i < 3; ++i) s += x[i] * W[i * 2 + j];
        y[j] = s;
    }
    return DLRT_OK;
}

/* loss = sum(x . W + b); v' = 0.5 v + grad; p' = p - 0.1 v' / step. NaN in x fails. */
int32_t dl_train(dl_context *ctx, const void *xp, const void *Wp, const void *bp,
                 const void *Wvp, const void *bvp, const void *stepp, void *lossp, void *W2p,
                 void *b2p, void *Wv2p, void *bv2p) {
    const float *x = xp, *W = Wp, *Wv = Wvp;
    const double *b = bp, *bv = bvp;
    float *W2 = W2p, *Wv2 = Wv2p, y[2];
    double *b2 = b2p, *bv2 = bv2p;
    float step = *(const float *)stepp;
    for (int i = 0; i < 3; ++i)
        if (isnan(x[i])) return dlrt_error(DLRT_ERR_INVALID_ARGUMENT, "dl_train: x holds a NaN");
    dl_infer(ctx, xp, Wp, bp, y);
    *(float *)lossp = y[0] + y[1];
    for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 2; ++j) {
            Wv2[i * 2 + j] = 0.5f * Wv[i * 2 + j] + x[i];
            W2[i * 2 + j] = W[i * 2 + j] - 0.1f * Wv2[i * 2 + j] / step;
        }
    for (int j = 0; j < 2; ++j) {
        bv2[j] = 0.5 * bv[j] + 1.0;
        b2[j] = b[j] - 0.1 * bv2[j] / step;
    }
    return DLRT_OK;
}

/* r = row sums of a where m, s = the count of m. */
int32_t dl_mix(dl_context *ctx, const void *ap, const void *mp, void *rp, void *sp) {
    const int64_t *a = ap;
    const uint8_t *m = mp;
    int64_t *r = rp;
    (void)ctx;
    *(int16_t *)sp = (int16_t)(m[0] + m[1]);
    for (int i = 0; i < 2; ++i) r[i] = m[i] ? a[i * 2] + a[i * 2 + 1] : 0;
    return DLRT_OK;
}
"""


def _cc(args: list[str], cwd: Path) -> None:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{shlex.join(args)} failed:\n{done.stderr}")


def zoo_library(directory: Path, cc: str = "cc", flags: tuple[str, ...] = ()) -> Path:
    """Builds directory/zoo.so (with zoo.h and dlrt.h beside it) as `telc build` lays a library
    out, compiling everything with `cc` and `flags` (sanitizers, say), and returns its path."""
    d = Path(directory)
    command = shlex.split(cc)
    shutil.copy(runtime_dir() / "include" / "dlrt.h", d / "dlrt.h")
    (d / "zoo_glue.c").write_text(glue_source(SPEC))
    (d / "zoo.h").write_text(header_source(SPEC))
    (d / "host.c").write_text(HOST_C)
    base = [*command, "-std=c11", "-O1", "-fPIC", f"-I{d}", *flags]
    _cc([*base, "-fvisibility=hidden", "-c", "zoo_glue.c", "-o", "glue.o"], d)
    _cc([*base, "-c", "host.c", "-o", "host.o"], d)
    runtime = build_runtime(shlex.join(command), flags)
    out = d / "zoo.so"
    _cc([*command, *flags, "-shared", "-o", str(out), "glue.o", "host.o", *map(str, runtime),
         "-lm", "-pthread", "-ldl"], d)  # fmt: skip
    return out
