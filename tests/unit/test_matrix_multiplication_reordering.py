"""matrix-multiplication-reordering (MMR): the dynamic programme finds the cheapest
parenthesization (checked against all of them); random chains become optimal, random tangles of
products reach the fixpoint in one run, and both compute the same on the interpreter; the
6-matrix chain drops to 15125 multiply-adds; too long chains are left alone; random modules and
the FileCheck cases stay valid and compute the same. The cases one by one are in
tests/filecheck/transforms/matrix-multiplication-reordering.dl."""

from __future__ import annotations

import functools
import random
import textwrap

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from semantics import assert_close_up_to_rounding, changes_to_generated_modules, generated

# Under its old name: a derandomized hypothesis test draws its examples from a digest of its body.
from semantics import assert_same_up_to_rounding as assert_same_results

from dlvm.interp import run_function
from dlvm.ir import module_text, parse_module
from dlvm.ir.builder import Builder, constant, new_function
from dlvm.ir.types import DataType, FunctionType, TensorType
from dlvm.ir.values import Module, Value
from dlvm.transforms.matrix_multiplication_reordering import (
    MAX_DOTS,
    MatrixMultiplicationReordering,
    Tree,
    matrix_shape,
    multiply_adds,
    optimal_order,
    order_cost,
)
from dlvm.transforms.pass_manager import PassManager

SIX = """module "six"
stage raw

func @f: (<30 x 35 x f32>, <35 x 15 x f32>) -> <30 x 25 x f32> {
'entry(%M1: <30 x 35 x f32>, %M2: <35 x 15 x f32>):
    %M3 = literal 1: <15 x 5 x f32>
    %M4 = literal 1: <5 x 10 x f32>
    %M5 = literal 1: <10 x 20 x f32>
    %M6 = literal 1: <20 x 25 x f32>
    %a = dot %M1: <30 x 35 x f32>, %M2: <35 x 15 x f32>
    %b = dot %a: <30 x 15 x f32>, %M3: <15 x 5 x f32>
    %c = dot %b: <30 x 5 x f32>, %M4: <5 x 10 x f32>
    %d = dot %c: <30 x 10 x f32>, %M5: <10 x 20 x f32>
    %e = dot %d: <30 x 20 x f32>, %M6: <20 x 25 x f32>
    return %e: <30 x 25 x f32>
}
"""


def reorder(module: Module) -> bool:
    [(_, changed)] = PassManager().run(module, [MatrixMultiplicationReordering])  # verifies
    return changed


def trees(lo: int, hi: int) -> list[Tree]:
    """Every parenthesization of the leaves lo..hi."""
    if lo == hi:
        return [lo]
    return [(a, b) for k in range(lo, hi) for a in trees(lo, k) for b in trees(k + 1, hi)]


def test_the_six_matrix_chain_drops_to_the_optimal_15125_multiply_adds():
    dims = [30, 35, 15, 5, 10, 20, 25]
    left_to_right = sum(30 * dims[i] * dims[i + 1] for i in range(1, 6))
    assert left_to_right == 40500
    assert optimal_order(dims) == (((0, (1, 2)), ((3, 4), 5)), 15125)

    before, after = parse_module(SIX), parse_module(SIX)
    fn = after.function_named("f")
    assert fn is not None
    assert multiply_adds(fn) == left_to_right
    assert reorder(after)
    assert multiply_adds(fn) == 15125
    assert not reorder(after)
    assert_same_results(before, after, "f")


@generated(60)
@given(st.lists(st.integers(1, 40), min_size=3, max_size=8))
def test_the_dynamic_programme_finds_the_cheapest_parenthesization(dims):
    tree, cost = optimal_order(dims)
    assert order_cost(tree, dims) == cost
    assert cost == min(order_cost(t, dims) for t in trees(0, len(dims) - 2))


def random_tree(rng: random.Random, lo: int, hi: int) -> Tree:
    if lo == hi:
        return lo
    k = rng.randrange(lo, hi)
    return (random_tree(rng, lo, k), random_tree(rng, k + 1, hi))


def chain_module(dims: list[int], tree: Tree, dtype: DataType = DataType.F32) -> Module:
    """@chain(m0, m1, …) = the product of the matrices of `dims` in the order of `tree`,
    passed through tanh so that the root has a user other than `return`."""
    shapes = [TensorType((dims[i], dims[i + 1]), dtype) for i in range(len(dims) - 1)]
    result = TensorType((dims[0], dims[-1]), dtype)
    fn = new_function("chain", FunctionType(tuple(shapes), result))
    b = Builder(fn.entry)

    def build(t: Tree) -> Value:
        if isinstance(t, int):
            return fn.arguments[t]
        return b.dot(build(t[0]), build(t[1]))

    b.build("return", [b.tanh(build(tree))])
    module = Module("chain")
    module.add_function(fn)
    return module


@generated(60)
@given(st.integers(0, 2**32 - 1), st.integers(2, 7))
def test_random_chains_become_optimal_and_compute_the_same(seed, n):
    rng = random.Random(seed)
    dims = [rng.randint(1, 12) for _ in range(n + 1)]
    tree = random_tree(rng, 0, n - 1)
    text = module_text(chain_module(dims, tree, rng.choice([DataType.F32, DataType.F64])))
    before, after = parse_module(text), parse_module(text)
    fn = after.function_named("chain")
    assert fn is not None
    cost, best = order_cost(tree, dims), optimal_order(dims)[1]
    assert multiply_adds(fn) == cost

    changed = reorder(after)

    assert changed == (best < cost)  # changed only when the order actually got cheaper
    assert multiply_adds(fn) == best
    assert not reorder(after)
    assert_same_results(before, after, "chain", seed)


def left_deep_chain(dots: int) -> Module:
    """@chain(a, v) = (((a·a)·a)·…)·v with `dots` dots, built without recursion."""
    a, v = TensorType((8, 8), DataType.F32), TensorType((8, 1), DataType.F32)
    fn = new_function("chain", FunctionType((a, v), v), ["a", "v"])
    b = Builder(fn.entry)
    product: Value = fn.arguments[0]
    for _ in range(dots - 1):
        product = b.dot(product, fn.arguments[0])
    b.build("return", [b.dot(product, fn.arguments[1])])
    module = Module("chain")
    module.add_function(fn)
    return module


def test_chains_longer_than_the_limit_are_left_alone():
    # A·(A·(…·v)) would be far cheaper; the search is cubic in the length, so it stops.
    for dots, reordered in ((MAX_DOTS, True), (MAX_DOTS + 1, False), (5000, False)):
        assert reorder(left_deep_chain(dots)) == reordered, dots


@pytest.mark.parametrize("control_flow", [False, True])
def test_generated_modules_stay_valid_and_compute_the_same(control_flow):
    changed = changes_to_generated_modules(reorder, range(200), 60, control_flow)
    assert changed >= 5  # the generated modules do exercise the pass


def test_a_chain_across_blocks_is_rebuilt_where_its_root_was():
    module = parse_module(
        textwrap.dedent("""\
        module "m"
        stage raw

        func @f: (<8 x 8 x f32>, <8 x 1 x f32>, bool) -> <8 x 1 x f32> {
        'entry(%a: <8 x 8 x f32>, %v: <8 x 1 x f32>, %c: bool):
            %aa = dot %a: <8 x 8 x f32>, %a: <8 x 8 x f32>
            conditional %c: bool then 'use() else 'skip()
        'use():
            %r = dot %aa: <8 x 8 x f32>, %v: <8 x 1 x f32>
            return %r: <8 x 1 x f32>
        'skip():
            return %v: <8 x 1 x f32>
        }
        """)
    )
    before = parse_module(module_text(module))
    assert reorder(module)
    fn = module.function_named("f")
    assert fn is not None
    assert [i.opcode for i in fn.blocks[0].instructions] == ["conditional"]
    assert [i.opcode for i in fn.blocks[1].instructions] == ["dot", "dot", "return"]
    rng = np.random.default_rng(0)
    for c in (True, False):
        args = [rng.uniform(-1, 1, (8, 8)), rng.uniform(-1, 1, (8, 1)), np.array(c)]
        assert_close_up_to_rounding(
            run_function(before, "f", args, float64=True),
            run_function(module, "f", args, float64=True),
        )


def test_the_filecheck_cases_compute_the_same():
    path = "tests/filecheck/transforms/matrix-multiplication-reordering.dl"
    with open(path, encoding="utf-8") as f:
        text = f.read()
    before, after = parse_module(text, path), parse_module(text, path)
    assert reorder(after)
    for fn in before.functions:
        for seed in range(3):  # both branches, loops of 1 to 4 iterations
            assert_same_results(before, after, fn.name, seed)


def tangle_module(rng: random.Random) -> Module:
    """@f: products of matrices of a few sizes, whose operands are drawn from the arguments,
    the earlier products and their `tanh`s: chains that share, branch and end in every way."""
    sizes = [rng.randint(1, 9) for _ in range(3)]
    shapes = [TensorType((r, c), DataType.F64) for r in sizes for c in sizes]
    scalar = TensorType((), DataType.F64)
    fn = new_function("f", FunctionType(tuple(shapes), scalar))
    b = Builder(fn.entry)
    pool: list[Value] = list(fn.arguments)
    unused: list[Value] = []
    for _ in range(rng.randint(2, 12)):
        left = rng.choice(pool)
        rows = matrix_shape(left)[1]
        right = rng.choice([v for v in pool if matrix_shape(v)[0] == rows])
        unused = [v for v in unused if v is not left and v is not right]
        product = b.dot(left, right)
        unused.append(b.tanh(product) if rng.random() < 0.2 else product)
        pool.append(unused[-1])
    # The results nothing else uses add up into the result.
    sums = [b.reduce(v, constant(0, scalar), comb="add", dims=(0, 1)) for v in unused]
    b.build("return", [functools.reduce(b.add, sums)])
    module = Module("tangle")
    module.add_function(fn)
    return module


@generated(60)
@given(st.integers(0, 2**32 - 1))
def test_tangled_chains_reach_the_fixpoint_in_one_run_and_compute_the_same(seed):
    text = module_text(tangle_module(random.Random(seed)))
    before, after = parse_module(text), parse_module(text)
    fn = after.functions[0]
    cost = multiply_adds(fn)

    changed = reorder(after)

    assert changed == (multiply_adds(fn) < cost)
    assert not reorder(after)
    assert_same_results(before, after, "f", seed)
