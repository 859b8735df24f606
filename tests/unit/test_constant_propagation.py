"""constant-propagation (ConstProp): folding keeps what functions compute (hand-written cases,
random modules whose arguments are partly replaced by constants, the TEL samples), floats fold
to literals that read back as the same value, the limits hold, and one run reaches the
fixpoint."""

from __future__ import annotations

import random

import numpy as np
import pytest
from irgen import random_module
from semantics import assert_same_in_own_precision
from telhelp import sample_names, sample_path

from dlvm.interp import InterpreterError, run_function
from dlvm.ir import module_text, parse_module
from dlvm.ir.builder import Builder, constant
from dlvm.ir.literals import AggregateLiteral, Literal, ScalarLiteral
from dlvm.ir.types import TensorType, Type, canonical
from dlvm.ir.values import Argument, Function, LiteralValue, Module, Value
from dlvm.transforms.constant_folding import EVAL_LIMIT, FOLD_LIMIT
from dlvm.transforms.pass_manager import PassManager
from telc.driver import compile_text, optimize

# Helpers shared with test_literal_broadcasting_promotion.py --------------------------------------


def run_passes(module: Module, *names: str) -> list[bool]:
    """Runs the passes (verifying after each); whether each changed the module."""
    return [changed for _, changed in PassManager().run(module, PassManager.resolve(names))]


def tensor_literal(values: np.ndarray, ty: TensorType) -> Literal:
    """The literal `<…>` holding values (a scalar literal for rank 0)."""
    if not ty.shape:
        return ScalarLiteral(values.item())
    row = ty.with_shape(ty.shape[1:])
    return AggregateLiteral(
        "tensor", tuple(LiteralValue(tensor_literal(v, row), row) for v in values)
    )


def constant_of(ty: Type, rng: random.Random, entry: Builder) -> Value:
    """A constant of type ty: a scalar literal use, or a `literal` instruction built at the
    entry (a splat, or its elements written out when there are few)."""
    t = canonical(ty)
    assert isinstance(t, TensorType)

    def draw():
        if t.dtype.is_bool:
            return rng.random() < 0.5
        if t.dtype.is_float:
            return rng.choice([0.5, 2.0, -1.25, 3.0, 0.1, 0.0])
        return rng.choice([1, 2, 3, -2, 0])

    if not t.shape:
        return constant(draw(), ty)
    if t.unit_count <= FOLD_LIMIT and rng.random() < 0.5:
        values = np.array([draw() for _ in range(t.unit_count)]).reshape(t.shape)
        return entry.literal(LiteralValue(tensor_literal(values, t), ty))
    return entry.literal(LiteralValue(ScalarLiteral(draw()), ty))


def with_constant_arguments(module: Module, seed: int, share: float = 0.6) -> None:
    """Replaces the uses of about `share` of each function's arguments by constants of their
    types, so that random modules give constant propagation something to fold. The arguments
    stay, so the functions are called as before."""
    rng = random.Random(seed)
    for fn in module.functions:
        entry = Builder(fn.blocks[0], 0)
        for arg in list(fn.arguments):
            if rng.random() < share:
                _replace_argument(fn, arg, constant_of(arg.type, rng, entry))


def _replace_argument(fn: Function, arg: Argument, new: Value) -> None:
    for inst in fn.instructions():
        inst.map_values(lambda v: new if v is arg else v)


# Hand-written functions ------------------------------------------------------------------------

HANDWRITTEN = """module "handwritten"
stage raw

func @mixed: (<2 x 2 x f32>, f32) -> (<2 x 2 x f32>, f32) {
'entry(%x: <2 x 2 x f32>, %s: f32):
    %m = literal <<1: f32, 2: f32>: <2 x f32>, <3: f32, 4: f32>: <2 x f32>>: <2 x 2 x f32>
    %mt = transpose %m: <2 x 2 x f32>
    %p = dot %m: <2 x 2 x f32>, %mt: <2 x 2 x f32>
    %l = log %p: <2 x 2 x f32>
    %y = add %x: <2 x 2 x f32>, %l: <2 x 2 x f32>
    %r = reduce %l: <2 x 2 x f32> by max init -inf: f32 along 0, 1
    %q = sqrt %r: f32
    %z = multiply %s: f32, %q: f32
    %t = literal (%y: <2 x 2 x f32>, %z: f32): (<2 x 2 x f32>, f32)
    return %t: (<2 x 2 x f32>, f32)
}

func @specials: (f32) -> f32 {
'entry(%x: f32):
    %nz = negate 0: f32
    %ninf = divide 1: f32, %nz: f32
    %nan = multiply %ninf: f32, 0: f32
    %m = max %x: f32, %nan: f32
    %a = add %ninf: f32, %x: f32
    %s = select %m: f32, %a: f32 by false: bool
    return %s: f32
}

func @integers: (i32) -> (i32, i32, i32, i32, i64) {
'entry(%x: i32):
    %a = truncateDivide -7: i32, 2: i32
    %b = floorDivide -7: i32, 2: i32
    %c = modulo -7: i32, 3: i32
    %d = power -3: i32, 3: i32
    %e = multiply 2147483647: i32, 2: i32
    %w = dataTypeCast %e: i32 to i64
    %s = add %x: i32, %a: i32
    %t = literal (%s: i32, %b: i32, %c: i32, %d: i32, %w: i64): (i32, i32, i32, i32, i64)
    return %t: (i32, i32, i32, i32, i64)
}

func @halves: (f16) -> f16 {
'entry(%x: f16):
    %a = divide 1: f16, 3: f16
    %b = exp %a: f16
    %c = multiply %x: f16, %b: f16
    return %c: f16
}

func @diamond: (f32) -> f32 {
'entry(%x: f32):
    %c = lessThan 1: i64, 2: i64
    conditional %c: bool then 'left(2: f32) else 'right(%x: f32)
'left(%l: f32):
    %l2 = multiply %l: f32, 3: f32
    branch 'join(%l2: f32, 1: f32)
'right(%r: f32):
    branch 'join(%r: f32, 1: f32)
'join(%j: f32, %k: f32):
    %s = add %j: f32, %k: f32
    %t = multiply %s: f32, %x: f32
    return %t: f32
}

func @loop: (i64, <3 x f32>) -> <3 x f32> {
'entry(%n: i64, %v: <3 x f32>):
    %one = literal 1: <3 x f32>
    branch 'header(0: i64, 2: i64, %one: <3 x f32>, %v: <3 x f32>)
'header(%i: i64, %step: i64, %c: <3 x f32>, %acc: <3 x f32>):
    %acc1 = add %acc: <3 x f32>, %c: <3 x f32>
    %i1 = add %i: i64, %step: i64
    %more = lessThan %i1: i64, %n: i64
    conditional %more: bool then 'header(%i1: i64, %step: i64, %c: <3 x f32>,
        %acc1: <3 x f32>) else 'exit()
'exit():
    return %acc1: <3 x f32>
}
"""


def test_handwritten_functions_compute_the_same():
    before, after = parse_module(HANDWRITTEN), parse_module(HANDWRITTEN)
    assert run_passes(after, "ConstProp", "ConstProp") == [True, False]
    assert_same_in_own_precision(before, after, seed=0, runs=4)
    text = module_text(after)
    assert module_text(parse_module(text)) == text
    # What folds does fold: only the uses of arguments are left in these functions.
    assert "dot" not in text and "reduce" not in text and "truncateDivide" not in text
    assert "conditional %c" not in text and "add %acc: <3 x f32>, %1.0: <3 x f32>" in text


def test_nothing_to_fold_is_unchanged():
    text = """module "m"
stage raw

func @f: (f32, <2 x f32>) -> <2 x f32> {
'entry(%x: f32, %v: <2 x f32>):
    %0.0 = multiply %x: f32, 2: f32
    %0.1 = add %v: <2 x f32>, %0.0: f32
    return %0.1: <2 x f32>
}
"""
    module = parse_module(text)
    assert run_passes(module, "ConstProp") == [False]
    assert module_text(module) == module_text(parse_module(text))


# Floats read back exactly ----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["f16", "f32", "f64"])
def test_folded_floats_read_back_as_the_same_value(dtype):
    """Quotients of small integers fold to the shortest literal of their own precision, which
    parses back to the same value, bit for bit."""
    pairs = [(a, b) for a in range(-7, 12, 2) for b in (3, 7, 10, 11, 13, -9, 1000)]
    body = "\n".join(
        f"    %q{i} = divide {a}: {dtype}, {b}: {dtype}" for i, (a, b) in enumerate(pairs)
    )
    items = ", ".join(f"%q{i}: {dtype}" for i in range(len(pairs)))
    ty = "(" + ", ".join([dtype] * len(pairs)) + ")"
    text = f"""module "floats"
stage raw

func @f: () -> {ty} {{
'entry():
{body}
    %t = literal ({items}): {ty}
    return %t: {ty}
}}
"""
    module = parse_module(text)
    assert run_passes(module, "ConstProp") == [True]
    folded = module_text(module)
    assert "divide" not in folded
    expected = run_function(parse_module(text), "f")
    actual = run_function(parse_module(folded), "f")
    for x, y in zip(expected, actual):
        assert x.tobytes() == y.tobytes()
    if dtype != "f64":  # the shortest text of its own precision, not float64's
        assert "0.33333334: f32" in folded or "0.3333: f16" in folded


# Limits ----------------------------------------------------------------------------------------


def _scan_of_ones(n: int) -> str:
    return f"""module "limit"
stage raw

func @f: () -> <{n} x i32> {{
'entry():
    %ones = literal 1: <{n} x i32>
    %s = scan %ones: <{n} x i32> by add along 0
    return %s: <{n} x i32>
}}
"""


def test_non_splat_results_fold_up_to_the_limit():
    at_limit = parse_module(_scan_of_ones(FOLD_LIMIT))
    assert run_passes(at_limit, "ConstProp") == [True]
    assert "<1: i32, 2: i32, 3: i32, 4: i32, 5: i32" in module_text(at_limit)
    beyond = parse_module(_scan_of_ones(FOLD_LIMIT + 1))
    assert run_passes(beyond, "ConstProp") == [False]


def test_large_operands_are_not_evaluated():
    n = 300
    assert n * n > EVAL_LIMIT
    text = f"""module "big"
stage raw

func @f: () -> <{n} x {n} x f32> {{
'entry():
    %a = literal 1: <{n} x {n} x f32>
    %d = dot %a: <{n} x {n} x f32>, %a: <{n} x {n} x f32>
    return %d: <{n} x {n} x f32>
}}
"""
    module = parse_module(text)
    assert run_passes(module, "ConstProp") == [False]


def test_failures_are_left_to_run_time():
    text = """module "fails"
stage raw

enum $E {
    ?a()
    ?b()
}

func @divide: () -> i32 {
'entry():
    %0.0 = divide 7: i32, 0: i32
    return %0.0: i32
}

func @missing_case: () -> () {
'entry():
    %0.0 = literal ?b(): $E
    branchEnum %0.0: $E case ?a 'a
'a():
    return
}
"""
    module = parse_module(text)
    assert run_passes(module, "ConstProp") == [False]
    with pytest.raises(InterpreterError, match="division by zero"):
        run_function(module, "divide")
    with pytest.raises(InterpreterError, match="no case"):
        run_function(module, "missing_case")


# Random modules --------------------------------------------------------------------------------

SEEDS = range(60)


def _count(module: Module, opcode: str) -> int:
    return sum(inst.opcode == opcode for fn in module.functions for inst in fn.instructions())


@pytest.mark.parametrize("control_flow", [False, True], ids=["straight", "control-flow"])
def test_random_modules_with_constant_arguments_fold_and_compute_the_same(control_flow):
    changed = branches = 0
    for seed in SEEDS:
        module = random_module(seed, 30, control_flow)
        with_constant_arguments(module, seed)
        text = module_text(module)
        before, after = parse_module(text), parse_module(text)
        first, second = run_passes(after, "ConstProp", "ConstProp")
        assert second is False, f"seed {seed}: a second run changed the module"
        changed += first
        branches += _count(before, "conditional") - _count(after, "conditional")
        folded = module_text(after)
        assert module_text(parse_module(folded)) == folded
        assert_same_in_own_precision(before, after, seed)
    assert changed >= 0.8 * len(SEEDS)
    assert branches >= (5 if control_flow else 0)


@pytest.mark.parametrize("control_flow", [False, True], ids=["straight", "control-flow"])
def test_random_modules_as_generated_stay_valid(control_flow):
    for seed in SEEDS:
        module = random_module(seed, 40, control_flow)
        text = module_text(module)
        before = parse_module(text)
        assert run_passes(module, "ConstProp", "ConstProp")[1] is False
        assert_same_in_own_precision(before, module, seed, runs=1)


# The TEL samples -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sample_names())
def test_samples_differentiated_ir_stays_valid_and_computes_the_same(name):
    with open(sample_path(name), encoding="utf-8") as f:
        compiled = compile_text(sample_path(name), f.read())
    optimize(compiled.module, level=0)  # differentiation only: the constants AD makes are left
    text = module_text(compiled.module)
    before, after = parse_module(text), parse_module(text)
    assert run_passes(after, "ConstProp", "ConstProp")[1] is False
    assert_same_in_own_precision(before, after, seed=0, runs=1)
