"""The bytes of a DLVM value in memory, by C's rules: what a pointer's pointee, a box's content, a
global variable and a compiled function's struct, array or enum value hold.

Tensors are dense row-major (a bool is a byte); tuples and structs put their elements one after
another, each aligned to its own alignment; an array repeats its element; pointers, boxes,
function values and stack handles are 8-byte addresses. An enum is an i64 tag then its case's
values (laid out as a tuple) after the tag. Tags count from the case `zero` stands for (the one
with the fewest values, dlvm.interp.objects.zero_of), so that all-zero bytes are the `zero` of
every type: fresh memory, `zero` and `undefined` are zeroed bytes, `null` is address 0."""

from __future__ import annotations

from dataclasses import dataclass

from dlvm.codegen.errors import CodegenError
from dlvm.ir.types import (
    AliasType,
    ArrayType,
    BoxType,
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

WORD = 8
TAG = 8  # bytes of an enum's tag


@dataclass(frozen=True)
class Layout:
    """Size (a multiple of align, so also the stride of an array) and alignment in bytes;
    `offsets` of a tuple's or struct's elements."""

    size: int
    align: int
    offsets: tuple[int, ...] = ()


_CACHE: dict[Type, Layout] = {}


def layout(t: Type) -> Layout:
    found = _CACHE.get(t)
    if found is None:
        found = _CACHE[t] = _layout(t, frozenset())
    return found


def _round(n: int, align: int) -> int:
    return -(-n // align) * align


def _sequence(types: list[Type], seen: frozenset[Type]) -> Layout:
    offsets, end, align = [], 0, 1
    for e in types:
        el = _layout(e, seen)
        end = _round(end, el.align)
        offsets.append(end)
        end += el.size
        align = max(align, el.align)
    return Layout(_round(end, align), align, tuple(offsets))


def _layout(ty: Type, seen: frozenset[Type]) -> Layout:
    t = canonical(ty)
    if isinstance(t, AliasType):
        raise CodegenError(f"values of the opaque type {ty} cannot be compiled")
    if isinstance(t, TensorType):
        return Layout(t.unit_count * t.dtype.size, t.dtype.size)
    if isinstance(t, PointerType | BoxType | FunctionType | StackType):
        return Layout(WORD, WORD)
    if t in seen:
        raise CodegenError(f"a value of type {ty} contains itself (recursion needs a box)")
    seen = seen | {t}
    if isinstance(t, TupleType):
        return _sequence(list(t.elements), seen)
    if isinstance(t, StructType):
        return _sequence([ft for _, ft in t.fields], seen)
    if isinstance(t, ArrayType):
        el = _layout(t.element, seen)
        return Layout(el.size * t.count, el.align)
    if isinstance(t, EnumType):
        payloads = [_sequence(list(tys), seen) for _, tys in t.cases]
        align = max([TAG, *(p.align for p in payloads)])
        size = _round(TAG, align) + max([0, *(p.size for p in payloads)])
        return Layout(_round(size, align), align)
    raise CodegenError(f"values of type {ty} cannot be compiled")  # pragma: no cover


def element_offsets(ty: Type) -> tuple[int, ...]:
    """The offsets of a tuple's elements or a struct's fields."""
    return layout(ty).offsets


def enum_case(ty: Type, case: str) -> tuple[int, list[tuple[int, Type]]]:
    """An enum case's tag and its values' (offset, type)s."""
    t = canonical(ty)
    assert isinstance(t, EnumType)
    names = [name for name, _ in t.cases]
    if case not in names:
        raise CodegenError(f"enum {ty} has no case ?{case}")
    zero = names.index(min(t.cases, key=lambda c: len(c[1]))[0])
    tys = list(t.cases[names.index(case)][1])
    start = _round(TAG, layout(t).align)
    payload = _sequence(tys, frozenset())
    return (names.index(case) - zero) % len(names), [
        (start + o, e) for o, e in zip(payload.offsets, tys)
    ]
