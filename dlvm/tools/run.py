"""`dlopt --run @f --args …`: runs a function through the reference interpreter and prints its
results, so IR can be tried by hand."""

from __future__ import annotations

import json
import warnings
from typing import NoReturn, cast

import numpy as np

from dlvm.diagnostics import Diagnostic, DiagnosticError
from dlvm.ir.types import DataType, FunctionType, TensorType, TupleType, canonical
from dlvm.ir.values import Module

NUMPY_DTYPES = {
    "bool": np.bool_,
    "i8": np.int8,
    "i16": np.int16,
    "i32": np.int32,
    "i64": np.int64,
    "f16": np.float16,
    "f32": np.float32,
    "f64": np.float64,
}


def _numpy_dtype(dt: DataType, index: int) -> np.dtype:
    """The NumPy dtype an argument of element type dt is read as (bf16: ml_dtypes')."""
    if dt.text in NUMPY_DTYPES:
        return np.dtype(NUMPY_DTYPES[dt.text])
    from dlvm.interp import InterpreterError
    from dlvm.interp.objects import np_dtype

    try:
        return np_dtype(dt)
    except InterpreterError as e:
        raise _fail(f"argument {index}: {e}") from None


def _fail(message: str) -> DiagnosticError:
    return DiagnosticError([Diagnostic(message)])


def _shown(text: str) -> str:
    """An argument as messages quote it: a long one cut short."""
    return text if len(text) <= 40 else text[:40] + "…"


def read_argument(text: str, ty, index: int, fname: str) -> np.ndarray:
    """One command-line argument as an array of the parameter's type."""
    t = canonical(ty)
    if not isinstance(t, TensorType):
        raise _fail(f"argument {index} of @{fname} has type {ty}; only tensors can be given here")
    value: object
    if text.endswith(".npy"):
        stored = _read_npy(text, index)
        if stored.shape != t.shape:  # before converting: the file's data is not read yet
            _wrong_shape(stored, ty, index, fname)
        if stored.dtype.kind == "V":  # bf16 bits, as numpy.save writes an ml_dtypes.bfloat16 array
            if t.dtype is not DataType.BF16:
                raise _fail(
                    f"argument {index}: {text} holds 2-byte bf16 values, not {t.dtype}",
                )
            stored = stored.view(_numpy_dtype(t.dtype, index))
        value = stored
    else:
        value = _read_json(text, index)
    try:
        # A float past the type's range is infinity, as a literal of that type is: quietly.
        with np.errstate(over="ignore"):
            arr: np.ndarray = np.asarray(value, dtype=_numpy_dtype(t.dtype, index))
        # No silent truncation: 1.5 is not an i64, 2 is not a bool.
        exact = t.dtype.is_float or np.array_equal(arr, np.asarray(value))
    except (TypeError, ValueError, OverflowError):
        exact = False
    if not exact:
        raise _fail(f"argument {index}: '{_shown(text)}' is not a {t.dtype} tensor")
    if arr.shape != t.shape:
        _wrong_shape(arr, ty, index, fname)
    return arr


def _wrong_shape(value: np.ndarray, ty, index: int, fname: str) -> NoReturn:
    raise _fail(
        f"argument {index} of @{fname} has type {ty}, but the value has shape "
        f"{'x'.join(map(str, value.shape)) or 'scalar'}"
    )


def _read_json(text: str, index: int) -> object:
    """A number or a nested list of numbers, in JSON."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise _fail(f"argument {index}: '{_shown(text)}' is nested too deeply") from None
    except json.JSONDecodeError:
        raise _fail(
            f"argument {index}: cannot read '{_shown(text)}' as a number, a nested list or a "
            ".npy file"
        ) from None
    except ValueError:  # int() refuses more than sys.get_int_max_str_digits() digits
        raise _fail(
            f"argument {index}: '{_shown(text)}' has a number with too many digits"
        ) from None
    pending = [value]
    while pending:  # numbers and lists only: null would become NaN, a string a character
        v = pending.pop()
        if isinstance(v, list):
            pending.extend(v)
        elif not isinstance(v, (bool, int, float)):
            raise _fail(f"argument {index}: '{_shown(text)}' is not a number or a nested list")
    return value


def _read_npy(path: str, index: int) -> np.ndarray:
    """The array a .npy file holds, mapped rather than read: its shape is checked before its
    data is touched, and a header that claims more data than the file has is an error."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a shape whose size overflows: not a warning here
            value = np.load(path, mmap_mode="r", allow_pickle=False)
    except Exception as e:  # NumPy's reading of a header raises what its parsers raise
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e) or "empty file"
        if reason.startswith("mmap length is greater"):
            reason = "its header describes more data than the file holds"
        raise _fail(f"argument {index}: cannot read {path}: {reason}") from None
    bf16 = isinstance(value, np.ndarray) and value.dtype.kind == "V" and value.dtype.itemsize == 2
    bf16 = bf16 and value.dtype.fields is None
    if not isinstance(value, np.ndarray) or (value.dtype.kind not in "biuf" and not bf16):
        what = value.dtype if isinstance(value, np.ndarray) else "not an array"
        raise _fail(f"argument {index}: {path} holds {what}, not numbers")
    return value


def format_value(value, ty, label: str = "result") -> list[str]:
    """`label: type = value` lines; tuple results get one line per element (`result.0`)."""
    t = canonical(ty)
    if isinstance(t, TupleType):
        lines: list[str] = []
        for i, (v, et) in enumerate(zip(value, t.elements)):
            lines += format_value(v, et, f"{label}.{i}")
        return lines
    if isinstance(value, (np.ndarray, np.generic)):
        text = np.array2string(np.asarray(value), separator=", ", threshold=64)
        return [f"{label}: {ty} = {text}"]
    return [f"{label}: {ty} = {value!r}"]


def run_and_print(module: Module, func: str, texts: list[str], float64: bool) -> None:
    from dlvm.interp import InterpreterError, run_function

    name = func.lstrip("@")
    fn = module.function_named(name)
    if fn is None:
        raise _fail(f'no function @{name} in module "{module.name}"')
    fty = cast(FunctionType, fn.type)
    params = fty.arguments
    if len(texts) != len(params):
        raise _fail(f"@{name} takes {len(params)} arguments, {len(texts)} given")
    args = [read_argument(t, p, i, name) for i, (t, p) in enumerate(zip(texts, params))]
    try:
        result = run_function(module, name, args, float64=float64)
    except InterpreterError as e:
        raise _fail(f"@{name}: {e}") from None
    except MemoryError:  # the program's values, not a bug: a tensor bigger than this machine
        raise _fail(f"@{name}: out of memory") from None
    for line in format_value(result, fty.result):
        print(line)
