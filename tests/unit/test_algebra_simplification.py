"""algebra-simplification (AS): each identity rewrites what it should, keeps every value's type
(broadcasts survive), replaces uses everywhere, reaches a fixpoint, and computes the same
results on the interpreter before and after. Generated modules: test_property_algebra.py."""

from __future__ import annotations

import functools
import textwrap

import numpy as np
import pytest
from semantics import assert_equivalent, assert_same

from dlvm.ir import module_text, parse_module
from dlvm.ir.printer import function_text
from dlvm.ir.values import Module
from dlvm.ir.verifier import verify
from dlvm.transforms import lookup_pass
from dlvm.transforms.algebra_rules import RULES
from dlvm.transforms.algebra_simplification import AlgebraSimplification
from dlvm.transforms.pass_manager import PassManager


def parse(src: str) -> Module:
    return parse_module('module "t"\nstage raw\n\n' + textwrap.dedent(src), "t.dl")


def simplify(src: str, interpret: bool = True) -> tuple[Module, bool]:
    """src after AS (verified), checked against src on the interpreter."""
    before, after = parse(src), parse(src)
    [(_, changed)] = PassManager().run(after, PassManager.resolve(["AS"]))
    if interpret:  # every function, 3 times on random inputs, in float64
        compare = functools.partial(assert_same, rtol=1e-12, atol=1e-12, same_dtype=False)
        assert_equivalent(before, after, compare, rng=np.random.default_rng(0), runs=3)
    return after, changed


def body(module: Module, name: str = "f") -> list[str]:
    """The printed instructions of @name (block headers included after the entry's)."""
    fn = module.function_named(name)
    assert fn is not None
    return [line.strip() for line in function_text(fn).splitlines()[2:-1]]


def check(src: str, *expected: str) -> Module:
    """AS rewrites @f of src to exactly the `expected` instruction lines, once DCE has removed
    the atoms AS leaves behind (the original DLVM's AS keeps a dead `literal` for DCE)."""
    module, changed = simplify(src)
    assert changed
    PassManager().run(module, PassManager.resolve(["DCE"]))
    assert body(module) == list(expected)
    return module


def check_unchanged(src: str, interpret: bool = True) -> None:
    module, changed = simplify(src, interpret)
    assert not changed
    assert module_text(module) == module_text(parse(src))


# Identities with a neutral element ------------------------------------------------------------


def test_adding_and_subtracting_zero():
    check(
        """
        func @f: (<2 x 3 x f32>) -> <2 x 3 x f32> {
        'entry(%x: <2 x 3 x f32>):
            %0.0 = add %x: <2 x 3 x f32>, 0: f32
            %0.1 = add 0.0: f32, %0.0: <2 x 3 x f32>
            %0.2 = subtract %0.1: <2 x 3 x f32>, zero: f32
            return %0.2: <2 x 3 x f32>
        }
        """,
        "return %x: <2 x 3 x f32>",
    )


def test_multiplying_and_dividing_by_one_including_a_splat_literal():
    check(
        """
        func @f: (<2 x 3 x f32>) -> <2 x 3 x f32> {
        'entry(%x: <2 x 3 x f32>):
            %ones = literal 1: <2 x 3 x f32>
            %0.1 = multiply %ones: <2 x 3 x f32>, %x: <2 x 3 x f32>
            %0.2 = multiply %0.1: <2 x 3 x f32>, 1: f32
            %0.3 = divide %0.2: <2 x 3 x f32>, 1.0: f32
            return %0.3: <2 x 3 x f32>
        }
        """,
        "return %x: <2 x 3 x f32>",
    )


def test_integer_identities():
    check(
        """
        func @f: (<3 x i32>) -> <3 x i32> {
        'entry(%x: <3 x i32>):
            %0.0 = multiply 1: i32, %x: <3 x i32>
            %0.1 = add %0.0: <3 x i32>, 0: i32
            %0.2 = divide %0.1: <3 x i32>, 1: i32
            %0.3 = power %0.2: <3 x i32>, 2: i32
            return %0.3: <3 x i32>
        }
        """,
        "%0.0 = multiply %x: <3 x i32>, %x: <3 x i32>",
        "return %0.0: <3 x i32>",
    )


def test_one_minus_x_and_zero_minus_x_stay():
    check_unchanged(
        """
        func @f: (<2 x f32>) -> <2 x f32> {
        'entry(%x: <2 x f32>):
            %0.0 = subtract 1: f32, %x: <2 x f32>
            %0.1 = subtract 0: f32, %0.0: <2 x f32>
            %0.2 = divide 1: f32, %0.1: <2 x f32>
            return %0.2: <2 x f32>
        }
        """
    )


# Identities producing a constant --------------------------------------------------------------


def test_multiplying_by_zero_gives_a_scalar_or_a_literal_instruction():
    check(
        """
        func @f: (f32, <1 x 3 x f32>) -> (f32, <2 x 3 x f32>) {
        'entry(%s: f32, %row: <1 x 3 x f32>):
            %zeros = literal 0: <2 x 3 x f32>
            %0.1 = multiply %s: f32, 0: f32
            %0.2 = multiply %row: <1 x 3 x f32>, %zeros: <2 x 3 x f32>
            %0.3 = literal (%0.1: f32, %0.2: <2 x 3 x f32>): (f32, <2 x 3 x f32>)
            return %0.3: (f32, <2 x 3 x f32>)
        }
        """,
        "%0.0 = literal 0: <2 x 3 x f32>",
        "%0.1 = literal (0: f32, %0.0: <2 x 3 x f32>): (f32, <2 x 3 x f32>)",
        "return %0.1: (f32, <2 x 3 x f32>)",
    )


def test_x_minus_x_x_over_x_and_x_mod_x():
    check(
        """
        func @f: (<2 x f32>, f32) -> (<2 x f32>, f32, <2 x f32>) {
        'entry(%x: <2 x f32>, %s: f32):
            %a = subtract %x: <2 x f32>, %x: <2 x f32>
            %b = divide %s: f32, %s: f32
            %c = modulo %x: <2 x f32>, %x: <2 x f32>
            %0.3 = literal (%a: <2 x f32>, %b: f32, %c: <2 x f32>): (<2 x f32>, f32, <2 x f32>)
            return %0.3: (<2 x f32>, f32, <2 x f32>)
        }
        """,
        "%0.0 = literal 0: <2 x f32>",
        "%0.1 = literal 0: <2 x f32>",
        "%0.2 = literal (%0.0: <2 x f32>, 1: f32, %0.1: <2 x f32>): (<2 x f32>, f32, <2 x f32>)",
        "return %0.2: (<2 x f32>, f32, <2 x f32>)",
    )


def test_functions_at_zero_and_one():
    module = check(
        """
        func @f: () -> (f32, f32, f32, f32, f32, f32, f32, <2 x f32>) {
        'entry():
            %zeros = literal zero: <2 x f32>
            %0.1 = exp 0: f32
            %0.2 = log 1: f32
            %0.3 = sin 0: f32
            %0.4 = sinh 0.0: f32
            %0.5 = tan 0: f32
            %0.6 = tanh 0: f32
            %0.7 = cos 0: f32
            %0.8 = cosh %zeros: <2 x f32>
            %0.9 = literal (%0.1: f32, %0.2: f32, %0.3: f32, %0.4: f32, %0.5: f32, %0.6: f32, %0.7: f32, %0.8: <2 x f32>): (f32, f32, f32, f32, f32, f32, f32, <2 x f32>)
            return %0.9: (f32, f32, f32, f32, f32, f32, f32, <2 x f32>)
        }
        """,  # noqa: E501
        "%0.0 = literal 1: <2 x f32>",
        "%0.1 = literal (1: f32, 0: f32, 0: f32, 0: f32, 0: f32, 0: f32, 1: f32, %0.0: <2 x f32>): "
        "(f32, f32, f32, f32, f32, f32, f32, <2 x f32>)",
        "return %0.1: (f32, f32, f32, f32, f32, f32, f32, <2 x f32>)",
    )
    assert verify(module) == []


# Powers ---------------------------------------------------------------------------------------


def test_powers():
    check(
        """
        func @f: (<2 x f64>) -> (<2 x f64>, <2 x f64>, <2 x f64>, <2 x f64>) {
        'entry(%x: <2 x f64>):
            %p0 = power %x: <2 x f64>, 0: f64
            %p1 = power %x: <2 x f64>, 1: f64
            %p2 = power %x: <2 x f64>, 2.0: f64
            %pm = power %x: <2 x f64>, -1: f64
            %0.4 = literal (%p0: <2 x f64>, %p1: <2 x f64>, %p2: <2 x f64>, %pm: <2 x f64>): (<2 x f64>, <2 x f64>, <2 x f64>, <2 x f64>)
            return %0.4: (<2 x f64>, <2 x f64>, <2 x f64>, <2 x f64>)
        }
        """,  # noqa: E501
        "%0.0 = literal 1: <2 x f64>",
        "%0.1 = multiply %x: <2 x f64>, %x: <2 x f64>",
        "%0.2 = divide 1: f64, %x: <2 x f64>",
        "%0.3 = literal (%0.0: <2 x f64>, %x: <2 x f64>, %0.1: <2 x f64>, %0.2: <2 x f64>): "
        "(<2 x f64>, <2 x f64>, <2 x f64>, <2 x f64>)",
        "return %0.3: (<2 x f64>, <2 x f64>, <2 x f64>, <2 x f64>)",
    )


def test_power_of_a_literal_to_zero_becomes_a_literal_one():
    check(
        """
        func @f: () -> <2 x f32> {
        'entry():
            branch 'next()
        'next():
            %lit = literal 3: <2 x f32>
            %1.1 = power %lit: <2 x f32>, 0: f32
            return %1.1: <2 x f32>
        }
        """,
        "branch 'next()",
        "'next():",
        "%1.0 = literal 1: <2 x f32>",
        "return %1.0: <2 x f32>",
    )


def test_integer_power_minus_one_stays():
    check_unchanged(
        """
        func @f: (<2 x i32>) -> <2 x i32> {
        'entry(%x: <2 x i32>):
            %0.0 = power %x: <2 x i32>, -1: i32
            return %0.0: <2 x i32>
        }
        """,
        interpret=False,  # it traps, and must go on trapping
    )


def test_power_chain_collapses_to_a_fixpoint():
    # As in the original DLVM's test: w^0 = 1, 1^1 = 1, 1^2 = 1·1 = 1.
    check(
        """
        func @f: (f32) -> f32 {
        'entry(%w: f32):
            %0.0 = power %w: f32, 0: f32
            %0.1 = power %0.0: f32, 1: f32
            %0.2 = power %0.1: f32, 2: f32
            %0.3 = cos %0.2: f32
            return %0.3: f32
        }
        """,
        "%0.0 = cos 1: f32",
        "return %0.0: f32",
    )


# Negation -------------------------------------------------------------------------------------


def test_negations():
    check(
        """
        func @f: (<2 x f32>, <2 x f32>) -> (<2 x f32>, <2 x f32>, <2 x f32>, <2 x f32>) {
        'entry(%x: <2 x f32>, %y: <2 x f32>):
            %n = negate %y: <2 x f32>
            %nn = negate %n: <2 x f32>
            %a = add %x: <2 x f32>, %n: <2 x f32>
            %b = add %n: <2 x f32>, %x: <2 x f32>
            %c = subtract %x: <2 x f32>, %n: <2 x f32>
            %0.5 = literal (%nn: <2 x f32>, %a: <2 x f32>, %b: <2 x f32>, %c: <2 x f32>): (<2 x f32>, <2 x f32>, <2 x f32>, <2 x f32>)
            return %0.5: (<2 x f32>, <2 x f32>, <2 x f32>, <2 x f32>)
        }
        """,  # noqa: E501
        "%0.0 = subtract %x: <2 x f32>, %y: <2 x f32>",
        "%0.1 = subtract %x: <2 x f32>, %y: <2 x f32>",
        "%0.2 = add %x: <2 x f32>, %y: <2 x f32>",
        "%0.3 = literal (%y: <2 x f32>, %0.0: <2 x f32>, %0.1: <2 x f32>, %0.2: <2 x f32>): "
        "(<2 x f32>, <2 x f32>, <2 x f32>, <2 x f32>)",
        "return %0.3: (<2 x f32>, <2 x f32>, <2 x f32>, <2 x f32>)",
    )


# Exponentials ---------------------------------------------------------------------------------

HYPERBOLIC = """
func @f: (<3 x f64>) -> (<3 x f64>, <3 x f64>, <3 x f64>) {
'entry(%x: <3 x f64>):
    %ex = exp %x: <3 x f64>
    %nx = negate %x: <3 x f64>
    %enx = exp %nx: <3 x f64>
    %d = subtract %ex: <3 x f64>, %enx: <3 x f64>
    %s = divide %d: <3 x f64>, 2: f64
    %p = add %enx: <3 x f64>, %ex: <3 x f64>
    %c = multiply 0.5: f64, %p: <3 x f64>
    %q = add %ex: <3 x f64>, %enx: <3 x f64>
    %c2 = divide %q: <3 x f64>, 2.0: f64
    %0.9 = literal (%s: <3 x f64>, %c: <3 x f64>, %c2: <3 x f64>): (<3 x f64>, <3 x f64>, <3 x f64>)
    return %0.9: (<3 x f64>, <3 x f64>, <3 x f64>)
}
"""


def test_sinh_and_cosh_are_recognised():
    check(
        HYPERBOLIC,
        "%0.0 = sinh %x: <3 x f64>",
        "%0.1 = cosh %x: <3 x f64>",
        "%0.2 = cosh %x: <3 x f64>",
        "%0.3 = literal (%0.0: <3 x f64>, %0.1: <3 x f64>, %0.2: <3 x f64>): "
        "(<3 x f64>, <3 x f64>, <3 x f64>)",
        "return %0.3: (<3 x f64>, <3 x f64>, <3 x f64>)",
    )


def test_sinh_needs_the_same_x_on_both_sides():
    check_unchanged(
        """
        func @f: (<3 x f64>, <3 x f64>) -> <3 x f64> {
        'entry(%x: <3 x f64>, %y: <3 x f64>):
            %ex = exp %x: <3 x f64>
            %ny = negate %y: <3 x f64>
            %eny = exp %ny: <3 x f64>
            %d = subtract %ex: <3 x f64>, %eny: <3 x f64>
            %s = divide %d: <3 x f64>, 2: f64
            %e = subtract %eny: <3 x f64>, %ex: <3 x f64>
            %t = divide %e: <3 x f64>, 3: f64
            %0.7 = add %s: <3 x f64>, %t: <3 x f64>
            return %0.7: <3 x f64>
        }
        """
    )


def test_quotient_of_exponentials():
    check(
        """
        func @f: (<2 x f64>, f64) -> <2 x f64> {
        'entry(%x: <2 x f64>, %y: f64):
            %ex = exp %x: <2 x f64>
            %ey = exp %y: f64
            %q = divide %ex: <2 x f64>, %ey: f64
            return %q: <2 x f64>
        }
        """,
        "%0.0 = subtract %x: <2 x f64>, %y: f64",
        "%0.1 = exp %0.0: <2 x f64>",
        "return %0.1: <2 x f64>",
    )


def test_quotient_of_exponentials_used_elsewhere_stays():
    check_unchanged(
        """
        func @f: (<2 x f64>, <2 x f64>) -> <2 x f64> {
        'entry(%x: <2 x f64>, %y: <2 x f64>):
            %ex = exp %x: <2 x f64>
            %ey = exp %y: <2 x f64>
            %q = divide %ex: <2 x f64>, %ey: <2 x f64>
            %0.3 = add %q: <2 x f64>, %ey: <2 x f64>
            return %0.3: <2 x f64>
        }
        """
    )


# Quotients ------------------------------------------------------------------------------------


def test_quotient_of_quotients():
    check(
        """
        func @f: (f32, f32, f32, f32) -> f32 {
        'entry(%x: f32, %y: f32, %z: f32, %a: f32):
            %0.0 = divide %x: f32, %y: f32
            %0.1 = divide %z: f32, %a: f32
            %0.2 = divide %0.0: f32, %0.1: f32
            return %0.2: f32
        }
        """,
        "%0.0 = multiply %x: f32, %a: f32",
        "%0.1 = multiply %y: f32, %z: f32",
        "%0.2 = divide %0.0: f32, %0.1: f32",
        "return %0.2: f32",
    )


def test_quotient_over_and_over_quotient():
    check(
        """
        func @f: (<2 x f32>, <2 x f32>, <2 x f32>) -> (<2 x f32>, <2 x f32>) {
        'entry(%x: <2 x f32>, %y: <2 x f32>, %z: <2 x f32>):
            %p = divide %x: <2 x f32>, %y: <2 x f32>
            %l = divide %p: <2 x f32>, %z: <2 x f32>
            %q = divide %y: <2 x f32>, %z: <2 x f32>
            %r = divide %x: <2 x f32>, %q: <2 x f32>
            %0.4 = literal (%l: <2 x f32>, %r: <2 x f32>): (<2 x f32>, <2 x f32>)
            return %0.4: (<2 x f32>, <2 x f32>)
        }
        """,
        "%0.0 = multiply %y: <2 x f32>, %z: <2 x f32>",
        "%0.1 = divide %x: <2 x f32>, %0.0: <2 x f32>",
        "%0.2 = multiply %x: <2 x f32>, %z: <2 x f32>",
        "%0.3 = divide %0.2: <2 x f32>, %y: <2 x f32>",
        "%0.4 = literal (%0.1: <2 x f32>, %0.3: <2 x f32>): (<2 x f32>, <2 x f32>)",
        "return %0.4: (<2 x f32>, <2 x f32>)",
    )


def test_reciprocal_of_a_quotient_flips_it():
    # x^−1 → 1/x, then 1/(y/z) → (1·z)/y, then 1·z → z.
    check(
        """
        func @f: (f64, f64) -> f64 {
        'entry(%y: f64, %z: f64):
            %q = divide %y: f64, %z: f64
            %r = power %q: f64, -1: f64
            return %r: f64
        }
        """,
        "%0.0 = divide %z: f64, %y: f64",
        "return %0.0: f64",
    )


def test_quotients_stay_for_integers_and_shared_inner_quotients():
    check_unchanged(
        """
        func @f: (<2 x i32>, <2 x i32>, <2 x i32>, f32, f32, f32) -> (<2 x i32>, f32) {
        'entry(%x: <2 x i32>, %y: <2 x i32>, %z: <2 x i32>, %a: f32, %b: f32, %c: f32):
            %0.0 = divide %x: <2 x i32>, %y: <2 x i32>
            %0.1 = divide %0.0: <2 x i32>, %z: <2 x i32>
            %0.2 = divide %a: f32, %b: f32
            %0.3 = divide %0.2: f32, %c: f32
            %0.4 = add %0.2: f32, %0.3: f32
            %0.5 = literal (%0.1: <2 x i32>, %0.4: f32): (<2 x i32>, f32)
            return %0.5: (<2 x i32>, f32)
        }
        """
    )


# Shapes ---------------------------------------------------------------------------------------


def test_transpose_of_transpose():
    check(
        """
        func @f: (<2 x 3 x f32>) -> <2 x 3 x f32> {
        'entry(%a: <2 x 3 x f32>):
            %0.0 = transpose %a: <2 x 3 x f32>
            %0.1 = transpose %0.0: <3 x 2 x f32>
            return %0.1: <2 x 3 x f32>
        }
        """,
        "return %a: <2 x 3 x f32>",
    )


def test_broadcasting_identities_keep_the_result_shape():
    # The adjoint code broadcasts with `add %v, %zeros`; those must survive.
    check_unchanged(
        """
        func @f: (f32, <1 x 3 x f32>, <1 x 1 x f32>, f32) -> (<2 x 3 x f32>, <2 x 3 x f32>, <2 x 3 x f32>, <2 x 3 x f32>, <2 x 3 x f32>) {
        'entry(%s: f32, %row: <1 x 3 x f32>, %v: <1 x 1 x f32>, %t: f32):
            %zeros = literal 0: <2 x 3 x f32>
            %ones = literal 1: <2 x 3 x f32>
            %twos = literal 2: <2 x 3 x f32>
            %a = add %s: f32, %zeros: <2 x 3 x f32>
            %b = multiply %row: <1 x 3 x f32>, %ones: <2 x 3 x f32>
            %c = add %zeros: <2 x 3 x f32>, %v: <1 x 1 x f32>
            %d = power %t: f32, %twos: <2 x 3 x f32>
            %e = divide %row: <1 x 3 x f32>, %ones: <2 x 3 x f32>
            %0.8 = literal (%a: <2 x 3 x f32>, %b: <2 x 3 x f32>, %c: <2 x 3 x f32>, %d: <2 x 3 x f32>, %e: <2 x 3 x f32>): (<2 x 3 x f32>, <2 x 3 x f32>, <2 x 3 x f32>, <2 x 3 x f32>, <2 x 3 x f32>)
            return %0.8: (<2 x 3 x f32>, <2 x 3 x f32>, <2 x 3 x f32>, <2 x 3 x f32>, <2 x 3 x f32>)
        }
        """  # noqa: E501
    )


def test_an_identity_that_keeps_the_shape_still_applies_beside_a_broadcast():
    check(
        """
        func @f: (<1 x 3 x f32>) -> <2 x 3 x f32> {
        'entry(%row: <1 x 3 x f32>):
            %zeros = literal 0: <2 x 3 x f32>
            %0.1 = add %row: <1 x 3 x f32>, 0: f32
            %0.2 = add %0.1: <1 x 3 x f32>, %zeros: <2 x 3 x f32>
            return %0.2: <2 x 3 x f32>
        }
        """,
        "%zeros = literal 0: <2 x 3 x f32>",
        "%0.1 = add %row: <1 x 3 x f32>, %zeros: <2 x 3 x f32>",
        "return %0.1: <2 x 3 x f32>",
    )


# Uses everywhere, names, change reports ------------------------------------------------------


def test_uses_in_successor_arguments_and_nested_literals_are_replaced():
    check(
        """
        func @f: (f32, <2 x f32>) -> ((f32, <2 x f32>), f32) {
        'entry(%a: f32, %b: <2 x f32>):
            %s = multiply %a: f32, 1: f32
            %t = add %b: <2 x f32>, 0: f32
            %0.2 = literal (%s: f32, %t: <2 x f32>): (f32, <2 x f32>)
            branch 'next(%s: f32)
        'next(%n: f32):
            %1.0 = literal (%0.2: (f32, <2 x f32>), %s: f32): ((f32, <2 x f32>), f32)
            return %1.0: ((f32, <2 x f32>), f32)
        }
        """,
        "%0.0 = literal (%a: f32, %b: <2 x f32>): (f32, <2 x f32>)",
        "branch 'next(%a: f32)",
        "'next(%n: f32):",
        "%1.0 = literal (%0.0: (f32, <2 x f32>), %a: f32): ((f32, <2 x f32>), f32)",
        "return %1.0: ((f32, <2 x f32>), f32)",
    )


def test_unreachable_cycles_are_left_alone():
    check_unchanged(
        """
        func @f: (f32) -> f32 {
        'entry(%x: f32):
            return %x: f32
        'dead():
            %a = negate %b: f32
            %b = negate %a: f32
            %c = divide %d: f32, %x: f32
            %d = divide %c: f32, %x: f32
            %e = add %e: f32, 0: f32
            return %a: f32
        }
        """
    )


def test_the_pass_is_registered_and_reaches_its_fixpoint_in_one_run():
    assert lookup_pass("AS") is AlgebraSimplification
    assert lookup_pass("algebra-simplification") is AlgebraSimplification
    assert len({rule.name for rule in RULES}) == len(RULES)
    module = parse(HYPERBOLIC)
    results = PassManager().run(module, PassManager.resolve(["AS", "AS"]))
    assert [changed for _, changed in results] == [True, False]


@pytest.mark.parametrize("seedable", [False, True])
def test_seed_paper_gradient_simplifies_to_a_transpose_and_a_dot(seedable):
    seed = " seedable" if seedable else ""
    seed_type = ", <1 x 10 x f32>" if seedable else ""
    module = parse(
        f"""
        func @f: (<1 x 784 x f32>, <784 x 10 x f32>, <1 x 10 x f32>) -> <1 x 10 x f32> {{
        'entry(%x: <1 x 784 x f32>, %w: <784 x 10 x f32>, %b: <1 x 10 x f32>):
            %0.0 = dot %x: <1 x 784 x f32>, %w: <784 x 10 x f32>
            %0.1 = add %0.0: <1 x 10 x f32>, %b: <1 x 10 x f32>
            return %0.1: <1 x 10 x f32>
        }}

        [gradient @f wrt 1, 2{seed}]
        func @f_grad: (<1 x 784 x f32>, <784 x 10 x f32>, <1 x 10 x f32>{seed_type})
                      -> (<784 x 10 x f32>, <1 x 10 x f32>)
        """
    )
    PassManager().run(module, PassManager.resolve(["AD", "AS", "CSE", "DCE"]))
    fn = module.function_named("f_grad")
    assert fn is not None
    expected = ["transpose", "dot", "literal", "return"]
    assert [i.opcode for i in fn.instructions()] == (
        expected if seedable else ["literal", *expected]
    )
