"""Products with a transposed weight, x · Wᵀ, as dot products of x's rows with W's rows read in
place (dlvm.codegen.matmul_rows): which products take them, and their results against the
interpreter for every count of rows up to 9 and past it, sums not a multiple of the vector
width (nor longer than one vector), partial groups of columns, f32 and f64, epilogues, x
computed by a prologue, on AVX-512 and AVX2 vectors, with 1, 2 and 13 threads; and Wᵀ packed
by square blocks for the products with more rows."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from irlib import run_elsewhere

import dlvm
from dlvm.codegen.build import LibraryBuild, build_library
from dlvm.codegen.llgen import llvm_module
from dlvm.codegen.spec import module_spec
from dlvm.interp import run_function
from dlvm.ir import parse_module

# (name, m, k, n, dtype, epilogue, prologue): x · Wᵀ with W n × k; the epilogue adds a bias
# row and takes relu (or tanh); with the prologue, x is the transpose of the k × m argument
# (rows of x not contiguous: copied first).
CASES = [
    *[(f"m{m}", m, 133, 13, "f32", "relu", False) for m in range(1, 10)],
    ("long", 1, 784, 256, "f32", "", False),
    ("short", 1, 3, 5, "f32", "relu", False),  # shorter than a vector
    ("one-column", 4, 130, 1, "f32", "", False),
    ("many-rows", 33, 150, 70, "f32", "tanh", False),
    ("prologue", 5, 131, 9, "f32", "relu", True),
    ("f64-m1", 1, 45, 11, "f64", "relu", False),
    ("f64-m3", 3, 145, 11, "f64", "", False),
    ("f64-m9", 9, 140, 19, "f64", "tanh", True),
    ("columns", 1, 100, 300, "f32", "relu", False),  # threads share groups of 64 columns
    ("rows", 12, 200, 40, "f32", "relu", False),  # threads share rows
]
# Products past the rule (many rows, short sums): the tiled kernel packs Wᵀ by square blocks
# along W's rows (dlvm.codegen.transposing), strip by strip or into panels (dlvm.codegen.panels),
# with steps and columns left over.
TILED = [
    ("tiled", 64, 32, 40, "f32", "relu", False),
    ("short-sums", 8, 64, 40, "f32", "relu", False),
    ("panels", 100, 45, 70, "f32", "relu", False),
    ("strip-f64", 64, 37, 20, "f64", "tanh", False),
]


def ty(shape: tuple[int, ...], dt: str) -> str:
    return "<" + " x ".join(map(str, shape)) + f" x {dt}>"


def function(case: tuple) -> str:
    name, m, k, n, dt, epilogue, prologue = case
    x, w, c, o = ty((m, k), dt), ty((n, k), dt), ty((1, n), dt), ty((m, n), dt)
    given = ty((k, m), dt) if prologue else x
    lines = [f"func @{symbol(name)}: ({given}, {w}, {c}) -> {o} {{",
             f"'entry(%x: {given}, %w: {w}, %c: {c}):"]  # fmt: skip
    a = "%x"
    if prologue:
        lines.append(f"    %y = transpose %x: {given}")
        a = "%y"
    lines.append(f"    %t = transpose %w: {w}")
    lines.append(f"    %d = dot {a}: {x}, %t: {ty((k, n), dt)}")
    r = "%d"
    if epilogue:
        lines.append(f"    %s = add %d: {o}, %c: {c}")
        if epilogue == "relu":
            lines.append(f"    %r = max %s: {o}, 0: {dt}")
        else:
            lines.append(f"    %r = tanh %s: {o}")
        r = "%r"
    return "\n".join([*lines, f"    return {r}: {o}", "}", ""])


def symbol(name: str) -> str:
    return "rows_" + name.replace("-", "_")


TEXT = 'module "rows"\nstage optimizable\n\n' + "\n".join(map(function, CASES + TILED))
ALL = CASES + TILED


def inputs(index: int) -> list[np.ndarray]:
    _, m, k, n, dt, _, prologue = ALL[index]
    rng = np.random.default_rng(index)
    dtype = np.float32 if dt == "f32" else np.float64
    x = (k, m) if prologue else (m, k)
    return [rng.uniform(-1, 1, s).astype(dtype) for s in (x, (n, k), (1, n))]


def expected(index: int) -> np.ndarray:
    reference = parse_module(TEXT, "rows.dl")
    return np.asarray(run_function(reference, symbol(ALL[index][0]), inputs(index)))


def check(name: str, got: np.ndarray, want: np.ndarray) -> None:
    """Sums in another order than the interpreter's: a few ulp of the largest sum."""
    assert got.shape == want.shape and got.dtype == want.dtype, name
    tol = 1e-12 if want.dtype == np.float64 else 1e-5
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale, err_msg=name)


def test_few_rows_read_the_weight_in_place_and_many_pack_it():
    """The row-dot loop along p (blocks named `wp`) in each case's kernel but the tiled
    ones', which copy Wᵀ by square blocks (`tcb`)."""
    build = LibraryBuild(parse_module(TEXT, "rows.dl"), module_spec(parse_module(
        TEXT, "rows.dl"), "rows"), Path("unused.so"))  # fmt: skip
    text = str(llvm_module(build.module))
    for name, *_ in ALL:
        body = text[text.index(f'@"k.{symbol(name)}_k.body"') :]
        body = body[: body.index("\n}\n")]
        tiled = name in {c[0] for c in TILED}
        assert ("\nwp.head" in body) != tiled and ("\ntcb.head" in body) == tiled, name


@pytest.fixture(scope="module", params=["native", "x86-64-v3"])
def library(request, tmp_path_factory) -> Path:
    """The cases built for this CPU's vectors (AVX-512 where it has them) and for AVX2's."""
    module = parse_module(TEXT, "rows.dl")
    path = tmp_path_factory.mktemp("rows") / "rows.so"
    build_library(module, module_spec(module, "rows"), path, cpu=request.param)
    return path


@pytest.mark.parametrize("threads", [1, 2, 13])
def test_row_dots_compute_what_the_interpreter_does(library, tmp_path, threads):
    """Each thread count in a process of its own (the runtime reads DLRT_NUM_THREADS once)."""
    calls = {symbol(c[0]): inputs(n) for n, c in enumerate(ALL)}
    env = {**os.environ, "DLRT_NUM_THREADS": str(threads)}
    got = run_elsewhere(library, calls, tmp_path, env)
    names = list(calls)
    for n, name in enumerate(names):
        check(name, got[name], expected(n))


def test_nan_in_the_weight_reaches_only_its_column(library):
    """The last, partial step of a sum loads only the row's own elements: a NaN at the start of
    W's row 5, which a whole vector at the end of row 4 would take in, is in column 5 of the
    result and nowhere else."""
    index = [c[0] for c in ALL].index("m3")
    x, w, c = inputs(index)
    w[5, 0] = np.nan
    with dlvm.load(library) as lib:
        got = getattr(lib, symbol("m3"))(x, w, c)
    assert np.isnan(got[:, 5]).all()
    got[:, 5] = 0
    assert not np.isnan(got).any()
