"""Property: for random straight-line differentiable functions (tests/unit/adgen.py), the
differentiation pass produces a module that verifies and round-trips through text, and its
gradients agree with finite differences in float64, seeded or not, for any `wrt` subset, with
`keeping`, and after DCE and CSE."""

from __future__ import annotations

import random
import re
from typing import cast

import numpy as np
from adgen import random_function
from gradcheck import add_gradient, differentiate, gradient_check
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from dlvm.interp import run_function
from dlvm.ir import module_text, parse_module
from dlvm.ir.typerules import gradient_type
from dlvm.ir.types import FunctionType
from dlvm.ir.values import Function, GradientDecl
from dlvm.ir.verifier import verify
from dlvm.transforms.pass_manager import PassManager

GENERATED = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
SEEDS = st.integers(0, 2**32 - 1)
SIZES = st.integers(1, 16)
BROADCAST = re.compile(
    r"= (?:add|subtract|multiply|divide|max|min) %\w+: ([^,]+), %\w+: (.+)$", re.M
)


def inputs_for(seed: int, shapes: list[tuple[int, ...]]) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1.5, 1.5, size=s) for s in shapes]


@GENERATED
@given(SEEDS, SIZES)
def test_generated_gradients_verify_and_match_finite_differences(seed, size):
    gen = random_function(seed, size)
    note(gen.text)
    module = parse_module(gen.text, "generated.dl")
    assert verify(module) == []
    g, wrt = add_gradient(module, "f")
    assert wrt == tuple(range(len(gen.shapes)))
    differentiate(module)  # asserts that the result verifies
    assert module.stage == "optimizable"
    assert g.declaration is None and g.blocks
    # The adjoint code is ordinary IR: it prints, parses back and verifies.
    text = module_text(module)
    again = parse_module(text, "differentiated.dl")
    assert verify(again) == []
    assert module_text(again) == text
    grads = gradient_check(gen.text, inputs_for(seed, gen.shapes))
    assert [np.shape(d) for d in grads] == gen.shapes


def _declare(module, wrt: tuple[int, ...], keeping: tuple[int, ...]) -> Function:
    """`[gradient @f wrt … keeping …] func @f_plain` (not seedable: seeded with 1)."""
    f = module.function_named("f")
    ty = gradient_type(cast(FunctionType, f.type), None, wrt, keeping, False)
    g = Function("f_plain", ty)
    g.declaration = GradientDecl(f, None, wrt, keeping, False)
    module.add_function(g)
    return g


@GENERATED
@given(SEEDS, SIZES, st.booleans())
def test_seeds_wrt_subsets_and_keeping_agree_with_the_full_gradient(seed, size, keep):
    """The unseeded gradient with respect to some of the arguments (and the kept output) is
    the seeded one with a seed of ones, restricted to those arguments, also after DCE+CSE."""
    gen = random_function(seed, size)
    note(gen.text)
    n = len(gen.shapes)
    pick = random.Random(seed)
    wrt = tuple(sorted(pick.sample(range(n), pick.randint(1, n))))
    keeping = (0,) if keep else ()
    module = parse_module(gen.text)
    full, _ = add_gradient(module, "f")
    _declare(module, wrt, keeping)
    differentiate(module)
    xs = inputs_for(seed, gen.shapes)
    out = run_function(module, "f", xs, float64=True)
    ones = np.ones(np.shape(out))

    def check(m) -> None:
        all_grads = run_function(m, full.name, [*xs, ones], float64=True)
        plain = run_function(m, "f_plain", xs, float64=True)
        assert len(plain) == len(wrt) + len(keeping)
        for k, i in enumerate(wrt):
            np.testing.assert_allclose(plain[k], all_grads[i], rtol=1e-12, atol=1e-12)
        if keep:
            np.testing.assert_allclose(plain[-1], out, rtol=1e-12, atol=1e-12)

    check(module)
    PassManager().run(module, PassManager.resolve(["DCE", "CSE", "DCE"]))
    assert verify(module) == []
    check(module)


def test_generator_is_deterministic_and_covers_the_operations():
    assert random_function(3, 12).text == random_function(3, 12).text
    texts = [random_function(s, 12) for s in range(60)]
    text = "".join(g.text for g in texts)
    for word in [
        " = tanh ",
        " = sin ",
        " = cos ",
        " = exp ",
        " = log ",
        " = sqrt ",
        " = negate ",
        " = square ",
        " = add ",
        " = subtract ",
        " = multiply ",
        " = divide ",
        " = max ",
        " = min ",
        " = dot ",
        " = transpose ",
        " = reduce ",
        " by add init 0: f32 along 0, 1",
        " = shapeCast ",
        " to scalar",
        " = padShape ",
        " = squeezeShape ",
        " = literal <",  # a tensor constant
        " = literal 2.0: <",  # a splat constant
        ", 0.5: f32",  # a scalar literal operand
        "-> f32 {",  # a scalar result
        "x f32> {",  # a tensor result
    ]:
        assert word in text, word
    # Broadcasting: elementwise operands of different shapes, both ways round.
    pairs = set(BROADCAST.findall(text))
    mixed = {(a, b) for a, b in pairs if a != b}
    assert any(a == "f32" for a, _ in mixed) and any(b == "f32" for _, b in mixed)
    assert any(a.startswith("<1 x ") and b.count(" x ") == 2 for a, b in mixed)
    assert any(b.startswith("<1 x ") and a.count(" x ") == 2 for a, b in mixed)
    assert max(len(g.shapes) for g in texts) == 4 and min(len(g.shapes) for g in texts) == 1
    assert {len(s) for g in texts for s in g.shapes} == {0, 1, 2}
