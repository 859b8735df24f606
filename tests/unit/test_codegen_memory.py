"""Host code against the interpreter on random inputs: memory (global variables, stack and heap
allocations, boxes and their counts, loads, stores, element pointers, overlapping copies),
structs, enums and branchEnum, arrays and tuples, function values (called, stored, passed as a
reduction's combinator), pointers on the AD tape, `trap`, and the failures the interpreter
reports. Functions taking pointers, boxes, structs or function values cannot be entry points
(the C ABI passes tensors): each entry below makes such values, passes them on and returns
tensors. One library holds every function (one build, and one more cut into parts)."""

from __future__ import annotations

import numpy as np
import pytest
from irlib import ir_library

import dlvm
from dlvm.codegen import parallel
from dlvm.interp import Interpreter, InterpreterError, run_function
from dlvm.ir import parse_module
from dlvm.runtime import Status

SOURCE = """module "memory"
stage optimizable

enum $Shape {
    ?circle(f32)
    ?rect(f32, <2 x f32>)
    ?empty()
}

enum $List {
    ?nil()
    ?cons(f32, box{$List})
}

struct $P {
    #w: <3 x 5 x f32>
    #b: f32
    #n: i64
}

var @counter: i64
var @table: <3 x 5 x f32>

func @bump: (i64, <5 x f32>) -> (i64, <3 x 5 x f32>) {
'entry(%by: i64, %row: <5 x f32>):
    %old = load @counter: *i64
    %new = add %old: i64, %by: i64
    store %new: i64 to @counter: *i64
    %p = elementPointer @table: *<3 x 5 x f32> at 0, 1
    %q = load %p: *<5 x f32>
    %q1 = add %q: <5 x f32>, %row: <5 x f32>
    store %q1: <5 x f32> to %p: *<5 x f32>
    %t = load @table: *<3 x 5 x f32>
    %r = literal (%new: i64, %t: <3 x 5 x f32>): (i64, <3 x 5 x f32>)
    return %r: (i64, <3 x 5 x f32>)
}

func @buffers: (<7 x f32>, i64) -> (<7 x f32>, f32, <2 x f32>) {
'entry(%x: <7 x f32>, %k: i64):
    %s = allocateStack f32 count 7
    %h = allocateHeap f32 count 7: i64
    branch 'fill(0: i64)
'fill(%i: i64):
    %more = lessThan %i: i64, 7: i64
    conditional %more: bool then 'put() else 'done()
'put():
    %xi = extract %i: i64 from %x: <7 x f32>
    %si = elementPointer %s: *f32 at %i: i64
    store %xi: f32 to %si: *f32
    %i1 = add %i: i64, 1: i64
    branch 'fill(%i1: i64)
'done():
    copy from %s: *f32 to %h: *f32 count 7: i64
    %h1 = elementPointer %h: *f32 at 1
    copy from %h: *f32 to %h1: *f32 count 3: i64
    %hk = elementPointer %h: *f32 at %k: i64
    %a = load %hk: *f32
    %b = multiply %a: f32, 2: f32
    store %b: f32 to %hk: *f32
    %t = allocateStack <2 x f32> count 3
    %t2 = elementPointer %t: *<2 x f32> at 2, 1
    store %a: f32 to %t2: *f32
    %t2v = elementPointer %t: *<2 x f32> at 2
    %tv = load %t2v: *<2 x f32>
    branch 'gather(0: i64, zero: <7 x f32>)
'gather(%j: i64, %acc: <7 x f32>):
    %again = lessThan %j: i64, 7: i64
    conditional %again: bool then 'take() else 'out()
'take():
    %hj = elementPointer %h: *f32 at %j: i64
    %v = load %hj: *f32
    %acc1 = insert %v: f32 to %acc: <7 x f32> at %j: i64
    %j1 = add %j: i64, 1: i64
    branch 'gather(%j1: i64, %acc1: <7 x f32>)
'out():
    deallocate %h: *f32
    %r = literal (%acc: <7 x f32>, %a: f32, %tv: <2 x f32>): (<7 x f32>, f32, <2 x f32>)
    return %r: (<7 x f32>, f32, <2 x f32>)
}

func @boxed: (f32) -> box{f32} {
'entry(%x: f32):
    %b = allocateBox f32
    %p = projectBox %b: box{f32}
    store %x: f32 to %p: *f32
    return %b: box{f32}
}

func @boxes: (f32, <5 x f32>) -> ((f32, <5 x f32>), f32) {
'entry(%x: f32, %v: <5 x f32>):
    %b = allocateBox (f32, <5 x f32>)
    %p = projectBox %b: box{(f32, <5 x f32>)}
    %p1 = elementPointer %p: *(f32, <5 x f32>) at 0, 1
    store %v: <5 x f32> to %p1: *<5 x f32>
    %p0 = elementPointer %p: *(f32, <5 x f32>) at 0, 0
    store %x: f32 to %p0: *f32
    retain %b: box{(f32, <5 x f32>)}
    release %b: box{(f32, <5 x f32>)}
    %t = load %p: *(f32, <5 x f32>)
    release %b: box{(f32, <5 x f32>)}
    %c = apply @boxed(%x: f32): (f32) -> box{f32}
    %cp = projectBox %c: box{f32}
    %y = load %cp: *f32
    deallocate %c: box{f32}
    %r = literal (%t: (f32, <5 x f32>), %y: f32): ((f32, <5 x f32>), f32)
    return %r: ((f32, <5 x f32>), f32)
}

func @list_fold: (<6 x f32>) -> f32 {
'entry(%x: <6 x f32>):
    %nil = allocateBox $List
    branch 'build(0: i64, %nil: box{$List})
'build(%i: i64, %tail: box{$List}):
    %more = lessThan %i: i64, 6: i64
    conditional %more: bool then 'push() else 'walk(%tail: box{$List}, 0: f32)
'push():
    %xi = extract %i: i64 from %x: <6 x f32>
    %node = allocateBox $List
    %np = projectBox %node: box{$List}
    %cell = literal ?cons(%xi: f32, %tail: box{$List}): $List
    store %cell: $List to %np: *$List
    %i1 = add %i: i64, 1: i64
    branch 'build(%i1: i64, %node: box{$List})
'walk(%cur: box{$List}, %acc: f32):
    %cp = projectBox %cur: box{$List}
    %c = load %cp: *$List
    release %cur: box{$List}
    branchEnum %c: $List case ?nil 'end case ?cons 'step
'step(%h: f32, %next: box{$List}):
    %half = multiply %acc: f32, 0.5: f32
    %acc1 = add %half: f32, %h: f32
    branch 'walk(%next: box{$List}, %acc1: f32)
'end():
    return %acc: f32
}

func @update: ($P, i64, f32) -> ($P, f32, <5 x f32>, f32) {
'entry(%p: $P, %i: i64, %v: f32):
    %b = extract #b from %p: $P
    %row = extract #w, %i: i64 from %p: $P
    %p1 = insert %v: f32 to %p: $P at #w, 1, %i: i64
    %e = extract #w, 1, %i: i64 from %p1: $P
    %t = literal (%p1: $P, %b: f32, %row: <5 x f32>, %e: f32): ($P, f32, <5 x f32>, f32)
    return %t: ($P, f32, <5 x f32>, f32)
}

func @structs: (<3 x 5 x f32>, f32, i64) -> (<3 x 5 x f32>, f32, <5 x f32>, f32, i64) {
'entry(%w: <3 x 5 x f32>, %b: f32, %i: i64):
    %p = literal {#w = %w: <3 x 5 x f32>, #b = %b: f32, #n = %i: i64}: $P
    %q = apply @update(%p: $P, %i: i64, %b: f32): ($P, i64, f32) -> ($P, f32, <5 x f32>, f32)
    %p1 = extract 0 from %q: ($P, f32, <5 x f32>, f32)
    %w1 = extract #w from %p1: $P
    %b1 = extract 1 from %q: ($P, f32, <5 x f32>, f32)
    %row = extract 2 from %q: ($P, f32, <5 x f32>, f32)
    %e = extract 3 from %q: ($P, f32, <5 x f32>, f32)
    %n = extract #n from %p1: $P
    %r = literal (%w1: <3 x 5 x f32>, %b1: f32, %row: <5 x f32>,
        %e: f32, %n: i64): (<3 x 5 x f32>, f32, <5 x f32>, f32, i64)
    return %r: (<3 x 5 x f32>, f32, <5 x f32>, f32, i64)
}

func @area: ($Shape) -> f32 {
'entry(%s: $Shape):
    branchEnum %s: $Shape case ?circle 'c case ?rect 'r case ?empty 'e
'c(%radius: f32):
    %a = multiply %radius: f32, %radius: f32
    return %a: f32
'r(%w: f32, %h: <2 x f32>):
    %h0 = reduce %h: <2 x f32> by add init 0: f32 along 0
    %ra = multiply %w: f32, %h0: f32
    return %ra: f32
'e():
    return -1: f32
}

func @shapes: (f32, <2 x f32>) -> <3 x f32> {
'entry(%x: f32, %v: <2 x f32>):
    %c = literal ?circle(%x: f32): $Shape
    %r = literal ?rect(%x: f32, %v: <2 x f32>): $Shape
    %e = literal ?empty(): $Shape
    %a0 = apply @area(%c: $Shape): ($Shape) -> f32
    %a1 = apply @area(%r: $Shape): ($Shape) -> f32
    %a2 = apply @area(%e: $Shape): ($Shape) -> f32
    %t = literal <%a0: f32, %a1: f32, %a2: f32>: <3 x f32>
    return %t: <3 x f32>
}

func @arrays: (<4 x i32>, i64) -> (i32, <4 x i32>, i32) {
'entry(%x: <4 x i32>, %k: i64):
    %x0 = extract 0 from %x: <4 x i32>
    %x1 = extract 1 from %x: <4 x i32>
    %a = literal [%x0: i32, %x1: i32, 7: i32]: [3 x i32]
    %y = extract %k: i64 from %a: [3 x i32]
    %a1 = insert %x1: i32 to %a: [3 x i32] at 0
    %t = literal (%y: i32,
        (%x: <4 x i32>, %a1: [3 x i32]): (<4 x i32>, [3 x i32])): (i32, (<4 x i32>, [3 x i32]))
    %t1 = insert %y: i32 to %t: (i32, (<4 x i32>, [3 x i32])) at 1, 1, 2
    %z = extract 1, 1, 2 from %t1: (i32, (<4 x i32>, [3 x i32]))
    %w = extract 1, 0 from %t1: (i32, (<4 x i32>, [3 x i32]))
    %u = extract 1, 1, 0 from %t1: (i32, (<4 x i32>, [3 x i32]))
    %r = literal (%z: i32, %w: <4 x i32>, %u: i32): (i32, <4 x i32>, i32)
    return %r: (i32, <4 x i32>, i32)
}

func @square: (f32) -> f32 {
'entry(%x: f32):
    %r = multiply %x: f32, %x: f32
    return %r: f32
}

func @negated: (f32) -> f32 {
'entry(%x: f32):
    %r = subtract 1: f32, %x: f32
    return %r: f32
}

func @twice: ((f32) -> f32, f32) -> f32 {
'entry(%f: (f32) -> f32, %x: f32):
    %y = apply %f(%x: f32): (f32) -> f32
    %z = apply %f(%y: f32): (f32) -> f32
    return %z: f32
}

func @functions: (f32, bool) -> (f32, f32) {
'entry(%x: f32, %c: bool):
    %a = apply @twice(@square: (f32) -> f32, %x: f32): ((f32) -> f32, f32) -> f32
    conditional %c: bool then 'pick(@square: (f32) -> f32) else 'pick(@negated: (f32) -> f32)
'pick(%f: (f32) -> f32):
    %cell = allocateStack (f32) -> f32 count 1
    store %f: (f32) -> f32 to %cell: *(f32) -> f32
    %g = load %cell: *(f32) -> f32
    %b = apply @twice(%g: (f32) -> f32, %x: f32): ((f32) -> f32, f32) -> f32
    %r = literal (%a: f32, %b: f32): (f32, f32)
    return %r: (f32, f32)
}

func @tape: (<3 x f32>) -> (<3 x f32>, f32) {
'entry(%x: <3 x f32>):
    %s = createStack
    %h = allocateHeap <3 x f32> count 1: i64
    store %x: <3 x f32> to %h: *<3 x f32>
    push %h: *<3 x f32> to %s: stack
    push 2: f32 to %s: stack
    %two = pop f32 from %s: stack
    %p = pop *<3 x f32> from %s: stack
    destroyStack %s: stack
    %v = load %p: *<3 x f32>
    deallocate %p: *<3 x f32>
    %r = literal (%v: <3 x f32>, %two: f32): (<3 x f32>, f32)
    return %r: (<3 x f32>, f32)
}

func @ping_pong: (<5 x f32>) -> (<5 x f32>, <5 x f32>) {
'entry(%x: <5 x f32>):
    %a = allocateHeap <5 x f32> count 1: i64
    %b = allocateHeap <5 x f32> count 1: i64
    store %x: <5 x f32> to %a: *<5 x f32>
    branch 'loop(0: i64, %a: *<5 x f32>, %b: *<5 x f32>)
'loop(%i: i64, %src: *<5 x f32>, %dst: *<5 x f32>):
    %more = lessThan %i: i64, 3: i64
    conditional %more: bool then 'step() else 'done()
'step():
    %v = load %src: *<5 x f32>
    %w = multiply %v: <5 x f32>, 2: f32
    %w1 = add %w: <5 x f32>, %x: <5 x f32>
    store %w1: <5 x f32> to %dst: *<5 x f32>
    %i1 = add %i: i64, 1: i64
    branch 'loop(%i1: i64, %dst: *<5 x f32>, %src: *<5 x f32>)
'done():
    %r0 = load %src: *<5 x f32>
    %r1 = load %dst: *<5 x f32>
    deallocate %a: *<5 x f32>
    deallocate %b: *<5 x f32>
    %r = literal (%r0: <5 x f32>, %r1: <5 x f32>): (<5 x f32>, <5 x f32>)
    return %r: (<5 x f32>, <5 x f32>)
}

func @blend: (f32, f32) -> f32 {
'entry(%acc: f32, %x: f32):
    %h = multiply %acc: f32, 0.5: f32
    %r = add %h: f32, %x: f32
    return %r: f32
}

func @fold_with: ((f32, f32) -> f32, <5 x 3 x f32>) -> <3 x f32> {
'entry(%f: (f32, f32) -> f32, %x: <5 x 3 x f32>):
    %r = reduce %x: <5 x 3 x f32> by %f: (f32, f32) -> f32 init 1: f32 along 0
    return %r: <3 x f32>
}

func @fold: (<5 x 3 x f32>) -> <3 x f32> {
'entry(%x: <5 x 3 x f32>):
    %r = apply @fold_with(@blend: (f32, f32) -> f32,
        %x: <5 x 3 x f32>): ((f32, f32) -> f32, <5 x 3 x f32>) -> <3 x f32>
    return %r: <3 x f32>
}

func @partial: (f32) -> f32 {
'entry(%x: f32):
    %s = literal ?rect(%x: f32, 0: <2 x f32>): $Shape
    %c = literal ?circle(%x: f32): $Shape
    %pos = greaterThan %x: f32, 0: f32
    conditional %pos: bool then 'go(%c: $Shape) else 'go(%s: $Shape)
'go(%v: $Shape):
    branchEnum %v: $Shape case ?circle 'c
'c(%r: f32):
    return %r: f32
}

func @fails: (f32) -> f32 {
'entry(%x: f32):
    %bad = lessThan %x: f32, 0: f32
    conditional %bad: bool then 'stop() else 'go()
'stop():
    trap
    return %x: f32
'go():
    return %x: f32
}

func @checked: (f32) -> f32 {
'entry(%x: f32):
    %y = apply @fails(%x: f32): (f32) -> f32
    %r = add %y: f32, 1: f32
    return %r: f32
}

func @null_load: (f32) -> f32 {
'entry(%x: f32):
    %p = literal null: *f32
    %c = greaterThan %x: f32, 0: f32
    conditional %c: bool then 'read() else 'skip()
'read():
    %v = load %p: *f32
    return %v: f32
'skip():
    return %x: f32
}

func @heap_count: (i64) -> f32 {
'entry(%n: i64):
    %h = allocateHeap f32 count %n: i64
    %v = load %h: *f32
    deallocate %h: *f32
    return %v: f32
}
"""


@pytest.fixture(scope="module", params=["whole", "split"])
def library(request, tmp_path_factory):
    """The library built from one LLVM module, and from one cut into as many parts as it can
    be (dlvm.codegen.parallel): globals, function values and helpers then cross parts."""
    with pytest.MonkeyPatch.context() as patch:
        if request.param == "split":
            patch.setattr(parallel, "PART_SIZE", 1)
        path = ir_library(SOURCE, "memory", tmp_path_factory.mktemp("memory"))
    with dlvm.load(path) as lib:
        yield lib, parse_module(SOURCE, "memory.dl")


def floats(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.uniform(-2, 2, shape).astype(np.float32)


# entry: its arguments, drawn from a generator
CASES = {
    "buffers": lambda rng: [floats(rng, 7), 5],
    "boxes": lambda rng: [floats(rng), floats(rng, 5)],
    "list_fold": lambda rng: [floats(rng, 6)],
    "structs": lambda rng: [floats(rng, 3, 5), floats(rng), 2],
    "shapes": lambda rng: [floats(rng), floats(rng, 2)],
    "arrays": lambda rng: [rng.integers(-9, 9, 4).astype(np.int32), 1],
    "functions-square": lambda rng: [floats(rng), True],
    "functions-negated": lambda rng: [floats(rng), False],
    "tape": lambda rng: [floats(rng, 3)],
    "ping_pong": lambda rng: [floats(rng, 5)],
    "fold": lambda rng: [floats(rng, 5, 3)],
    "partial": lambda rng: [np.float32(rng.uniform(0.5, 2))],
    "checked": lambda rng: [np.float32(rng.uniform(0.5, 2))],
}


@pytest.mark.parametrize("index, case", list(enumerate(CASES)), ids=list(CASES))
def test_host_code_matches_interpreter(library, index, case):
    lib, reference = library
    name = case.split("-")[0]
    inputs = CASES[case](np.random.default_rng(index))
    expected = _flat(run_function(reference, name, inputs))
    got = getattr(lib, name)(*inputs)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        g, e = np.asarray(g), np.asarray(e)
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=1e-6)


def _flat(value) -> tuple:
    """A result as the library returns it: a tuple flattened, one array per element."""
    if isinstance(value, tuple):
        return tuple(x for v in value for x in _flat(v))
    return (value,)


def test_only_functions_of_tensors_are_entries(library):
    lib, _ = library
    assert {"buffers", "boxes", "checked"} <= set(lib.entries)
    assert not {"boxed", "update", "area", "twice", "fold_with"} & set(lib.entries)


def test_global_variables_keep_their_values_between_calls(library):
    lib, reference = library
    interp = Interpreter(reference)
    rng = np.random.default_rng(7)
    for by in (3, -11, 5):
        row = floats(rng, 5)
        want_count, want_table = interp.run("bump", [by, row])
        count, table = lib.bump(by, row)
        assert count == want_count
        np.testing.assert_array_equal(table, want_table)


def test_trap_fails_the_entry_with_its_location(library):
    lib, reference = library
    with pytest.raises(InterpreterError) as expected:
        run_function(reference, "checked", [-1.0])
    with pytest.raises(dlvm.LibraryError) as got:
        lib.checked(-1.0)
    assert got.value.status is Status.TRAP
    where = str(expected.value).splitlines()[0]  # "trap at memory.dl:L:C in @fails"
    assert where.startswith("trap at memory.dl:")
    assert got.value.message == f"memory_checked: {where}"
    assert lib.checked(2.0) == 3.0  # the model still works


@pytest.mark.parametrize(
    "name, args",
    [
        ("null_load", [1.0]),
        ("heap_count", [0]),
        ("heap_count", [-3]),
        ("partial", [-2.0]),
        ("arrays", [np.arange(4, dtype=np.int32), 3]),
        ("structs", [np.zeros((3, 5), np.float32), 1.0, 3]),
    ],
)
def test_run_time_errors_say_what_the_interpreter_says(library, name, args):
    """The message of the innermost failure (the interpreter adds the calls it went through)."""
    lib, reference = library
    with pytest.raises(InterpreterError) as expected:
        run_function(reference, name, args)
    with pytest.raises(dlvm.LibraryError) as got:
        getattr(lib, name)(*args)
    assert got.value.status is Status.INVALID_ARGUMENT
    assert got.value.message == f"memory_{name}: {str(expected.value).splitlines()[0]}"
