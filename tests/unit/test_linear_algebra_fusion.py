"""linear-algebra-fusion (LAF): the LSTM sample's four gate products per step become one and
every entry point computes the same; random groups of products sharing an operand fuse into the
expected number of products, random tangles of products reach the fixpoint in one run, and both
compute the same; random modules and the FileCheck cases stay valid and compute the same. The
cases one by one are in tests/filecheck/transforms/linear-algebra-fusion.dl."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

# Under its old name: a derandomized hypothesis test draws its examples from a digest of its body.
from semantics import assert_same_up_to_rounding as assert_same_results
from semantics import changes_to_generated_modules, generated
from telhelp import sample_path

from dlvm.ir import module_text, parse_module
from dlvm.ir.builder import Builder, new_function
from dlvm.ir.literals import AggregateLiteral
from dlvm.ir.types import DataType, FunctionType, TensorType, TupleType
from dlvm.ir.values import Argument, Block, LiteralValue, Module, Value
from dlvm.transforms.linear_algebra_fusion import LinearAlgebraFusion, find_groups
from dlvm.transforms.pass_manager import PassManager
from telc.driver import compile_text


def fuse(module: Module) -> bool:
    [(_, changed)] = PassManager().run(module, [LinearAlgebraFusion])  # verifies after the pass
    return changed


def lstm_module() -> tuple[Module, list[str]]:
    """samples/lstm.tel lowered, differentiated and CSE'd (the four `extract`s of the step's
    input become one), and the names of its entry points."""
    path = sample_path("lstm")
    with open(path, encoding="utf-8") as f:
        compiled = compile_text(path, f.read())
    PassManager().run(compiled.module, PassManager.resolve(["differentiation", "CSE"]))
    return compiled.module, [e.name for e in compiled.interface.entries]


def step_block(module: Module) -> Block:
    infer = module.function_named("infer")
    assert infer is not None
    block = infer.block_named("t_step")
    assert block is not None
    return block


def dots_using(block: Block, name: str) -> int:
    return sum(
        i.opcode == "dot" and any(isinstance(v, Argument) and v.name == name for v in i.operands)
        for i in block.instructions
    )


def test_the_lstm_gate_products_become_one_and_compute_the_same():
    module, entries = lstm_module()
    before = parse_module(module_text(module))
    step = step_block(module)
    assert dots_using(step, "h_prev") == 4
    assert sum(i.opcode == "dot" for i in step.instructions) == 8  # x·W and h·U per gate

    assert fuse(module)

    step = step_block(module)
    assert dots_using(step, "h_prev") == 1
    assert sum(i.opcode == "dot" for i in step.instructions) == 2
    assert not fuse(module)
    for name in entries:
        assert_same_results(before, module, name)


def group_module(rng: random.Random) -> tuple[Module, int]:
    """@f: products x·U_i and V_j·W in random order, some of whose other operand is computed
    (a `tanh`) just before the product; returns the module and how many products fusion must
    leave: per shared operand, the first product plus every later one whose operand is computed
    after the first (it cannot join the first one's group, nor any other)."""
    dt = rng.choice([DataType.F32, DataType.F64])

    def matrix(rows: int, cols: int) -> TensorType:
        return TensorType((rows, cols), dt)

    m, k, n = (rng.randint(1, 6) for _ in range(3))
    sides = [rng.choice("xW") for _ in range(rng.randint(2, 7))]
    sizes = [rng.randint(1, 5) for _ in sides]
    others = [matrix(k, z) if s == "x" else matrix(z, k) for s, z in zip(sides, sizes)]
    products = [matrix(m, z) if s == "x" else matrix(z, n) for s, z in zip(sides, sizes)]
    result = TupleType(tuple(products))
    fn = new_function("f", FunctionType((matrix(m, k), matrix(k, n), *others), result))
    b = Builder(fn.entry)
    x, w, *args = fn.arguments
    results: list[Value] = []
    expected = {"x": 0, "W": 0}
    for side, arg in zip(sides, args):
        computed = rng.random() < 0.4
        other: Value = b.tanh(arg) if computed else arg
        results.append(b.dot(x, other) if side == "x" else b.dot(other, w))
        if expected[side] == 0 or computed:
            expected[side] += 1
    b.build("return", [b.literal(LiteralValue(AggregateLiteral("tuple", tuple(results)), result))])
    module = Module("groups")
    module.add_function(fn)
    return module, sum(expected.values())


@generated(60)
@given(st.integers(0, 2**32 - 1))
def test_random_groups_fuse_and_compute_the_same(seed):
    module, remaining = group_module(random.Random(seed))
    text = module_text(module)
    before, after = parse_module(text), parse_module(text)
    dots = sum(i.opcode == "dot" for i in before.functions[0].instructions())

    changed = fuse(after)

    fn = after.functions[0]
    assert sum(i.opcode == "dot" for i in fn.instructions()) == remaining
    assert changed == (remaining < dots)
    assert find_groups(fn) == []
    assert not fuse(after)
    assert_same_results(before, after, "f", seed)


@pytest.mark.parametrize("control_flow", [False, True])
def test_generated_modules_stay_valid_and_compute_the_same(control_flow):
    changed = changes_to_generated_modules(fuse, range(150), 40, control_flow)
    assert changed >= 10  # the generated modules do exercise the pass


def test_the_filecheck_cases_compute_the_same():
    path = "tests/filecheck/transforms/linear-algebra-fusion.dl"
    with open(path, encoding="utf-8") as f:
        text = f.read()
    before, after = parse_module(text, path), parse_module(text, path)
    assert fuse(after)
    for fn in before.functions:
        for seed in range(3):  # both branches
            assert_same_results(before, after, fn.name, seed)


def tangle_module(rng: random.Random) -> Module:
    """@f: square products whose operands are drawn from a few arguments and the earlier
    products and their `tanh`s, so that products share operands, read each other and read
    values computed in between, in every combination."""
    square = TensorType((3, 3), rng.choice([DataType.F32, DataType.F64]))
    count = rng.randint(2, 10)
    fn = new_function("f", FunctionType((square,) * 3, TupleType((square,) * count)))
    b = Builder(fn.entry)
    pool: list[Value] = list(fn.arguments)
    products: list[Value] = []
    for _ in range(count):
        if rng.random() < 0.3:
            pool.append(b.tanh(rng.choice(pool)))
        products.append(b.dot(rng.choice(pool), rng.choice(pool)))
        if rng.random() < 0.5:
            pool.append(products[-1])
    result = TupleType((square,) * count)
    b.build("return", [b.literal(LiteralValue(AggregateLiteral("tuple", tuple(products)), result))])
    module = Module("tangle")
    module.add_function(fn)
    return module


@generated(80)
@given(st.integers(0, 2**32 - 1))
def test_tangled_products_reach_the_fixpoint_in_one_run_and_compute_the_same(seed):
    text = module_text(tangle_module(random.Random(seed)))
    before, after = parse_module(text), parse_module(text)
    dots = sum(i.opcode == "dot" for i in before.functions[0].instructions())

    changed = fuse(after)

    fused = sum(i.opcode == "dot" for i in after.functions[0].instructions())
    assert changed == (fused < dots)
    assert find_groups(after.functions[0]) == []
    assert not fuse(after)
    assert_same_results(before, after, "f", seed)
