"""Random chains of transposes and changes of shape (Hypothesis strategies) and the same chain
on a NumPy array, for the tests of strided views (dlvm.ir.strided and the kernels that read
them in place)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

# A chain: "t" a transpose (all axes reversed), or a shape.
Step = tuple[int, ...] | str

PRIMES = (2, 3, 5)


@st.composite
def shapes_of(draw: st.DrawFn, size: int) -> tuple[int, ...]:
    """A shape of `size` elements: its prime factors shuffled into 1 to 5 axes, some of 1."""
    factors: list[int] = []
    for p in PRIMES:
        while size % p == 0:
            factors.append(p)
            size //= p
    assert size == 1
    factors = draw(st.permutations(factors))
    rank = draw(st.integers(1, 5))
    cuts = sorted(draw(st.lists(st.integers(0, len(factors)), min_size=rank - 1,
                                max_size=rank - 1)))  # fmt: skip
    bounds = [0, *cuts, len(factors)]
    return tuple(math.prod(factors[a:b]) for a, b in zip(bounds, bounds[1:]))


@st.composite
def chains(draw: st.DrawFn, max_steps: int = 5) -> tuple[tuple[int, ...], list[Step]]:
    """A starting shape (at most 360 elements) and 1 to max_steps transposes and changes of
    shape after it."""
    size = draw(st.sampled_from([2**a * 3**b * 5**c for a in range(4) for b in range(3)
                                 for c in range(2)]))  # fmt: skip
    start = draw(shapes_of(size))
    steps: list[Step] = []
    for _ in range(draw(st.integers(1, max_steps))):
        steps.append("t" if draw(st.booleans()) else draw(shapes_of(size)))
    return start, steps


def numpy_chain(a: np.ndarray, steps: list[Step]) -> np.ndarray:
    for s in steps:
        a = a.T if s == "t" else a.reshape(s)
    return a


def shape_after(shape: tuple[int, ...], steps: list[Step]) -> tuple[int, ...]:
    for s in steps:
        shape = shape[::-1] if s == "t" else s  # type: ignore[assignment]
    return shape
