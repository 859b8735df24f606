"""An elementwise chain end to end: tanh(0.5·x + 0.25)·sigmoid(x) compiles to one kernel
(compute generation fuses 0.5·x, read twice, instead of writing it to memory), the host function
hands the kernel the caller's result buffer instead of copying the result there
(dlvm/codegen/frame.py), and the library matches NumPy."""

from __future__ import annotations

import copy
import re

import numpy as np
import pytest

import dlvm
from dlvm.codegen.build import build_library, schedule
from dlvm.codegen.llgen import llvm_module
from telc.driver import compile_text, optimize

N = 4099  # not a multiple of any vector width: the loop's remainder runs too

SOURCE = f"""module chain
use nn
dim N = {N}
export def chain(x: [N]) -> [N] = tanh(0.5 * x + 0.25) * sigmoid(x)
"""


@pytest.fixture(scope="module")
def compiled():
    compiled = compile_text("chain.tel", SOURCE)
    optimize(compiled.module)
    return compiled


@pytest.fixture(scope="module")
def scheduled(compiled):
    return schedule(copy.deepcopy(compiled.module))


def test_the_chain_is_one_kernel(scheduled):
    host = scheduled.function_named("chain")
    body = [inst.opcode for inst in host.blocks[0].instructions]
    assert body == ["apply", "return"]
    kernel = host.blocks[0].instructions[0].operands[0]
    assert kernel.compute
    assert [i.opcode for i in kernel.blocks[0].instructions].count("multiply") == 3


def test_the_result_is_written_without_a_copy(scheduled):
    text = str(llvm_module(scheduled))
    host = re.search(r'^define .*@"?dl_chain"?\(.*?^}', text, re.M | re.S)
    assert host is not None
    assert "memcpy" not in host.group(0)
    result = re.findall(r'ptr (%"?[.\w]+"?)', host.group(0).splitlines()[0])[-1]
    assert f"store ptr {result}," in host.group(0)  # the kernel's output pointer
    # Nothing is left in the frame but its minimum size.
    assert re.search(r'@"?dl_chain\.frame"? = private constant i64 64\b', text)


def test_the_chain_matches_numpy(compiled, tmp_path):
    path = tmp_path / "chain.so"
    build_library(compiled.module, compiled.spec, path)
    x = np.concatenate([
        np.linspace(-12, 12, N - 5, dtype=np.float32),
        np.array([0.0, -0.0, 1e-30, np.inf, -np.inf], np.float32),
    ])  # fmt: skip
    wide = x.astype(np.float64)
    with np.errstate(over="ignore"):
        expected = np.tanh(0.5 * wide + 0.25) / (1 + np.exp(-wide))
    with dlvm.load(path) as lib:
        got = lib.chain(x)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
