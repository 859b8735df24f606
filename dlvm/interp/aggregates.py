"""Literals and aggregate access: the `literal` instruction and literal operands, `extract` and
`insert` through tuples, structs, arrays and tensors (dim 0).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dlvm.interp.errors import InterpreterError
from dlvm.interp.objects import EnumValue, element, replace, zero_of
from dlvm.interp.registry import impl
from dlvm.ir.literals import (
    AggregateLiteral,
    DenseLiteral,
    EnumLiteral,
    ScalarLiteral,
    SpecialLiteral,
    StructLiteral,
    dense_array,
    fits,
)
from dlvm.ir.typerules import TypeRuleError, check_literal_operand
from dlvm.ir.types import TensorType, canonical
from dlvm.ir.values import ElementKey, LiteralValue


def literal_value(frame, use: LiteralValue) -> Any:
    """The value of a literal use. A scalar splats to the full tensor shape of its type; `zero`
    and `undefined` are zeros; `null` is None; aggregate elements are uses evaluated in the
    frame."""
    lit, ty = use.literal, use.type
    t = canonical(ty)
    if isinstance(lit, ScalarLiteral):
        if not isinstance(t, TensorType):
            raise InterpreterError(f"scalar literal {lit} cannot have type {ty}")
        if not fits(lit.value, t.dtype):
            raise InterpreterError(f"literal {lit} does not fit {ty}")
        return np.full(t.shape, lit.value, dtype=frame.dtype(t))
    if isinstance(lit, SpecialLiteral):
        return None if lit.word == "null" else zero_of(ty, frame.interp.float64)
    if isinstance(lit, DenseLiteral):
        return _dense_value(frame, use)
    if isinstance(lit, StructLiteral):
        return {name: frame.value(v) for name, v in lit.fields}
    items = [frame.value(v) for v in lit.elements()]
    if isinstance(lit, EnumLiteral):
        return EnumValue(lit.case, tuple(items))
    assert isinstance(lit, AggregateLiteral)
    if lit.kind == "tensor":
        return np.asarray(np.stack(items), dtype=frame.dtype(t))
    return tuple(items) if lit.kind == "tuple" else items


def _dense_value(frame, use: LiteralValue) -> np.ndarray:
    """A dense literal's bytes read as its tensor (little-endian), in an array of its own."""
    try:
        check_literal_operand(use, aggregate_ok=True)
    except TypeRuleError as e:
        raise InterpreterError(f"{e}") from None
    t = canonical(use.type)
    assert isinstance(t, TensorType) and isinstance(use.literal, DenseLiteral)
    stored = dense_array(use.literal.data, t.dtype)
    return stored.reshape(t.shape).astype(frame.dtype(t))  # astype copies: bytes are immutable


@impl("literal")
def _literal(frame, inst, args):
    return args[0]


def runtime_key(frame, key: ElementKey) -> int | str:
    """An element key as an int index or a field name (value keys are read at run time)."""
    if key.index is not None:
        return key.index
    if key.field is not None:
        return key.field
    return int(frame.value(key.value)[()])


@impl("extract")
def _extract(frame, inst, args):
    value = args[0]
    for key in inst.attrs["keys"]:
        value = element(value, runtime_key(frame, key))
    return value


@impl("insert")
def _insert(frame, inst, args):
    """`insert v to dest at keys`: a copy of dest with the element at keys replaced by v."""
    keys = tuple(runtime_key(frame, k) for k in inst.attrs["keys"])
    return replace(args[1], keys, args[0])
