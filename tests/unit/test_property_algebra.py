"""Property: algebra-simplification (AS) keeps random modules made with the Builder
(tests/unit/irgen.py) valid, reaches its fixpoint in one run, and keeps what they compute."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from irgen import random_module

from dlvm.interp import run_function
from dlvm.ir import module_text, parse_module
from dlvm.ir.types import FunctionType, TensorType, canonical
from dlvm.transforms.pass_manager import PassManager

NP = {"i32": np.int32, "i64": np.int64}


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.integers(0, 2**32 - 1), st.booleans())
def test_generated_modules_stay_valid_and_reach_a_fixpoint(seed, control_flow):
    module = random_module(seed, 40, control_flow)
    manager = PassManager()  # verifies after every pass
    results = manager.run(module, PassManager.resolve(["AS", "AS"]))
    assert results[1][1] is False
    manager.run(module, PassManager.resolve(["CSE", "DCE", "AS"]))
    text = module_text(module)
    assert module_text(parse_module(text)) == text


def random_args(fn_type: FunctionType, rng: np.random.Generator) -> list:
    out = []
    for ty in fn_type.arguments:
        t = canonical(ty)
        assert isinstance(t, TensorType)
        if t.dtype.is_float:
            out.append(rng.uniform(0.5, 2.0, t.shape) * rng.choice([-1.0, 1.0], t.shape))
        elif t.dtype.is_bool:
            out.append(rng.random(t.shape) < 0.5)
        else:
            out.append(rng.integers(1, 5, t.shape).astype(NP[t.dtype.text]))
    return out


@pytest.mark.parametrize("seed", range(16))
def test_generated_straight_line_modules_compute_the_same(seed):
    text = module_text(random_module(seed, 30, False))
    before, after = parse_module(text), parse_module(text)
    PassManager().run(after, PassManager.resolve(["AS"]))
    rng = np.random.default_rng(seed)
    for fn in before.functions:
        assert isinstance(fn.type, FunctionType)
        args = random_args(fn.type, rng)
        expected = run_function(before, fn.name, args, float64=True, seed=1)
        actual = run_function(after, fn.name, args, float64=True, seed=1)
        assert_close_where_finite(expected, actual)


def assert_close_where_finite(a, b) -> None:
    # x·0 → 0 and x−x → 0 differ from IEEE arithmetic only where x is infinite or NaN.
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_close_where_finite(x, y)
        return
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape
    if a.dtype.kind == "f":
        finite = np.isfinite(a)
        np.testing.assert_allclose(a[finite], b[finite], rtol=1e-9, atol=1e-9)
    else:
        np.testing.assert_array_equal(a, b)
