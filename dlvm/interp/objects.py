"""Runtime values of the interpreter and their conversions from and to DLVM types.

Tensors are NumPy arrays (scalars 0-d), tuples Python tuples, structs dicts keyed by field name
(without `#`), arrays lists, enums `EnumValue(case, values)`. Memory is modelled by `Buffer`s of
cells addressed by `Pointer`s; boxes are reference-counted one-cell buffers; the AD stack is a
list. Aggregate values are immutable: updates build new values. bf16 tensors are arrays of
ml_dtypes.bfloat16 (the optional extra `bf16`), which rounds to nearest even as NumPy's float16
does.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

try:
    import ml_dtypes
except ImportError:  # the optional extra `bf16`: without it a bf16 value cannot be made
    ml_dtypes = None  # type: ignore[assignment]

from dlvm.interp.errors import InterpreterError
from dlvm.ir.types import (
    AliasType,
    ArrayType,
    BoxType,
    DataType,
    EnumType,
    FunctionType,
    PointerType,
    StackType,
    StructType,
    TensorType,
    TupleType,
    Type,
    canonical,
)
from dlvm.ir.values import Function

NP_DTYPES: dict[DataType, np.dtype] = {
    DataType.BOOL: np.dtype(np.bool_),
    DataType.I8: np.dtype(np.int8),
    DataType.I16: np.dtype(np.int16),
    DataType.I32: np.dtype(np.int32),
    DataType.I64: np.dtype(np.int64),
    DataType.F16: np.dtype(np.float16),
    DataType.F32: np.dtype(np.float32),
    DataType.F64: np.dtype(np.float64),
}
if ml_dtypes is not None:
    NP_DTYPES[DataType.BF16] = np.dtype(ml_dtypes.bfloat16)


def np_dtype(dt: DataType, float64: bool = False) -> np.dtype:
    """The NumPy dtype holding `dt`; every float type is f64 in float64 mode."""
    if float64 and dt.is_float:
        return NP_DTYPES[DataType.F64]
    if dt not in NP_DTYPES:
        raise InterpreterError(f"{dt} values need the ml_dtypes package (pip install 'telc[bf16]')")
    return NP_DTYPES[dt]


def is_bf16(d: np.dtype) -> bool:
    """Whether a NumPy dtype is ml_dtypes' bfloat16."""
    return DataType.BF16 in NP_DTYPES and d == NP_DTYPES[DataType.BF16]


def is_float_dtype(d: np.dtype) -> bool:
    """Whether a NumPy dtype holds floats: NumPy's own (kind 'f') or ml_dtypes' bfloat16, whose
    kind is 'V'."""
    return d.kind == "f" or is_bf16(d)


class EnumValue(NamedTuple):
    """An enum value: the case name (without `?`) and its associated values."""

    case: str
    values: tuple = ()


class Buffer:
    """A run of memory cells from one allocation (`kind`: stack, heap, box or global)."""

    __slots__ = ("cells", "kind", "freed")

    def __init__(self, cells: list, kind: str) -> None:
        self.cells = cells
        self.kind = kind
        self.freed = False

    def check_live(self) -> None:
        if self.freed:
            raise InterpreterError(f"use of {self.kind} memory after it was deallocated")

    def free(self) -> None:
        if self.kind == "global":
            raise InterpreterError("cannot deallocate a global variable")
        if self.freed:
            raise InterpreterError(f"{self.kind} memory deallocated twice")
        self.freed = True


class Pointer:
    """An address: a cell of a buffer, then a path of keys (int or field) into its value."""

    __slots__ = ("buffer", "index", "path")

    def __init__(self, buffer: Buffer, index: int = 0, path: tuple = ()) -> None:
        self.buffer = buffer
        self.index = index
        self.path = path

    def offset(self, n: int) -> Pointer:
        """Pointer arithmetic: n elements further (on the innermost indexed level)."""
        if not self.path:
            return Pointer(self.buffer, self.index + n)
        last = self.path[-1]
        if isinstance(last, str):
            if n:
                raise InterpreterError(f"cannot offset a pointer to field #{last} by {n}")
            return self
        return Pointer(self.buffer, self.index, self.path[:-1] + (last + n,))

    def element(self, keys: tuple) -> Pointer:
        """`elementPointer`: the first key offsets the pointer, the rest index the pointee."""
        p = self.offset(keys[0])
        return Pointer(p.buffer, p.index, p.path + tuple(keys[1:])) if len(keys) > 1 else p

    def _cell(self) -> int:
        self.buffer.check_live()
        n = len(self.buffer.cells)
        if not 0 <= self.index < n:
            raise InterpreterError(
                f"pointer offset {self.index} is out of bounds of a {self.buffer.kind} "
                f"allocation of {n} element{'s' if n != 1 else ''}"
            )
        return self.index

    def load(self) -> Any:
        value = self.buffer.cells[self._cell()]
        for k in self.path:
            value = element(value, k)
        return value

    def store(self, value: Any) -> None:
        i = self._cell()
        cells = self.buffer.cells
        cells[i] = replace(cells[i], self.path, value) if self.path else value

    def __repr__(self) -> str:
        return f"Pointer({self.buffer.kind}, {self.index}, {self.path})"


class Box:
    """A reference-counted heap box holding one value; freed when the count drops to zero."""

    __slots__ = ("buffer", "refcount")

    def __init__(self, value: Any) -> None:
        self.buffer = Buffer([value], "box")
        self.refcount = 1

    def retain(self) -> None:
        self.buffer.check_live()
        self.refcount += 1

    def release(self) -> None:
        self.buffer.check_live()
        self.refcount -= 1
        if self.refcount == 0:
            self.buffer.free()


class ADStack:
    """The AD tape: push and pop in LIFO order."""

    __slots__ = ("items", "destroyed")

    def __init__(self) -> None:
        self.items: list = []
        self.destroyed = False

    def check_live(self) -> None:
        if self.destroyed:
            raise InterpreterError("use of an AD stack after destroyStack")


# Keyed access into aggregates ------------------------------------------------------------------


def element(value: Any, key: int | str) -> Any:
    """One step of extract: a struct field, a tuple/array element or a tensor row (dim 0)."""
    if isinstance(key, str):
        if not isinstance(value, dict) or key not in value:
            raise InterpreterError(f"no field #{key} in {_describe(value)}")
        return value[key]
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            raise InterpreterError("cannot index a scalar")
        _check_index(key, value.shape[0], "tensor dimension 0")
        return value[key, ...]
    if isinstance(value, (tuple, list)) and not isinstance(value, EnumValue):
        _check_index(key, len(value), "tuple" if isinstance(value, tuple) else "array")
        return value[key]
    raise InterpreterError(f"cannot index {_describe(value)} with {key}")


def replace(value: Any, keys: tuple, new: Any) -> Any:
    """A copy of `value` with the element at the key path replaced by `new` (insert)."""
    if not keys:
        return new
    key, rest = keys[0], keys[1:]
    inner = replace(element(value, key), rest, new)
    if isinstance(value, dict):
        out: Any = dict(value)
        out[key] = inner
        return out
    if isinstance(value, np.ndarray):
        out = value.copy()
        out[key] = inner
        return out
    if isinstance(value, tuple):
        return value[:key] + (inner,) + value[key + 1 :]
    out = list(value)
    out[key] = inner
    return out


def _check_index(i: int, n: int, what: str) -> None:
    if not 0 <= i < n:
        raise InterpreterError(f"index {i} is out of bounds for {what} of size {n}")


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"a tensor of shape {value.shape} and dtype {value.dtype}"
    if isinstance(value, EnumValue):
        return f"enum case ?{value.case}"
    if isinstance(value, dict):
        return "a struct with fields " + ", ".join("#" + k for k in value)
    return f"a {type(value).__name__}"


# Types ---------------------------------------------------------------------------------------


def zero_of(ty: Type, float64: bool = False, _depth: int = 0) -> Any:
    """The value of `zero` (and of `undefined`, and of fresh memory) of a type."""
    t = canonical(ty)
    if isinstance(t, TensorType):
        return np.zeros(t.shape, np_dtype(t.dtype, float64))
    if isinstance(t, TupleType):
        return tuple(zero_of(e, float64, _depth) for e in t.elements)
    if isinstance(t, ArrayType):
        return [zero_of(t.element, float64, _depth)] * t.count
    if isinstance(t, StructType):
        return {name: zero_of(ft, float64, _depth) for name, ft in t.fields}
    if isinstance(t, EnumType) and t.cases and _depth < 32:
        # The case with the fewest associated values, so recursive enums terminate.
        case, tys = min(t.cases, key=lambda c: len(c[1]))
        return EnumValue(case, tuple(zero_of(e, float64, _depth + 1) for e in tys))
    return None  # pointers, boxes, functions (null), stacks, opaque types


def conform(ty: Type, value: Any, float64: bool, convert: bool, what: str) -> Any:
    """Checks that `value` is a runtime value of type `ty`; returns it (converted when
    `convert`: Python numbers and lists become arrays of the right dtype) or raises
    InterpreterError naming `what`.

    Without `convert` a tensor must be an ndarray of exactly the runtime dtype. With it, an
    ndarray must have the type's own dtype (any float dtype for a float type in float64 mode),
    and a Python scalar or list must be of a compatible kind.
    """
    t = canonical(ty)
    if isinstance(t, TensorType):
        return _conform_tensor(t, value, float64, convert, what)
    if isinstance(t, TupleType):
        if not isinstance(value, (tuple, list) if convert else tuple) or isinstance(
            value, EnumValue
        ):
            raise _mismatch(ty, value, what)
        if len(value) != len(t.elements):
            raise InterpreterError(f"{what}: expected {ty}, got {len(value)} elements")
        return tuple(
            conform(e, v, float64, convert, f"{what}.{i}")
            for i, (e, v) in enumerate(zip(t.elements, value))
        )
    if isinstance(t, ArrayType):
        if not isinstance(value, (list, tuple) if convert else list):
            raise _mismatch(ty, value, what)
        if len(value) != t.count:
            raise InterpreterError(f"{what}: expected {ty}, got {len(value)} elements")
        return [
            conform(t.element, v, float64, convert, f"{what}[{i}]") for i, v in enumerate(value)
        ]
    if isinstance(t, StructType):
        names = [n for n, _ in t.fields]
        if not isinstance(value, dict) or sorted(value) != sorted(names):
            raise _mismatch(ty, value, what, f"a dict with keys {', '.join(names)}")
        return {n: conform(ft, value[n], float64, convert, f"{what}#{n}") for n, ft in t.fields}
    if isinstance(t, EnumType):
        if not isinstance(value, tuple) or len(value) != 2 or not isinstance(value[0], str):
            raise _mismatch(ty, value, what, "an EnumValue(case, values)")
        case, vals = value
        tys = t.case_types(case)
        if tys is None:
            raise InterpreterError(f"{what}: enum {ty} has no case ?{case}")
        if len(vals) != len(tys):
            raise InterpreterError(f"{what}: ?{case} takes {len(tys)} values, got {len(vals)}")
        payload = (conform(e, v, float64, convert, f"{what}?{case}") for e, v in zip(tys, vals))
        return EnumValue(case, tuple(payload))
    expected = {
        PointerType: Pointer,
        BoxType: Box,
        FunctionType: Function,
        StackType: ADStack,
    }.get(type(t))
    if expected is not None:
        if value is not None and not isinstance(value, expected):
            raise _mismatch(ty, value, what)
        return value
    if isinstance(t, AliasType):  # opaque: anything goes
        return value
    raise InterpreterError(f"{what}: unsupported type {ty}")  # pragma: no cover


def _conform_tensor(t: TensorType, value: Any, float64: bool, convert: bool, what: str) -> Any:
    target = np_dtype(t.dtype, float64)
    if isinstance(value, np.ndarray) and value.shape == t.shape and value.dtype == target:
        return value  # the common case, and the only one allowed without conversion
    explicit = isinstance(value, (np.ndarray, np.generic))
    if not convert or not (explicit or isinstance(value, (bool, int, float, list, tuple))):
        raise _mismatch(t, value, what)
    try:
        arr = np.asarray(value)
    except ValueError as e:  # ragged nested lists
        raise InterpreterError(f"{what}: expected {t}, got an irregular nested list") from e
    if arr.shape != t.shape:
        raise InterpreterError(f"{what}: expected {t}, got shape {arr.shape}")
    if explicit:
        widened = float64 and t.dtype.is_float and is_float_dtype(arr.dtype)
        ok = arr.dtype == NP_DTYPES[t.dtype] or widened
    else:
        kinds = {"bool": "b", "int": "biu", "float": "biuf"}[t.dtype.base.value]
        ok = arr.dtype.kind in kinds and (arr.dtype.kind != "b" or t.dtype.is_bool or arr.size == 0)
    if not ok:
        raise InterpreterError(f"{what}: expected {t}, got dtype {arr.dtype}")
    return arr.astype(target, copy=False)


def _mismatch(ty: Type, value: Any, what: str, form: str | None = None) -> InterpreterError:
    got = _describe(value) if value is not None else "None"
    hint = f" ({form})" if form else ""
    return InterpreterError(f"{what}: expected {ty}{hint}, got {got}")
