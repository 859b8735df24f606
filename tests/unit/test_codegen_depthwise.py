"""The CPU depthwise `convolve` (dlvm.codegen.conv_depthwise: vectors along the output row,
the borders element by element) against the interpreter in f32 and f64, for every option and
rows whose interior is shorter than a vector, a few vectors with an overlapping last one, or
several unrolled blocks; and the compiled gradients against the interpreter's and finite
differences."""

from __future__ import annotations

import math

import numpy as np
import pytest
from convlib import (
    DTYPES,
    Case,
    assert_close,
    check_finite_differences,
    check_forward,
    check_gradients,
    conv_library,
    function,
    inputs,
    out_shape,
    symbol,
)

from dlvm.codegen import conv_depthwise, conv_long_sums
from dlvm.interp import run_function
from dlvm.ir import parse_module

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
    with conv_library("dw", CASES, GRADIENT_CASES, tmp_path_factory.mktemp("dw")) as built:
        yield built


def case_named(name: str) -> Case:
    return next(c for c in CASES if c[0] == name)


@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("index", range(len(CASES)), ids=[c[0] for c in CASES])
def test_depthwise_matches_interpreter(compiled, index, dt):
    check_forward(compiled, CASES[index], dt, index)


@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("name", GRADIENT_CASES)
def test_gradients_match_interpreter(compiled, name, dt):
    check_gradients(compiled, case_named(name), dt, CASES.index(case_named(name)), 99)


@pytest.mark.parametrize("name", GRADIENT_CASES)
def test_gradients_match_finite_differences(compiled, name):
    check_finite_differences(compiled, case_named(name), CASES.index(case_named(name)), 5)


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
    cases = [c[:4] for c in POINTWISE_CASES]
    names = [c[0] for c in cases]
    with conv_library("pw", cases, names, tmp_path_factory.mktemp("pw"), wrt=(1,)) as built:
        yield built


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
    names = [c[0] for c in KERNEL_GRADIENT_CASES]
    directory = tmp_path_factory.mktemp("kg")
    with conv_library("kg", KERNEL_GRADIENT_CASES, names, directory, wrt=(1,)) as built:
        yield built


@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize(
    "index", range(len(KERNEL_GRADIENT_CASES)), ids=[c[0] for c in KERNEL_GRADIENT_CASES]
)
def test_depthwise_kernel_gradient_matches_interpreter(kernel_gradients, index, dt):
    """Compiled against interpreted; the adjoint's convolution has every image's channel as a
    group (batch and channels not exchanged) and suits the long-sums loop."""
    case = KERNEL_GRADIENT_CASES[index]
    check_gradients(kernel_gradients, case, dt, index, 11)
    _, x, k, _ = case
    body = kernel_gradients[1].function_named(symbol(case[0], dt) + "_check").blocks[0]
    adjoint = [i for i in body.instructions if i.opcode == "convolve"][1]
    kernel, out = adjoint.operands[1].type.shape, adjoint.type.shape
    assert out[:2] == (1, x[0] * k[0])
    assert kernel[1] == 1 and math.prod(kernel[2:]) > conv_depthwise.MAX_TAPS
    assert math.prod(out[2:]) <= conv_long_sums.MAX_OUTPUTS


@pytest.mark.parametrize(
    "index", range(len(KERNEL_GRADIENT_CASES)), ids=[c[0] for c in KERNEL_GRADIENT_CASES]
)
def test_depthwise_kernel_gradient_matches_finite_differences(kernel_gradients, index):
    check_finite_differences(
        kernel_gradients, KERNEL_GRADIENT_CASES[index], index, 11, wrt=(1,), points=8
    )


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
