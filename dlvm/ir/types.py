"""DLVM types (docs/ir.md, "Types"): data types, tensors, aggregates, nominal types, pointers.

Structural types are frozen dataclasses compared by value; struct, enum and alias types are
nominal identity objects. `canonical` expands transparent aliases; `same_type` compares types the
way the verifier does; `byte_size` and `size_problem` say how big a value is and whether it may
be that big (MAX_TENSOR_BYTES).
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
    """A scalar element type; `bool`, `i8`…`i64`, `f16`…`f64`, `bf16` (bfloat16: f32's exponent
    range, 8 bits of significand)."""

    BOOL = ("bool", Base.BOOL, 1)
    I8 = ("i8", Base.INT, 8)
    I16 = ("i16", Base.INT, 16)
    I32 = ("i32", Base.INT, 32)
    I64 = ("i64", Base.INT, 64)
    F16 = ("f16", Base.FLOAT, 16)
    F32 = ("f32", Base.FLOAT, 32)
    F64 = ("f64", Base.FLOAT, 64)
    BF16 = ("bf16", Base.FLOAT, 16)

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


# Sizes ---------------------------------------------------------------------------------------

# The most bytes a value may take, and the most elements a tensor or array may have: 2^62 - 1.
# Far past any address space (2^48 to 2^57 bytes), so no real program is refused, and small
# enough that the sum of two sizes, or one size rounded up to an alignment, stays below 2^63:
# a signed 64-bit size computation has that much headroom (sums of more must still be checked).
MAX_TENSOR_BYTES = (1 << 62) - 1
_LIMIT = f"2^{MAX_TENSOR_BYTES.bit_length()} - 1"  # as messages write it
_WORD = 8  # a pointer, box, function value or stack handle; an enum's tag


def byte_size(ty: Type) -> int:
    """The bytes a value of type ty takes in memory, laid out as C would (docs/c-abi.md): dense
    row-major tensors, elements of tuples and structs at their natural alignment, arrays
    repeating their element, an enum an 8-byte tag then its largest case, 8 bytes for pointers,
    boxes, functions and stacks. A type that contains itself counts its recursion as nothing."""
    return _size_align(ty, frozenset())[0]


def _round(n: int, align: int) -> int:
    return -(-n // align) * align


def _sequence(types: list[Type], seen: frozenset[Type]) -> tuple[int, int]:
    end, align = 0, 1
    for t in types:
        size, a = _size_align(t, seen)
        end = _round(end, a) + size
        align = max(align, a)
    return _round(end, align), align


def _size_align(ty: Type, seen: frozenset[Type]) -> tuple[int, int]:
    t = canonical(ty)
    if isinstance(t, TensorType):
        return prod(t.shape) * t.dtype.size, t.dtype.size
    if isinstance(t, (PointerType, BoxType, FunctionType, StackType, AliasType)):
        return _WORD, _WORD  # an opaque alias is a handle
    if t in seen:
        return 0, 1
    seen = seen | {t}
    if isinstance(t, TupleType):
        return _sequence(list(t.elements), seen)
    if isinstance(t, StructType):
        return _sequence([ft for _, ft in t.fields], seen)
    if isinstance(t, ArrayType):
        size, align = _size_align(t.element, seen)
        return size * t.count, align
    if isinstance(t, EnumType):
        payloads = [_sequence(list(tys), seen) for _, tys in t.cases]
        align = max([_WORD, *(a for _, a in payloads)])
        return _round(_round(_WORD, align) + max([0, *(s for s, _ in payloads)]), align), align
    return _WORD, _WORD  # pragma: no cover - every type is one of the above


def size_problem(ty: Type) -> str | None:
    """Why no value of type ty, or of a type inside it (a pointee, a function's argument), can
    exist: more than MAX_TENSOR_BYTES bytes or elements. None when every one can."""
    for t in _inner_types(ty):
        if isinstance(t, ArrayType) and t.count > MAX_TENSOR_BYTES:
            return f"{t} has {t.count} elements, more than the {_LIMIT} an array may have"
        size = 0 if isinstance(t, FunctionType) else byte_size(t)
        if size > MAX_TENSOR_BYTES:
            amount = size if size.bit_length() <= 64 else f"at least 2^{size.bit_length() - 1}"
            return f"a value of type {t} takes {amount} bytes, more than the {_LIMIT} allowed"
    return None


def _inner_types(ty: Type) -> list[Type]:
    """ty and every type written inside it, outermost first; nominal types once each."""
    out: list[Type] = []
    pending, seen = [ty], set()
    while pending:
        t = pending.pop()
        if isinstance(t, NominalType):
            if id(t) in seen:
                continue
            seen.add(id(t))
        out.append(t)
        if isinstance(t, TupleType):
            pending.extend(reversed(t.elements))
        elif isinstance(t, ArrayType):
            pending.append(t.element)
        elif isinstance(t, (PointerType, BoxType)):
            pending.append(t.pointee if isinstance(t, PointerType) else t.content)
        elif isinstance(t, FunctionType):
            pending.extend(reversed((*t.arguments, t.result)))
        elif isinstance(t, StructType):
            pending.extend(reversed([ft for _, ft in t.fields]))
        elif isinstance(t, EnumType):
            pending.extend(reversed([et for _, tys in t.cases for et in tys]))
        elif isinstance(t, AliasType) and t.target is not None:
            pending.append(t.target)
    return out
