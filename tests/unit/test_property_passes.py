"""Property: every optimisation pass and every -O pipeline keeps random modules valid and keeps
what they compute, on straight-line code and on code with branches and loops.

Modules come from tests/unit/irgen.py. In half of the cases some arguments of each function
are turned into constants (a splat `literal` at the top of the entry block), so that the
constant-driven passes (ConstProp, LBP, and CFGSimp after a folded branch) have work to do.
Results are compared in float64: exactly for integers and booleans, to a tight tolerance for
floats where the original is finite. The tolerance allows for MMR's re-association and for
ConstProp, which folds in the IR's precision (f32 constants); AS's x·0 → 0 differs from IEEE
arithmetic only at infinities and NaN.
"""

from __future__ import annotations

import functools
import random

import numpy as np
import pytest
from irgen import random_module
from semantics import assert_close_where_finite, assert_equivalent

from dlvm.ir import module_text, parse_module
from dlvm.ir.builder import Builder, constant
from dlvm.ir.types import TensorType, canonical
from dlvm.ir.values import Argument, Module
from dlvm.transforms.pass_manager import PassManager
from dlvm.transforms.pipelines import PIPELINES

OPTIMISATIONS = (
    "algebra-simplification",
    "constant-propagation",
    "common-subexpression-elimination",
    "dead-code-elimination",
    "cfg-canonicalization",
    "cfg-simplification",
    "matrix-multiplication-reordering",
    "linear-algebra-fusion",
    "literal-broadcasting-promotion",
    "loop-invariant-code-motion",
)
SEEDS = range(12)


def make_constants(module: Module, seed: int) -> None:
    """Replaces the uses of about half of each function's tensor arguments by a splat literal
    of a small value, defined at the top of the entry block."""
    rng = random.Random(seed)
    for fn in module.functions:
        if not fn.blocks:
            continue
        b = Builder(fn.blocks[0], 0)
        for arg in list(fn.arguments):
            t = canonical(arg.type)
            if not isinstance(t, TensorType) or rng.random() < 0.5:
                continue
            value = rng.choice([True, False]) if t.dtype.is_bool else rng.choice([1, 2, 3])
            # A scalar constant is a bare literal use; a tensor one a `literal` instruction.
            replacement = b.literal(constant(value, t)) if t.shape else constant(value, t)
            for inst in list(fn.instructions()):
                if inst is not replacement:
                    inst.map_values(lambda v, a=arg, r=replacement: r if v is a else v)


def source(seed: int, control_flow: bool, constants: bool) -> str:
    module = random_module(seed, 30, control_flow)
    if constants:
        make_constants(module, seed)
    return module_text(module)


def check(text: str, run, seed: int) -> None:
    """Runs `run(module)` on a copy of the module and compares each function's results."""
    before, after = parse_module(text), parse_module(text)
    run(after)
    assert module_text(parse_module(module_text(after))) == module_text(after)
    compare = functools.partial(assert_close_where_finite, rtol=1e-6, atol=1e-9, same_dtype=True)
    names = [fn.name for fn in before.functions if fn.blocks]
    assert_equivalent(before, after, compare, rng=np.random.default_rng(seed), names=names)


@pytest.mark.parametrize("constants", [False, True], ids=["args", "constants"])
@pytest.mark.parametrize("control_flow", [False, True], ids=["straight", "branches"])
@pytest.mark.parametrize("name", OPTIMISATIONS)
def test_each_pass_keeps_what_modules_compute(name, control_flow, constants):
    passes = PassManager.resolve([name])
    for seed in SEEDS:
        text = source(seed, control_flow, constants)
        check(text, lambda m: PassManager().run(m, passes), seed)  # verifies after the pass


@pytest.mark.parametrize("constants", [False, True], ids=["args", "constants"])
@pytest.mark.parametrize("control_flow", [False, True], ids=["straight", "branches"])
@pytest.mark.parametrize("level", [1, 2])
def test_each_pipeline_keeps_what_modules_compute(level, control_flow, constants):
    for seed in SEEDS:
        text = source(seed, control_flow, constants)
        check(text, lambda m: PassManager().run_pipeline(m, PIPELINES[level]), seed)


@pytest.mark.parametrize("level", [1, 2])
def test_a_pipeline_reaches_its_fixpoint(level):
    """After a pipeline has run, running it again changes nothing (-O2 stops within its
    bound on these modules)."""
    for seed in SEEDS:
        module = parse_module(source(seed, True, seed % 2 == 0))
        manager = PassManager()
        manager.run_pipeline(module, PIPELINES[2])
        again = manager.run_pipeline(module, PIPELINES[level])
        assert [p.alias for p, changed in again if changed] == [], seed


def test_make_constants_really_makes_constants():
    module = random_module(0, 30, True)
    make_constants(module, 0)
    uses = {v for fn in module.functions for i in fn.instructions() for v in i.uses()}
    unused = [a for fn in module.functions for a in fn.arguments if a not in uses]
    assert unused and all(isinstance(a, Argument) for a in unused)
