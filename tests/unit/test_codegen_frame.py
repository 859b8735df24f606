"""Memory planning of host frames (dlvm/codegen/frame.py): values whose lifetimes do not
overlap share bytes, a value never shares with one live at its definition or read by the
instruction that defines it, except that a pointwise kernel may write over an input it reads
only at the index it writes and that dies there (dlvm/codegen/inplace.py), values carried
around a loop keep their storage, and the values returned are computed in the caller's result
buffers."""

from __future__ import annotations

import numpy as np

import dlvm
from dlvm.codegen.build import build_library, schedule
from dlvm.codegen.frame import FramePlan, storage_size
from dlvm.codegen.inplace import aligned_inputs
from dlvm.codegen.spec import module_spec
from dlvm.interp import run_function
from dlvm.ir import parse_module
from dlvm.transforms.compute_generation import ComputeGeneration

# Four kernels in a row, each reading the last at the index it writes (written at stage compute:
# compute generation would fuse them into one).
CHAIN = """module "chain"
stage compute

[compute]
func @f_exp: (<1024 x f32>) -> <1024 x f32> {
'entry(%x: <1024 x f32>):
    %a = exp %x: <1024 x f32>
    return %a: <1024 x f32>
}

[compute]
func @f_tanh: (<1024 x f32>) -> <1024 x f32> {
'entry(%a: <1024 x f32>):
    %a2 = add %a: <1024 x f32>, %a: <1024 x f32>
    %b = tanh %a2: <1024 x f32>
    return %b: <1024 x f32>
}

[compute]
func @f_sin: (<1024 x f32>) -> <1024 x f32> {
'entry(%b: <1024 x f32>):
    %b2 = add %b: <1024 x f32>, %b: <1024 x f32>
    %c = sin %b2: <1024 x f32>
    return %c: <1024 x f32>
}

[compute]
func @f_twice: (<1024 x f32>) -> <1024 x f32> {
'entry(%c: <1024 x f32>):
    %c2 = add %c: <1024 x f32>, %c: <1024 x f32>
    return %c2: <1024 x f32>
}

func @f: (<1024 x f32>) -> <1024 x f32> {
'entry(%x: <1024 x f32>):
    %a = apply @f_exp(%x: <1024 x f32>): (<1024 x f32>) -> <1024 x f32>
    %b = apply @f_tanh(%a: <1024 x f32>): (<1024 x f32>) -> <1024 x f32>
    %c = apply @f_sin(%b: <1024 x f32>): (<1024 x f32>) -> <1024 x f32>
    %c2 = apply @f_twice(%c: <1024 x f32>): (<1024 x f32>) -> <1024 x f32>
    return %c2: <1024 x f32>
}
"""

LOOP = """module "loop"
stage optimizable

func @f: (<256 x f32>, i64) -> <256 x f32> {
'entry(%x: <256 x f32>, %n: i64):
    branch 'head(%x: <256 x f32>, 0: i64)
'head(%h: <256 x f32>, %i: i64):
    %more = lessThan %i: i64, %n: i64
    conditional %more: bool then 'body() else 'done()
'body():
    %t = tanh %h: <256 x f32>
    %u = add %t: <256 x f32>, %h: <256 x f32>
    %j = add %i: i64, 1: i64
    branch 'head(%u: <256 x f32>, %j: i64)
'done():
    return %h: <256 x f32>
}
"""


def plan_of(text: str, in_place: bool = True) -> FramePlan:
    module = parse_module(text, "m.dl")
    ComputeGeneration().run(module)
    return FramePlan(module.function_named("f"), in_place=in_place)


def named(plan: FramePlan, name: str):
    return next(v for v in plan.order if getattr(v, "name", None) == name)


def overlap(plan: FramePlan, a, b) -> bool:
    sa, sb = storage_size(a.type), storage_size(b.type)
    oa, ob = plan.offset[a], plan.offset[b]
    return oa < ob + sb and ob < oa + sa


def test_a_chain_of_kernels_reuses_storage():
    plan = plan_of(CHAIN, in_place=False)
    values = plan.order
    assert len(values) == 3  # exp, add+tanh, add+sin; the last add writes the caller's result
    assert plan.size == 2 * 4096  # two buffers take turns, not three
    for v in values:  # no value shares with one it reads
        for u in v.operands[1:]:
            if u in plan.offset:
                assert not overlap(plan, v, u)


def test_values_carried_around_a_loop_keep_their_storage():
    plan = plan_of(LOOP)
    live_together = [
        (a, b) for a in plan.order for b in plan.order if a is not b and b in plan.interferes[a]
    ]
    assert live_together
    for a, b in live_together:
        assert not overlap(plan, a, b), (a, b)
    h = plan.fn.blocks[1].arguments[0]
    u = named(plan, "u")
    assert u in plan.interferes[h]  # %u is written to %h's successor slot while %h is read
    assert h in plan.shares[u] and not overlap(plan, u, h)  # so not in place, though %h dies


# Values computed in the caller's result buffers ------------------------------------------------

RETURNED = """module "returned"
stage optimizable

func @f: (<256 x f32>) -> (<256 x f32>, f32, <256 x f32>, <256 x f32>) {
'entry(%x: <256 x f32>):
    %a = exp %x: <256 x f32>
    %r = reverse %a: <256 x f32> along 0
    %b = add %a: <256 x f32>, %r: <256 x f32>
    %d = dot %a: <256 x f32>, %x: <256 x f32>
    %t = literal (%b: <256 x f32>, %d: f32, %a: <256 x f32>, %b: <256 x f32>): (<256 x f32>, f32, <256 x f32>, <256 x f32>)
    return %t: (<256 x f32>, f32, <256 x f32>, <256 x f32>)
}
"""  # noqa: E501


def test_returned_values_are_computed_in_the_callers_buffers(tmp_path):
    plan = plan_of(RETURNED)
    a, b, d = (next(i for i in plan.fn.instructions() if i.name == n) for n in "abd")
    assert plan.returned == {b: 0, d: 1, a: 2}  # %b's second place is a copy of the first
    assert plan.order == [] and plan.size == 0
    assert plan_of(LOOP).returned == {}  # a block argument is copied
    module = parse_module(RETURNED, "returned.dl")
    reference = parse_module(RETURNED, "returned.dl")
    path = tmp_path / "returned.so"
    build_library(schedule(module), module_spec(module, "test"), path)
    x = np.random.default_rng(5).uniform(-1, 1, 256).astype(np.float32)
    with dlvm.load(path) as lib:
        got = lib.f(x)
    for g, e in zip(got, run_function(reference, "f", [x]), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=2e-6, atol=2e-6)


# In-place kernels -----------------------------------------------------------------------------

KERNELS = """module "kernels"
stage compute

[compute]
func @bias_tanh: (<4 x 8 x f32>, <1 x 8 x f32>, f32) -> <4 x 8 x f32> {
'entry(%x: <4 x 8 x f32>, %b: <1 x 8 x f32>, %s: f32):
    %p = add %x: <4 x 8 x f32>, %b: <1 x 8 x f32>
    %q = multiply %p: <4 x 8 x f32>, %s: f32
    %z = tanh %q: <4 x 8 x f32>
    return %z: <4 x 8 x f32>
}

[compute]
func @broadcast: (<1 x 8 x f32>, <4 x 8 x f32>) -> <4 x 8 x f32> {
'entry(%row: <1 x 8 x f32>, %y: <4 x 8 x f32>):
    %p = subtract %row: <1 x 8 x f32>, %y: <4 x 8 x f32>
    return %p: <4 x 8 x f32>
}

[compute]
func @transposed: (<8 x 8 x f32>, <8 x 8 x f32>) -> <8 x 8 x f32> {
'entry(%x: <8 x 8 x f32>, %y: <8 x 8 x f32>):
    %t = transpose %x: <8 x 8 x f32>
    %p = add %t: <8 x 8 x f32>, %y: <8 x 8 x f32>
    return %p: <8 x 8 x f32>
}

[compute]
func @read_twice: (<8 x 8 x f32>) -> <8 x 8 x f32> {
'entry(%x: <8 x 8 x f32>):
    %t = transpose %x: <8 x 8 x f32>
    %p = add %x: <8 x 8 x f32>, %t: <8 x 8 x f32>
    return %p: <8 x 8 x f32>
}

[compute]
func @dot_epilogue: (<8 x 8 x f32>, <8 x 8 x f32>, <8 x 8 x f32>) -> <8 x 8 x f32> {
'entry(%a: <8 x 8 x f32>, %b: <8 x 8 x f32>, %c: <8 x 8 x f32>):
    %d = dot %a: <8 x 8 x f32>, %b: <8 x 8 x f32>
    %p = add %d: <8 x 8 x f32>, %c: <8 x 8 x f32>
    return %p: <8 x 8 x f32>
}

[compute]
func @compare_select: (<6 x f32>, <6 x f32>) -> <6 x f32> {
'entry(%x: <6 x f32>, %y: <6 x f32>):
    %c = greaterThan %x: <6 x f32>, %y: <6 x f32>
    %p = select %x: <6 x f32>, 0: f32 by %c: <6 x bool>
    return %p: <6 x f32>
}

[compute]
func @casts: (<6 x f32>, <6 x f64>) -> <6 x f32> {
'entry(%x: <6 x f32>, %w: <6 x f64>):
    %d = dataTypeCast %x: <6 x f32> to f64
    %s = add %d: <6 x f64>, %w: <6 x f64>
    %p = dataTypeCast %s: <6 x f64> to f32
    return %p: <6 x f32>
}

[compute]
func @reversed: (<6 x f32>, <6 x f32>) -> <6 x f32> {
'entry(%x: <6 x f32>, %y: <6 x f32>):
    %r = reverse %x: <6 x f32> along 0
    %p = multiply %r: <6 x f32>, %y: <6 x f32>
    return %p: <6 x f32>
}
"""


def test_aligned_inputs_are_read_only_at_the_index_written():
    module = parse_module(KERNELS, "kernels.dl")

    def aligned(name: str) -> set[int]:
        return aligned_inputs(module.function_named(name))

    assert aligned("bias_tanh") == {0}  # the bias row is broadcast, the scalar too
    assert aligned("broadcast") == {1}
    assert aligned("transposed") == {1}  # same shape, but x[j, i] is read for out[i, j]
    assert aligned("read_twice") == set()  # read at the index and transposed
    assert aligned("dot_epilogue") == set()  # a dot reads across indices: never in place
    assert aligned("compare_select") == {0, 1}  # through a bool of the same shape
    assert aligned("casts") == {0}  # w's f64 elements are wider than the output's
    assert aligned("reversed") == {1}


def test_a_chain_of_pointwise_kernels_computes_in_place():
    before = plan_of(CHAIN, in_place=False)
    plan = plan_of(CHAIN)
    assert plan.size == 4096 < before.size  # one buffer: each kernel writes over its input
    for v in plan.order:
        for u in v.operands[1:]:
            if u in plan.offset and overlap(plan, v, u):
                assert u in plan.shares[v] and plan.offset[u] == plan.offset[v]


# Kernels %a, %b and %c (%b is read at two indices, so it is written to memory); %c stays in the
# frame because a scalar product, not a kernel of its own, reads it.
LIVE_AFTER = """module "live"
stage optimizable

func @f: (<256 x f32>) -> f32 {
'entry(%x: <256 x f32>):
    %a = exp %x: <256 x f32>
    %b = tanh %a: <256 x f32>
    %r = reverse %b: <256 x f32> along 0
    %b2 = add %b: <256 x f32>, %r: <256 x f32>
    %c = multiply %a: <256 x f32>, %b2: <256 x f32>
    %d = dot %c: <256 x f32>, %x: <256 x f32>
    return %d: f32
}
"""


def test_an_input_still_live_is_not_written_over():
    plan = plan_of(LIVE_AFTER)
    a, b, c = (named(plan, n) for n in ("a", "b", "c"))
    assert not overlap(plan, a, b)  # %a is read again by %c's kernel
    assert plan.offset[c] in (plan.offset[a], plan.offset[b])  # both die at %c
    assert plan.size == 2 * storage_size(a.type)


BORROWED = """module "borrowed"
stage optimizable

func @f: (<256 x f32>) -> f32 {
'entry(%x: <256 x f32>):
    %a = exp %x: <256 x f32>
    %t = literal (%a: <256 x f32>, %x: <256 x f32>): (<256 x f32>, <256 x f32>)
    %b = tanh %a: <256 x f32>
    %r = reverse %b: <256 x f32> along 0
    %b2 = add %b: <256 x f32>, %r: <256 x f32>
    %e = extract 0 from %t: (<256 x f32>, <256 x f32>)
    %c = add %e: <256 x f32>, %b2: <256 x f32>
    %d = dot %c: <256 x f32>, %x: <256 x f32>
    return %d: f32
}
"""


def test_a_tuple_element_keeps_its_storage_from_being_written_over():
    plan = plan_of(BORROWED)
    a, b = named(plan, "a"), named(plan, "b")
    assert a not in plan.shares[b]  # %a dies at %b's kernel, but %t still holds it
    assert not overlap(plan, a, b)


def test_an_input_passed_twice_is_not_written_over():
    plan = plan_of(BORROWED.replace("%e: <256 x f32>, %b2", "%e: <256 x f32>, %a"))
    c = named(plan, "c")  # reads %a directly and through %e: both ways must be aligned
    assert not plan.shares[c]


INPLACE_PROGRAM = """module "inplace"
stage optimizable

func @chain: (<300 x 257 x f32>, <1 x 257 x f32>) -> <300 x 257 x f32> {
'entry(%x: <300 x 257 x f32>, %b: <1 x 257 x f32>):
    %a = exp %x: <300 x 257 x f32>
    %s = add %a: <300 x 257 x f32>, %b: <1 x 257 x f32>
    %t = tanh %s: <300 x 257 x f32>
    %t2 = multiply %t: <300 x 257 x f32>, %t: <300 x 257 x f32>
    %u = transpose %t2: <300 x 257 x f32>
    %v = transpose %u: <257 x 300 x f32>
    %w = subtract %v: <300 x 257 x f32>, %b: <1 x 257 x f32>
    %w2 = add %w: <300 x 257 x f32>, %w: <300 x 257 x f32>
    %c = greaterThan %w2: <300 x 257 x f32>, 0.5: f32
    %r = select %w2: <300 x 257 x f32>, %a: <300 x 257 x f32> by %c: <300 x 257 x bool>
    %y = apply @halve(%r: <300 x 257 x f32>): (<300 x 257 x f32>) -> <300 x 257 x f32>
    return %y: <300 x 257 x f32>
}

func @halve: (<300 x 257 x f32>) -> <300 x 257 x f32> {
'entry(%v: <300 x 257 x f32>):
    %h = multiply %v: <300 x 257 x f32>, 0.5: f32
    return %h: <300 x 257 x f32>
}

func @small: (<7 x 3 x f64>) -> <7 x 3 x f64> {
'entry(%x: <7 x 3 x f64>):
    %a = sin %x: <7 x 3 x f64>
    %s = reduce %a: <7 x 3 x f64> by add init 0: f64 along 0, 1
    %c = multiply %a: <7 x 3 x f64>, %s: f64
    %y = apply @negated(%c: <7 x 3 x f64>): (<7 x 3 x f64>) -> <7 x 3 x f64>
    return %y: <7 x 3 x f64>
}

func @negated: (<7 x 3 x f64>) -> <7 x 3 x f64> {
'entry(%v: <7 x 3 x f64>):
    %n = negate %v: <7 x 3 x f64>
    return %n: <7 x 3 x f64>
}
"""


def test_a_built_program_with_in_place_kernels_matches_the_interpreter(tmp_path):
    module = parse_module(INPLACE_PROGRAM, "inplace.dl")
    reference = parse_module(INPLACE_PROGRAM, "inplace.dl")
    schedule(module)
    # The test is void unless something is computed in place: the last kernels, whose results
    # a call reads (a returned one would be computed in the caller's buffer).
    for name in ("chain", "small"):
        plan = FramePlan(module.function_named(name))
        assert any(plan.offset[v] == plan.offset.get(w) for v in plan.order for w in plan.shares[v])
    path = tmp_path / "inplace.so"
    build_library(module, module_spec(module, "test"), path)
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (300, 257)).astype(np.float32)
    b = rng.uniform(-1, 1, (1, 257)).astype(np.float32)
    y = rng.uniform(-2, 2, (7, 3))
    with dlvm.load(path) as lib:
        for name, args in (("chain", [x, b]), ("small", [y])):
            expected = np.asarray(run_function(reference, name, args))
            got = np.asarray(getattr(lib, name)(*args))
            np.testing.assert_allclose(got, expected, rtol=2e-6, atol=2e-6, err_msg=name)
