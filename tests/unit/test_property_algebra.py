"""Property: algebra-simplification (AS) keeps random modules made with the Builder
(tests/unit/irgen.py) valid, reaches its fixpoint in one run, and keeps what they compute."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from irgen import random_module
from semantics import assert_close_where_finite, assert_equivalent, generated

from dlvm.ir import module_text, parse_module
from dlvm.transforms.pass_manager import PassManager


@generated(60)
@given(st.integers(0, 2**32 - 1), st.booleans())
def test_generated_modules_stay_valid_and_reach_a_fixpoint(seed, control_flow):
    module = random_module(seed, 40, control_flow)
    manager = PassManager()  # verifies after every pass
    results = manager.run(module, PassManager.resolve(["AS", "AS"]))
    assert results[1][1] is False
    manager.run(module, PassManager.resolve(["CSE", "DCE", "AS"]))
    text = module_text(module)
    assert module_text(parse_module(text)) == text


@pytest.mark.parametrize("seed", range(16))
def test_generated_straight_line_modules_compute_the_same(seed):
    text = module_text(random_module(seed, 30, False))
    before, after = parse_module(text), parse_module(text)
    PassManager().run(after, PassManager.resolve(["AS"]))
    # x·0 → 0 and x−x → 0 differ from IEEE arithmetic only where x is infinite or NaN.
    compare = functools.partial(assert_close_where_finite, rtol=1e-9, atol=1e-9)
    assert_equivalent(before, after, compare, rng=np.random.default_rng(seed))
