"""The analysis cache: results stored on each function and valid for one revision.

Every structural edit bumps `Function.revision` (values.py), so a cached result is never
served for a function that changed; `invalidate` drops results explicitly (the pass manager
calls it when a pass reports a change, which also covers in-place edits of attributes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from dlvm.ir.values import Function

T = TypeVar("T")

_ALL_FUNCTIONS_EPOCH = [0]  # bumped by invalidate(None): every cached result is stale


def analysis(compute: Callable[[Function], T], fn: Function) -> T:
    """The result of `compute(fn)`, recomputed only when fn changed since the last call."""
    stamp = (fn.revision, _ALL_FUNCTIONS_EPOCH[0])
    hit = fn.analyses.get(compute)
    if hit is not None and hit[0] == stamp:
        return hit[1]  # type: ignore[return-value]
    result = compute(fn)
    fn.analyses[compute] = (stamp, result)
    return result


def invalidate(fn: Function | None = None) -> None:
    """Drops cached results for fn (or for every function)."""
    if fn is None:
        _ALL_FUNCTIONS_EPOCH[0] += 1
    else:
        fn.analyses.clear()
