"""TEL built-ins against NumPy on the interpreter: each case is an exported one-line function,
its arguments, and what NumPy computes from them (docs/tel.md "Built-in functions")."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from telhelp import compile_snippet

from dlvm.interp import run_function

RNG = np.random.default_rng(7)
A = RNG.standard_normal((2, 3, 4))
M = RNG.standard_normal((3, 5))
TIES = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0], [-1.0, -5.0, -1.0, -7.0]])
LABELS = np.array([2, 0, 4, 4, 1])


def logaddexp0(x: np.ndarray) -> np.ndarray:
    """log(e^0 + e^x), NaN kept without NumPy's warning."""
    with np.errstate(invalid="ignore"):
        return np.logaddexp(0, x)


WIDE = np.array([-1e30, -740.0, -100.0, -1.5, 0.0, 0.5, 40.0, 100.0, 1e30, np.nan])

# name: (signature, body, arguments, NumPy)
CASES: dict[str, tuple[str, str, list[np.ndarray], Callable[..., np.ndarray]]] = {
    "onehot": ("(i: i64[5]) -> f64[5 x 6]", "onehot(i, 6)", [LABELS], lambda i: np.eye(6)[i]),
    # The classic DLVM TEL intrinsics pow(a, b) and mod(a, b): a ** b and a % b.
    "classic-pow": (
        "(x: f64[3 x 5]) -> f64[3 x 5]",
        "pow(abs(x), 1.5)",
        [M],
        lambda x: np.abs(x) ** 1.5,
    ),
    "classic-mod": (
        "(x: f64[3 x 5], y: f64[5]) -> f64[3 x 5]",
        "mod(x, y)",
        [M, np.array([0.5, 1.0, 1.5, 2.0, 0.75])],
        lambda x, y: np.fmod(x, y),
    ),
    "onehot-of-a-matrix": (
        "(i: i32[2 x 3]) -> f64[2 x 3 x 5]",
        "onehot(i, 5)",
        [np.array([[0, 4, 2], [3, 3, 1]], np.int32)],
        lambda i: np.eye(5)[i],
    ),
    "argmax-last-axis-first-on-ties": (
        "(x: f64[3 x 4]) -> i64[3]",
        "argmax(x)",
        [TIES],
        lambda x: np.argmax(x, axis=-1),
    ),
    "argmax-axis-0": (
        "(x: f64[3 x 4]) -> i64[4]",
        "argmax(x, axis: 0)",
        [TIES],
        lambda x: np.argmax(x, axis=0),
    ),
    "argmax-of-integers": (
        "(x: i32[5]) -> i64[]",
        "argmax(x)",
        [np.array([3, -2, 9, 9, 1], np.int32)],
        lambda x: np.argmax(x),
    ),
    "reverse-two-axes": (
        "(x: f64[2 x 3 x 4]) -> f64[2 x 3 x 4]",
        "reverse(x, axis: (0, -1))",
        [A],
        lambda x: x[::-1, :, ::-1],
    ),
    "transpose": ("(x: f64[3 x 5]) -> f64[5 x 3]", "x^T", [M], lambda x: x.T),
    "transpose-permutation": (
        "(x: f64[2 x 3 x 4]) -> f64[3 x 4 x 2]",
        "transpose(x, perm: (1, 2, 0))",
        [A],
        lambda x: np.transpose(x, (1, 2, 0)),
    ),
    "transpose-swap-inner": (
        "(x: f64[2 x 3 x 4]) -> f64[2 x 4 x 3]",
        "transpose(x, (0, -1, 1))",
        [A],
        lambda x: np.transpose(x, (0, 2, 1)),
    ),
    "swap-axes-last-two": (
        "(x: f64[2 x 3 x 4]) -> f64[2 x 4 x 3]",
        "swap_axes(x)",
        [A],
        lambda x: np.swapaxes(x, -1, -2),
    ),
    "swap-axes-outer": (
        "(x: f64[2 x 3 x 4]) -> f64[4 x 3 x 2]",
        "swap_axes(x, axes: (0, -1))",
        [A],
        lambda x: np.swapaxes(x, 0, 2),
    ),
    "size-of-axes": (
        "(x: f64[2 x 3 x 4]) -> f64[2 x 3 x 4]",
        "x * size(x) + size(x, axis: 0) * 10",
        [A],
        lambda x: x * 4 + 20,
    ),
    "iota-last-axis": (
        "(x: f64[2 x 3 x 4]) -> i64[2 x 3 x 4]",
        "iota(x)",
        [A],
        lambda x: np.broadcast_to(np.arange(4), x.shape),
    ),
    "iota-causal-mask": (
        "(x: f64[3 x 5]) -> bool[3 x 5]",
        "iota(x, axis: -1) <= iota(x, axis: 0)",
        [M],
        lambda x: np.tril(np.ones(x.shape, bool)),
    ),
    "concat-axis-1": (
        "(x: f64[3 x 5], y: f64[3 x 5]) -> f64[3 x 10]",
        "concat(x, y, axis: 1)",
        [M, M * 2],
        lambda x, y: np.concatenate([x, y], axis=1),
    ),
    "sum-keepdims": (
        "(x: f64[2 x 3 x 4]) -> f64[2 x 1 x 4]",
        "sum(x, axis: 1, keepdims: true)",
        [A],
        lambda x: x.sum(axis=1, keepdims=True),
    ),
    "mean-two-axes": (
        "(x: f64[2 x 3 x 4]) -> f64[3]",
        "mean(x, axis: (0, 2))",
        [A],
        lambda x: x.mean(axis=(0, 2)),
    ),
    "prod-all": ("(x: f64[3 x 5]) -> f64", "prod(x)", [M], lambda x: np.prod(x)),
    "max-min-reductions": (
        "(x: f64[2 x 3 x 4]) -> f64[2 x 4]",
        "max(x, axis: 1) - min(x, axis: -2)",
        [A],
        lambda x: x.max(axis=1) - x.min(axis=1),
    ),
    "select-broadcast": (
        "(c: bool[3 x 1], x: f64[3 x 5]) -> f64[3 x 5]",
        "select(c, x, 0.5)",
        [np.array([[True], [False], [True]]), M],
        lambda c, x: np.where(c, x, 0.5),
    ),
    "cast-bool-to-float": (
        "(x: f64[3 x 5]) -> f64[3 x 5]",
        "cast(x > 0.0, f64) * x",
        [M],
        lambda x: np.maximum(x, 0.0),
    ),
    # log(1 + e^x) far into both tails (x itself; e^x, subnormal at -740) and NaN.
    "softplus": (
        "(x: f64[10]) -> f64[10]",
        "softplus(x)",
        [WIDE],
        logaddexp0,
    ),
    "slice-and-index": (
        "(x: f64[2 x 3 x 4]) -> f64[2 x 3]",
        "x[1][1:3] . x[0]^T[0:4]",
        [A],
        lambda x: x[1][1:3] @ x[0].T[0:4],
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_builtin_matches_numpy(name: str, tmp_path) -> None:
    signature, body, args, model = CASES[name]
    compiled = compile_snippet(
        str(tmp_path), f"module b\ntype float64\nexport def f{signature} = {body}\n"
    )
    got = run_function(compiled.module, "f", args, float64=True)
    expected = model(*args)
    assert np.shape(got) == np.shape(expected)
    assert np.asarray(got).dtype == np.asarray(expected).dtype
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_onehot_of_many_classes_stays_small_in_the_ir(tmp_path) -> None:
    """0..n-1 is a running sum, not an n-element literal: a million classes compile at once."""
    compiled = compile_snippet(
        str(tmp_path),
        "module big\nexport def f(i: i64[2]) -> f32[2 x 1000000] = onehot(i, 1000000)\n",
    )
    assert len(str(compiled.module)) < 2000


@pytest.mark.parametrize("rank", [4, 5, 8])
def test_transpose_by_every_kind_of_permutation(rank: int, tmp_path) -> None:
    """Permutations are built from full reversals of merged axes: a sample of each rank,
    including the reversal, the identity and adjacent swaps, matches NumPy."""
    rng = np.random.default_rng(rank)
    shape = tuple(int(d) for d in rng.integers(1, 4, rank))
    x = rng.standard_normal(shape)
    perms = [tuple(range(rank)), tuple(reversed(range(rank))), (1, 0, *range(2, rank))]
    perms += [tuple(int(i) for i in rng.permutation(rank)) for _ in range(4)]
    lines = ["module p", "type float64"]
    for k, perm in enumerate(perms):
        out = " x ".join(str(shape[i]) for i in perm)
        dims = " x ".join(map(str, shape))
        lines.append(f"export def f{k}(x: f64[{dims}]) -> f64[{out}] = transpose(x, perm: {perm})")
    compiled = compile_snippet(str(tmp_path), "\n".join(lines) + "\n")
    for k, perm in enumerate(perms):
        got = run_function(compiled.module, f"f{k}", [x], float64=True)
        np.testing.assert_array_equal(got, np.transpose(x, perm))


def test_second_derivative_through_a_named_gradient(tmp_path) -> None:
    text = (
        "module d2\ntype float64\n"
        "def f(x: f64) -> f64 = x * x * x + sin(x)\n"
        "def df(x: f64) -> f64 = grad(f, wrt: x)(x)\n"
        "export def g(x: f64) -> f64 = grad(df, wrt: x)(x)\n"
    )
    compiled = compile_snippet(str(tmp_path), text)
    for x in (-1.5, 0.0, 2.0):
        got = run_function(compiled.module, "g", [np.float64(x)], float64=True)
        np.testing.assert_allclose(got, 6 * x - np.sin(x), rtol=1e-12, atol=1e-12)


def test_softplus_gradient_is_the_logistic_function(tmp_path) -> None:
    """d softplus(x) = 1 / (1 + e^-x), with neither tail overflowing or flushed early."""
    text = (
        "module s\ntype float64\n"
        "def f(x: f64[9]) -> f64 = sum(softplus(x))\n"
        "export def g(x: f64[9]) -> f64[9] = grad(f, wrt: x)(x)\n"
    )
    compiled = compile_snippet(str(tmp_path), text)
    x = WIDE[:-1]
    z = np.exp(-np.abs(x))
    got = run_function(compiled.module, "g", [x], float64=True)
    np.testing.assert_allclose(got, np.where(x >= 0, 1 / (1 + z), z / (1 + z)), rtol=1e-12, atol=0)


def test_division_of_compile_time_numbers_is_exact(tmp_path) -> None:
    """`1 / 3` is a third and `6 / 3` the integer 2, as Python's `/`; an integer tensor still
    divides as C does. Truncating made `x * (1 / 3)` silently `x * 0`."""
    source = """module d
type float64
export def third(x: [2]) = x * (1 / 3)
export def ratio(x: [2]) = x * (size(x, axis: 0) / (size(x, axis: 0) - 1))
export def twice(i: i64[2]) = i * (6 / 3)
export def halves(i: i64[2]) = i / 2
"""
    module = compile_snippet(str(tmp_path), source).module
    x, i = np.array([3.0, 6.0]), np.array([7, -7], np.int64)
    np.testing.assert_allclose(run_function(module, "third", [x], float64=True), x / 3)
    np.testing.assert_allclose(run_function(module, "ratio", [x], float64=True), 2 * x)
    np.testing.assert_array_equal(run_function(module, "twice", [i], float64=True), 2 * i)
    np.testing.assert_array_equal(run_function(module, "halves", [i], float64=True), [3, -3])
