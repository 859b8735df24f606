"""TEL's view of types: element type names, NumPy broadcasting, and shapes written for people
(`[B x 64]`, with the values of named dimensions)."""

from __future__ import annotations

from dlvm.ir.types import DataType

DTYPES: dict[str, DataType] = {
    "float16": DataType.F16,
    "float32": DataType.F32,
    "float64": DataType.F64,
    "bfloat16": DataType.BF16,
    "int8": DataType.I8,
    "int16": DataType.I16,
    "int32": DataType.I32,
    "int64": DataType.I64,
    "bool": DataType.BOOL,
    **{dt.text: dt for dt in DataType},
}

# In a def signature, `int[S...]` (or `int`) takes any integer element type: the argument's, one
# shared by every such parameter of the signature (and its result), i64 when none decides it.
ANY_INT = "int"
# `heads: dim` in a def signature: an integer known at compile time that the signature's later
# parameters, its result and its body use as a dimension (`x as [B x heads x D / heads]`).
DIM_PARAM = "dim"

_FLOAT_MAX = {
    DataType.F16: 65504.0,
    DataType.F32: 3.4028234663852886e38,
    # bf16's largest finite value (0x7F7F)
    DataType.BF16: 3.3895313892515355e38,
}


def fits(value: int | float, dtype: DataType) -> bool:
    """Whether a number is representable in dtype: integers within its range, and for floats
    a magnitude that does not round to infinity."""
    if dtype.is_int:
        if isinstance(value, float):
            return False
        bound = 1 << (dtype.bits - 1)
        return -bound <= value < bound
    if dtype.is_float:
        try:
            magnitude = abs(float(value))
        except OverflowError:
            return False
        return magnitude <= _FLOAT_MAX.get(dtype, 1.7976931348623157e308)
    return False


def numpy_broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """NumPy's broadcast of two shapes (aligned on the right, 1 stretches), None if they clash."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and x != 1 and y != 1:
            return None
        out.append(x if y == 1 else y)
    return tuple(reversed(out))


def shape_str(shape: tuple[int | str, ...]) -> str:
    """`[B x 64]`, `[]`."""
    return "[" + " x ".join(map(str, shape)) + "]"
