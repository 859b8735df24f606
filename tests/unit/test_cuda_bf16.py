"""bf16 matrix products on tensor cores (--target cuda): mma.m16n8k16 with bf16 operands staged
in shared memory and f32 accumulators, the product rounded to bf16 once (dlvm.codegen.cuda_mma).
Their values on the CPU emulator of the intrinsic (cuda_emulator.py) against the interpreter,
for shapes that are not multiples of the tile, batch prefixes, a transposed operand and
epilogues; their PTX through ptxas for sm_80 and sm_90; which products stay bf16 in a build for
CUDA; and the CPU half of such a library, which sums those products in f32 too. The bound
they keep to is bf16_mma_cases.py's."""

from __future__ import annotations

import numpy as np
import pytest
from bf16_mma_cases import ON_TENSOR_CORES, PRODUCTS, SHAPES, check_within_bound, inputs
from cuda_emulator import EmulatedInterpreter, Emulator, host_text

import dlvm
from dlvm.codegen.build import build_library, schedule
from dlvm.codegen.cuda import check_ptx, device_module, ptx
from dlvm.codegen.spec import module_spec
from dlvm.interp import run_function
from dlvm.ir import parse_module
from dlvm.transforms.compute_generation import ComputeGeneration
from dlvm.transforms.compute_scheduling import ComputeScheduling


@pytest.fixture(scope="module")
def scheduled():
    return schedule(parse_module(PRODUCTS, "bf16mma.dl"), cuda=True)


@pytest.fixture(scope="module")
def emulated(scheduled, tmp_path_factory):
    return EmulatedInterpreter(scheduled, Emulator(scheduled, tmp_path_factory.mktemp("bf16")))


def test_bf16_products_of_a_tile_stay_bf16_for_tensor_cores(scheduled):
    """In a build for CUDA, a bf16 product of at least 64 x 64 outputs reaches the scheduler as
    bf16 and is scheduled `mma 1`; a smaller one is taken in f32 (its kernel casts); a CPU
    build keeps them all bf16 (its matrix-product kernel sums bf16 in f32: bf16_products)."""
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
    assert len(dots) == len(SHAPES) and all("x bf16>" in str(i.type) for i in dots)


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


def test_a_small_bf16_product_left_bf16_sums_in_f32_on_a_gpu_thread(tmp_path):
    """Scheduled as given (dlopt --target cuda: no f32 rewrite), a product too small for the
    tensor cores is one GPU thread's sum per element: in f32, rounded once."""
    module = parse_module(PRODUCTS, "bf16mma.dl")
    ComputeGeneration().run(module)
    ComputeScheduling(cuda=True).run(module)
    (kernel,) = [f for f in module.functions if f.name == "small_k"]
    assert kernel.cuda_schedule.get_all("tile") is None
    emulated = EmulatedInterpreter(module, Emulator(module, tmp_path))
    args = inputs("small", 4)
    want = np.asarray(run_function(parse_module(PRODUCTS, "bf16mma.dl"), "small", args))
    check_within_bound("small", args, np.asarray(emulated.run("small", args)), want)
