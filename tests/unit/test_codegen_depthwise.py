"""The CPU depthwise `convolve` (dlvm.codegen.conv_depthwise: vectors along the output row,
the borders element by element) against the interpreter in f32 and f64, for every option and
rows whose interior is shorter than a vector, a few vectors with an overlapping last one, or
several unrolled blocks; and the compiled gradients against the interpreter's and finite
differences."""

from __future__ import annotations

import math

import numpy as np
import pytest
from gradcheck import add_gradient, differentiate
from irlib import ir_library
from test_codegen_convolution import DTYPES, assert_close, function, inputs, out_shape, symbol

import dlvm
from dlvm.codegen import conv_depthwise, conv_long_sums
from dlvm.interp import run_function
from dlvm.ir import module_text, parse_module

# (name, input shape, kernel shape, options)
CASES = [
    ("dw-3x3-pad", (2, 6, 9, 20), (6, 1, 3, 3), "padding (1, 1), (1, 1) groups 6"),
    ("dw-unrolled", (1, 3, 5, 150), (3, 1, 3, 3), "padding (1, 1), (1, 1) groups 3"),
    ("dw-stride-2", (2, 4, 11, 40), (4, 1, 3, 3), "strides 2, 2 padding (1, 1), (1, 1) groups 4"),
    ("dw-stride-3", (1, 2, 10, 100), (2, 1, 3, 3), "strides 3, 3 padding (1, 1), (1, 1) groups 2"),
    ("dw-stride-5", (1, 2, 9, 90), (2, 1, 3, 3), "strides 5, 5 padding (1, 1), (1, 1) groups 2"),
    ("dw-5x5", (2, 3, 12, 37), (3, 1, 5, 5), "padding (2, 2), (2, 2) groups 3"),
    (
        "dw-dilation-2",
        (1, 4, 12, 45),
        (4, 1, 3, 3),
        "padding (2, 2), (2, 2) rightDilation 2, 2 groups 4",
    ),
    ("dw-multiplier-2", (2, 3, 8, 21), (6, 1, 3, 3), "padding (1, 1), (1, 1) groups 3"),
    ("dw-odd-7x5", (2, 5, 7, 5), (5, 1, 3, 3), "padding (1, 1), (1, 1) groups 5"),
    ("dw-batch-1", (1, 8, 16, 33), (8, 1, 3, 3), "padding (1, 1), (1, 1) groups 8"),
    ("dw-uneven-padding", (2, 2, 9, 40), (2, 1, 4, 3), "padding (0, 3), (2, 0) groups 2"),
    ("dw-no-padding", (1, 2, 6, 50), (2, 1, 3, 3), "groups 2"),
    ("dw-one-channel", (3, 1, 6, 30), (1, 1, 2, 2), "padding (1, 1), (1, 1)"),
    ("dw-1-D", (2, 3, 50), (3, 1, 4), "padding (1, 2) groups 3"),
    ("dw-3-D", (1, 2, 4, 5, 40), (2, 1, 2, 3, 3), "padding (1, 0), (1, 1), (1, 1) groups 2"),
    ("dw-unused-channel", (1, 5, 6, 30), (4, 1, 3, 3), "padding (1, 1), (1, 1) groups 4"),
]
GRADIENT_CASES = ["dw-3x3-pad", "dw-stride-2", "dw-multiplier-2", "dw-dilation-2", "dw-odd-7x5"]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """One library: every case in both types, and the seedable gradients of GRADIENT_CASES."""
    parts = ['module "dw"\nstage raw\n']
    for name, x, k, options in CASES:
        for dt in DTYPES:
            parts.append(function(symbol(name, dt), x, k, options, dt))
    module = parse_module("\n".join(parts), "dw.dl")
    for name in GRADIENT_CASES:
        for dt in DTYPES:
            add_gradient(module, symbol(name, dt))
    differentiate(module)
    text = module_text(module)
    path = ir_library(text, "dw", tmp_path_factory.mktemp("dw"))
    with dlvm.load(path) as lib:
        yield lib, parse_module(text, "dw.dl")


@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("index", range(len(CASES)), ids=[c[0] for c in CASES])
def test_depthwise_matches_interpreter(compiled, index, dt):
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


def test_which_convolutions_are_depthwise():
    """One input channel per group, at most MAX_MULTIPLIER output channels per group and
    MAX_TAPS taps, no left dilation, floats in vectors."""
    module = parse_module(
        'module "m"\nstage raw\n\n'
        + function("dw", (1, 4, 5, 5), (8, 1, 3, 3), "groups 4", "f32")
        + function("many", (1, 2, 5, 5), (12, 1, 3, 3), "groups 2", "f32")
        + function("dense", (1, 4, 5, 5), (4, 2, 3, 3), "groups 2", "f32")
        + function("ld", (1, 4, 5, 5), (4, 1, 3, 3), "leftDilation 2, 2 groups 4", "f32")
        + function("taps", (1, 4, 12, 12), (4, 1, 9, 9), "groups 4", "f32")
        + function("ints", (1, 4, 5, 5), (4, 1, 3, 3), "groups 4", "i32"),
        "m.dl",
    )
    dw, many, dense, ld, taps, ints = (fn.blocks[0].instructions[0] for fn in module.functions)
    assert conv_depthwise.suits(dw, 8) and not conv_depthwise.suits(dw, 1)
    for other in (many, dense, ld, taps, ints):
        assert not conv_depthwise.suits(other, 8)


# 1x1 kernels' adjoints: a batched product (adjoints_window._pointwise_kernel_adjoint).
POINTWISE_CASES = [
    ("pw-1x1", (3, 5, 6, 7), (4, 5, 1, 1), "", (1, 1)),
    ("pw-stride-2-odd", (2, 3, 7, 9), (4, 3, 1, 1), "strides 2, 2", (2, 2)),
    ("pw-stride-3-1-D", (2, 3, 10), (2, 3, 1), "strides 3", (3,)),
    ("pw-dilated-kernel", (1, 2, 5, 5), (3, 2, 1, 1), "strides 1, 2 rightDilation 2, 2", (1, 2)),
]


def kernel_gradient(x: np.ndarray, seed: np.ndarray, strides: tuple[int, ...]) -> np.ndarray:
    """dk[o, c] = Σn Σp seed[n, o, p] · x[n, c, p·stride], in float64."""
    picked = x[(slice(None), slice(None), *(slice(None, None, s) for s in strides))]
    picked = picked[(slice(None), slice(None), *(slice(0, n) for n in seed.shape[2:]))]
    flat = picked.reshape(*picked.shape[:2], -1).astype(np.float64)
    dk = np.einsum("nop,ncp->oc", seed.reshape(*seed.shape[:2], -1).astype(np.float64), flat)
    return dk.reshape(dk.shape + (1,) * (x.ndim - 2))


@pytest.fixture(scope="module")
def pointwise(tmp_path_factory):
    parts = ['module "pw"\nstage raw\n']
    for name, x, k, options, _ in POINTWISE_CASES:
        for dt in DTYPES:
            parts.append(function(symbol(name, dt), x, k, options, dt))
    module = parse_module("\n".join(parts), "pw.dl")
    for name, *_ in POINTWISE_CASES:
        for dt in DTYPES:
            add_gradient(module, symbol(name, dt), wrt=(1,))
    differentiate(module)
    text = module_text(module)
    path = ir_library(text, "pw", tmp_path_factory.mktemp("pw"))
    with dlvm.load(path) as lib:
        yield lib, parse_module(text, "pw.dl")


@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("index", range(len(POINTWISE_CASES)), ids=[c[0] for c in POINTWISE_CASES])
def test_pointwise_kernel_gradient(pointwise, index, dt):
    """Compiled and interpreted against the sum written out in NumPy; and no convolution."""
    lib, reference = pointwise
    name, x, k, options, strides = POINTWISE_CASES[index]
    args = inputs(x, k, dt, index)
    seed = np.random.default_rng(7).uniform(-1, 1, out_shape(x, k, options)).astype(DTYPES[dt])
    fn = symbol(name, dt) + "_check"
    want = kernel_gradient(args[0], seed, strides)
    (interpreted,) = run_function(reference, fn, [*args, seed])
    got = getattr(lib, fn)(*args, seed)  # a result of one tensor comes back bare
    assert_close(np.asarray(interpreted), want.astype(DTYPES[dt]), dt)
    assert_close(np.asarray(got), want.astype(DTYPES[dt]), dt)
    body = reference.function_named(fn).blocks[0].instructions
    assert [i.opcode for i in body].count("convolve") == 1  # the primal's only


# Depthwise kernels' adjoints: each image's channel a group of its own, summed by a reduce
# (adjoints_window._depthwise_kernel_adjoint), the convolution by conv_long_sums's loop.
KERNEL_GRADIENT_CASES = [
    ("kg-3x3-pad", (3, 4, 16, 16), (4, 1, 3, 3), "padding (1, 1), (1, 1) groups 4"),
    ("kg-stride-2", (2, 3, 17, 23), (3, 1, 3, 3), "strides 2, 2 padding (1, 1), (1, 1) groups 3"),
    ("kg-stride-5", (1, 2, 30, 61), (2, 1, 3, 3), "strides 5, 5 padding (1, 1), (1, 1) groups 2"),
    ("kg-5x5", (2, 3, 12, 29), (3, 1, 5, 5), "padding (2, 2), (2, 2) groups 3"),
    (
        "kg-dilation-2",
        (2, 2, 13, 19),
        (2, 1, 3, 3),
        "padding (2, 2), (2, 2) rightDilation 2, 2 groups 2",
    ),
    ("kg-multiplier-2", (2, 3, 11, 21), (6, 1, 3, 3), "padding (1, 1), (1, 1) groups 3"),
    ("kg-odd-no-pad", (3, 2, 13, 11), (2, 1, 3, 3), "groups 2"),
    ("kg-uneven-padding", (2, 2, 15, 18), (2, 1, 4, 3), "padding (0, 3), (2, 0) groups 2"),
    ("kg-batch-1", (1, 5, 14, 37), (5, 1, 3, 3), "padding (1, 1), (1, 1) groups 5"),
    ("kg-unused-channel", (2, 5, 12, 12), (4, 1, 3, 3), "padding (1, 1), (1, 1) groups 4"),
    ("kg-1-D", (3, 2, 90), (2, 1, 4), "padding (1, 2) groups 2"),
    ("kg-3-D", (2, 2, 5, 6, 20), (2, 1, 2, 3, 3), "padding (1, 0), (1, 1), (1, 1) groups 2"),
]


@pytest.fixture(scope="module")
def kernel_gradients(tmp_path_factory):
    parts = ['module "kg"\nstage raw\n']
    for name, x, k, options in KERNEL_GRADIENT_CASES:
        for dt in DTYPES:
            parts.append(function(symbol(name, dt), x, k, options, dt))
    module = parse_module("\n".join(parts), "kg.dl")
    for name, *_ in KERNEL_GRADIENT_CASES:
        for dt in DTYPES:
            add_gradient(module, symbol(name, dt), wrt=(1,))
    differentiate(module)
    text = module_text(module)
    path = ir_library(text, "kg", tmp_path_factory.mktemp("kg"))
    with dlvm.load(path) as lib:
        yield lib, parse_module(text, "kg.dl")


def kernel_gradient_case(index: int, dt: str) -> tuple[str, list[np.ndarray], np.ndarray]:
    name, x, k, options = KERNEL_GRADIENT_CASES[index]
    args = inputs(x, k, dt, index)
    seed = np.random.default_rng(11).uniform(-1, 1, out_shape(x, k, options)).astype(DTYPES[dt])
    return symbol(name, dt), args, seed


@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize(
    "index", range(len(KERNEL_GRADIENT_CASES)), ids=[c[0] for c in KERNEL_GRADIENT_CASES]
)
def test_depthwise_kernel_gradient_matches_interpreter(kernel_gradients, index, dt):
    """Compiled against interpreted; the adjoint's convolution has every image's channel as a
    group (batch and channels not exchanged) and suits the long-sums loop."""
    lib, reference = kernel_gradients
    fn, args, seed = kernel_gradient_case(index, dt)
    (want,) = run_function(reference, fn + "_check", [*args, seed])
    assert_close(np.asarray(lib_call(lib, fn + "_check", args, seed)), np.asarray(want), dt)
    body = reference.function_named(fn + "_check").blocks[0].instructions
    adjoint = [i for i in body if i.opcode == "convolve"][1]
    kernel, out = adjoint.operands[1].type.shape, adjoint.type.shape
    assert out[:2] == (1, args[0].shape[0] * args[1].shape[0])
    assert kernel[1] == 1 and math.prod(kernel[2:]) > conv_depthwise.MAX_TAPS
    assert math.prod(out[2:]) <= conv_long_sums.MAX_OUTPUTS


def lib_call(lib, fn: str, args: list[np.ndarray], seed: np.ndarray) -> np.ndarray:
    return np.asarray(getattr(lib, fn)(*args, seed))  # a result of one tensor comes back bare


@pytest.mark.parametrize(
    "index", range(len(KERNEL_GRADIENT_CASES)), ids=[c[0] for c in KERNEL_GRADIENT_CASES]
)
def test_depthwise_kernel_gradient_matches_finite_differences(kernel_gradients, index):
    """The compiled f64 kernel gradient of <seed, conv(x, k)> against central differences of
    the compiled convolution, at 8 elements of the kernel."""
    lib, _ = kernel_gradients
    fn, args, seed = kernel_gradient_case(index, "f64")
    grad = lib_call(lib, fn + "_check", args, seed)
    f = getattr(lib, fn)
    rng = np.random.default_rng(3)
    eps = 1e-6
    for _ in range(8):
        at = tuple(int(rng.integers(0, n)) for n in args[1].shape)
        plus, minus = args[1].copy(), args[1].copy()
        plus[at] += eps
        minus[at] -= eps
        numeric = (np.sum(seed * f(args[0], plus)) - np.sum(seed * f(args[0], minus))) / (2 * eps)
        assert abs(grad[at] - numeric) <= 1e-6 * max(1.0, abs(numeric)), at


def test_which_convolutions_have_long_sums():
    """One input channel per group, few outputs (at most MAX_OUTPUTS), more taps than the
    depthwise loop unrolls, no left dilation, floats in vectors."""
    module = parse_module(
        'module "m"\nstage raw\n\n'
        + function("long", (1, 4, 20, 20), (4, 1, 18, 18), "groups 4", "f32")
        + function("short", (1, 4, 10, 10), (4, 1, 8, 8), "groups 4", "f32")
        + function("many", (1, 4, 30, 30), (4, 1, 20, 20), "groups 4", "f32")
        + function("dense", (1, 4, 20, 20), (2, 2, 18, 18), "groups 2", "f32")
        + function("ld", (1, 4, 20, 20), (4, 1, 18, 18), "leftDilation 2, 2 groups 4", "f32")
        + function("ints", (1, 4, 20, 20), (4, 1, 18, 18), "groups 4", "i32"),
        "m.dl",
    )
    long, short, many, dense, ld, ints = (fn.blocks[0].instructions[0] for fn in module.functions)
    assert conv_long_sums.suits(long, 8) and not conv_long_sums.suits(long, 1)
    for other in (short, many, dense, ld, ints):
        assert not conv_long_sums.suits(other, 8)
