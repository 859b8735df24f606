"""Reference interpreter: whole programs (loops, recursion, higher-order calls), aggregates and
enums, memory, the AD stack, globals and float64 mode."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from dlvm.interp import EnumValue, Interpreter, InterpreterError, run_function
from dlvm.ir import parse_module


def module(src: str):
    return parse_module('module "t"\nstage raw\n\n' + textwrap.dedent(src), "t.dl")


PROGRAMS = module("""
func @sum_below: (i64) -> i64 {
'entry(%n: i64):
    branch 'loop(0: i64, 0: i64)
'loop(%i: i64, %acc: i64):
    %done = greaterThanOrEqual %i: i64, %n: i64
    conditional %done: bool then 'exit(%acc: i64) else 'body()
'body():
    %acc1 = add %acc: i64, %i: i64
    %i1 = add %i: i64, 1: i64
    branch 'loop(%i1: i64, %acc1: i64)
'exit(%r: i64):
    return %r: i64
}

func @factorial_loop: (f64) -> f64 {
'entry(%n: f64):
    branch 'loop(%n: f64, 1: f64)
'loop(%k: f64, %acc: f64):
    %more = greaterThan %k: f64, 1: f64
    conditional %more: bool then 'step() else 'exit()
'step():
    %acc1 = multiply %acc: f64, %k: f64
    %k1 = subtract %k: f64, 1: f64
    branch 'loop(%k1: f64, %acc1: f64)
'exit():
    return %acc: f64
}

func @fib: (i32) -> i32 {
'entry(%n: i32):
    %small = lessThan %n: i32, 2: i32
    conditional %small: bool then 'base() else 'rec()
'base():
    return %n: i32
'rec():
    %n1 = subtract %n: i32, 1: i32
    %n2 = subtract %n: i32, 2: i32
    %a = apply @fib(%n1: i32): (i32) -> i32
    %b = apply @fib(%n2: i32): (i32) -> i32
    %s = add %a: i32, %b: i32
    return %s: i32
}

func @is_even: (i64) -> bool {
'entry(%n: i64):
    %z = equal %n: i64, 0: i64
    conditional %z: bool then 'yes() else 'no()
'yes():
    return true: bool
'no():
    %m = subtract %n: i64, 1: i64
    %r = apply @is_odd(%m: i64): (i64) -> bool
    return %r: bool
}

func @is_odd: (i64) -> bool {
'entry(%n: i64):
    %z = equal %n: i64, 0: i64
    conditional %z: bool then 'no() else 'yes()
'no():
    return false: bool
'yes():
    %m = subtract %n: i64, 1: i64
    %r = apply @is_even(%m: i64): (i64) -> bool
    return %r: bool
}

func @twice: ((<2 x f32>) -> <2 x f32>, <2 x f32>) -> <2 x f32> {
'entry(%f: (<2 x f32>) -> <2 x f32>, %x: <2 x f32>):
    %y = apply %f(%x: <2 x f32>): (<2 x f32>) -> <2 x f32>
    %z = apply %f(%y: <2 x f32>): (<2 x f32>) -> <2 x f32>
    return %z: <2 x f32>
}

func @square: (<2 x f32>) -> <2 x f32> {
'entry(%x: <2 x f32>):
    %y = multiply %x: <2 x f32>, %x: <2 x f32>
    return %y: <2 x f32>
}

func @use_twice: (<2 x f32>) -> <2 x f32> {
'entry(%x: <2 x f32>):
    %r = apply @twice(@square: (<2 x f32>) -> <2 x f32>, %x: <2 x f32>): ((<2 x f32>) -> <2 x f32>, <2 x f32>) -> <2 x f32>
    return %r: <2 x f32>
}

func @nothing: () -> () {
'entry():
    return
}
""")  # noqa: E501


@pytest.mark.parametrize(
    "name,arg,want",
    [
        ("sum_below", 10, 45),
        ("sum_below", 0, 0),
        ("factorial_loop", 10.0, 3628800.0),
        ("fib", 15, 610),
        ("fib", 1, 1),
        ("is_even", 10, True),
        ("is_even", 7, False),
        ("is_odd", 7, True),
        ("is_odd", 300, False),
    ],
)
def test_programs(name, arg, want):
    got = run_function(PROGRAMS, name, [arg])
    assert isinstance(got, np.ndarray) and got.shape == () and got == want


def test_higher_order_call_and_void():
    got = run_function(PROGRAMS, "use_twice", [np.array([2.0, 3.0], np.float32)])
    np.testing.assert_array_equal(got, [16.0, 81.0])
    assert run_function(PROGRAMS, "nothing", []) == ()


def test_deep_recursion_within_limit():
    assert run_function(PROGRAMS, "is_even", [900]) == True  # noqa: E712


def test_plan_cache_follows_revisions():
    interp = Interpreter(PROGRAMS)
    assert interp.run("sum_below", [4]) == 6
    fn = PROGRAMS.function_named("sum_below")
    body = fn.block_named("body")
    add = body.instructions[0]
    body.remove(add)
    add.operands = [add.operands[0], add.operands[0]]  # acc + acc instead of acc + i
    body.insert(0, add)
    try:
        assert interp.run("sum_below", [4]) == 0
    finally:
        body.remove(add)
        add.operands = [add.operands[0], fn.block_named("loop").arguments[0]]
        body.insert(0, add)
    assert interp.run("sum_below", [4]) == 6


# Aggregates and enums ----------------------------------------------------------------------

AGGREGATES = module("""
struct $P {
    #w: <2 x 2 x f32>
    #b: f32
}

enum $Shape {
    ?circle(f32)
    ?rect(f32, f32)
    ?empty()
}

func @area: ($Shape) -> f32 {
'entry(%s: $Shape):
    branchEnum %s: $Shape case ?circle 'c case ?rect 'r case ?empty 'e
'c(%radius: f32):
    %r2 = multiply %radius: f32, %radius: f32
    %a = multiply %r2: f32, 3: f32
    return %a: f32
'r(%w: f32, %h: f32):
    %ra = multiply %w: f32, %h: f32
    return %ra: f32
'e():
    return 0: f32
}

func @make_rect: (f32) -> f32 {
'entry(%x: f32):
    %s = literal ?rect(%x: f32, 2: f32): $Shape
    %a = apply @area(%s: $Shape): ($Shape) -> f32
    return %a: f32
}

func @update: ($P, i64, f32) -> ($P, f32, <2 x f32>, f32) {
'entry(%p: $P, %i: i64, %v: f32):
    %b = extract #b from %p: $P
    %row = extract #w, %i: i64 from %p: $P
    %p1 = insert %v: f32 to %p: $P at #w, 1, %i: i64
    %e = extract #w, 1, %i: i64 from %p1: $P
    %t = literal (%p1: $P, %b: f32, %row: <2 x f32>, %e: f32): ($P, f32, <2 x f32>, f32)
    return %t: ($P, f32, <2 x f32>, f32)
}

func @tuples: ((f32, (i32, bool)), [3 x i32]) -> ((f32, (i32, bool)), i32) {
'entry(%t: (f32, (i32, bool)), %a: [3 x i32]):
    %x = extract 1, 0 from %t: (f32, (i32, bool))
    %y = extract 2 from %a: [3 x i32]
    %s = add %x: i32, %y: i32
    %t1 = insert %s: i32 to %t: (f32, (i32, bool)) at 1, 0
    %r = literal (%t1: (f32, (i32, bool)), %y: i32): ((f32, (i32, bool)), i32)
    return %r: ((f32, (i32, bool)), i32)
}

func @partial: ($Shape) -> f32 {
'entry(%s: $Shape):
    branchEnum %s: $Shape case ?circle 'c
'c(%radius: f32):
    return %radius: f32
}
""")


@pytest.mark.parametrize(
    "shape,want",
    [
        (EnumValue("circle", (2.0,)), 12.0),
        (EnumValue("rect", (2.0, 3.5)), 7.0),
        (("empty", ()), 0.0),
    ],
)
def test_branch_enum_binds_associated_values(shape, want):
    assert run_function(AGGREGATES, "area", [shape]) == want


def test_enum_literal_passed_to_call():
    assert run_function(AGGREGATES, "make_rect", [4.0]) == 8.0


def test_struct_extract_insert_with_value_keys():
    w = np.array([[1, 2], [3, 4]], np.float32)
    p = {"w": w, "b": np.float32(0.5)}
    p1, b, row, e = run_function(AGGREGATES, "update", [p, 1, 9.0])
    assert b == 0.5 and row.tolist() == [3, 4] and e == 9.0
    assert p1["w"].tolist() == [[1, 2], [3, 9]] and p1["b"] == 0.5
    assert w.tolist() == [[1, 2], [3, 4]]  # values are immutable: the input is unchanged


def test_tuple_and_array_keys():
    t = (1.5, (np.int32(4), True))
    (t1, y) = run_function(AGGREGATES, "tuples", [t, [7, 8, 9]])
    assert y == 9 and t1[0] == 1.5 and t1[1][0] == 13 and t1[1][1]


# Memory, boxes, the AD stack and globals ---------------------------------------------------

MEMORY = module("""
var @counter: i64
var @table: <3 x f32>

func @bump: (i64) -> i64 {
'entry(%by: i64):
    %old = load @counter: *i64
    %new = add %old: i64, %by: i64
    store %new: i64 to @counter: *i64
    %p = elementPointer @table: *<3 x f32> at 0, 1
    %q = load %p: *f32
    %q1 = add %q: f32, 1: f32
    store %q1: f32 to %p: *f32
    return %new: i64
}

func @buffers: (<4 x f32>) -> (f32, f32, <2 x f32>) {
'entry(%x: <4 x f32>):
    %s = allocateStack f32 count 4
    %h = allocateHeap f32 count 4: i64
    %x0 = extract 0 from %x: <4 x f32>
    %x3 = extract 3 from %x: <4 x f32>
    store %x0: f32 to %s: *f32
    %s3 = elementPointer %s: *f32 at 3
    store %x3: f32 to %s3: *f32
    copy from %s: *f32 to %h: *f32 count 4: i64
    %h3 = elementPointer %h: *f32 at 3
    %a = load %h3: *f32
    %b = load %h: *f32
    %t = allocateStack <2 x f32> count 1
    %tp = elementPointer %t: *<2 x f32> at 0, 1
    store %a: f32 to %tp: *f32
    %tv = load %t: *<2 x f32>
    deallocate %h: *f32
    %r = literal (%a: f32, %b: f32, %tv: <2 x f32>): (f32, f32, <2 x f32>)
    return %r: (f32, f32, <2 x f32>)
}

func @boxes: (f32) -> f32 {
'entry(%x: f32):
    %b = allocateBox (f32, f32)
    %p = projectBox %b: box{(f32, f32)}
    %p1 = elementPointer %p: *(f32, f32) at 0, 1
    store %x: f32 to %p1: *f32
    retain %b: box{(f32, f32)}
    release %b: box{(f32, f32)}
    %v = load %p1: *f32
    release %b: box{(f32, f32)}
    return %v: f32
}

func @box_use_after_release: () -> f32 {
'entry():
    %b = allocateBox f32
    release %b: box{f32}
    %p = projectBox %b: box{f32}
    %v = load %p: *f32
    return %v: f32
}

func @tape: (f32, <2 x i32>) -> (<2 x i32>, f32) {
'entry(%x: f32, %y: <2 x i32>):
    %s = createStack
    push %x: f32 to %s: stack
    push %y: <2 x i32> to %s: stack
    %a = pop <2 x i32> from %s: stack
    %b = pop f32 from %s: stack
    destroyStack %s: stack
    %r = literal (%a: <2 x i32>, %b: f32): (<2 x i32>, f32)
    return %r: (<2 x i32>, f32)
}
""")


def test_globals_persist_per_interpreter():
    interp = Interpreter(MEMORY)
    assert interp.run("bump", [5]) == 5
    assert interp.run("bump", [2]) == 7
    assert interp.global_value("counter") == 7
    assert interp.global_value("table").tolist() == [0, 2, 0]
    assert run_function(MEMORY, "bump", [1]) == 1  # a fresh interpreter starts from zero


def test_stack_heap_copy_and_element_pointers():
    a, b, tv = run_function(MEMORY, "buffers", [np.array([1, 2, 3, 4], np.float32)])
    assert a == 4 and b == 1 and tv.tolist() == [0, 4]


def test_boxes_and_refcounts():
    assert run_function(MEMORY, "boxes", [2.5]) == 2.5


def test_box_memory_dies_with_its_last_release():
    with pytest.raises(InterpreterError, match="use of box memory after it was deallocated"):
        run_function(MEMORY, "box_use_after_release", [])


def test_ad_stack_is_lifo():
    a, b = run_function(MEMORY, "tape", [1.5, [3, 4]])
    assert a.tolist() == [3, 4] and a.dtype == np.int32 and b == 1.5


# float64 mode ------------------------------------------------------------------------------

PRECISION = module("""
func @f: (f32, f16) -> (f32, f32, <2 x f32>) {
'entry(%x: f32, %h: f16):
    %big = add %x: f32, 100000000: f32
    %back = subtract %big: f32, 100000000: f32
    %wide = dataTypeCast %h: f16 to f32
    %third = literal 0.1: <2 x f32>
    %r = literal (%back: f32, %wide: f32, %third: <2 x f32>): (f32, f32, <2 x f32>)
    return %r: (f32, f32, <2 x f32>)
}
""")


def test_float64_mode():
    back, wide, third = run_function(PRECISION, "f", [1.0, np.float16(0.1)])
    assert back.dtype == np.float32 and back == 0.0  # 1e8 + 1 rounds away in f32
    assert wide.dtype == np.float32 and third.dtype == np.float32
    back, wide, third = run_function(PRECISION, "f", [np.float32(1.0), 0.1], float64=True)
    assert back.dtype == np.float64 and back == 1.0
    assert wide.dtype == np.float64 and wide == 0.1  # the f16 input is taken as f64
    assert third.dtype == np.float64 and third[0] == 0.1
