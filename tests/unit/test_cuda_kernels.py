"""Every instruction's CUDA kernel against the interpreter: the cases of test_codegen_ops
(odd sizes, broadcasting, every element type, products tiled and not, prologues and
epilogues), compiled by dlvm.codegen.cuda and run by the CPU emulator of the CUDA execution
model (cuda_emulator.py): host code interpreted, each [compute] function by its kernel. Random
numbers are host code's: no kernel draws them, and a seed draws the interpreter's. The same
kernels as PTX are assembled by ptxas, which the emulator cannot stand in for."""

from __future__ import annotations

import numpy as np
import pytest
from cuda_emulator import EmulatedInterpreter, Emulator
from test_codegen_ops import CASES, assert_matches, module_text, random_input

from dlvm.codegen.build import schedule
from dlvm.codegen.cuda import check_ptx, ptx
from dlvm.codegen.device_plan import NotPlannable, device_plan
from dlvm.interp import Interpreter, run_function
from dlvm.ir import parse_module


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    text = module_text()
    module = schedule(parse_module(text, "ops.dl"), cuda=True)
    emulator = Emulator(module, tmp_path_factory.mktemp("cuda-ops"))
    return module, emulator, parse_module(text, "ops.dl")


@pytest.mark.parametrize("index, name", list(enumerate(CASES)), ids=list(CASES))
def test_kernel_matches_interpreter(emulated, index, name):
    module, emulator, reference = emulated
    args, _, _ = CASES[name]
    rng = np.random.default_rng(index)
    inputs = [random_input(t, rng, name) for t in args]
    expected = np.asarray(run_function(reference, f"f{index}", inputs))
    assert_matches(name, np.asarray(EmulatedInterpreter(module, emulator).run(f"f{index}", inputs)),
                   expected)  # fmt: skip


def test_every_kernel_is_ptx_that_ptxas_accepts(emulated):
    """The emulator compiles the kernels for the CPU and calls the C library for libdevice's
    functions: a math function NVPTX cannot lower, or a libdevice name that does not exist,
    shows only here (test_cuda_samples assembles only what the samples happen to use)."""
    module, _, _ = emulated
    text, launches = ptx(module)
    assert text.count(".entry ") == len(launches) == sum(1 for f in module.functions if f.compute)
    assert "spill stores" in check_ptx(text)


# test_codegen_ops's functions that draw random numbers, each with a range to draw from.
RANDOM = {"random_i32": (-3, 4), "random_i8": (-128, 127), "random_i64": (-(2**62), 2**62)}


def test_random_numbers_are_drawn_by_host_code(emulated):
    """No kernel draws random numbers: `random` stays in host code, which has no device plan, so
    a library built for CUDA draws them on the CPU (what test_codegen_ops checks of the
    compiled draws holds there) and the kernels need no generator."""
    module, _, _ = emulated
    kernels = {f: i for i, f in enumerate(f for f in module.functions if f.compute)}
    assert kernels and not any(i.opcode == "random" for f in kernels for i in f.instructions())
    for name in RANDOM:
        fn = module.function_named(name)
        assert any(i.opcode == "random" for i in fn.instructions())
        with pytest.raises(NotPlannable):
            device_plan(fn, kernels)


@pytest.mark.parametrize("name", RANDOM)
def test_random_numbers_of_a_seed_are_the_interpreters(emulated, name):
    """Run as host code, a seed draws what it draws on the interpreter of the module before
    scheduling, in [lo, hi), and another seed draws other numbers."""
    module, emulator, reference = emulated
    lo, hi = RANDOM[name]
    got = np.asarray(EmulatedInterpreter(module, emulator, seed=11).run(name, [lo, hi]))
    want = np.asarray(Interpreter(reference, seed=11).run(name, [lo, hi]))
    assert got.dtype == want.dtype and got.size > 1
    np.testing.assert_array_equal(got, want)
    assert got.min() >= lo and got.max() < hi and len(np.unique(got)) > 1
    other = np.asarray(EmulatedInterpreter(module, emulator, seed=12).run(name, [lo, hi]))
    assert not np.array_equal(got, other)


def test_long_reductions_into_few_outputs_use_whole_blocks(emulated):
    module, _, _ = emulated
    blocks = [f for f in module.functions if f.cuda_schedule and f.cuda_schedule.get("cooperative")]
    assert len(blocks) >= 5  # the reduce-long cases, and reduce-rows-parallel
    dtypes = {str(f.type.result).split()[-1].rstrip(">") for f in blocks}
    assert {"f32", "i32", "f64"} <= dtypes


def test_products_with_a_tile_of_outputs_are_tiled(emulated):
    """The tiled kernel is what the product cases above exercised, with its edges: at least
    the five cases of 64 x 64 outputs or more, one with a batch (grid z) and one in f64."""
    module, _, _ = emulated
    tiled = [f for f in module.functions if f.cuda_schedule and f.cuda_schedule.get_all("tile")]
    assert len(tiled) >= 5
    assert any(f.cuda_schedule.get_all("grid")[2] == 2 for f in tiled)
    assert any("f64" in str(f.type) for f in tiled)
    convolutions = [
        f for f in tiled if any(i.opcode == "convolve" for i in f.blocks[0].instructions)
    ]
    assert len(convolutions) == 2  # as implicit products, one of them grouped (grid z = 2)
    on_tensor_cores = [str(f.type) for f in tiled if f.cuda_schedule.get("mma") == 1]
    # f16 and bf16, each alone and batched with an epilogue; bf16 also x · Wᵀ + bias and tanh
    assert sum("x f16>" in t for t in on_tensor_cores) == 2
    assert sum("bf16" in t for t in on_tensor_cores) == 4 == len(on_tensor_cores) - 2


TF32 = """module "tf32"
stage optimizable

func @product: (<70 x 40 x f32>, <40 x 130 x f32>) -> <70 x 130 x f32> {
'entry(%a: <70 x 40 x f32>, %b: <40 x 130 x f32>):
    %r = dot %a: <70 x 40 x f32>, %b: <40 x 130 x f32>
    return %r: <70 x 130 x f32>
}

func @relu_of_product: (<2 x 66 x 9 x f32>, <2 x 9 x 64 x f32>) -> <2 x 66 x 64 x f32> {
'entry(%a: <2 x 66 x 9 x f32>, %b: <2 x 9 x 64 x f32>):
    %d = dot %a: <2 x 66 x 9 x f32>, %b: <2 x 9 x 64 x f32>
    %r = max %d: <2 x 66 x 64 x f32>, 0: f32
    return %r: <2 x 66 x 64 x f32>
}
"""


def tf32(x: np.ndarray) -> np.ndarray:
    """x rounded to TF32 (10 bits of mantissa, to nearest, ties away from zero)."""
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def test_f32_products_in_tf32_on_tensor_cores(tmp_path):
    """Asked for (--tf32), f32 products run mma.m16n8k8.tf32: the product of the operands
    rounded to TF32, summed in f32."""
    module = schedule(parse_module(TF32, "tf32.dl"), cuda=True, tf32=True)
    kernels = [f for f in module.functions if f.compute and f.cuda_schedule.get("tf32") == 1]
    assert len(kernels) == 2
    emulated = EmulatedInterpreter(module, Emulator(module, tmp_path))
    rng = np.random.default_rng(3)
    a, b = rng.uniform(-2, 2, (70, 40)), rng.uniform(-2, 2, (40, 130))
    got = emulated.run("product", [a.astype(np.float32), b.astype(np.float32)])
    exact = tf32(a).astype(np.float64) @ tf32(b).astype(np.float64)
    np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-5 * np.abs(exact).max())
    assert np.abs(got - a @ b).max() > 1e-4  # the rounding to TF32 shows
    a, b = rng.uniform(-2, 2, (2, 66, 9)), rng.uniform(-2, 2, (2, 9, 64))
    got = emulated.run("relu_of_product", [a.astype(np.float32), b.astype(np.float32)])
    exact = np.maximum(tf32(a).astype(np.float64) @ tf32(b).astype(np.float64), 0)
    np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-5 * np.abs(exact).max())
