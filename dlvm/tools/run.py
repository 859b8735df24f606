"""`dlopt --run @f --args …`: runs a function through the reference interpreter and prints its
results, so IR can be tried by hand."""

from __future__ import annotations

import json
from typing import cast

import numpy as np

from dlvm.diagnostics import Diagnostic, DiagnosticError
from dlvm.ir.types import FunctionType, TensorType, TupleType, canonical
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


def _fail(message: str) -> DiagnosticError:
    return DiagnosticError([Diagnostic(message)])


def read_argument(text: str, ty, index: int, fname: str) -> np.ndarray:
    """One command-line argument as an array of the parameter's type."""
    t = canonical(ty)
    if not isinstance(t, TensorType):
        raise _fail(f"argument {index} of @{fname} has type {ty}; only tensors can be given here")
    if text.endswith(".npy"):
        try:
            value = np.load(text, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise _fail(f"argument {index}: cannot read {text}: {e}") from None
    else:
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            raise _fail(
                f"argument {index}: cannot read '{text}' as a number, a nested list or a .npy file"
            ) from None
    try:
        arr: np.ndarray = np.asarray(value, dtype=NUMPY_DTYPES[t.dtype.text])
        # No silent truncation: 1.5 is not an i64, 2 is not a bool.
        exact = t.dtype.is_float or np.array_equal(arr, np.asarray(value))
    except (TypeError, ValueError, OverflowError):
        exact = False
    if not exact:
        raise _fail(f"argument {index}: '{text}' is not a {t.dtype} tensor")
    if arr.shape != t.shape:
        raise _fail(
            f"argument {index} of @{fname} has type {ty}, but the value has shape "
            f"{'x'.join(map(str, arr.shape)) or 'scalar'}"
        )
    return arr


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
    for line in format_value(result, fty.result):
        print(line)
