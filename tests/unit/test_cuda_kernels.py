"""Every instruction's CUDA kernel against the interpreter: the cases of test_codegen_ops
(odd sizes, broadcasting, every element type, products tiled and not, prologues and
epilogues), compiled by dlvm.codegen.cuda and run by the CPU emulator of the CUDA execution
model (cuda_emulator.py): host code interpreted, each [compute] function by its kernel."""

from __future__ import annotations

import numpy as np
import pytest
from cuda_emulator import EmulatedInterpreter, Emulator
from test_codegen_ops import CASES, assert_matches, module_text, random_input

from dlvm.codegen.build import schedule
from dlvm.interp import run_function
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
    if name.startswith("random"):
        return
    assert_matches(name, np.asarray(EmulatedInterpreter(module, emulator).run(f"f{index}", inputs)),
                   expected)  # fmt: skip


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
    on_tensor_cores = [f for f in tiled if f.cuda_schedule.get("mma") == 1]
    assert len(on_tensor_cores) == 2 and all("f16" in str(f.type) for f in on_tensor_cores)
