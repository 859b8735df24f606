"""Elementwise instructions as tables, one row per operation: unary and binary arithmetic,
boolean logic and comparisons, plus select and the casts.

Broadcasting follows docs/ir.md ("Types") (a scalar operand, or equal ranks with dims equal or 1),
which is a special case of NumPy's, so the table functions broadcast by themselves. Every result
is cast to the instruction's dtype (f64 for every float in float64 mode).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from dlvm.interp import special
from dlvm.interp.errors import InterpreterError
from dlvm.interp.objects import NP_DTYPES, is_float_dtype
from dlvm.interp.registry import impl
from dlvm.ir.types import TensorType, canonical

Array = np.ndarray


def _integral_identity(fn: Callable[[Array], Array]) -> Callable[[Array], Array]:
    """Rounding functions leave integers alone (NumPy would return floats)."""
    return lambda x: x if x.dtype.kind in "iu" else fn(x)


def _round_half_away(x: Array) -> Array:
    """`round`: to the nearest integer, halfway cases away from zero (C `round`, XLA)."""
    return np.copysign(np.floor(np.abs(x) + 0.5), x)


def _softplus(x: Array) -> Array:
    """log(1 + e^x) as max(x, 0) + log1p(e^-|x|): e^-|x| ≤ 1 never overflows and log1p keeps
    the tail for x ≪ 0. Computed in float64 (at least) and rounded once by the caller, as the
    special functions are: the oracle is within about half an ulp in f32 and f16."""
    w = x.astype(np.promote_types(x.dtype, np.float64))
    return np.maximum(w, 0) + np.log1p(np.exp(-np.abs(w)))


UNARY: dict[str, Callable[[Array], Array]] = {
    "negate": np.negative,
    "sign": np.sign,
    "square": np.square,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "exp": np.exp,
    "log": np.log,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "lgamma": special.lgamma,
    "digamma": special.digamma,
    "erf": special.erf,
    "erfc": special.erfc,
    "softplus": _softplus,
    "round": _integral_identity(_round_half_away),
    "rint": _integral_identity(np.rint),  # halfway cases to even
    "ceil": _integral_identity(np.ceil),
    "floor": _integral_identity(np.floor),
}


def _nonzero_divisor(b: Array) -> None:
    if b.dtype.kind in "iu" and np.any(b == 0):
        raise InterpreterError("integer division by zero")


def _truncate_divide(a: Array, b: Array) -> Array:
    """Quotient rounded toward zero (C and LLVM `sdiv`); floats give trunc(a / b)."""
    if is_float_dtype(a.dtype):
        return np.trunc(a / b)
    _nonzero_divisor(b)
    q = np.floor_divide(a, b)
    # floor and trunc differ by one where the division is inexact and the signs differ.
    return q + ((np.remainder(a, b) != 0) & ((a < 0) != (b < 0)))


def _divide(a: Array, b: Array) -> Array:
    """True division for floats; for integers the truncating quotient, like `sdiv`."""
    return np.true_divide(a, b) if is_float_dtype(a.dtype) else _truncate_divide(a, b)


def _floor_divide(a: Array, b: Array) -> Array:
    """Quotient rounded toward −infinity (Python `//`, NumPy `floor_divide`)."""
    _nonzero_divisor(b)
    return np.floor_divide(a, b)


def _modulo(a: Array, b: Array) -> Array:
    """Remainder with the sign of the dividend (C `fmod`/`%`, LLVM `frem`/`srem`: NumPy
    `fmod`), so that a == truncateDivide(a, b) * b + modulo(a, b)."""
    _nonzero_divisor(b)
    return np.fmod(a, b)


def _power(a: Array, b: Array) -> Array:
    if b.dtype.kind in "iu" and np.any(b < 0):
        raise InterpreterError("integer power with a negative exponent")
    return np.power(a, b)


def _shift_amounts(a: Array, b: Array) -> tuple[Array, Array]:
    """Whether each amount is in [0, bits), and the amounts with the others made 0."""
    bits = np.asarray(a).dtype.itemsize * 8
    inside = (b >= 0) & (b < bits)
    return inside, np.where(inside, b, 0).astype(np.asarray(a).dtype)


def _shift_left(a: Array, b: Array) -> Array:
    """a << b, wrapping; an amount outside [0, bits) gives 0."""
    inside, amount = _shift_amounts(a, b)
    return np.where(inside, np.left_shift(a, amount), 0)


def _shift_right(a: Array, b: Array) -> Array:
    """a >> b with the sign copied in; an amount outside [0, bits) shifts by bits - 1 (-1 for a
    negative a, 0 otherwise)."""
    inside, amount = _shift_amounts(a, b)
    bits = np.asarray(a).dtype.itemsize * 8
    return np.right_shift(a, np.where(inside, amount, bits - 1).astype(amount.dtype))


BINARY: dict[str, Callable[[Array, Array], Array]] = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": _divide,
    "truncateDivide": _truncate_divide,
    "floorDivide": _floor_divide,
    "modulo": _modulo,
    "power": _power,
    "min": np.minimum,  # NaN-propagating
    "max": np.maximum,
    "and": np.bitwise_and,  # logical on bools
    "or": np.bitwise_or,
    "xor": np.bitwise_xor,
    "shiftLeft": _shift_left,
    "shiftRight": _shift_right,
}

COMPARE: dict[str, Callable[[Array, Array], Array]] = {
    "lessThan": np.less,
    "lessThanOrEqual": np.less_equal,
    "greaterThan": np.greater,
    "greaterThanOrEqual": np.greater_equal,
    "equal": np.equal,
    "notEqual": np.not_equal,
}


def _register_unary(name: str, fn: Callable[[Array], Array]) -> None:
    @impl(name)
    def run(frame, inst, args):
        return np.asarray(fn(args[0]), dtype=frame.dtype(inst.type))


def _register_binary(name: str, fn: Callable[[Array, Array], Array]) -> None:
    @impl(name)
    def run(frame, inst, args):
        return np.asarray(fn(args[0], args[1]), dtype=frame.dtype(inst.type))


for _name, _unary in UNARY.items():
    _register_unary(_name, _unary)
for _name, _binary in (BINARY | COMPARE).items():
    _register_binary(_name, _binary)
del _name, _unary, _binary


@impl("not")
def _not(frame, inst, args):
    return np.asarray(np.invert(args[0]))  # logical on bools; a scalar stays a 0-d tensor


@impl("select")
def _select(frame, inst, args):
    """`select a, b by flags`: a where the flag is true, else b (all three broadcast)."""
    a, b, flags = args
    return np.asarray(np.where(flags, a, b), dtype=frame.dtype(inst.type))


@impl("dataTypeCast")
def _data_type_cast(frame, inst, args):
    return args[0].astype(frame.dtype(inst.type))


@impl("convert")
def _convert(frame, inst, args):
    """`convert`: bool to 0/1, anything to bool as != 0, integers to floats to nearest (even),
    floats to integers toward zero and saturated (NaN to 0), integers wrapped to a narrower
    width (docs/ir.md, "Elementwise")."""
    x = np.asarray(args[0])
    to = frame.dtype(inst.type)
    if to.kind == "b":
        return np.asarray(x != 0)
    if is_float_dtype(x.dtype) and to.kind in "iu":
        return _float_to_int(x, to)
    return x.astype(to)


def _float_to_int(x: Array, to: np.dtype) -> Array:
    """x rounded toward zero into `to`, saturating past its range; NaN gives 0 (as LLVM's
    `fptosi.sat`, which compiled code uses)."""
    info = np.iinfo(to)
    t = np.trunc(x.astype(np.float64))
    # 2^(bits-1) is exact in f64; info.max is not for i64, so compare against the power.
    top = float(2 ** (info.bits - 1))
    inside = (t >= -top) & (t < top)
    out = np.where(inside, t, 0).astype(to)
    out = np.where(t >= top, info.max, out)
    out = np.where(t < -top, info.min, out)
    return np.asarray(out.astype(to))


@impl("bitCast")
def _bit_cast(frame, inst, args):
    """Reinterprets the bytes of a tensor as another tensor type of the same byte size; other
    values (pointers, boxes, aggregates) pass through unchanged."""
    x = args[0]
    src, dst = canonical(inst.operands[0].type), canonical(inst.type)
    if not (isinstance(src, TensorType) and isinstance(dst, TensorType)):
        return x
    # Reinterpret the declared bits, not the float64-mode widening of them.
    raw = np.ascontiguousarray(x.astype(NP_DTYPES[src.dtype]))
    target = NP_DTYPES[dst.dtype]
    if raw.nbytes != target.itemsize * dst.unit_count:
        raise InterpreterError(f"cannot bit-cast {src} ({raw.nbytes} bytes) to {dst}")
    return raw.reshape(-1).view(target).reshape(dst.shape).astype(frame.dtype(dst))
