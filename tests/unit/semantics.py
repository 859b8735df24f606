"""Checking on the reference interpreter that a transformation keeps what functions compute,
for the tests of the optimisation passes: random arguments for a function type, comparisons of
results (integers and booleans exactly, floats to the tolerance each test chooses), running the
functions of a module before and after a transformation, and the hypothesis settings of the
property tests. The CFG passes' tests compare bit for bit, on their own (tests/unit/cfggen.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from irgen import random_module

from dlvm.interp import InterpreterError, run_function
from dlvm.interp.objects import np_dtype
from dlvm.ir import module_text, parse_module
from dlvm.ir.types import FunctionType, TensorType, TupleType, Type, canonical
from dlvm.ir.values import Module
from dlvm.transforms.pass_base import Pass
from dlvm.transforms.pass_manager import PassManager


def run_twice(module: Module, pass_class: type[Pass]) -> tuple[bool, bool]:
    """Runs a pass twice (the pass manager verifies after each run); whether each run changed
    something: a pass at its fixpoint changes nothing the second time."""
    (_, first), (_, second) = PassManager().run(module, [pass_class] * 2)
    return first, second


def generated(max_examples: int) -> settings:
    """The settings of the property tests: `max_examples` examples, the same ones on every run
    (derandomized, no example database), no deadline, slow generation allowed."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


# Random arguments -------------------------------------------------------------------------------


def random_value(ty: Type, rng: np.random.Generator, float64: bool = True) -> object:
    """A random value of type ty: floats in [0.5, 2) of either sign (away from zero, so that
    divisions and logarithms stay finite), integers in [1, 5), booleans; tuples element by
    element. Floats are float64 arrays (which the interpreter takes for any float type in
    float64 mode) or, with float64=False, arrays of the type's own dtype."""
    t = canonical(ty)
    if isinstance(t, TupleType):
        return tuple(random_value(e, rng, float64) for e in t.elements)
    assert isinstance(t, TensorType), f"no random value of type {ty}"
    if t.dtype.is_float:
        value = rng.uniform(0.5, 2.0, t.shape) * rng.choice([-1.0, 1.0], t.shape)
        return value if float64 else value.astype(np_dtype(t.dtype))
    if t.dtype.is_bool:
        return rng.random(t.shape) < 0.5
    return rng.integers(1, 5, t.shape).astype(np_dtype(t.dtype))


def random_args(fn_type: FunctionType, rng: np.random.Generator, float64: bool = True) -> list:
    """Random arguments (random_value) for a function of type fn_type."""
    return [random_value(t, rng, float64) for t in fn_type.arguments]


# Comparing results ------------------------------------------------------------------------------


def _assert_each(
    expected: object,
    actual: object,
    floats: Callable[[np.ndarray, np.ndarray], None],
    same_dtype: bool,
) -> None:
    """Tuples element by element; equal shapes (and dtypes with same_dtype); integers and
    booleans exactly; floats by floats(expected, actual)."""
    if isinstance(expected, tuple):
        assert isinstance(actual, tuple) and len(expected) == len(actual)
        for e, a in zip(expected, actual):
            _assert_each(e, a, floats, same_dtype)
        return
    e, a = np.asarray(expected), np.asarray(actual)
    assert e.shape == a.shape
    if same_dtype:
        assert e.dtype == a.dtype
    if e.dtype.kind == "f":
        floats(e, a)
    else:
        np.testing.assert_array_equal(e, a)


def assert_same(
    expected: object, actual: object, *, rtol: float, atol: float = 0.0, same_dtype: bool = True
) -> None:
    """Equal results: floats within rtol and atol everywhere, NaN equal to NaN and infinities
    to themselves; with same_dtype, of the same dtypes."""

    def floats(e: np.ndarray, a: np.ndarray) -> None:
        np.testing.assert_allclose(e, a, rtol=rtol, atol=atol, equal_nan=True)

    _assert_each(expected, actual, floats, same_dtype)


def assert_close_where_finite(
    expected: object, actual: object, *, rtol: float, atol: float, same_dtype: bool = False
) -> None:
    """Equal results, floats within rtol and atol wherever `expected` is finite: rewrites
    such as x·0 → 0 and x−x → 0 differ from IEEE arithmetic only where x is infinite or NaN.
    With same_dtype, of the same dtypes."""

    def floats(e: np.ndarray, a: np.ndarray) -> None:
        finite = np.isfinite(e)
        np.testing.assert_allclose(e[finite], a[finite], rtol=rtol, atol=atol)

    _assert_each(expected, actual, floats, same_dtype)


def assert_close_up_to_rounding(expected: object, actual: object) -> None:
    """Equal up to rounding where `expected` is finite: re-association (MMR, LAF) changes the
    order of the additions only. Floats within a relative 1e-9 of expected plus an absolute
    1e-12 times its largest finite magnitude (at least 1)."""

    def floats(e: np.ndarray, a: np.ndarray) -> None:
        finite = np.isfinite(e)
        scale = float(np.abs(e[finite]).max(initial=1.0))
        np.testing.assert_allclose(a[finite], e[finite], rtol=1e-9, atol=1e-12 * scale)

    _assert_each(expected, actual, floats, same_dtype=False)


# Functions before and after a transformation ----------------------------------------------------


def assert_equivalent(
    before: Module,
    after: Module,
    compare: Callable[[object, object], None],
    *,
    rng: np.random.Generator,
    names: Iterable[str] | None = None,
    runs: int = 1,
    float64: bool = True,
    traps: bool = False,
) -> None:
    """Each function of `before` (those named, or every one) computes in `after` what it
    computes in `before`: `runs` times on random arguments drawn from rng, the results
    compared by compare(expected, actual), the interpreter's `random` seeded alike (seed=1).
    float64: interpret in float64 rather than in the IR's own precision. traps: where `before`
    fails (InterpreterError), `after` must fail too."""
    if names is None:
        names = [fn.name for fn in before.functions]
    for name in names:
        fn = before.function_named(name)
        assert fn is not None and isinstance(fn.type, FunctionType)
        for _ in range(runs):
            args = random_args(fn.type, rng, float64)
            try:
                expected = run_function(before, name, args, float64=float64, seed=1)
            except InterpreterError:
                if not traps:
                    raise
                with pytest.raises(InterpreterError):
                    run_function(after, name, args, float64=float64, seed=1)
                continue
            compare(expected, run_function(after, name, args, float64=float64, seed=1))


def assert_same_in_own_precision(before: Module, after: Module, seed: int, runs: int = 2) -> None:
    """Every function of `after` computes what it did in `before` in the IR's own precision
    (integers and booleans exactly, floats within 1e-6, NaN equal to NaN), or fails as it did
    (ConstProp and LBP, which fold in that precision)."""
    compare = functools.partial(assert_same, rtol=1e-6)
    rng = np.random.default_rng(seed)
    assert_equivalent(before, after, compare, rng=rng, runs=runs, float64=False, traps=True)


def assert_same_up_to_rounding(before: Module, after: Module, name: str, seed: int = 0) -> None:
    """@name computes the same in both modules (float64) on random arguments drawn from seed,
    up to the rounding of re-associated additions (MMR, LAF)."""
    rng = np.random.default_rng(seed)
    assert_equivalent(before, after, assert_close_up_to_rounding, rng=rng, names=[name])


def changes_to_generated_modules(
    apply: Callable[[Module], bool], seeds: Iterable[int], size: int, control_flow: bool
) -> int:
    """How many of the random modules random_module(seed, size, control_flow) apply(module)
    changes (it runs a pass and says whether it changed the module). An unchanged module must
    print as before; a changed one must be a fixpoint, read back as printed, and compute the
    same up to rounding (assert_same_up_to_rounding) in every function."""
    changed = 0
    for seed in seeds:
        text = module_text(random_module(seed, size, control_flow))
        before, after = parse_module(text), parse_module(text)
        if not apply(after):
            assert module_text(after) == text
            continue
        changed += 1
        assert not apply(after)
        printed = module_text(after)
        assert module_text(parse_module(printed)) == printed
        for fn in before.functions:
            assert_same_up_to_rounding(before, after, fn.name, seed)
    return changed


__all__ = [
    "assert_close_up_to_rounding",
    "assert_close_where_finite",
    "assert_equivalent",
    "assert_same",
    "assert_same_in_own_precision",
    "assert_same_up_to_rounding",
    "changes_to_generated_modules",
    "generated",
    "random_args",
    "random_value",
]
