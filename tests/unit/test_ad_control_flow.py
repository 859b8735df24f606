"""Gradients through branches, loops, calls, recursion and of gradients, against finite
differences (float64, interpreter)."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import add_gradient, differentiate, gradient_check

from dlvm.interp import run_function
from dlvm.ir import parse_module

HEAD = 'module "t"\nstage raw\n\n'

IF_ELSE = (
    HEAD
    + """
func @f: (f32, f32) -> f32 {
'entry(%x: f32, %y: f32):
    %c = greaterThan %x: f32, %y: f32
    conditional %c: bool then 'big(%x: f32) else 'small(%y: f32)
'big(%a: f32):
    %s = sin %a: f32
    branch 'join(%s: f32)
'small(%b: f32):
    %m = multiply %b: f32, %x: f32
    branch 'join(%m: f32)
'join(%r: f32):
    %t = multiply %r: f32, %y: f32
    return %t: f32
}
"""
)


@pytest.mark.parametrize("x, y", [(1.3, 0.4), (0.2, 0.9)], ids=["then", "else"])
def test_if_else_on_a_computed_condition(x, y):
    gradient_check(IF_ELSE, [np.array(x), np.array(y)])


# h <- tanh(h • w + x_t) for every row x_t of %xs: an RNN unrolled as a loop.
RNN = (
    HEAD
    + """
func @f: (<4 x 1 x 3 x f32>, <3 x 3 x f32>, <1 x 3 x f32>) -> <1 x 3 x f32> {
'entry(%xs: <4 x 1 x 3 x f32>, %w: <3 x 3 x f32>, %h0: <1 x 3 x f32>):
    branch 'loop(0: i64, %h0: <1 x 3 x f32>)
'loop(%i: i64, %h: <1 x 3 x f32>):
    %more = lessThan %i: i64, 4: i64
    conditional %more: bool then 'body() else 'done()
'body():
    %xt = extract %i: i64 from %xs: <4 x 1 x 3 x f32>
    %p = dot %h: <1 x 3 x f32>, %w: <3 x 3 x f32>
    %q = add %p: <1 x 3 x f32>, %xt: <1 x 3 x f32>
    %hn = tanh %q: <1 x 3 x f32>
    %in = add %i: i64, 1: i64
    branch 'loop(%in: i64, %hn: <1 x 3 x f32>)
'done():
    return %h: <1 x 3 x f32>
}
"""
)


def test_rnn_loop():
    rng = np.random.default_rng(7)
    gradient_check(
        RNN,
        [
            rng.standard_normal((4, 1, 3)),
            0.5 * rng.standard_normal((3, 3)),
            rng.standard_normal((1, 3)),
        ],
    )


# Newton-like iteration with a data-dependent trip count: halve until below 1, count steps.
WHILE = (
    HEAD
    + """
func @f: (f32, f32) -> f32 {
'entry(%x: f32, %k: f32):
    branch 'test(%x: f32, 1: f32)
'test(%v: f32, %acc: f32):
    %big = greaterThan %v: f32, 1: f32
    conditional %big: bool then 'step(%v: f32, %acc: f32) else 'exit(%v: f32, %acc: f32)
'step(%a: f32, %b: f32):
    %half = multiply %a: f32, %k: f32
    %grow = multiply %b: f32, %a: f32
    branch 'test(%half: f32, %grow: f32)
'exit(%u: f32, %w: f32):
    %r = add %u: f32, %w: f32
    return %r: f32
}
"""
)


def test_while_loop_with_a_data_dependent_trip_count():
    gradient_check(WHILE, [np.array(7.3), np.array(0.5)])


NESTED = (
    HEAD
    + """
func @f: (f32) -> f32 {
'entry(%x: f32):
    branch 'outer(0: i64, %x: f32)
'outer(%i: i64, %s: f32):
    %go = lessThan %i: i64, 3: i64
    conditional %go: bool then 'inner_start() else 'end()
'inner_start():
    branch 'inner(0: i64, %s: f32)
'inner(%j: i64, %t: f32):
    %go2 = lessThan %j: i64, 2: i64
    conditional %go2: bool then 'inner_body() else 'outer_next()
'inner_body():
    %u = sin %t: f32
    %v = multiply %u: f32, %x: f32
    %j1 = add %j: i64, 1: i64
    branch 'inner(%j1: i64, %v: f32)
'outer_next():
    %w = add %t: f32, %s: f32
    %i1 = add %i: i64, 1: i64
    branch 'outer(%i1: i64, %w: f32)
'end():
    return %s: f32
}
"""
)


def test_nested_loops():
    gradient_check(NESTED, [np.array(0.7)])


MULTIPLE_RETURNS = (
    HEAD
    + """
func @f: (<2 x f32>, f32) -> <2 x f32> {
'entry(%x: <2 x f32>, %y: f32):
    %c = greaterThan %y: f32, 0: f32
    conditional %c: bool then 'pos() else 'neg()
'pos():
    %a = multiply %x: <2 x f32>, %y: f32
    return %a: <2 x f32>
'neg():
    %b = exp %x: <2 x f32>
    return %b: <2 x f32>
}
"""
)


@pytest.mark.parametrize("y", [0.8, -0.8], ids=["first", "second"])
def test_several_returns(y):
    gradient_check(MULTIPLE_RETURNS, [np.array([0.3, -1.2]), np.array(y)])


RECURSION = (
    HEAD
    + """
func @f: (f32, i64) -> f32 {
'entry(%x: f32, %n: i64):
    %stop = equal %n: i64, 0: i64
    conditional %stop: bool then 'base() else 'rec()
'base():
    return 1: f32
'rec():
    %m = subtract %n: i64, 1: i64
    %r = apply @f(%x: f32, %m: i64): (f32, i64) -> f32
    %s = sin %x: f32
    %p = multiply %r: f32, %s: f32
    %q = add %p: f32, %x: f32
    return %q: f32
}
"""
)


def test_direct_recursion():
    gradient_check(RECURSION, [np.array(0.9), np.int64(4)])


MUTUAL = (
    HEAD
    + """
func @f: (f32, i64) -> f32 {
'entry(%x: f32, %n: i64):
    %stop = lessThanOrEqual %n: i64, 0: i64
    conditional %stop: bool then 'base() else 'rec()
'base():
    return %x: f32
'rec():
    %m = subtract %n: i64, 1: i64
    %r = apply @g(%x: f32, %m: i64): (f32, i64) -> f32
    %p = multiply %r: f32, %x: f32
    return %p: f32
}

func @g: (f32, i64) -> f32 {
'entry(%x: f32, %n: i64):
    %r = apply @f(%x: f32, %n: i64): (f32, i64) -> f32
    %s = cos %r: f32
    return %s: f32
}
"""
)


def test_mutual_recursion():
    gradient_check(MUTUAL, [np.array(0.6), np.int64(3)])


TUPLE_CALL = (
    HEAD
    + """
func @pair: (f32, <2 x f32>) -> (f32, <2 x f32>) {
'entry(%a: f32, %v: <2 x f32>):
    %s = multiply %a: f32, %a: f32
    %w = multiply %v: <2 x f32>, %a: f32
    %t = literal (%s: f32, %w: <2 x f32>): (f32, <2 x f32>)
    return %t: (f32, <2 x f32>)
}

func @f: (f32, <2 x f32>) -> <2 x f32> {
'entry(%x: f32, %y: <2 x f32>):
    %t = apply @pair(%x: f32, %y: <2 x f32>): (f32, <2 x f32>) -> (f32, <2 x f32>)
    %s = extract 0 from %t: (f32, <2 x f32>)
    %w = extract 1 from %t: (f32, <2 x f32>)
    %r = multiply %w: <2 x f32>, %s: f32
    return %r: <2 x f32>
}
"""
)


def test_call_of_a_function_with_a_tuple_result():
    gradient_check(TUPLE_CALL, [np.array(1.1), np.array([0.5, -2.0])])


FROM_TUPLE = (
    HEAD
    + """
func @f: (f32, f32) -> (f32, f32) {
'entry(%x: f32, %y: f32):
    %a = multiply %x: f32, %y: f32
    %b = divide %x: f32, %y: f32
    %t = literal (%a: f32, %b: f32): (f32, f32)
    return %t: (f32, f32)
}
"""
)


@pytest.mark.parametrize("source", [0, 1])
def test_from_an_element_of_a_tuple_result(source):
    gradient_check(FROM_TUPLE, [np.array(1.5), np.array(0.7)], source=source)


SECOND_ORDER = (
    HEAD
    + """
func @f: (<3 x f32>, <3 x f32>) -> f32 {
'entry(%x: <3 x f32>, %w: <3 x f32>):
    %t = tanh %x: <3 x f32>
    %p = multiply %t: <3 x f32>, %w: <3 x f32>
    %q = multiply %p: <3 x f32>, %x: <3 x f32>
    %r = reduce %q: <3 x f32> by add init 0: f32 along 0
    return %r: f32
}

[gradient @f wrt 0]
func @df: (<3 x f32>, <3 x f32>) -> (<3 x f32>)

func @hv: (<3 x f32>, <3 x f32>, <3 x f32>) -> f32 {
'entry(%x: <3 x f32>, %w: <3 x f32>, %v: <3 x f32>):
    %g = apply @df(%x: <3 x f32>, %w: <3 x f32>): (<3 x f32>, <3 x f32>) -> (<3 x f32>)
    %gx = extract 0 from %g: (<3 x f32>)
    %d = dot %gx: <3 x f32>, %v: <3 x f32>
    return %d: f32
}
"""
)


def test_second_order_hessian_vector_product():
    """∇ₓ(∇ₓf · v) = H v: against finite differences of the first gradient, and against the
    closed form for f = Σ tanh(x)·w·x (H is diagonal)."""
    rng = np.random.default_rng(8)
    x, w, v = (rng.standard_normal(3) for _ in range(3))
    gradient_check(SECOND_ORDER, [x, w, v], fn="hv", wrt=(0,))
    module = parse_module(SECOND_ORDER)
    g, _ = add_gradient(module, "hv", wrt=(0,))
    differentiate(module)
    (hv,) = run_function(module, g.name, [x, w, v, np.array(1.0)], float64=True)
    t = np.tanh(x)
    dt = 1 - t * t
    hess_diag = w * (-2 * t * dt * x + 2 * dt)
    np.testing.assert_allclose(hv, hess_diag * v, rtol=1e-9)


def test_gradient_of_a_declared_gradient_function():
    text = (
        SECOND_ORDER
        + """
[gradient @df from 0 wrt 0, 1]
func @ddf: (<3 x f32>, <3 x f32>) -> (<3 x f32>, <3 x f32>)
"""
    )
    rng = np.random.default_rng(9)
    gradient_check(text, [rng.standard_normal(3), rng.standard_normal(3)], fn="df", source=0)


ENUM = (
    HEAD
    + """enum $Choice {
    ?scale(f32)
    ?keep()
}

func @f: (f32, f32) -> f32 {
'entry(%x: f32, %k: f32):
    %big = greaterThan %k: f32, 0: f32
    conditional %big: bool then 'make_scale() else 'make_keep()
'make_scale():
    %c = literal ?scale(%k: f32): $Choice
    branch 'pick(%c: $Choice)
'make_keep():
    %d = literal ?keep(): $Choice
    %less = lessThan %k: f32, -5: f32
    conditional %less: bool then 'scaled(%x: f32) else 'pick(%d: $Choice)
'pick(%e: $Choice):
    branchEnum %e: $Choice case ?scale 'scaled case ?keep 'join_keep
'scaled(%s: f32):
    branch 'join(%s: f32)
'join_keep():
    branch 'join(1: f32)
'join(%m: f32):
    %r = multiply %x: f32, %m: f32
    %t = sin %r: f32
    return %t: f32
}
"""
)


@pytest.mark.parametrize("k", [2.0, -1.0, -6.0], ids=["scale", "keep", "direct"])
def test_branch_enum_with_case_values(k):
    # 'scaled is reached from a branchEnum case and from a conditional: its edges are split,
    # and the enum edge's block forwards the case's value.
    gradient_check(ENUM, [np.array(0.7), np.array(k)], wrt=(0,))


ARRAY = (
    HEAD
    + """
func @f: (f32, f32) -> f32 {
'entry(%x: f32, %y: f32):
    %a = literal [%x: f32, %y: f32]: [2 x f32]
    %p = extract 0 from %a: [2 x f32]
    %q = extract 1 from %a: [2 x f32]
    %r = multiply %p: f32, %q: f32
    %s = add %r: f32, %p: f32
    return %s: f32
}
"""
)


def test_adjoints_of_an_array_accumulate_element_by_element():
    gradient_check(ARRAY, [np.array(0.4), np.array(-1.3)])
