"""bf16 matrix products on a real GPU's tensor cores (skipped without one,
tests/gpu/conftest.py): the functions of tests/unit/bf16_mma_cases.py through a library built
for CUDA, on "cuda:0", against the interpreter within that file's bound. With
$DLVM_GPU_PREBUILT the library comes from that directory (tests/gpu/prebuild.py)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from bf16_mma_cases import PRODUCTS, SHAPES, check_within_bound, inputs

import dlvm
from dlvm.codegen.build import build_library
from dlvm.codegen.spec import module_spec
from dlvm.interp import run_function
from dlvm.ir import parse_module

NAME = "bf16mma"


def built_bf16(directory: Path) -> Path:
    """bf16mma.so for CUDA: prebuilt, or built into directory."""
    prebuilt = os.environ.get("DLVM_GPU_PREBUILT")
    if prebuilt:
        return Path(prebuilt) / f"{NAME}.so"
    path = directory / f"{NAME}.so"
    module = parse_module(PRODUCTS, f"{NAME}.dl")
    build_library(module, module_spec(module, NAME), path, cuda=True)
    return path


@pytest.fixture(scope="module")
def products(tmp_path_factory):
    path = built_bf16(tmp_path_factory.mktemp("gpu-bf16"))
    with dlvm.load(path, device="cuda:0") as lib:
        yield lib


@pytest.mark.parametrize("name", list(SHAPES))
def test_bf16_products_on_the_gpu_match_the_interpreter(products, name):
    """Tensor cores may truncate their f32 sums where the interpreter rounds: more elements
    may differ by an ulp than on the emulator, all within the bound."""
    args = inputs(name, 3)
    want = np.asarray(run_function(parse_module(PRODUCTS, f"{NAME}.dl"), name, args))
    got = np.asarray(getattr(products, name)(*args))
    check_within_bound(name, args, got, want, equal=0.9)
