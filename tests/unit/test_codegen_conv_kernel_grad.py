"""Convolutions whose kernel is longer than their output run as a product over (image, tap)
rows that reads each padded input plane in place (dlvm.codegen.conv_kernel_grad), and kernel
gradients read the input and the output's gradient in place, batch and channels exchanged by
strided views (compute generation): compiled against the interpreter in f32 and f64 for shapes
that leave partial tiles, strips, slices and transpose blocks, several passes of images, and
primal convolutions whose kernel gradients take this path (padding, odd sizes, dilation) or
another (stride 2, groups), against the interpreter and finite differences."""

from __future__ import annotations

import pytest
from convlib import (
    DTYPES,
    check_finite_differences,
    check_forward,
    check_gradients,
    conv_library,
    symbol,
)

from dlvm.codegen import conv_gemm, conv_kernel_grad
from dlvm.codegen.build import LibraryBuild
from dlvm.codegen.spec import module_spec
from dlvm.ir import parse_module
from dlvm.ir.values import Argument, Instruction, Module

# (name, input shape, kernel shape, options): kernels longer than the output.
CASES = [
    # 7 images × 9 taps = 63 rows (4 tiles of 14 and 7 left), 6 outputs (a partial strip),
    # 99 - 9 - 8 = 83 steps of the padded grid per channel (a partial transpose block).
    ("kg-3x3-pad", (7, 5, 9, 9), (6, 5, 9, 9), "padding (1, 1), (1, 1)"),
    # Uneven padding, output 4 × 3, kernel 5 × 5: a grid 8 wide whose last 3 columns are zero.
    ("kg-odd", (3, 4, 7, 6), (5, 4, 5, 5), "padding (1, 0), (0, 1)"),
    # Taps 2 apart (a dilated primal's kernel gradient).
    ("kg-strides", (4, 3, 10, 10), (5, 3, 10, 10), "strides 2, 2 padding (2, 2), (2, 2)"),
    # One and three spatial axes; 33 outputs: two whole strips and one column.
    ("kg-1d", (6, 3, 20), (33, 3, 17), ""),
    ("kg-3d", (2, 3, 5, 6, 7), (4, 3, 4, 4, 6), "padding (1, 1), (1, 1), (1, 1)"),
    # Long sums: 700 steps per channel, three slices.
    ("kg-long", (3, 2, 30, 30), (4, 2, 26, 27), ""),
]
# Primal convolutions: (name, input, kernel, options), their kernel gradients by this path
# unless the name says otherwise.
PRIMALS = [
    ("p-3x3", (5, 6, 9, 9), (7, 6, 3, 3), "padding (1, 1), (1, 1)"),
    ("p-odd", (3, 5, 7, 6), (4, 5, 3, 2), "padding (1, 0), (0, 1)"),
    ("p-dilated", (3, 4, 11, 10), (5, 4, 3, 3), "padding (2, 2), (2, 2) rightDilation 2, 2"),
    ("p-stride-2-other", (4, 3, 11, 11), (6, 3, 3, 3), "strides 2, 2 padding (1, 1), (1, 1)"),
    ("p-groups-2-other", (4, 6, 7, 7), (8, 3, 3, 3), "padding (1, 1), (1, 1) groups 2"),
]
LANES = {"f32": 16, "f64": 8}  # AVX-512, where the tests run


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """One library: every case in both types and the seedable gradients of PRIMALS, built
    with passes of at most 2 images (images in several passes, a last one short)."""
    names = [p[0] for p in PRIMALS]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(conv_kernel_grad, "PASS_BYTES", 1)
        with conv_library("kgrad", CASES + PRIMALS, names, tmp_path_factory.mktemp("kg")) as built:
            yield built


@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("index", range(len(CASES)), ids=[c[0] for c in CASES])
def test_long_kernel_convolve_matches_interpreter(compiled, index, dt):
    check_forward(compiled, CASES[index], dt, index)


@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("index", range(len(PRIMALS)), ids=[p[0] for p in PRIMALS])
def test_gradients_match_interpreter(compiled, index, dt):
    assert len(check_gradients(compiled, PRIMALS[index], dt, 5, 3)) == 2


@pytest.mark.parametrize("index", range(len(PRIMALS)), ids=[p[0] for p in PRIMALS])
def test_gradients_match_finite_differences(compiled, index):
    check_finite_differences(compiled, PRIMALS[index], 5, 8)


def _compute_module(module: Module, tmp_path) -> Module:
    """The module as the library build schedules it (kernels outlined)."""
    return LibraryBuild(module, module_spec(module, "test"), tmp_path / "m.so").module


def _longer_kernel(conv: Instruction) -> bool:
    out, kernel = conv.type, conv.operands[1].type
    return out.shape[-1] < kernel.shape[-1]  # type: ignore[attr-defined]


def _kernel_gradient(module: Module, name: str) -> Instruction:
    """The convolve of the kernel gradient in the [compute] functions of @name's gradient."""
    found = [
        inst
        for fn in module.functions
        if fn.compute and fn.name.startswith(name + "_check")
        for inst in fn.blocks[0].instructions
        if inst.opcode == "convolve" and _longer_kernel(inst)
    ]
    assert len(found) == 1, name
    return found[0]


@pytest.mark.parametrize("dt", list(DTYPES))
def test_which_kernel_gradients_read_in_place(compiled, dt, tmp_path):
    """The primals' kernel gradients read both operands where they lie (views of the
    kernel's arguments, no transposed copies), and run as this product, except a stride-2
    primal's (ConvGemm, still in place) and a grouped one's (its input transposed first);
    the cases run as this product."""
    _, module = compiled
    lanes = LANES[dt]
    for name, *_ in CASES:
        fn = module.function_named(symbol(name, dt))
        assert fn is not None
        (conv,) = [i for i in fn.blocks[0].instructions if i.opcode == "convolve"]
        assert conv_kernel_grad.suits(conv, lanes), name
    scheduled = _compute_module(module, tmp_path)
    for name, *_ in PRIMALS:
        conv = _kernel_gradient(scheduled, symbol(name, dt))
        in_place = [conv_gemm.in_memory(v) for v in conv.operands]
        if name.endswith("groups-2-other"):  # groups × batch is no one stride of x
            assert isinstance(conv.operands[0], Argument), name
            assert in_place[1] is not None and isinstance(conv.operands[1], Instruction), name
            assert not conv_kernel_grad.suits(conv, lanes), name
            continue
        assert all(isinstance(v, Instruction) for v in conv.operands), name
        assert all(found is not None for found in in_place), name
        assert conv_gemm.suits(conv, lanes), name
        assert conv_kernel_grad.suits(conv, lanes) != name.endswith("-other"), name


def test_a_convolution_as_long_as_its_output_is_not_this_product():
    """A forward convolution (kernel shorter than its output) keeps ConvGemm."""
    text = (
        'module "m"\nstage raw\n\n'
        "func @f: (<2 x 3 x 8 x 8 x f32>, <4 x 3 x 3 x 3 x f32>) -> <2 x 4 x 6 x 6 x f32> {\n"
        "'entry(%x: <2 x 3 x 8 x 8 x f32>, %k: <4 x 3 x 3 x 3 x f32>):\n"
        "    %r = convolve %x: <2 x 3 x 8 x 8 x f32> kernel %k: <4 x 3 x 3 x 3 x f32>\n"
        "    return %r: <2 x 4 x 6 x 6 x f32>\n}\n"
    )
    conv = parse_module(text, "m.dl").functions[0].blocks[0].instructions[0]
    assert conv_gemm.suits(conv, 16) and not conv_kernel_grad.suits(conv, 16)


def test_a_kernel_of_one_column_still_runs_as_a_product():
    """One input channel and a 1×1 kernel: its columns are one run of one element."""
    text = (
        'module "m"\nstage raw\n\n'
        "func @f: (<2 x 1 x 8 x 8 x f32>, <4 x 1 x 1 x 1 x f32>) -> <2 x 4 x 8 x 8 x f32> {\n"
        "'entry(%x: <2 x 1 x 8 x 8 x f32>, %k: <4 x 1 x 1 x 1 x f32>):\n"
        "    %r = convolve %x: <2 x 1 x 8 x 8 x f32> kernel %k: <4 x 1 x 1 x 1 x f32>\n"
        "    return %r: <2 x 4 x 8 x 8 x f32>\n}\n"
    )
    conv = parse_module(text, "m.dl").functions[0].blocks[0].instructions[0]
    assert conv_gemm.suits(conv, 16)
