"""Convolutions whose images have few output positions fold several images into the columns of
one product (dlvm.codegen.conv_folded): compiled against the interpreter in f32 and f64 for
shapes that leave partial panels, strips and tiles, the kernel gradients (convolutions of 9
and of 1 output position) end to end against the interpreter and finite differences, and
which convolutions take the folded path."""

from __future__ import annotations

import pytest
from convlib import (
    DTYPES,
    check_finite_differences,
    check_forward,
    check_gradients,
    conv_library,
    function,
    symbol,
)

from dlvm.codegen import conv_folded
from dlvm.ir import parse_module
from dlvm.ir.values import Instruction, Module

# (name, input shape, kernel shape, options): convolutions that fold their images.
CASES = [
    # A 3×3 kernel's gradient as _kernel_adjoint makes it: 29 images of 9 positions, 28 a
    # panel (252 columns, a last strip 12 wide), then a panel of 1 image; 7 rows: 6 + 1.
    ("kgrad-3x3", (29, 16, 8, 8), (7, 16, 8, 8), "padding (1, 1), (1, 1)"),
    # The gradient of a stride-2 kernel: the adjoint dilated by 2.
    ("kgrad-stride-2", (6, 3, 9, 9), (5, 3, 5, 5), "padding (1, 1), (1, 1) rightDilation 2, 2"),
    # A 1×1 kernel's gradient: 300 images of 1 position, panels of 256 and 44 columns.
    ("kgrad-1x1", (300, 5, 6, 7), (9, 5, 6, 7), ""),
    # Small feature maps with groups: 16 positions, 2 rows per group (a tile 4 vectors wide).
    ("groups-2", (5, 6, 4, 4), (4, 3, 3, 3), "padding (1, 1), (1, 1) groups 2"),
    # 3 × 2 positions, 13 channels × 9 taps (depth over slices), 3 rows.
    ("odd-sizes", (11, 13, 5, 3), (3, 13, 3, 3), "padding (0, 0), (0, 1)"),
    ("two-images", (2, 4, 5, 5), (6, 4, 3, 3), ""),
]
# Primal convolutions whose kernel gradients fold: (name, input, kernel, options).
PRIMALS = [
    ("p-3x3", (16, 6, 8, 8), (5, 6, 3, 3), "padding (1, 1), (1, 1)"),
    ("p-stride-2", (4, 3, 13, 13), (6, 3, 3, 3), "strides 2, 2 padding (1, 1), (1, 1)"),
    ("p-1x1", (3, 7, 8, 5), (4, 7, 1, 1), ""),
    ("p-groups-2", (4, 6, 7, 7), (8, 3, 3, 3), "padding (1, 1), (1, 1) groups 2"),
]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """One library: every case in both types and the seedable gradients of PRIMALS."""
    names = [p[0] for p in PRIMALS]
    with conv_library("fold", CASES + PRIMALS, names, tmp_path_factory.mktemp("fold")) as built:
        yield built


def convolutions(module: Module, fn: str) -> list[Instruction]:
    f = module.function_named(fn)
    assert f is not None, fn
    return [i for blk in f.blocks for i in blk.instructions if i.opcode == "convolve"]


LANES = {"f32": 8, "f64": 4}  # AVX2


@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("index", range(len(CASES)), ids=[c[0] for c in CASES])
def test_folded_convolve_matches_interpreter(compiled, index, dt):
    check_forward(compiled, CASES[index], dt, index)


@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("index", range(len(PRIMALS)), ids=[p[0] for p in PRIMALS])
def test_folded_gradients_match_interpreter(compiled, index, dt):
    assert len(check_gradients(compiled, PRIMALS[index], dt, 7, 3)) == 2


@pytest.mark.parametrize("index", range(len(PRIMALS)), ids=[p[0] for p in PRIMALS])
def test_folded_kernel_gradients_match_finite_differences(compiled, index):
    """Both gradients, the kernel's the folded convolution, at 12 elements each."""
    check_finite_differences(compiled, PRIMALS[index], 7, 10)


@pytest.mark.parametrize("dt", list(DTYPES))
def test_which_convolutions_fold(compiled, dt):
    """The cases and the primals' kernel gradients fold; the primals themselves and batches
    of one image do not."""
    _, module = compiled
    lanes = LANES[dt]
    for name, *_ in CASES:
        (conv,) = convolutions(module, symbol(name, dt))
        assert conv_folded.folds(conv, lanes), name
    for name, *_ in PRIMALS:
        (primal,) = convolutions(module, symbol(name, dt))
        assert not conv_folded.folds(primal, lanes), name
        gradient = convolutions(module, symbol(name, dt) + "_check")
        taps = primal.operands[1].type.shape[2:]  # type: ignore[attr-defined]
        kernel_grads = [c for c in gradient if c.type.shape[2:] == taps]  # type: ignore[attr-defined]
        if all(t == 1 for t in taps):  # a 1x1 kernel's gradient is a batched dot, not a convolve
            assert not kernel_grads, name
            continue
        assert kernel_grads and all(conv_folded.folds(c, lanes) for c in kernel_grads), name
    one = parse_module(
        'module "m"\nstage raw\n\n' + function("one", (1, 4, 8, 8), (4, 4, 8, 8), "", dt), "m.dl"
    )
    assert not conv_folded.folds(one.functions[0].blocks[0].instructions[0], lanes)
