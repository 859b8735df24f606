"""`--value NAME=TEXT`: the value a graph input of an ONNX model is fixed to at build time
(docs/onnx.md, "Fixed inputs"; docs/telc.md): numbers in the input's element type, a scalar as
one number, or `@file.npy`. Each problem is a diagnostic naming the option."""

from __future__ import annotations

import math

import numpy as np

from dlvm.diagnostics import Diagnostic, DiagnosticError
from dlvm.ir.types import DataType
from telc.npy import NpyError, read_array

_BOOLS = {"true": True, "false": False, "1": True, "0": False}


def parse_value(name: str, text: str, dims: tuple[int | str, ...], dtype: str) -> np.ndarray:
    """The value `text` gives the input `name`, declared with `dims` (a dynamic dimension a
    str) and the element type `dtype` (the IR's name, `i64`), as an array of that type."""
    from dlvm.onnx.dtypes import NUMPY_TYPES  # the importer loads when a model is used

    option = f"--value {name}={_shown(text)}"
    declared = f"{dtype}[{' x '.join(map(str, dims))}]"
    numpy_type = np.dtype(NUMPY_TYPES[next(d for d in DataType if d.text == dtype)])
    if text.startswith("@"):
        array = _converted(option, _read(option, text[1:]), numpy_type)
    else:
        array = _numbers(option, text, numpy_type, dims, declared, name)
    if array.ndim != len(dims) or any(
        isinstance(d, int) and d != n for d, n in zip(dims, array.shape)
    ):
        shape = " x ".join(map(str, array.shape)) or "a scalar"
        raise _error(f"{option}: the value's shape is {shape}, the input is {declared}")
    return array


def _numbers(
    option: str, text: str, dtype: np.dtype, dims: tuple[int | str, ...], declared: str, name: str
) -> np.ndarray:
    words = [w.strip() for w in text.split(",")]
    items = [_number(option, w, dtype) for w in words]
    if not dims:
        if len(items) != 1:
            raise _error(f"{option}: the input is a scalar ({declared}): give one number")
        return np.array(items[0], dtype)
    if all(isinstance(d, int) for d in dims):
        count = math.prod(d for d in dims if isinstance(d, int))
        if len(items) != count:
            raise _error(f"{option}: {len(items)} numbers, the input {declared} holds {count}")
        return np.array(items, dtype).reshape(tuple(int(d) for d in dims))
    if len(dims) == 1:
        return np.array(items, dtype)
    raise _error(
        f"{option}: the input {declared} has dynamic dimensions: give its value as a file",
        f"--value {name}=@{name}.npy (numpy.save writes one)",
    )


def _number(option: str, word: str, dtype: np.dtype) -> bool | int | float:
    try:
        if dtype.kind == "b":
            return _BOOLS[word.lower()]
        if dtype.kind == "i":
            value = int(word)
            info = np.iinfo(dtype)
            if not info.min <= value <= info.max:
                raise ValueError
            return value
        return float(word)
    except (KeyError, ValueError):
        kind = {"b": "a bool (true, false, 1 or 0)", "i": f"an {dtype}"}.get(dtype.kind)
        raise _error(f"{option}: '{word}' is not {kind or f'a {dtype} number'}") from None


def _read(option: str, path: str) -> np.ndarray:
    try:
        return read_array(path)
    except NpyError as e:
        raise _error(f"{option}: {e}") from None


def _converted(option: str, array: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The array in the input's type where that changes no value (an int64 .npy for an i32
    input, a float64 one for f32 only where every value is a float32 one)."""
    if array.dtype.kind not in "biuf" or (array.dtype.kind == "f" and dtype.kind in "bi"):
        raise _error(f"{option}: the file holds {array.dtype}, the input is {dtype}")
    with np.errstate(invalid="ignore", over="ignore"):
        converted = array.astype(dtype)
        back = converted.astype(array.dtype)
    if not np.array_equal(back, array, equal_nan=array.dtype.kind == "f"):
        raise _error(f"{option}: the file's {array.dtype} values do not all fit {dtype}")
    return converted


def _shown(text: str) -> str:
    return text if len(text) <= 40 else text[:40] + "…"


def _error(message: str, fix: str | None = None) -> DiagnosticError:
    notes = (Diagnostic(f"  help: {fix}", None, "detail"),) if fix else ()
    return DiagnosticError([Diagnostic(message, None, notes=notes)])
