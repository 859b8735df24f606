"""cfg-simplification (CFGSimp) on hand-written programs, random control flow
(tests/unit/cfggen.py and tests/unit/irgen.py) and the differentiated samples: the result
verifies (the pass manager checks after every pass), computes the same, leaves nothing for any
rule to do, and a second run changes nothing; the random shapes exercise every rule. The cases
one by one are in tests/filecheck/transforms/."""

from __future__ import annotations

from collections import Counter

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

from dlvm.ir import module_text, parse_module
from dlvm.ir.cfg import CFG
from dlvm.ir.values import Block, Function, Module
from dlvm.ir.verifier import verify
from dlvm.transforms.cfg_edits import edge_sources
from dlvm.transforms.cfg_simplification import RULES, CFGSimplification


def assert_simple(module: Module) -> None:
    """No rule applies anywhere (each condition checked independently of the pass's code)."""
    for fn in module.functions:
        g = CFG(fn)
        sources = edge_sources(fn)
        assert all(g.reachable(b) for b in fn.blocks), f"@{fn.name}: unreachable blocks"
        for block in fn.blocks:
            term = block.terminator
            assert term is not None
            if term.opcode == "conditional":
                then, other = term.attrs["then"], term.attrs["else"]
                assert not (then.block is other.block and then.args == other.args), block
            if block is fn.blocks[0]:
                continue
            assert not _is_removable_trampoline(fn, block), block
            preds = sources[block]
            if len(preds) == 1 and preds[0] is not block:
                kind = preds[0].terminator.opcode  # type: ignore[union-attr]
                assert kind != "branch", f"{block} could merge into {preds[0]}"
                assert kind == "branchEnum" or not block.arguments, f"{block} keeps arguments"


def _is_removable_trampoline(fn: Function, block: Block) -> bool:
    if len(block.instructions) != 1 or block.instructions[0].opcode != "branch":
        return False
    dest = block.instructions[0].attrs["dest"]
    if dest.block is block or [id(v) for v in dest.args] != [id(a) for a in block.arguments]:
        return False
    readers = [i for i in fn.instructions() if any(v in block.arguments for v in i.uses())]
    return readers == block.instructions


def test_programs_compute_the_same_when_simplified():
    module = parse_module(PROGRAMS)
    expected = outcomes(module)
    assert run_twice(module, CFGSimplification) == (True, False)
    assert_simple(module)
    assert outcomes(module) == expected


@generated(60)
@given(st.integers(0, 2**32 - 1))
def test_random_control_flow_computes_the_same_when_simplified(seed):
    module = cfg_module(seed)
    expected = outcomes(module)
    assert run_twice(module, CFGSimplification)[1] is False
    assert_simple(module)
    assert outcomes(module) == expected
    text = module_text(module)
    assert module_text(parse_module(text)) == text


def test_random_control_flow_exercises_every_rule():
    applied: Counter[str] = Counter()
    for seed in range(40):
        module = cfg_module(seed)
        expected = outcomes(module)
        for fn in module.functions:
            while True:  # the pass's loop, counting which rule did something
                done = [rule.__name__ for rule in RULES if rule(fn)]
                applied.update(done)
                if not done:
                    break
        assert not verify(module)
        assert outcomes(module) == expected
    assert set(applied) == {rule.__name__ for rule in RULES}, applied


@generated(30)
@given(st.integers(0, 2**32 - 1))
def test_generated_tensor_modules_compute_the_same(seed):
    module = random_module(seed, 40, True)
    inputs = random_inputs(module, [f.name for f in module.functions], seed)
    expected = results(module, inputs)
    assert run_twice(module, CFGSimplification)[1] is False
    assert_simple(module)
    assert_same_results(expected, results(module, inputs))


@pytest.mark.parametrize("sample", sample_names())
def test_differentiated_samples_compute_the_same(sample):
    module, entries = differentiated_sample(sample)
    inputs = random_inputs(module, entries, 0)
    expected = results(module, inputs)
    assert run_twice(module, CFGSimplification)[1] is False
    assert_simple(module)
    assert_same_results(expected, results(module, inputs))
