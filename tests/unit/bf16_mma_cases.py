"""The bf16 matrix products that tests/unit/test_cuda_bf16.py runs on the CUDA emulator and
tests/gpu/test_gpu_bf16.py on a GPU, their arguments, and the bound their results keep to
against the interpreter's.

The bound (docs/ir.md, "bf16"): the interpreter sums the exact f32 products in NumPy's order,
the kernel in the tensor cores' (on the emulator, 16-deep slices, in order), and both round
once. So an element differs by at most one bf16 ulp of the result, plus each side's error of an
f32 sum of K terms (K·2^-23·Σ|a||b| each, rounding to nearest or truncating as tensor cores
may: it shows only where the terms cancel); an epilogue computed from it (bias, relu, tanh:
none steeper than 1) adds one bf16 ulp for each of its two roundings. On the emulator more
than 99.9 % of the elements equal the interpreter's bit for bit, the rest one ulp apart."""

from __future__ import annotations

import ml_dtypes
import numpy as np

BF16 = ml_dtypes.bfloat16

PRODUCTS = """module "bf16mma"
stage optimizable

func @product: (<70 x 40 x bf16>, <40 x 130 x bf16>) -> <70 x 130 x bf16> {
'entry(%a: <70 x 40 x bf16>, %b: <40 x 130 x bf16>):
    %r = dot %a: <70 x 40 x bf16>, %b: <40 x 130 x bf16>
    return %r: <70 x 130 x bf16>
}

func @long: (<96 x 300 x bf16>, <300 x 80 x bf16>) -> <96 x 80 x bf16> {
'entry(%a: <96 x 300 x bf16>, %b: <300 x 80 x bf16>):
    %r = dot %a: <96 x 300 x bf16>, %b: <300 x 80 x bf16>
    return %r: <96 x 80 x bf16>
}

func @batched: (<2 x 3 x 65 x 19 x bf16>, <2 x 3 x 19 x 66 x bf16>) -> <2 x 3 x 65 x 66 x bf16> {
'entry(%a: <2 x 3 x 65 x 19 x bf16>, %b: <2 x 3 x 19 x 66 x bf16>):
    %r = dot %a: <2 x 3 x 65 x 19 x bf16>, %b: <2 x 3 x 19 x 66 x bf16>
    return %r: <2 x 3 x 65 x 66 x bf16>
}

func @linear_relu: (<67 x 50 x bf16>, <129 x 50 x bf16>, <1 x 129 x bf16>) -> <67 x 129 x bf16> {
'entry(%x: <67 x 50 x bf16>, %w: <129 x 50 x bf16>, %c: <1 x 129 x bf16>):
    %t = transpose %w: <129 x 50 x bf16>
    %d = dot %x: <67 x 50 x bf16>, %t: <50 x 129 x bf16>
    %s = add %d: <67 x 129 x bf16>, %c: <1 x 129 x bf16>
    %r = max %s: <67 x 129 x bf16>, 0: bf16
    return %r: <67 x 129 x bf16>
}

func @th: (<2 x 64 x 9 x bf16>, <2 x 9 x 80 x bf16>, <2 x 1 x 80 x bf16>) -> <2 x 64 x 80 x bf16> {
'entry(%a: <2 x 64 x 9 x bf16>, %b: <2 x 9 x 80 x bf16>, %c: <2 x 1 x 80 x bf16>):
    %d = dot %a: <2 x 64 x 9 x bf16>, %b: <2 x 9 x 80 x bf16>
    %s = add %d: <2 x 64 x 80 x bf16>, %c: <2 x 1 x 80 x bf16>
    %r = tanh %s: <2 x 64 x 80 x bf16>
    return %r: <2 x 64 x 80 x bf16>
}

func @small: (<8 x 40 x bf16>, <40 x 24 x bf16>) -> <8 x 24 x bf16> {
'entry(%a: <8 x 40 x bf16>, %b: <40 x 24 x bf16>):
    %r = dot %a: <8 x 40 x bf16>, %b: <40 x 24 x bf16>
    return %r: <8 x 24 x bf16>
}
"""

# Each function's arguments' shapes, and whether its product has an epilogue.
SHAPES = {
    "product": ([(70, 40), (40, 130)], False),
    "long": ([(96, 300), (300, 80)], False),
    "batched": ([(2, 3, 65, 19), (2, 3, 19, 66)], False),
    "linear_relu": ([(67, 50), (129, 50), (1, 129)], True),
    "th": ([(2, 64, 9), (2, 9, 80), (2, 1, 80)], True),  # tanh of a product plus a bias
    "small": ([(8, 40), (40, 24)], False),
}
ON_TENSOR_CORES = ["product", "long", "batched", "linear_relu", "th"]


def inputs(name: str, seed: int) -> list[np.ndarray]:
    """Random bf16 arguments of `name`, in [-2, 2)."""
    rng = np.random.default_rng(seed)
    return [rng.uniform(-2, 2, shape).astype(BF16) for shape in SHAPES[name][0]]


def bf16_ulp(x: np.ndarray) -> np.ndarray:
    """The spacing of bf16 numbers at |x| (8 significant bits; subnormal spacing below)."""
    e = np.floor(np.log2(np.maximum(np.abs(x.astype(np.float64)), 2.0**-126)))
    return 2.0 ** (e - 7)


def bound(name: str, args: list[np.ndarray], got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """The module docstring's bound on |got - want|, element by element."""
    x, y = (a.astype(np.float64) for a in args[:2])
    if name == "linear_relu":
        y = y.T
    k = x.shape[-1]
    ordering = 2 * k * 2.0**-23 * (np.abs(x) @ np.abs(y))
    largest = np.maximum(np.abs(got.astype(np.float64)), np.abs(want.astype(np.float64)))
    exact = x @ y
    if not SHAPES[name][1]:
        return bf16_ulp(np.maximum(largest, np.abs(exact))) + ordering
    summed = np.abs(exact + args[2].astype(np.float64))
    return bf16_ulp(np.abs(exact)) + ordering + bf16_ulp(summed) + bf16_ulp(largest)


def check_within_bound(
    name: str, args: list[np.ndarray], got: np.ndarray, want: np.ndarray, equal: float = 0.97
) -> None:
    """got within the bound of want, and at least the fraction `equal` of its elements equal
    to want's bit for bit (the sums are f32's: a bf16 accumulator would be many ulps off)."""
    assert got.dtype == want.dtype == np.dtype(BF16) and got.shape == want.shape
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    limit = bound(name, args, got, want)
    worst = np.unravel_index(np.argmax(diff - limit), diff.shape)
    assert np.all(diff <= limit), (name, worst, got[worst], want[worst], limit[worst])
    assert np.mean(got == want) >= equal, name
