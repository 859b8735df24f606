"""Operations composed of several instructions, shared by every producer of IR (the TEL
frontend and the passes): each takes `op(opname, *operands, **attrs) -> Value`, the caller's
way of emitting one instruction."""

from __future__ import annotations

import math
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


__all__: list[Any] = ["slice_along"]
