"""DLVM types (docs/ir.md, "Types"): data types, tensors, aggregates, nominal types, pointers.

Structural types are frozen dataclasses compared by value; struct, enum and alias types are
nominal identity objects. `canonical` expands transparent aliases; `same_type` compares types the
way the verifier does.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from math import prod


class Base(enum.Enum):
    BOOL = "bool"
    INT = "int"
    FLOAT = "float"


class DataType(enum.Enum):
    """A scalar element type; `bool`, `i8`…`i64`, `f16`…`f64`."""

    BOOL = ("bool", Base.BOOL, 1)
    I8 = ("i8", Base.INT, 8)
    I16 = ("i16", Base.INT, 16)
    I32 = ("i32", Base.INT, 32)
    I64 = ("i64", Base.INT, 64)
    F16 = ("f16", Base.FLOAT, 16)
    F32 = ("f32", Base.FLOAT, 32)
    F64 = ("f64", Base.FLOAT, 64)

    def __init__(self, text: str, base: Base, bits: int) -> None:
        self.text = text
        self.base = base
        self.bits = bits

    @property
    def is_float(self) -> bool:
        return self.base is Base.FLOAT

    @property
    def is_int(self) -> bool:
        return self.base is Base.INT

    @property
    def is_bool(self) -> bool:
        return self.base is Base.BOOL

    @property
    def size(self) -> int:
        """Bytes one element takes in memory (a bool takes a byte)."""
        return max(1, self.bits // 8)

    @property
    def is_numeric(self) -> bool:
        return self.base is not Base.BOOL

    def can_cast_to(self, other: DataType) -> bool:
        """Casts stay within one base (docs/ir.md, "Types"). Integers and bools never narrow; floats
        may, unlike the original DLVM, because the adjoint of a widening cast is the narrowing one
        (and mixed precision needs it)."""
        if self.base is not other.base:
            return False
        return self.base is Base.FLOAT or self.bits <= other.bits

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"DataType.{self.name}"


DATA_TYPES: dict[str, DataType] = {dt.text: dt for dt in DataType}


class Type:
    """Base class of every DLVM type."""

    __slots__ = ()

    def __str__(self) -> str:  # pragma: no cover - every subclass overrides
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class TensorType(Type):
    """A tensor of `dtype` with `shape`; rank 0 is a scalar and prints as the bare dtype."""

    shape: tuple[int, ...]
    dtype: DataType

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_scalar(self) -> bool:
        return not self.shape

    @property
    def unit_count(self) -> int:
        return prod(self.shape)

    def with_shape(self, shape: tuple[int, ...]) -> TensorType:
        return TensorType(tuple(shape), self.dtype)

    def with_dtype(self, dtype: DataType) -> TensorType:
        return TensorType(self.shape, dtype)

    def __str__(self) -> str:
        key = (self.shape, self.dtype.text)  # hashes in C, unlike the dataclass itself
        text = _TENSOR_TEXT.get(key)
        if text is None:
            if not self.shape:
                text = self.dtype.text
            else:
                text = "<" + " x ".join(map(str, self.shape)) + " x " + self.dtype.text + ">"
            if len(_TENSOR_TEXT) < 65536:
                _TENSOR_TEXT[key] = text
        return text


_TENSOR_TEXT: dict[tuple[tuple[int, ...], str], str] = {}


def scalar(dtype: DataType) -> TensorType:
    return TensorType((), dtype)


BOOL = scalar(DataType.BOOL)
I64 = scalar(DataType.I64)
F32 = scalar(DataType.F32)


@dataclass(frozen=True, slots=True)
class TupleType(Type):
    """`(T, U)`; the empty tuple `()` is void."""

    elements: tuple[Type, ...]

    @property
    def is_void(self) -> bool:
        return not self.elements

    def __str__(self) -> str:
        return "(" + ", ".join(map(str, self.elements)) + ")"


VOID = TupleType(())


@dataclass(frozen=True, slots=True)
class ArrayType(Type):
    count: int
    element: Type

    def __str__(self) -> str:
        return f"[{self.count} x {self.element}]"


@dataclass(frozen=True, slots=True)
class PointerType(Type):
    pointee: Type

    def __str__(self) -> str:
        return f"*{self.pointee}"


@dataclass(frozen=True, slots=True)
class BoxType(Type):
    """A reference-counted heap box."""

    content: Type

    def __str__(self) -> str:
        return "box{" + str(self.content) + "}"


@dataclass(frozen=True, slots=True)
class FunctionType(Type):
    arguments: tuple[Type, ...]
    result: Type

    def __str__(self) -> str:
        return "(" + ", ".join(map(str, self.arguments)) + ") -> " + str(self.result)


@dataclass(frozen=True, slots=True)
class StackType(Type):
    """The AD stack."""

    def __str__(self) -> str:
        return "stack"


STACK = StackType()


class NominalType(Type):
    """A named type declared at module level (`$Name`), compared by identity."""

    __slots__ = ("name", "loc")

    def __init__(self, name: str) -> None:
        self.name = name
        self.loc = None

    def __str__(self) -> str:
        return "$" + self.name

    def __repr__(self) -> str:
        return f"{type(self).__name__}(${self.name})"


class StructType(NominalType):
    """`struct $Name { #field: T … }`."""

    __slots__ = ("fields",)

    def __init__(self, name: str, fields: list[tuple[str, Type]] | None = None) -> None:
        super().__init__(name)
        self.fields: list[tuple[str, Type]] = list(fields or [])

    def field_type(self, name: str) -> Type | None:
        for field, ty in self.fields:
            if field == name:
                return ty
        return None

    def field_index(self, name: str) -> int | None:
        for i, (field, _) in enumerate(self.fields):
            if field == name:
                return i
        return None


class EnumType(NominalType):
    """`enum $Name { ?case(T, U) … }`; may be recursive."""

    __slots__ = ("cases",)

    def __init__(self, name: str, cases: list[tuple[str, tuple[Type, ...]]] | None = None) -> None:
        super().__init__(name)
        self.cases: list[tuple[str, tuple[Type, ...]]] = list(cases or [])

    def case_types(self, name: str) -> tuple[Type, ...] | None:
        for case, tys in self.cases:
            if case == name:
                return tys
        return None


class AliasType(NominalType):
    """`type $Name = T` (transparent) or `type $Name = opaque` (target is None)."""

    __slots__ = ("target",)

    def __init__(self, name: str, target: Type | None = None) -> None:
        super().__init__(name)
        self.target = target

    @property
    def is_opaque(self) -> bool:
        return self.target is None


def canonical(ty: Type) -> Type:
    """Expands transparent aliases at the top level (repeatedly)."""
    seen = 0
    while isinstance(ty, AliasType) and ty.target is not None:
        ty = ty.target
        seen += 1
        if seen > 64:  # a cyclic alias; the verifier reports it
            break
    return ty


def _deep_canonical(ty: Type) -> Type:
    ty = canonical(ty)
    if isinstance(ty, TupleType):
        return TupleType(tuple(_deep_canonical(t) for t in ty.elements))
    if isinstance(ty, ArrayType):
        return ArrayType(ty.count, _deep_canonical(ty.element))
    if isinstance(ty, PointerType):
        return PointerType(_deep_canonical(ty.pointee))
    if isinstance(ty, BoxType):
        return BoxType(_deep_canonical(ty.content))
    if isinstance(ty, FunctionType):
        return FunctionType(
            tuple(_deep_canonical(t) for t in ty.arguments), _deep_canonical(ty.result)
        )
    return ty


def same_type(a: Type, b: Type) -> bool:
    """Type equality with transparent aliases expanded; nominal types compare by identity."""
    if a is b or a == b:
        return True
    return _deep_canonical(a) == _deep_canonical(b)


def as_tensor(ty: Type) -> TensorType | None:
    ty = canonical(ty)
    return ty if isinstance(ty, TensorType) else None


def is_differentiable(ty: Type) -> bool:
    """A tensor (or scalar) of a float data type."""
    t = as_tensor(ty)
    return t is not None and t.dtype.is_float


def is_void(ty: Type) -> bool:
    ty = canonical(ty)
    return isinstance(ty, TupleType) and ty.is_void


def broadcast_shapes(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """IR broadcasting: scalars take the other shape; otherwise equal rank, dims equal or 1."""
    if not a:
        return b
    if not b:
        return a
    if len(a) != len(b):
        return None
    out = []
    for x, y in zip(a, b):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return tuple(out)


def shape_text(shape: tuple[int, ...]) -> str:
    """The `2 x 3` / `scalar` form used by shapeCast and random."""
    return " x ".join(map(str, shape)) if shape else "scalar"
