"""A plain C program uses a library telc built (samples/digits.tel) through its header alone:
create, infer, train, save, load into a second model with the same predictions, and the error
statuses for bad arguments; the library depends only on libc, libm, libpthread and libdl."""

from __future__ import annotations

import subprocess

import pytest

PROGRAM = r"""
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "digits.h"

#define CHECK(call) do { dlrt_status s_ = (call); if (s_ != DLRT_OK) { \
    fprintf(stderr, "%s failed (%d): %s\n", #call, (int)s_, dlrt_last_error()); \
    return 1; } } while (0)

_Static_assert(DIGITS_INFER_X_SIZE == 32 * 64, "the header gives the input's size");
_Static_assert(DIGITS_INFER_Y_SIZE == 32 * 10, "and the output's");

int main(int argc, char **argv) {
    static float x[32 * 64], labels[32 * 10], y[32 * 10], y2[32 * 10];
    float loss0 = 0, loss = 0;
    for (int i = 0; i < 32 * 64; ++i) x[i] = (float)((i * 7) % 17) / 17.0f;
    for (int i = 0; i < 32; ++i) labels[i * 10 + i % 10] = 1.0f;
    digits_model *m = NULL, *m2 = NULL;
    CHECK(digits_create("cpu", 42, &m));
    CHECK(digits_train_step(m, x, labels, &loss0));
    for (int step = 0; step < 50; ++step) CHECK(digits_train_step(m, x, labels, &loss));
    if (!(loss < loss0)) {
        fprintf(stderr, "loss did not fall: %f -> %f\n", loss0, loss);
        return 1;
    }
    CHECK(digits_infer(m, x, y));
    CHECK(digits_save(m, argv[1]));
    CHECK(digits_create(NULL, 7, &m2));
    CHECK(digits_load(m2, argv[1]));
    CHECK(digits_infer(m2, x, y2));
    if (memcmp(y, y2, sizeof y) != 0) { fprintf(stderr, "reloaded model differs\n"); return 1; }
    if (digits_infer(m, NULL, y) != DLRT_ERR_INVALID_ARGUMENT
        || !strstr(dlrt_last_error(), "x")) {
        fprintf(stderr, "NULL input not reported: %s\n", dlrt_last_error()); return 1;
    }
    digits_model *bad = NULL;
    if (digits_create("tpu:0", 1, &bad) != DLRT_ERR_INVALID_ARGUMENT || bad != NULL) {
        fprintf(stderr, "bad device not reported\n"); return 1;
    }
    if (digits_load(m2, "/nonexistent/dir/p.safetensors") == DLRT_OK) return 1;
    if (strstr(digits_manifest(), "\"name\":\"digits\"") == NULL &&
        strstr(digits_manifest(), "\"name\": \"digits\"") == NULL) return 1;
    digits_destroy(m);
    digits_destroy(m2);
    digits_destroy(NULL);
    printf("ok %f %f\n", loss0, loss);
    return 0;
}
"""


@pytest.fixture(scope="module")
def library(sample_library):
    return sample_library("digits")


def test_c_program_uses_the_library_through_its_header(library, tmp_path):
    source = tmp_path / "main.c"
    source.write_text(PROGRAM)
    exe = tmp_path / "main"
    d = library.parent
    subprocess.run(
        [
            "cc",
            "-std=c11",
            "-Wall",
            "-Werror",
            f"-I{d}",
            str(source),
            str(library),
            f"-Wl,-rpath,{d}",
            "-o",
            str(exe),
        ],  # fmt: skip
        check=True,
    )
    run = subprocess.run([str(exe), str(tmp_path / "p.safetensors")], capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("ok ")


def test_library_depends_only_on_the_c_library(library):
    needed = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True)
    libs = {line.split("[")[1].split("]")[0] for line in needed.stdout.splitlines()
            if "(NEEDED)" in line}  # fmt: skip
    # The dynamic loader itself comes with libc (thread-local storage is resolved through it).
    allowed = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "ld-linux-x86-64.so.2"}
    assert libs <= allowed, libs
