"""Operations composed of several instructions, shared by every producer of IR (the TEL
frontend and the passes): each takes `op(opname, *operands, **attrs) -> Value`, the caller's
way of emitting one instruction."""

from __future__ import annotations

import functools
import itertools
import math
from collections import deque
from collections.abc import Callable
from typing import Any

from dlvm.ir.types import TensorType, canonical
from dlvm.ir.values import Value

Emit = Callable[..., Value]


def slice_along(op: Emit, v: Value, axis: int, lo: int, hi: int) -> Value:
    """v[…, lo..hi (closed), …] along any axis. `slice` cuts the first dimension; for another
    axis the tensor is viewed as [P, n·Q], transposed to [n·Q, P], cut, and turned back (P and
    Q are the products of the dimensions before and after the axis)."""
    t = canonical(v.type)
    assert isinstance(t, TensorType)
    if axis == 0:
        return op("slice", v, lo=lo, hi=hi)
    p, n, q = math.prod(t.shape[:axis]), t.shape[axis], math.prod(t.shape[axis + 1 :])
    flat = op("transpose", op("shapeCast", v, shape=(p, n * q)))
    rows = op("slice", op("shapeCast", flat, shape=(n, q * p)), lo=lo, hi=hi)
    k = hi - lo + 1
    back = op("transpose", op("shapeCast", rows, shape=(k * q, p)))
    return op("shapeCast", back, shape=t.shape[:axis] + (k,) + t.shape[axis + 1 :])


def permute(op: Emit, v: Value, perm: tuple[int, ...]) -> Value:
    """v with its axes permuted like NumPy's `transpose(v, perm)`: result axis i is axis
    perm[i] of v. `transpose` only reverses every axis, so each step views v with runs of
    adjacent axes merged, reverses the runs, and views the result with its axes apart again;
    the fewest such steps are searched for (every permutation needs a few)."""
    t = canonical(v.type)
    assert isinstance(t, TensorType)
    shape = t.shape
    order = tuple(range(len(shape)))  # which axis of v sits at each position now
    for runs in _reversal_steps(tuple(perm)):
        merged = tuple(math.prod(shape[order[i]] for i in run) for run in runs)
        order = tuple(i for run in reversed(runs) for i in (order[j] for j in run))
        if len(merged) != len(order):
            v = op("shapeCast", v, shape=merged)
        v = op("transpose", v)
        if len(merged) != len(order):
            v = op("shapeCast", v, shape=tuple(shape[i] for i in order))
    return v


Runs = tuple[tuple[int, ...], ...]


@functools.cache
def _reversal_steps(perm: tuple[int, ...]) -> tuple[Runs, ...]:
    """The shortest sequence of run reversals (each a split of the positions into runs of
    adjacent positions, at least two) that turns the identity order into perm."""
    n = len(perm)
    if n > 7:  # the search grows as n!: sort by adjacent swaps instead (two steps each)
        return _swap_steps(perm)
    splits = [
        _runs(n, cuts) for k in range(1, n) for cuts in itertools.combinations(range(1, n), k)
    ]
    start = tuple(range(n))
    came: dict[tuple[int, ...], tuple[tuple[int, ...], Runs] | None] = {start: None}
    queue = deque([start])
    while queue and perm not in came:
        order = queue.popleft()
        for runs in splits:
            nxt = tuple(order[j] for run in reversed(runs) for j in run)
            if nxt not in came:
                came[nxt] = (order, runs)
                queue.append(nxt)
    steps: list[Runs] = []
    at = perm
    while (prev := came[at]) is not None:
        at, runs = prev
        steps.append(runs)
    return tuple(reversed(steps))


def _runs(n: int, cuts: tuple[int, ...]) -> Runs:
    bounds = (0, *cuts, n)
    return tuple(tuple(range(a, b)) for a, b in itertools.pairwise(bounds))


def _swap_steps(perm: tuple[int, ...]) -> tuple[Runs, ...]:
    """Bubble sort towards perm; the swap of positions i and i+1 is two reversals:
    (A)(i)(i+1)(B) → (B)(i+1)(i)(A), then (B)(i+1 i)(A) → (A)(i+1 i)(B)."""
    n = len(perm)
    order = list(range(n))
    steps: list[Runs] = []
    for target in range(n):
        i = order.index(perm[target])
        while i > target:
            a, b = i - 1, n - i - 1  # lengths of A and B
            first = tuple(r for r in (tuple(range(a)), (a,), (a + 1,), tuple(range(a + 2, n))) if r)
            second = tuple(r for r in (tuple(range(b)), (b, b + 1), tuple(range(b + 2, n))) if r)
            steps += [first, second]
            order[i - 1], order[i] = order[i], order[i - 1]
            i -= 1
    return tuple(steps)


__all__: list[Any] = ["permute", "slice_along"]
