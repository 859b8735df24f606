"""Reference interpreter: every failure is an InterpreterError with a located, named message."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from dlvm.interp import EnumValue, Interpreter, InterpreterError, run_function
from dlvm.ir import parse_module
from dlvm.ir.literals import ScalarLiteral
from dlvm.ir.types import DataType, TensorType, scalar
from dlvm.ir.values import LiteralValue

SRC = """
module "t"
stage raw

struct $P {
    #a: f32
}

enum $E {
    ?one(f32)
    ?two()
}

func @f: (<2 x f32>, i32) -> f32 {
'entry(%x: <2 x f32>, %i: i32):
    %e = extract %i: i32 from %x: <2 x f32>
    return %e: f32
}

func @insert_at: ([3 x f32], i64) -> [3 x f32] {
'entry(%a: [3 x f32], %i: i64):
    %r = insert 1: f32 to %a: [3 x f32] at %i: i64
    return %r: [3 x f32]
}

func @takes: ($P, $E, (f32, i8)) -> () {
'entry(%p: $P, %e: $E, %t: (f32, i8)):
    return
}

func @trapping: (bool) -> f32 {
'entry(%c: bool):
    conditional %c: bool then 'bad() else 'good()
'bad():
    trap
    return 0: f32
'good():
    return 1: f32
}

func @divide: (i32, i32) -> i32 {
'entry(%a: i32, %b: i32):
    %q = divide %a: i32, %b: i32
    return %q: i32
}

func @caller: (i32) -> i32 {
'entry(%b: i32):
    %q = apply @divide(7: i32, %b: i32): (i32, i32) -> i32
    return %q: i32
}

func @forever: (i64) -> i64 {
'entry(%n: i64):
    %m = add %n: i64, 1: i64
    %r = apply @forever(%m: i64): (i64) -> i64
    return %r: i64
}

[extern]
func @ext: (f32) -> f32

[gradient @divide_f wrt 0]
func @divide_f_grad: (f32, f32) -> (f32)

func @divide_f: (f32, f32) -> f32 {
'entry(%a: f32, %b: f32):
    %q = divide %a: f32, %b: f32
    return %q: f32
}

func @call_ext: (f32) -> f32 {
'entry(%x: f32):
    %r = apply @ext(%x: f32): (f32) -> f32
    return %r: f32
}

func @call_null: (f32) -> f32 {
'entry(%x: f32):
    %n = literal null: (f32) -> f32
    %r = apply %n(%x: f32): (f32) -> f32
    return %r: f32
}

func @escape: () -> *f32 {
'entry():
    %p = allocateStack f32 count 1
    return %p: *f32
}

func @dangling: () -> f32 {
'entry():
    %p = apply @escape(): () -> *f32
    %v = load %p: *f32
    return %v: f32
}

func @past_end: (i64) -> f32 {
'entry(%i: i64):
    %p = allocateHeap f32 count 2: i64
    %q = elementPointer %p: *f32 at %i: i64
    %v = load %q: *f32
    return %v: f32
}

func @double_free: () -> () {
'entry():
    %p = allocateHeap f32 count 1: i64
    deallocate %p: *f32
    deallocate %p: *f32
    return
}

func @release_twice: () -> () {
'entry():
    %b = allocateBox f32
    release %b: box{f32}
    release %b: box{f32}
    return
}

func @pop_empty: () -> f32 {
'entry():
    %s = createStack
    %v = pop f32 from %s: stack
    return %v: f32
}

func @pop_wrong: (<2 x f32>) -> f32 {
'entry(%x: <2 x f32>):
    %s = createStack
    push %x: <2 x f32> to %s: stack
    %v = pop f32 from %s: stack
    return %v: f32
}

func @after_destroy: (f32) -> () {
'entry(%x: f32):
    %s = createStack
    destroyStack %s: stack
    push %x: f32 to %s: stack
    return
}

func @partial: ($E) -> f32 {
'entry(%e: $E):
    branchEnum %e: $E case ?one 'one
'one(%v: f32):
    return %v: f32
}

func @bad_random: () -> <3 x i32> {
'entry():
    %r = random 3 from 5: i32 upto 5: i32
    return %r: <3 x i32>
}

func @mat: (<2 x 3 x f32>, <3 x 4 x f32>) -> <2 x 4 x f32> {
'entry(%a: <2 x 3 x f32>, %b: <3 x 4 x f32>):
    %r = dot %a: <2 x 3 x f32>, %b: <3 x 4 x f32>
    return %r: <2 x 4 x f32>
}
"""

M = parse_module(textwrap.dedent(SRC), "t.dl")
V2 = np.zeros(2, np.float32)


def fails(name: str, args: list, *fragments: str, module=M, **kw) -> InterpreterError:
    with pytest.raises(InterpreterError) as info:
        run_function(module, name, args, **kw)
    text = str(info.value)
    for f in fragments:
        assert f in text, f"{f!r} not in {text!r}"
    return info.value


@pytest.mark.parametrize(
    "name,args,fragments",
    [
        ("nope", [], ["no function @nope"]),
        ("f", [V2], ["@f takes 2 arguments, 1 given"]),
        ("f", [np.zeros(3, np.float32), 0], ["argument 0 of @f", "<2 x f32>", "shape (3,)"]),
        ("f", [np.zeros(2, np.float64), 0], ["argument 0 of @f", "dtype float64"]),
        ("f", [V2, 1.5], ["argument 1 of @f", "expected i32", "dtype float64"]),
        ("f", [V2, "x"], ["argument 1 of @f", "expected i32"]),
        ("f", [[[1.0, 2.0], [3.0]], 0], ["argument 0 of @f", "irregular"]),
        ("takes", [{"b": 1.0}, ("two", ()), (1.0, 2)], ["argument 0 of @takes", "$P"]),
        ("takes", [{"a": 1.0}, ("three", ()), (1.0, 2)], ["argument 1", "no case ?three"]),
        ("takes", [{"a": 1.0}, ("one", ()), (1.0, 2)], ["?one takes 1 values, got 0"]),
        ("takes", [{"a": 1.0}, ("two", ()), (1.0,)], ["argument 2", "got 1 elements"]),
    ],
)
def test_bad_arguments(name, args, fragments):
    fails(name, args, *fragments)


def test_good_arguments_are_converted():
    assert run_function(M, "f", [[1, 2], np.int32(1)]) == 2
    assert run_function(M, "takes", [{"a": 1}, EnumValue("two"), (1.0, 2)]) == ()


def test_trap_names_its_location():
    err = fails("trapping", [True], "trap at t.dl:")
    assert err.trap and err.function == "trapping" and str(err).startswith("trap at t.dl:")
    assert run_function(M, "trapping", [False]) == 1.0


@pytest.mark.parametrize(
    "name,args,fragments",
    [
        ("f", [V2, 2], ["t.dl:", "in @f, extract", "index 2 is out of bounds"]),
        ("f", [V2, -1], ["index -1 is out of bounds"]),
        ("insert_at", [[1.0, 2.0, 3.0], 3], ["in @insert_at, insert", "out of bounds for array"]),
        ("past_end", [2], ["in @past_end, load", "out of bounds"]),
        ("past_end", [-1], ["out of bounds"]),
    ],
)
def test_out_of_bounds(name, args, fragments):
    fails(name, args, *fragments)
    assert run_function(M, "f", [np.array([1, 2], np.float32), 1]) == 2


def test_errors_in_callees_say_where_they_were_called_from():
    err = fails(
        "caller", [0], "in @divide, divide: integer division by zero", "called from @caller"
    )
    assert err.loc is not None and err.opcode == "divide"


@pytest.mark.parametrize(
    "name,fragments",
    [
        ("call_ext", ["cannot call @ext", "[extern]"]),
        ("divide_f_grad", ["gradient declaration without a body"]),
        ("call_null", ["null function"]),
    ],
)
def test_calls_without_a_body(name, fragments):
    args = [1.0, 2.0] if name == "divide_f_grad" else [1.0]
    fails(name, args, *fragments)


def test_runaway_recursion():
    err = fails("forever", [0], "call depth limit 1000 exceeded calling @forever", "988 more calls")
    assert len(err.call_sites) == 999 and len(str(err).splitlines()) == 13
    fails("forever", [0], "call depth limit 20 exceeded", max_depth=20)


@pytest.mark.parametrize(
    "name,args,fragments",
    [
        ("dangling", [], ["in @dangling, load", "use of stack memory after it was deallocated"]),
        ("double_free", [], ["deallocated twice"]),
        ("release_twice", [], ["in @release_twice, release", "after it was deallocated"]),
        ("pop_empty", [], ["pop from an empty AD stack"]),
        ("pop_wrong", [V2], ["popped value: expected f32"]),
        ("after_destroy", [1.0], ["after destroyStack"]),
        ("bad_random", [], ["random range [5, 5) is empty"]),
    ],
)
def test_memory_and_stack_errors(name, args, fragments):
    fails(name, args, *fragments)


def test_a_literal_that_does_not_fit_its_type():
    """The parser and the verifier refuse `300: i8`; IR that skipped them (a pass's output run
    unverified) fails here by the same rule (dlvm.ir.literals.fits)."""
    text = 'module "t"\nstage raw\n\nfunc @too_big: () -> i8 {\n\'entry():\n'
    m = parse_module(text + "    %v = add 3: i8, 1: i8\n    return %v: i8\n}\n", "t.dl")
    three = LiteralValue(ScalarLiteral(3), scalar(DataType.I8))
    add = m.function_named("too_big").blocks[0].instructions[0]
    add.map_values(lambda v: LiteralValue(ScalarLiteral(300), v.type) if v == three else v)
    fails("too_big", [], "in @too_big, add", "literal 300 does not fit i8", module=m)


def test_missing_enum_case():
    fails("partial", [EnumValue("two")], "branchEnum has no case for ?two")


def test_internal_failures_are_located_errors():
    m = parse_module(textwrap.dedent(SRC), "t.dl")
    dot = m.function_named("mat").blocks[0].instructions[0]
    a, b = np.ones((2, 3), np.float32), np.ones((3, 4), np.float32)
    assert run_function(m, "mat", [a, b]).shape == (2, 4)
    dot.type = TensorType((2, 5), dot.type.dtype)  # an ill-typed instruction
    fails("mat", [a, b], "in @mat, dot", "result has shape (2, 4)", module=m)
    dot.operands = [dot.operands[1], dot.operands[0]]  # shapes no longer line up
    err = fails("mat", [a, b], "in @mat, dot", "ValueError", module=m)
    assert isinstance(err.__cause__, ValueError)


def test_max_depth_is_per_interpreter_and_recovers():
    interp = Interpreter(M, max_depth=5)
    with pytest.raises(InterpreterError):
        interp.run("forever", [0])
    assert interp.depth == 0 and interp.run("trapping", [False]) == 1.0
