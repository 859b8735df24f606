"""bf16 matrix products on tensor cores (--target cuda): mma.m16n8k16 with bf16 operands staged
in shared memory and f32 accumulators, the product rounded to bf16 once (dlvm.codegen.cuda_mma).
Their values on the CPU emulator of the intrinsic (cuda_emulator.py) against the interpreter,
for shapes that are not multiples of the tile, batch prefixes, a transposed operand and
epilogues; their PTX through ptxas for sm_80 and sm_90; which products stay bf16 in a build for
CUDA; and the CPU half of such a library, which sums those products in f32 too.

The bound (docs/ir.md, "bf16"): the interpreter sums the exact f32 products in NumPy's order,
the kernel in the tensor cores' (on the emulator, 16-deep slices, in order), and both round
once. So an element differs by at most one bf16 ulp of the result, plus twice f32's rounding
of a K-term sum (2·K·2^-24·Σ|a||b|, which shows only where the terms cancel); an epilogue
computed from it (bias, relu, tanh: none steeper than 1) adds one bf16 ulp for each of its
two roundings."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from cuda_emulator import EmulatedInterpreter, Emulator, host_text

import dlvm
from dlvm.codegen.build import build_library, schedule
from dlvm.codegen.cuda import check_ptx, device_module, ptx
from dlvm.codegen.spec import module_spec
from dlvm.interp import run_function
from dlvm.ir import parse_module

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
    ordering = 2 * k * 2.0**-24 * (np.abs(x) @ np.abs(y))
    largest = np.maximum(np.abs(got.astype(np.float64)), np.abs(want.astype(np.float64)))
    exact = x @ y
    if not SHAPES[name][1]:
        return bf16_ulp(np.maximum(largest, np.abs(exact))) + ordering
    summed = np.abs(exact + args[2].astype(np.float64))
    return bf16_ulp(np.abs(exact)) + ordering + bf16_ulp(summed) + bf16_ulp(largest)


def check_within_bound(name: str, args: list[np.ndarray], got: np.ndarray, want: np.ndarray):
    """got within the bound of want, and most elements equal to it bit for bit (the sums are
    f32's, not bf16's: a bf16 accumulator would be off by many ulps)."""
    assert got.dtype == want.dtype == np.dtype(BF16) and got.shape == want.shape
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    limit = bound(name, args, got, want)
    worst = np.unravel_index(np.argmax(diff - limit), diff.shape)
    assert np.all(diff <= limit), (name, worst, got[worst], want[worst], limit[worst])
    assert np.mean(got == want) > 0.97, name


@pytest.fixture(scope="module")
def scheduled():
    return schedule(parse_module(PRODUCTS, "bf16mma.dl"), cuda=True)


@pytest.fixture(scope="module")
def emulated(scheduled, tmp_path_factory):
    return EmulatedInterpreter(scheduled, Emulator(scheduled, tmp_path_factory.mktemp("bf16")))


def test_bf16_products_of_a_tile_stay_bf16_for_tensor_cores(scheduled):
    """In a build for CUDA, a bf16 product of at least 64 x 64 outputs reaches the scheduler as
    bf16 and is scheduled `mma 1`; a smaller one is taken in f32 (its kernel casts); a CPU
    build takes them all in f32."""
    kernels = {f.name: f for f in scheduled.functions if f.compute}
    for name in ON_TENSOR_CORES:
        kernel = kernels[f"{name}_k"]  # the only kernel: the product and its epilogue
        (dot,) = [i for i in kernel.instructions() if i.opcode == "dot"]
        assert "bf16" in str(dot.type), name
        sched = kernel.cuda_schedule
        assert sched.get("mma") == 1 and sched.get("tf32") != 1, name
        assert sched.get_all("tile") == (64, 64, 16) and sched.get("block") == 128
    small = [i for f in kernels.values() if f.name.startswith("small_") for i in f.instructions()]
    assert [str(i.type) for i in small if i.opcode == "dot"] == ["<8 x 24 x f32>"]
    cpu = schedule(parse_module(PRODUCTS, "bf16mma.dl"))
    dots = [i for f in cpu.functions for i in f.instructions() if i.opcode == "dot"]
    assert len(dots) == len(SHAPES) and all("x f32>" in str(i.type) for i in dots)


def test_the_kernels_call_the_bf16_mma(scheduled):
    """The bf16 kernels call dl.mma.m16n8k16.bf16, around the intrinsic
    llvm.nvvm.mma.m16n8k16.row.col.bf16, which the emulator replaces."""
    device, _ = device_module(scheduled)
    text = str(device)
    assert '"llvm.nvvm.mma.m16n8k16.row.col.bf16"' in text
    assert text.count('call void @"dl.mma.m16n8k16.bf16"') >= 8 * len(ON_TENSOR_CORES)
    assert "dl.mma.m16n8k16.bf16" not in host_text(text)
    assert "dlemu_mma_bf16" in host_text(text)


@pytest.mark.parametrize("name", list(SHAPES))
def test_emulated_bf16_products_match_the_interpreter(emulated, name):
    args = inputs(name, 1)
    want = np.asarray(run_function(parse_module(PRODUCTS, "bf16mma.dl"), name, args))
    got = np.asarray(emulated.run(name, args))
    check_within_bound(name, args, got, want)


@pytest.mark.parametrize("gpu", ["sm_80", "sm_90"])
def test_ptxas_accepts_the_bf16_kernels(scheduled, gpu):
    text, launches = ptx(scheduled, gpu)
    assert text.count("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") >= 8 * len(
        ON_TENSOR_CORES)  # fmt: skip
    report = check_ptx(text, gpu)
    assert report.count("0 bytes spill stores") == len(launches)


def test_a_library_for_cuda_computes_its_bf16_products_on_the_cpu_in_f32(tmp_path):
    """The CPU half of a library built for CUDA has the tensor-core products as bf16 too: its
    kernels sum them in f32 and round once, as the interpreter does (bit for bit here: the
    same order)."""
    module = parse_module(PRODUCTS, "bf16mma.dl")
    path = tmp_path / "bf16mma.so"
    build_library(module, module_spec(module, "bf16mma"), path, cuda=True)
    reference = parse_module(PRODUCTS, "bf16mma.dl")
    with dlvm.load(path) as lib:
        for name in SHAPES:
            args = inputs(name, 2)
            want = np.asarray(run_function(reference, name, args))
            got = np.asarray(getattr(lib, name)(*args))
            check_within_bound(name, args, got, want)
