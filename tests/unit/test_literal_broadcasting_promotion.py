"""literal-broadcasting-promotion (LBP): promoting splat literals keeps what functions compute
and every result type, reports a change only when it made one, and one run reaches the
fixpoint (hand-written cases, random modules, the TEL samples)."""

from __future__ import annotations

import pytest
from irgen import random_module
from semantics import assert_same_in_own_precision
from telhelp import sample_names, sample_path
from test_constant_propagation import run_passes, with_constant_arguments

from dlvm.ir import module_text, parse_module
from dlvm.ir.values import LiteralValue, Module
from dlvm.transforms.literal_broadcasting_promotion import BROADCASTING, scalar_of_splat
from telc.driver import compile_text, optimize

SEEDS = range(40)

HANDWRITTEN = """module "lbp"
stage raw

func @f: (<2 x 3 x f32>, <2 x 3 x bool>, <1 x 3 x f32>) -> (<2 x 3 x f32>, <2 x 3 x bool>) {
'entry(%x: <2 x 3 x f32>, %c: <2 x 3 x bool>, %row: <1 x 3 x f32>):
    %half = literal 0.5: <2 x 3 x f32>
    %two = literal 2: <2 x 3 x f32>
    %yes = literal true: <2 x 3 x bool>
    %none = literal zero: <2 x 3 x f32>
    %0.4 = multiply %x: <2 x 3 x f32>, %half: <2 x 3 x f32>
    %0.5 = power %0.4: <2 x 3 x f32>, %two: <2 x 3 x f32>
    %0.6 = add %row: <1 x 3 x f32>, %two: <2 x 3 x f32>
    %0.7 = max %0.6: <2 x 3 x f32>, %0.5: <2 x 3 x f32>
    %0.8 = lessThan %half: <2 x 3 x f32>, %0.7: <2 x 3 x f32>
    %0.9 = and %0.8: <2 x 3 x bool>, %yes: <2 x 3 x bool>
    %0.10 = or %c: <2 x 3 x bool>, %0.9: <2 x 3 x bool>
    %0.11 = select %0.7: <2 x 3 x f32>, %none: <2 x 3 x f32> by %0.10: <2 x 3 x bool>
    %0.12 = subtract %two: <2 x 3 x f32>, %half: <2 x 3 x f32>
    %0.13 = add %0.11: <2 x 3 x f32>, %0.12: <2 x 3 x f32>
    %t = literal (%0.13: <2 x 3 x f32>, %0.10: <2 x 3 x bool>): (<2 x 3 x f32>, <2 x 3 x bool>)
    return %t: (<2 x 3 x f32>, <2 x 3 x bool>)
}
"""


def _splat_operands(module: Module) -> int:
    """How many operands of broadcasting instructions are splat literal instructions."""
    return sum(
        scalar_of_splat(v) is not None
        for fn in module.functions
        for inst in fn.instructions()
        if inst.op.family in BROADCASTING
        for v in inst.operands
    )


def _types(module: Module) -> list[str]:
    return [str(inst.type) for fn in module.functions for inst in fn.instructions()]


def test_handwritten_promotions_keep_results_and_types():
    before, after = parse_module(HANDWRITTEN), parse_module(HANDWRITTEN)
    assert run_passes(after, "LBP", "LBP") == [True, False]
    assert_same_in_own_precision(before, after, seed=0, runs=4)
    assert _types(after) == _types(before)
    text = module_text(after)
    assert "%0.4 = multiply %x: <2 x 3 x f32>, 0.5: f32" in text
    assert "%0.8 = lessThan 0.5: f32, %0.7: <2 x 3 x f32>" in text
    assert "%0.9 = and %0.8: <2 x 3 x bool>, true: bool" in text
    assert "select %0.7: <2 x 3 x f32>, zero: f32 by %0.10" in text
    # The literal shapes the result of %0.6; in %0.12 it does once the other is promoted.
    assert "%0.6 = add %row: <1 x 3 x f32>, %two: <2 x 3 x f32>" in text
    assert "%0.12 = subtract 2: f32, %half: <2 x 3 x f32>" in text


def test_existing_scalar_literals_are_not_a_change():
    """The original DLVM reported a change for every scalar literal operand; we report one only
    when an operand was replaced."""
    text = """module "m"
stage raw

func @f: (<2 x f32>) -> <2 x f32> {
'entry(%x: <2 x f32>):
    %0.0 = add %x: <2 x f32>, 1: f32
    %0.1 = literal <1: f32, 2: f32>: <2 x f32>
    %0.2 = multiply %0.0: <2 x f32>, %0.1: <2 x f32>
    return %0.2: <2 x f32>
}
"""
    module = parse_module(text)
    assert run_passes(module, "LBP") == [False]
    assert module_text(module) == module_text(parse_module(text))


def test_scalar_of_splat_reads_only_splat_literals():
    module = parse_module(HANDWRITTEN)
    insts = {i.name: i for i in module.functions[0].instructions() if i.name}
    half = scalar_of_splat(insts["half"])
    assert isinstance(half, LiteralValue) and half.use_text() == "0.5: f32"
    assert scalar_of_splat(insts["t"]) is None  # a tuple literal
    assert scalar_of_splat(module.functions[0].arguments[0]) is None


@pytest.mark.parametrize("control_flow", [False, True], ids=["straight", "control-flow"])
def test_random_modules_keep_results_and_types(control_flow):
    promoted = 0
    for seed in SEEDS:
        module = random_module(seed, 30, control_flow)
        with_constant_arguments(module, seed)
        text = module_text(module)
        before, after = parse_module(text), parse_module(text)
        splats = _splat_operands(after)
        first, second = run_passes(after, "LBP", "LBP")
        assert second is False, f"seed {seed}: a second run changed the module"
        assert first == (_splat_operands(after) < splats)  # changed exactly when it promoted
        promoted += first
        assert _types(after) == _types(before)
        assert_same_in_own_precision(before, after, seed)
    assert promoted >= len(SEEDS) // 3  # splats often are what shapes a result


@pytest.mark.parametrize("name", sample_names())
def test_samples_differentiated_ir_stays_valid_and_computes_the_same(name):
    with open(sample_path(name), encoding="utf-8") as f:
        compiled = compile_text(sample_path(name), f.read())
    optimize(compiled.module, level=0)  # differentiation only: AD's seeds are splat literals
    text = module_text(compiled.module)
    before, after = parse_module(text), parse_module(text)
    assert run_passes(after, "LBP", "LBP")[1] is False
    assert_same_in_own_precision(before, after, seed=0, runs=1)
