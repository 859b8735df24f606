"""Convolutions with few output positions and long sums as dot products of the kernel's rows
with the transposed im2col's (dlvm.codegen.conv_rows): compiled against the interpreter in f32
and f64 with padding, strides, 1×1 kernels, groups, odd sizes, an output narrower than the
kernel, images stacked into one pass, output channels shared by threads (shares past the
channels, a last partial group of them), fused epilogues, on this CPU's vectors and AVX2's,
with 1, 2 and 13 threads; and which convolutions take the path."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from convlib import DTYPES, assert_close, out_shape, ty
from irlib import run_elsewhere

from dlvm.codegen import conv_rows
from dlvm.codegen.build import LibraryBuild, build_library
from dlvm.codegen.llgen import llvm_module
from dlvm.codegen.spec import module_spec
from dlvm.interp import run_function
from dlvm.ir import parse_module
from dlvm.ir.values import Instruction

# (name, input, kernel, options, epilogue): the epilogue's lines read the convolution as %c,
# the bias [1 x C x 1 x 1] as %b, a tensor of the output's shape as %y, and end in %r.
BIAS_RELU = ["%s = add %c: {o}, %b: {b}", "%r = max %s: {o}, 0: {dt}"]
CASES = [
    # 16 positions; threads share 20 channels in 4 blocks of a group of 8 (the last empty).
    ("pad-3x3", (1, 64, 4, 4), (20, 64, 3, 3), "padding (1, 1), (1, 1)",
     ["%s = add %c: {o}, %b: {b}", "%t = max %s: {o}, 0: {dt}", "%r = add %t: {o}, %y: {o}"]),
    ("stride-2", (1, 48, 9, 9), (12, 48, 3, 3), "strides 2, 2 padding (1, 1), (1, 1)", BIAS_RELU),
    # 8 × 8 positions, sums of 1152.
    ("8x8", (1, 128, 8, 8), (12, 128, 3, 3), "padding (1, 1), (1, 1)", BIAS_RELU),
    # Stride 2 past a 7 × 7 input: its padded planes would be larger than X̂ᵀ (copied
    # element by element instead).
    ("1x1-stride-2", (1, 260, 7, 7), (9, 260, 1, 1), "strides 2, 2", []),
    # 25 positions, 5 blocks of 20 channels; no epilogue.
    ("shared", (1, 96, 5, 5), (20, 96, 3, 3), "padding (1, 1), (1, 1)", []),
    # Two images of 15 positions, a block of their 3 output rows to each share.
    ("1x1", (2, 256, 3, 5), (13, 256, 1, 1), "", BIAS_RELU),
    # Two images stacked into one pass of 30 rows on one thread.
    ("1x1-stacked", (2, 240, 3, 5), (9, 240, 1, 1), "", []),
    # 9 channels a group: a group of 8, then one.
    ("groups", (1, 64, 5, 3), (18, 32, 3, 3), "padding (1, 1), (0, 1) groups 2",
     ["%r = add %c: {o}, %y: {o}"]),
    ("odd", (3, 37, 3, 4), (7, 37, 3, 3), "padding (1, 1), (1, 1)",
     ["%s = add %c: {o}, %b: {b}", "%r = tanh %s: {o}"]),
    # An output narrower than the kernel (a ResNet's last stage at 64 × 64).
    ("narrow", (1, 32, 2, 2), (10, 32, 3, 3), "padding (1, 1), (1, 1)", BIAS_RELU),
    # Sums of 1440 in chunks (a group's rows of the kernel kept in L1: RowDots.chunk).
    ("long-sums", (1, 160, 3, 3), (12, 160, 3, 3), "padding (1, 1), (1, 1)", BIAS_RELU),
    # Eight images of 4 positions, shared by the threads one or more each.
    ("batch-8", (8, 128, 2, 2), (16, 128, 3, 3), "padding (1, 1), (1, 1)", BIAS_RELU),
]  # fmt: skip
# Convolutions that keep conv_gemm's tiles: 81 positions, sums shorter than 16 per position
# (64 positions, sums of 576), a short sum, 80 rows.
OTHERS = [
    ("positions-81", (1, 128, 9, 9), (16, 128, 3, 3), "padding (1, 1), (1, 1)", []),
    ("positions-64", (1, 64, 8, 8), (16, 64, 3, 3), "padding (1, 1), (1, 1)", []),
    ("short-sums", (1, 8, 4, 4), (16, 8, 3, 3), "padding (1, 1), (1, 1)", []),
    ("rows-80", (5, 64, 4, 4), (16, 64, 3, 3), "padding (1, 1), (1, 1)", []),
]  # fmt: skip
ALL = CASES + OTHERS


def function(name: str, case: tuple, dt: str) -> str:
    _, x, k, options, lines = case
    shape = out_shape(x, k, options)
    o, b = ty(shape, dt), ty((1, shape[1], *(1,) * (len(shape) - 2)), dt)
    args = f"%x: {ty(x, dt)}, %k: {ty(k, dt)}, %b: {b}, %y: {o}"
    body = "".join("    " + line.format(o=o, b=b, dt=dt) + "\n" for line in lines)
    result = "%r" if lines else "%c"
    return (
        f"func @{name}: ({ty(x, dt)}, {ty(k, dt)}, {b}, {o}) -> {o} {{\n'entry({args}):\n"
        f"    %c = convolve %x: {ty(x, dt)} kernel %k: {ty(k, dt)} {options}\n"
        f"{body}    return {result}: {o}\n}}\n"
    )


def symbol(name: str, dt: str) -> str:
    return f"rows_{name.replace('-', '_')}_{dt}"


TEXT = 'module "crows"\nstage optimizable\n\n' + "\n".join(
    function(symbol(c[0], dt), c, dt) for c in ALL for dt in DTYPES
)
NAMES = [(symbol(c[0], dt), n, dt) for n, c in enumerate(ALL) for dt in DTYPES]


def inputs(index: int, dt: str) -> list[np.ndarray]:
    _, x, k, options, _ = ALL[index]
    shape = out_shape(x, k, options)
    rng = np.random.default_rng(index)
    shapes = [x, k, (1, shape[1], *(1,) * (len(shape) - 2)), shape]
    return [rng.uniform(-2, 2, s).astype(DTYPES[dt]) for s in shapes]


def convolution(module, name: str) -> Instruction:
    f = module.function_named(name)
    assert f is not None, name
    (conv,) = [i for blk in f.blocks for i in blk.instructions if i.opcode == "convolve"]
    return conv


@pytest.mark.parametrize("lanes", [{"f32": 16, "f64": 8}, {"f32": 8, "f64": 4}])
def test_which_convolutions_take_row_dots(lanes):
    """The cases on AVX-512's vectors and AVX2's; not the others."""
    module = parse_module(TEXT, "crows.dl")
    for case in ALL:
        for dt in DTYPES:
            conv = convolution(module, symbol(case[0], dt))
            # 8 × 8 positions with AVX-512's vectors only (conv_rows.PADDED_VECTOR_BYTES).
            wide = lanes[dt] * DTYPES[dt]().itemsize >= 64
            taken = case in CASES and (case[0] != "8x8" or wide)
            assert conv_rows.suits(conv, lanes[dt]) == taken, (case[0], dt)


def test_the_kernels_build_the_transposed_im2col():
    """The cases' kernels copy X̂ᵀ (blocks named `xrow`; from zero-padded planes: `ximage`) and
    run the row-dot loop (`wp`), long sums in chunks (`kc`); the others neither. Some cases'
    threads share channels (compute-scheduling's `split`)."""
    module = parse_module(TEXT, "crows.dl")
    build = LibraryBuild(module, module_spec(parse_module(TEXT, "crows.dl"), "crows"),
                         Path("unused.so"))  # fmt: skip
    text = str(llvm_module(build.module))
    # Padded planes with AVX-512's vectors only (conv_rows.PADDED_VECTOR_BYTES).
    schedules = {f.name: f.schedule for f in build.module.functions}
    wide = {dt: schedules[symbol("pad-3x3", dt) + "_k"].get("vectorize", 1)  # type: ignore[union-attr]
            * DTYPES[dt]().itemsize >= 64 for dt in DTYPES}  # fmt: skip
    for case in ALL:
        for dt in DTYPES:
            at = text.index(f'@"k.{symbol(case[0], dt)}_k.body"')
            body = text[at : text.index("\n}\n", at)]
            rows = case in CASES and (case[0] != "8x8" or wide[dt])
            assert ("\nxrow.head" in body) == rows and ("\nwp.head" in body) == rows, case[0]
            if case[0] in ("long-sums", "narrow"):  # sums of 1440 in chunks, of 288 at once
                assert ("\nkc.head" in body) == (case[0] == "long-sums"), case[0]
            if case[0] in ("pad-3x3", "1x1-stride-2"):  # X̂ᵀ from padded planes, or not
                padded = case[0] == "pad-3x3" and wide[dt]
                assert ("\nximage.head" in body) == padded, case[0]
    split = [f for f in build.module.functions if f.schedule and f.schedule.get("split", 1) > 1]
    assert any(symbol("shared", "f32") in f.name for f in split)


@pytest.fixture(scope="module", params=["native", "x86-64-v3"])
def library(request, tmp_path_factory) -> Path:
    """The cases built for this CPU's vectors (AVX-512 where it has them) and for AVX2's."""
    module = parse_module(TEXT, "crows.dl")
    path = tmp_path_factory.mktemp("crows") / "crows.so"
    build_library(module, module_spec(module, "crows"), path, cpu=request.param)
    return path


# aligned_alloc failing: the runtime's dlrt_scratch then has no buffer to give.
NO_SCRATCH = """#include <stddef.h>
void *aligned_alloc(size_t alignment, size_t size) { (void)alignment; (void)size; return NULL; }
"""


def run_cases(library: Path, tmp_path: Path, env: dict[str, str]) -> None:
    """Every case in a process of its own with `env`, against the interpreter."""
    calls = {name: inputs(n, dt) for name, n, dt in NAMES}
    got = run_elsewhere(library, calls, tmp_path, env)
    reference = parse_module(TEXT, "crows.dl")
    for name, n, dt in NAMES:
        want = np.asarray(run_function(reference, name, inputs(n, dt)))
        assert_close(got[name], want, dt)


@pytest.mark.parametrize("threads", [1, 2, 13])
def test_row_dots_compute_what_the_interpreter_does(library, tmp_path, threads):
    """Each thread count in a process of its own (the runtime reads DLRT_NUM_THREADS once)."""
    run_cases(library, tmp_path, {**os.environ, "DLRT_NUM_THREADS": str(threads)})


def test_without_a_scratch_buffer_each_share_is_computed_element_by_element(library, tmp_path):
    """With no scratch buffer (aligned_alloc failing, preloaded), every thread computes its
    own share, the same images and channels, one output element at a time."""
    shim = tmp_path / "no_scratch.so"
    (tmp_path / "no_scratch.c").write_text(NO_SCRATCH)
    cc = os.environ.get("CC") or "cc"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(shim), str(tmp_path / "no_scratch.c")],
                   check=True)  # fmt: skip
    run_cases(library, tmp_path, {**os.environ, "DLRT_NUM_THREADS": "3", "LD_PRELOAD": str(shim)})
