"""loop-invariant-code-motion (LICM) on hand-written programs, random loops
(tests/unit/cfggen.py, whose loop bodies hold invariant code, some of which may trap, and
tests/unit/irgen.py) and the differentiated samples: the result verifies (the pass manager checks
after every pass), computes the same and traps exactly where the original did (nothing unsafe
is speculated), a second run changes nothing, and hoisting does happen. The cases one by one are
in tests/filecheck/transforms/."""

from __future__ import annotations

import pytest
from cfggen import (
    PROGRAMS,
    assert_same_results,
    cfg_module,
    differentiated_sample,
    outcomes,
    random_inputs,
    results,
)
from hypothesis import given
from hypothesis import strategies as st
from irgen import random_module
from semantics import generated, run_twice
from telhelp import sample_names

from dlvm.analysis.loops import loop_info
from dlvm.ir import module_text, parse_module
from dlvm.ir.values import Module
from dlvm.transforms.loop_invariant_code_motion import LoopInvariantCodeMotion
from dlvm.transforms.pass_manager import PassManager


def loop_work(module: Module) -> int:
    """Instructions weighted by their loop depth (0 outside loops)."""
    return sum(
        len(b.instructions) * loop_info(fn).depth(b) for fn in module.functions for b in fn.blocks
    )


def test_programs_compute_the_same_with_less_in_their_loops():
    module = parse_module(PROGRAMS)
    expected = outcomes(module)
    before = loop_work(module)
    assert run_twice(module, LoopInvariantCodeMotion) == (True, False)
    assert loop_work(module) < before
    assert outcomes(module) == expected
    nested = module.function_named("nested_loops")
    assert nested is not None
    [division] = [i for i in nested.instructions() if i.opcode == "truncateDivide"]
    assert loop_info(nested).depth(division.block) == 2  # it might trap: it stays


@generated(60)
@given(st.integers(0, 2**32 - 1))
def test_random_loops_compute_and_trap_the_same(seed):
    module = cfg_module(seed)
    expected = outcomes(module)
    assert run_twice(module, LoopInvariantCodeMotion)[1] is False
    assert outcomes(module) == expected
    text = module_text(module)
    assert module_text(parse_module(text)) == text


def test_random_loops_often_have_invariant_code_to_hoist():
    changed = [run_twice(cfg_module(seed), LoopInvariantCodeMotion)[0] for seed in range(40)]
    assert sum(changed) >= 0.6 * len(changed)


@generated(30)
@given(st.integers(0, 2**32 - 1))
def test_generated_tensor_modules_compute_the_same(seed):
    module = random_module(seed, 40, True)
    inputs = random_inputs(module, [f.name for f in module.functions], seed)
    expected = results(module, inputs)
    assert run_twice(module, LoopInvariantCodeMotion)[1] is False
    assert_same_results(expected, results(module, inputs))


def test_generated_tensor_modules_often_have_invariant_code_to_hoist():
    modules = [random_module(seed, 40, True) for seed in range(40)]
    changed = [run_twice(m, LoopInvariantCodeMotion)[0] for m in modules]
    assert sum(changed) >= 0.3 * len(changed)


@pytest.mark.parametrize("sample", sample_names())
def test_differentiated_samples_compute_the_same(sample):
    module, entries = differentiated_sample(sample)
    inputs = random_inputs(module, entries, 0)
    expected = results(module, inputs)
    assert run_twice(module, LoopInvariantCodeMotion)[1] is False
    assert_same_results(expected, results(module, inputs))


@pytest.mark.parametrize("sample", ["rnn", "lstm"])
def test_recurrent_adjoint_loops_lose_their_invariant_work(sample):
    module, _ = differentiated_sample(sample)
    PassManager().run(module, PassManager.resolve(["CFGSimp"]))
    before = loop_work(module)
    assert run_twice(module, LoopInvariantCodeMotion) == (True, False)
    assert loop_work(module) < before
