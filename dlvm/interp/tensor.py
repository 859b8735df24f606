"""Tensor instructions other than elementwise and reductions: dot, layout and shape changes,
shape queries and random tensors.
"""

from __future__ import annotations

import numpy as np

from dlvm.interp.errors import InterpreterError
from dlvm.interp.objects import is_bf16, is_float_dtype
from dlvm.interp.registry import impl


@impl("dot")
def _dot(frame, inst, args):
    """Matrix product with a batch prefix (NumPy `matmul`); two vectors give a scalar. bf16
    operands are multiplied and summed in f32 and the result rounded once, as compiled code
    does (and NumPy does for f16)."""
    a, b = args
    if is_bf16(a.dtype):
        a, b = a.astype(np.float32), b.astype(np.float32)
    return np.asarray(np.matmul(a, b), dtype=frame.dtype(inst.type))


@impl("transpose")
def _transpose(frame, inst, args):
    """Reverses the order of all dimensions."""
    return np.transpose(args[0])


@impl("reverse")
def _reverse(frame, inst, args):
    return np.flip(args[0], axis=tuple(inst.attrs["dims"]))


@impl("concatenate")
def _concatenate(frame, inst, args):
    return np.concatenate(args, axis=inst.attrs["axis"])


@impl("slice")
def _slice(frame, inst, args):
    """`slice v from lo upto hi`: the closed range [lo, hi] of dimension 0."""
    lo, hi = inst.attrs["lo"], inst.attrs["hi"]
    x = args[0]
    if not 0 <= lo <= hi < x.shape[0]:
        raise InterpreterError(f"slice {lo} upto {hi} is out of bounds for shape {x.shape}")
    return x[lo : hi + 1]


def _checked_ids(ids: np.ndarray, n: int, axis: int) -> np.ndarray:
    """The ids as int64 after checking each is in [0, n): a negative id does not count from
    the end (docs/ir.md, "gather")."""
    bad = (ids < 0) | (ids >= n)
    if bad.any():
        first = int(ids[bad].flat[0])
        raise InterpreterError(f"id {first} out of range [0, {n}) along axis {axis}")
    return ids.astype(np.int64)


@impl("gather")
def _gather(frame, inst, args):
    """NumPy's `take`: the ids select along `axis`, their shape replacing that dimension."""
    table, ids = args
    axis = inst.attrs["axis"]
    return np.take(table, _checked_ids(ids, table.shape[axis], axis), axis=axis)


@impl("scatterAdd")
def _scatter_add(frame, inst, args):
    """The base plus each update added at its id along `axis` (repeated ids accumulate)."""
    updates, ids, base = args
    axis = inst.attrs["axis"]
    out = np.array(base, copy=True)
    where = (slice(None),) * axis + (_checked_ids(ids, base.shape[axis], axis),)
    np.add.at(out, where, updates)
    return out


@impl("padShape")
def _pad_shape(frame, inst, args):
    return np.expand_dims(args[0], inst.attrs["index"])


@impl("squeezeShape")
def _squeeze_shape(frame, inst, args):
    return np.squeeze(args[0], axis=inst.attrs["index"])


@impl("shapeCast")
def _shape_cast(frame, inst, args):
    """Reshape in row-major order."""
    return np.reshape(args[0], inst.attrs["shape"])


@impl("rank")
def _rank(frame, inst, args):
    return np.asarray(args[0].ndim, dtype=np.int64)


@impl("shape")
def _shape(frame, inst, args):
    return np.asarray(args[0].shape, dtype=np.int64)


@impl("unitCount")
def _unit_count(frame, inst, args):
    return np.asarray(args[0].size, dtype=np.int64)


@impl("random")
def _random(frame, inst, args):
    """Uniform in [lo, hi): reals for float types, integers for integer types. Draws from the
    interpreter's seedable `numpy.random.Generator`."""
    lo, hi = args[0][()], args[1][()]
    shape = inst.attrs["shape"]
    dtype = frame.dtype(inst.type)
    rng = frame.interp.rng
    if is_float_dtype(dtype):
        if hi < lo:
            raise InterpreterError(f"random range [{lo}, {hi}) is empty")
        r = rng.uniform(lo, hi, size=shape).astype(dtype)
        if hi > lo:  # rounding to a narrow float type may reach hi; keep the range half-open
            r = np.minimum(r, np.nextafter(dtype.type(hi), dtype.type(lo)))
        return np.asarray(r, dtype=dtype)
    if hi <= lo:
        raise InterpreterError(f"random range [{lo}, {hi}) is empty")
    return np.asarray(rng.integers(lo, hi, size=shape, dtype=dtype), dtype=dtype)
