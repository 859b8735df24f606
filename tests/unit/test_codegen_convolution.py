"""The CPU `convolve` (matrix products on the micro-kernel, dlvm.codegen.conv_gemm, and the
element loop it keeps for depthwise convolutions) against the interpreter in f32 and f64, for
every option and sizes that leave partial tiles, strips, slices and panels; and the compiled
gradients (themselves convolutions) against the interpreter's and finite differences."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import add_gradient, differentiate
from irlib import ir_library

import dlvm
from dlvm.codegen import conv_gemm
from dlvm.interp import run_function
from dlvm.ir import module_text, parse_module

# (name, input shape, kernel shape, options)
CASES = [
    ("3x3-pad", (2, 5, 9, 9), (6, 5, 3, 3), "padding (1, 1), (1, 1)"),
    ("stride-2", (2, 4, 11, 10), (7, 4, 3, 3), "strides 2, 2 padding (1, 1), (1, 1)"),
    ("1x1", (3, 8, 6, 7), (5, 8, 1, 1), ""),
    ("dilation-2", (1, 3, 12, 12), (4, 3, 3, 3), "padding (2, 2), (2, 2) rightDilation 2, 2"),
    ("groups-2", (2, 6, 7, 7), (8, 3, 3, 3), "padding (1, 1), (1, 1) groups 2"),
    ("depthwise", (2, 4, 7, 7), (4, 1, 3, 3), "padding (1, 1), (1, 1) groups 4"),
    ("one-output-channel", (2, 6, 8, 8), (1, 6, 5, 5), "padding (4, 4), (4, 4)"),
    ("left-dilation", (1, 3, 5, 6), (4, 3, 3, 3), "padding (2, 2), (2, 2) leftDilation 2, 2"),
    # 13 channels × 25 taps: two slices of the depth; 7 × 5 positions: one partial strip.
    ("odd-sizes", (2, 13, 7, 5), (3, 13, 5, 5), "padding (2, 2), (2, 2)"),
    # 22 × 21 positions: a panel of 12 output rows and one of 10.
    ("batch-1-panels", (1, 3, 22, 21), (9, 3, 3, 3), "padding (1, 1), (1, 1)"),
    ("1-D", (2, 3, 300), (5, 3, 4), "padding (1, 2)"),
    ("3-D", (1, 2, 4, 5, 6), (3, 2, 2, 3, 2), "strides 1, 2, 1 padding (1, 0), (1, 1), (0, 1)"),
    (
        "everything",
        (1, 4, 5, 5),
        (4, 2, 3, 3),
        "strides 2, 1 padding (1, 1), (0, 2) leftDilation 1, 2 rightDilation 2, 1 groups 2",
    ),
    ("groups-unused-channel", (1, 5, 6, 6), (4, 2, 2, 2), "groups 2"),
]
GRADIENT_CASES = [
    "3x3-pad", "stride-2", "1x1", "groups-2", "depthwise", "everything", "odd-sizes",
]  # fmt: skip
DTYPES = {"f32": np.float32, "f64": np.float64}


def ty(shape: tuple[int, ...], dt: str) -> str:
    return "<" + " x ".join(map(str, shape)) + f" x {dt}>"


def out_shape(x: tuple[int, ...], k: tuple[int, ...], options: str) -> tuple[int, ...]:
    text = (f'module "s"\nstage raw\n\nfunc @f: ({ty(x, "f32")}, {ty(k, "f32")}) -> f32 {{\n'
            f"'entry(%x: {ty(x, 'f32')}, %k: {ty(k, 'f32')}):\n"
            f"    %r = convolve %x: {ty(x, 'f32')} kernel %k: {ty(k, 'f32')} {options}\n"
            "    return 0: f32\n}\n")  # fmt: skip
    inst = parse_module(text, "s.dl").functions[0].blocks[0].instructions[0]
    return inst.type.shape  # type: ignore[attr-defined]


def function(name: str, x: tuple[int, ...], k: tuple[int, ...], options: str, dt: str) -> str:
    r = ty(out_shape(x, k, options), dt)
    return (
        f"func @{name}: ({ty(x, dt)}, {ty(k, dt)}) -> {r} {{\n"
        f"'entry(%x: {ty(x, dt)}, %k: {ty(k, dt)}):\n"
        f"    %r = convolve %x: {ty(x, dt)} kernel %k: {ty(k, dt)} {options}\n"
        f"    return %r: {r}\n}}\n"
    )


def symbol(name: str, dt: str) -> str:
    return f"conv_{name.replace('-', '_')}_{dt}"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """One library: every case in both types, and the seedable gradients of GRADIENT_CASES."""
    parts = ['module "conv"\nstage raw\n']
    for name, x, k, options in CASES:
        for dt in DTYPES:
            parts.append(function(symbol(name, dt), x, k, options, dt))
    module = parse_module("\n".join(parts), "conv.dl")
    for name in GRADIENT_CASES:
        for dt in DTYPES:
            add_gradient(module, symbol(name, dt))
    differentiate(module)
    text = module_text(module)
    path = ir_library(text, "conv", tmp_path_factory.mktemp("conv"))
    with dlvm.load(path) as lib:
        yield lib, parse_module(text, "conv.dl")


def inputs(x: tuple[int, ...], k: tuple[int, ...], dt: str, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-2, 2, s).astype(DTYPES[dt]) for s in (x, k)]


def assert_close(got: np.ndarray, want: np.ndarray, dt: str) -> None:
    """Sums taken in another order (tiles, slices, fused multiply-adds): a few ulp of the
    largest magnitude."""
    assert got.shape == want.shape and got.dtype == want.dtype
    tol = 1e-12 if dt == "f64" else 1e-5
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)


@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("index", range(len(CASES)), ids=[c[0] for c in CASES])
def test_convolve_matches_interpreter(compiled, index, dt):
    lib, reference = compiled
    name, x, k, _ = CASES[index]
    args = inputs(x, k, dt, index)
    want = np.asarray(run_function(reference, symbol(name, dt), args))
    assert_close(np.asarray(getattr(lib, symbol(name, dt))(*args)), want, dt)


@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("name", GRADIENT_CASES)
def test_gradients_match_interpreter(compiled, name, dt):
    lib, reference = compiled
    index = [c[0] for c in CASES].index(name)
    _, x, k, options = CASES[index]
    args = inputs(x, k, dt, index)
    seed = np.random.default_rng(99).uniform(-1, 1, out_shape(x, k, options)).astype(DTYPES[dt])
    fn = symbol(name, dt) + "_check"
    want = run_function(reference, fn, [*args, seed])
    got = getattr(lib, fn)(*args, seed)
    for g, w in zip(got, want):
        assert_close(np.asarray(g), np.asarray(w), dt)


@pytest.mark.parametrize("name", GRADIENT_CASES)
def test_gradients_match_finite_differences(compiled, name):
    """The compiled f64 gradient of <seed, conv(x, k)> against central differences of the
    compiled convolution, at 12 elements of each operand."""
    lib, _ = compiled
    index = [c[0] for c in CASES].index(name)
    _, x, k, options = CASES[index]
    args = inputs(x, k, "f64", index)
    rng = np.random.default_rng(5)
    seed = rng.uniform(-1, 1, out_shape(x, k, options))
    f = getattr(lib, symbol(name, "f64"))
    grads = getattr(lib, symbol(name, "f64") + "_check")(*args, seed)
    eps = 1e-6
    for i, grad in enumerate(grads):
        for _ in range(12):
            at = tuple(int(rng.integers(0, n)) for n in args[i].shape)
            plus, minus = [a.copy() for a in args], [a.copy() for a in args]
            plus[i][at] += eps
            minus[i][at] -= eps
            numeric = (np.sum(seed * f(*plus)) - np.sum(seed * f(*minus))) / (2 * eps)
            assert abs(grad[at] - numeric) <= 1e-6 * max(1.0, abs(numeric)), (i, at)


def test_which_convolutions_are_products():
    """Floats in vectors with two output channels per group or more, or one with a long sum,
    run as products; depthwise convolutions, integers and unvectorised kernels keep the
    element loop."""
    module = parse_module(
        'module "m"\nstage raw\n\n'
        + function("f", (1, 4, 5, 5), (4, 2, 3, 3), "groups 2", "f32")
        + function("depthwise", (1, 4, 5, 5), (4, 1, 3, 3), "groups 4", "f32")
        + function("ints", (1, 4, 5, 5), (4, 4, 3, 3), "", "i32")
        + function("one", (1, 6, 8, 8), (1, 6, 5, 5), "", "f64"),
        "m.dl",
    )
    f, depthwise, ints, one = (fn.blocks[0].instructions[0] for fn in module.functions)
    assert conv_gemm.suits(one, 4)
    assert conv_gemm.suits(f, 8) and not conv_gemm.suits(f, 1)
    assert not conv_gemm.suits(depthwise, 8)
    assert not conv_gemm.suits(ints, 8)
