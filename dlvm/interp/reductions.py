"""Reductions: reduce, scan and reduceWindow, with a combinator that is either a binary
operation's name or a function `@f: (T, T) -> T` called through the interpreter.

The meaning is always a left fold in row-major order, `acc = comb(acc, x)`; for associative
built-in combinators the NumPy reductions compute the same thing (up to float rounding order).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np

from dlvm.interp.elementwise import BINARY
from dlvm.interp.errors import InterpreterError
from dlvm.interp.objects import is_bf16
from dlvm.interp.registry import impl
from dlvm.ir.values import Function
from dlvm.ir.windows import window_padding

Array = np.ndarray
Combinator = Callable[[Array, Array], Array]

# Associative, commutative combinators with an equivalent NumPy ufunc.
UFUNCS: dict[str, np.ufunc] = {
    "add": np.add,
    "multiply": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
    "and": np.logical_and,
    "or": np.logical_or,
}


def combinator(frame, comb, dtype: np.dtype) -> Combinator:
    """The combinator as a function of two broadcastable arrays, its result cast to dtype."""
    if isinstance(comb, str):
        fn = BINARY[comb]
        return lambda a, b: np.asarray(fn(a, b), dtype=dtype)
    callee = frame.value(comb)
    if not isinstance(callee, Function):
        raise InterpreterError(f"combinator {comb.ref_text()} is not a function (null?)")

    def call_per_element(a: Array, b: Array) -> Array:
        a, b = np.broadcast_arrays(a, b)
        out = np.empty(a.shape, dtype=dtype)
        for idx in np.ndindex(*a.shape):
            out[idx] = frame.interp.call(callee, [a[idx + (...,)], b[idx + (...,)]])
        return out

    return call_per_element


@impl("reduce")
def _reduce(frame, inst, args):
    """`reduce v by comb init v0 along dims`: folds the listed dims away, starting from v0."""
    x, init = args
    dims = tuple(sorted(inst.attrs["dims"]))
    comb = inst.attrs["comb"]
    dtype = frame.dtype(inst.type)
    if comb == "add" and is_bf16(dtype):
        # A bf16 sum accumulates in f64 and is rounded once, as compiled code's (docs/ir.md,
        # "Reductions"); ml_dtypes would round after every add (256 + 1 is 256 in bf16).
        wide = np.add.reduce(x.astype(np.float64), axis=dims, initial=float(init[()]))
        return np.asarray(wide, dtype=dtype)
    if isinstance(comb, str) and comb in UFUNCS:
        return np.asarray(UFUNCS[comb].reduce(x, axis=dims, initial=init[()]), dtype=dtype)
    fn = combinator(frame, comb, dtype)
    kept = [i for i in range(x.ndim) if i not in dims]
    kept_shape = tuple(x.shape[i] for i in kept)
    rows = np.transpose(x, kept + list(dims)).reshape(kept_shape + (-1,))
    acc = np.full(kept_shape, init, dtype=dtype)
    for k in range(rows.shape[-1]):
        acc = fn(acc, rows[..., k])
    return acc


@impl("scan")
def _scan(frame, inst, args):
    """`scan v by comb along dims`: inclusive cumulative fold along each dim, in the listed
    order (`out[i] = comb(out[i-1], x[i])`, `out[0] = x[0]`)."""
    x = args[0]
    comb = inst.attrs["comb"]
    dtype = frame.dtype(inst.type)
    fast = UFUNCS.get(comb) if isinstance(comb, str) else None
    fn = None if fast is not None else combinator(frame, comb, dtype)
    for d in inst.attrs["dims"]:
        if fast is not None:
            x = np.asarray(fast.accumulate(x, axis=d), dtype=dtype)
            continue
        src = np.moveaxis(x, d, 0)
        out = np.empty_like(src)
        acc = src[0]
        out[0] = acc
        for i in range(1, src.shape[0]):
            acc = fn(acc, src[i])
            out[i] = acc
        x = np.moveaxis(out, 0, d)
    return x


@impl("reduceWindow")
def _reduce_window(frame, inst, args):
    """`reduceWindow v by comb init v0 dims d… strides s… padding mode`: folds each window
    (padded with v0) starting from v0."""
    x, init = args
    dims, strides = inst.attrs["dims"], inst.attrs["strides"]
    mode = inst.attrs["padding"]
    dtype = frame.dtype(inst.type)
    out_shape = inst.type.shape
    if x.ndim != len(out_shape):
        raise InterpreterError(f"operand of rank {x.ndim} does not match the window rank")
    pads = [window_padding(*a, mode) for a in zip(x.shape, dims, strides, out_shape)]
    padded = np.pad(x, pads, constant_values=init[()])
    fn = combinator(frame, inst.attrs["comb"], dtype)
    acc = np.full(out_shape, init, dtype=dtype)
    if 0 in out_shape:
        return acc
    for offset in itertools.product(*(range(d) for d in dims)):
        window = tuple(
            slice(o, o + (m - 1) * s + 1, s) for o, m, s in zip(offset, out_shape, strides)
        )
        acc = fn(acc, padded[window])
    return acc
