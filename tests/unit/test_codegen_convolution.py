"""The CPU `convolve` (matrix products on the micro-kernel, dlvm.codegen.conv_gemm, and the
element loop it keeps for integers) against the interpreter in f32 and f64, for
every option and sizes that leave partial tiles, strips, slices and panels; and the compiled
gradients (themselves convolutions) against the interpreter's and finite differences."""

from __future__ import annotations

import pytest
from convlib import (
    DTYPES,
    Case,
    check_finite_differences,
    check_forward,
    check_gradients,
    conv_library,
    function,
)

from dlvm.codegen import conv_gemm
from dlvm.ir import parse_module

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


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """One library: every case in both types, and the seedable gradients of GRADIENT_CASES."""
    with conv_library("conv", CASES, GRADIENT_CASES, tmp_path_factory.mktemp("conv")) as built:
        yield built


def case_named(name: str) -> Case:
    return next(c for c in CASES if c[0] == name)


@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("index", range(len(CASES)), ids=[c[0] for c in CASES])
def test_convolve_matches_interpreter(compiled, index, dt):
    check_forward(compiled, CASES[index], dt, index)


@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("name", GRADIENT_CASES)
def test_gradients_match_interpreter(compiled, name, dt):
    check_gradients(compiled, case_named(name), dt, CASES.index(case_named(name)), 99)


@pytest.mark.parametrize("name", GRADIENT_CASES)
def test_gradients_match_finite_differences(compiled, name):
    check_finite_differences(compiled, case_named(name), CASES.index(case_named(name)), 5)


def test_which_convolutions_are_products():
    """Floats in vectors with two output channels per group or more, or one with a long sum,
    run as products; depthwise convolutions (dlvm.codegen.conv_depthwise), integers and
    unvectorised kernels do not."""
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
