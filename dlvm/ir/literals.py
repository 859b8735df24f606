"""Literal payloads (docs/ir.md, "Literals and uses"): scalars, `zero`/`undefined`/`null`,
aggregates, and dense tensors.

A literal has no type of its own; a `LiteralValue` (in values.py) pairs it with the type of its
use. Aggregate elements are themselves typed uses (values), so literals nest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dlvm.ir.types import DataType

if TYPE_CHECKING:
    from dlvm.ir.values import Value


class Literal:
    __slots__ = ()

    def elements(self) -> tuple[Value, ...]:
        """The nested uses of an aggregate literal (none for scalars)."""
        return ()

    def map_elements(self, fn) -> Literal:
        return self


@dataclass(frozen=True, slots=True)
class ScalarLiteral(Literal):
    """An integer, float or boolean. Integers stay integers in print (`1: f32` prints `1`)."""

    value: int | float | bool

    def __str__(self) -> str:
        v = self.value
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int):
            return str(v)
        return format_float(v)


def format_float(v: float) -> str:
    """Shortest round-trip text, always with a `.` or an exponent (`1.0`, `0.5`, `1e-05`)."""
    if v != v:
        return "nan"
    if v in (float("inf"), float("-inf")):
        return "inf" if v > 0 else "-inf"
    text = repr(float(v))
    if "e" in text:
        mantissa, exp = text.split("e")
        if exp.startswith("+"):
            exp = exp[1:]
        return mantissa + "e" + exp
    return text


def fits(value: int | float | bool, dtype: DataType) -> bool:
    """Whether a scalar literal's value is one of dtype's (docs/ir.md, "Literals and uses"), the
    one rule the verifier and the interpreter apply: `true` and `false` only for bool; an integer
    for an integer type within its range (i8: -128 to 127); for a float type a float (past the
    type's range it is infinity) or an integer, read as the nearest f64 first, so one past f64's
    range (about 1.8e308) is not."""
    if isinstance(value, bool) or dtype.is_bool:
        return isinstance(value, bool) and dtype.is_bool
    if dtype.is_int:
        half = 1 << (dtype.bits - 1)
        return isinstance(value, int) and -half <= value < half
    if isinstance(value, int):
        try:
            float(value)
        except OverflowError:
            return False
    return True


@dataclass(frozen=True, slots=True)
class SpecialLiteral(Literal):
    """`zero`, `undefined` or `null`."""

    word: str

    def __str__(self) -> str:
        return self.word


ZERO = SpecialLiteral("zero")
UNDEFINED = SpecialLiteral("undefined")
NULL = SpecialLiteral("null")


@dataclass(frozen=True, slots=True)
class AggregateLiteral(Literal):
    """`<u, u>` (tensor), `(u, u)` (tuple) or `[u, u]` (array)."""

    kind: str  # "tensor" | "tuple" | "array"
    items: tuple[Value, ...]

    def elements(self) -> tuple[Value, ...]:
        return self.items

    def map_elements(self, fn) -> Literal:
        return AggregateLiteral(self.kind, tuple(fn(v) for v in self.items))

    def __str__(self) -> str:
        open_, close = {"tensor": ("<", ">"), "tuple": ("(", ")"), "array": ("[", "]")}[self.kind]
        return open_ + ", ".join(v.use_text() for v in self.items) + close


@dataclass(frozen=True, slots=True)
class StructLiteral(Literal):
    """`{#a = u, #b = u}`."""

    fields: tuple[tuple[str, Value], ...]

    def elements(self) -> tuple[Value, ...]:
        return tuple(v for _, v in self.fields)

    def map_elements(self, fn) -> Literal:
        return StructLiteral(tuple((k, fn(v)) for k, v in self.fields))

    def __str__(self) -> str:
        return "{" + ", ".join(f"#{k} = {v.use_text()}" for k, v in self.fields) + "}"


@dataclass(frozen=True, slots=True)
class EnumLiteral(Literal):
    """`?case(u, u)`."""

    case: str
    items: tuple[Value, ...]

    def elements(self) -> tuple[Value, ...]:
        return self.items

    def map_elements(self, fn) -> Literal:
        return EnumLiteral(self.case, tuple(fn(v) for v in self.items))

    def __str__(self) -> str:
        return f"?{self.case}(" + ", ".join(v.use_text() for v in self.items) + ")"


@dataclass(frozen=True, slots=True)
class DenseLiteral(Literal):
    """`dense "0000803f00000040"`: a whole tensor as its elements' bytes in memory order
    (row-major, little-endian, a bool one byte 0 or 1, a bf16 its bits: docs/c-abi.md), written
    as lowercase hex.
    One object however many elements, so weights cost their bytes and nothing per element;
    equal when the bytes are."""

    data: bytes

    def __str__(self) -> str:
        return f'dense "{self.data.hex()}"'


def dense_dtype(dt: DataType) -> str:
    """NumPy's name for dt's elements as a dense literal holds them (`<f4` for f32, `?` for
    bool, `<u2` for bf16: its bits, which NumPy has no float type for)."""
    if dt is DataType.BF16:
        return "<u2"
    return "?" if dt.is_bool else "<" + ("f" if dt.is_float else "i") + str(dt.size)


def dense_bytes(values: Any, dt: DataType) -> bytes:
    """The bytes of a dense literal of element type dt holding `values` (an array-like of
    numbers, converted: a bf16 rounded to nearest even as ml_dtypes rounds)."""
    if dt is DataType.BF16:
        return bf16_bits(np.asarray(values)).astype("<u2").tobytes()
    return np.asarray(values).astype(dense_dtype(dt)).tobytes()


def dense_array(data: bytes, dt: DataType) -> np.ndarray:
    """The elements a dense literal's bytes hold, flat: as NumPy numbers of dense_dtype(dt),
    bf16 as the float32 numbers it equals exactly."""
    stored = np.frombuffer(data, dense_dtype(dt))
    if dt is DataType.BF16:
        return (stored.astype(np.uint32) << 16).view(np.float32)
    return stored


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """The bits (uint16) of the bf16 numbers nearest to `values` (any numbers; NumPy arrays of
    ml_dtypes.bfloat16 too, whose bits come back as they are): through f32, whose range bf16
    shares, rounded to nearest even, NaN kept (quiet), as ml_dtypes rounds."""
    with np.errstate(over="ignore"):  # past f32's range: infinity in f32 and in bf16
        bits = np.ascontiguousarray(values, np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> 16) & 1)) >> 16
    quiet_nan = (bits >> 16) | 0x40
    return np.where(np.isnan(bits.view(np.float32)), quiet_nan, rounded).astype(np.uint16)


def literal_brief(lit: Literal) -> str:
    """A literal as messages show it: a dense literal by its size (its text may be megabytes)."""
    return f"dense ({len(lit.data)} bytes)" if isinstance(lit, DenseLiteral) else str(lit)
