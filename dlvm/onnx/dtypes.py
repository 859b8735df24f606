"""ONNX element types (TensorProto.DataType numbers) and the IR's data types and NumPy's."""

from __future__ import annotations

import numpy as np

from dlvm.ir.types import DataType

try:
    import ml_dtypes  # a dependency of onnx itself; without it, BFLOAT16 is not imported
except ImportError:  # pragma: no cover
    ml_dtypes = None  # type: ignore[assignment]

# TensorProto.DataType values (onnx.proto), written out so that this table needs no import of
# onnx: FLOAT 1, UINT8 2, INT8 3, UINT16 4, INT16 5, INT32 6, INT64 7, STRING 8, BOOL 9,
# FLOAT16 10, DOUBLE 11, BFLOAT16 16.
IR_TYPES: dict[int, DataType] = {
    1: DataType.F32,
    3: DataType.I8,
    5: DataType.I16,
    6: DataType.I32,
    7: DataType.I64,
    9: DataType.BOOL,
    10: DataType.F16,
    11: DataType.F64,
}
if ml_dtypes is not None:
    IR_TYPES[16] = DataType.BF16

NUMPY_TYPES: dict[DataType, type] = {
    DataType.F32: np.float32,
    DataType.F64: np.float64,
    DataType.F16: np.float16,
    DataType.I8: np.int8,
    DataType.I16: np.int16,
    DataType.I32: np.int32,
    DataType.I64: np.int64,
    DataType.BOOL: np.bool_,
}
if ml_dtypes is not None:
    NUMPY_TYPES[DataType.BF16] = ml_dtypes.bfloat16

FROM_NUMPY: dict[np.dtype, DataType] = {np.dtype(t): d for d, t in NUMPY_TYPES.items()}


def ir_type_of(elem_type: int) -> DataType | None:
    """The IR's data type for an ONNX element type, None where the IR has none (unsigned
    integers, strings, complex numbers, the 8-bit and 4-bit floats; bfloat16 without ml_dtypes)."""
    return IR_TYPES.get(elem_type)


def onnx_type_name(elem_type: int) -> str:
    """`FLOAT`, `UINT8`… for messages (the number itself when onnx is not installed)."""
    try:
        from onnx import TensorProto

        return str(TensorProto.DataType.Name(elem_type))
    except (ImportError, ValueError):
        return str(elem_type)
