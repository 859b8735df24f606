"""cfg-canonicalization (CFGCan) on hand-written programs, random control flow
(tests/unit/cfggen.py and tests/unit/irgen.py) and the differentiated samples: the result
verifies (the pass manager checks after every pass), computes the same, has the canonical form
(one return; every loop with a preheader, one latch and dedicated exits), and a second run
changes nothing. The cases one by one are in tests/filecheck/transforms/."""

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
from dlvm.transforms.cfg_canonicalization import CFGCanonicalization


def assert_canonical(module: Module) -> None:
    for fn in module.functions:
        returns = [b for b in fn.blocks if b.terminator and b.terminator.opcode == "return"]
        assert len(returns) <= 1, f"@{fn.name}: {len(returns)} returns"
        for loop in loop_info(fn):
            assert loop.preheader is not None, f"@{fn.name}: {loop} has no preheader"
            assert len(loop.latches) == 1, f"@{fn.name}: {loop} has {len(loop.latches)} latches"
            assert loop.has_dedicated_exits, f"@{fn.name}: {loop} shares an exit"


def test_programs_compute_the_same_in_canonical_form():
    module = parse_module(PROGRAMS)
    expected = outcomes(module)
    assert run_twice(module, CFGCanonicalization) == (True, False)
    assert_canonical(module)
    assert outcomes(module) == expected


@generated(60)
@given(st.integers(0, 2**32 - 1))
def test_random_control_flow_computes_the_same_in_canonical_form(seed):
    module = cfg_module(seed)
    expected = outcomes(module)
    assert run_twice(module, CFGCanonicalization)[1] is False
    assert_canonical(module)
    assert outcomes(module) == expected
    text = module_text(module)
    assert module_text(parse_module(text)) == text


@generated(30)
@given(st.integers(0, 2**32 - 1))
def test_generated_tensor_modules_compute_the_same(seed):
    module = random_module(seed, 40, True)
    inputs = random_inputs(module, [f.name for f in module.functions], seed)
    expected = results(module, inputs)
    assert run_twice(module, CFGCanonicalization)[1] is False
    assert_canonical(module)
    assert_same_results(expected, results(module, inputs))


@pytest.mark.parametrize("sample", sample_names())
def test_differentiated_samples_compute_the_same(sample):
    module, entries = differentiated_sample(sample)
    inputs = random_inputs(module, entries, 0)
    expected = results(module, inputs)
    assert run_twice(module, CFGCanonicalization)[1] is False
    assert_canonical(module)
    assert_same_results(expected, results(module, inputs))
