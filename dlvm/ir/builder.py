"""Builds instructions through their declarations: the only way frontends and passes create IR.

`Builder(block).add(x, y)` creates `add x, y` at the insertion point, computing its type with
the declaration's rule (a TypeRuleError means the operands do not fit). Attribute arguments are
keywords named as in the syntax templates (`then_`/`else_` for conditional's successors).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dlvm.ir.literals import AggregateLiteral, DenseLiteral, ScalarLiteral, dense_bytes
from dlvm.ir.ops import OpDef, lookup
from dlvm.ir.typerules import TypeRuleError, gradient_type
from dlvm.ir.types import FunctionType, TensorType, TupleType, Type
from dlvm.ir.values import (
    Argument,
    Block,
    Function,
    GradientDecl,
    Instruction,
    LiteralValue,
    Value,
)


class Builder:
    """An insertion point (a block and an index; None means the block's end)."""

    def __init__(self, block: Block | None = None, index: int | None = None) -> None:
        self.block = block
        self.index = index

    def at_end(self, block: Block) -> Builder:
        self.block, self.index = block, None
        return self

    def before(self, inst: Instruction) -> Builder:
        assert inst.block is not None
        self.block, self.index = inst.block, inst.block.instructions.index(inst)
        return self

    def after(self, inst: Instruction) -> Builder:
        assert inst.block is not None
        self.block, self.index = inst.block, inst.block.instructions.index(inst) + 1
        return self

    def build(
        self, opname: str, operands: list[Value], name: str | None = None, **attrs: Any
    ) -> Instruction:
        """Creates and inserts one instruction; raises TypeRuleError if it is ill-typed."""
        op = lookup(opname)
        if op is None:
            raise TypeRuleError(f"unknown instruction '{opname}'")
        inst = create(op, operands, name, **attrs)
        assert self.block is not None, "the builder has no insertion point"
        if self.index is None:
            self.block.append(inst)
        else:
            self.block.insert(self.index, inst)
            self.index += 1
        return inst

    def __getattr__(self, opname: str):
        if opname.startswith("_") or lookup(opname) is None:
            raise AttributeError(opname)

        def build(*operands: Value, name: str | None = None, **attrs: Any) -> Instruction:
            return self.build(opname, list(operands), name, **attrs)

        return build


def create(op: OpDef, operands: list[Value], name: str | None = None, **attrs: Any) -> Instruction:
    """A detached instruction of `op` with its type inferred."""
    full = dict.fromkeys(op.attr_kinds)
    for k, v in attrs.items():
        key = k[:-1] if k.endswith("_") else k
        if key not in full:
            raise TypeRuleError(f"'{op.name}' has no attribute '{key}'")
        full[key] = v
    ty = op.infer([v.type for v in operands], full)
    return Instruction(op, list(operands), full, ty, name)


def constant(value: int | float | bool, type: Type) -> LiteralValue:
    """A scalar literal use such as `1: f32`."""
    return LiteralValue(ScalarLiteral(value), type)


def tensor_literal(array: Any, type: TensorType) -> LiteralValue:
    """The literal of a whole tensor from an array-like of type's shape (a NumPy array, nested
    lists), converted to type's element type: `dense "…"` of its bytes, or a scalar literal
    for a scalar type. Raises ValueError when the shape is not type's, or an integer is past
    the range of an integer type (never wrapped)."""
    values = np.asarray(array)
    if values.shape != type.shape:
        raise ValueError(f"an array of shape {values.shape} for a literal of type {type}")
    dt = type.dtype
    if dt.is_int and values.dtype.kind in "iu" and values.size:
        half = 1 << (dt.bits - 1)
        low, high = int(values.min()), int(values.max())
        if low < -half or high >= half:
            raise ValueError(f"{low if low < -half else high} is past the range of {dt}")
    if not type.shape:
        convert = bool if dt.is_bool else int if dt.is_int else float
        return LiteralValue(ScalarLiteral(convert(values.item())), type)
    return LiteralValue(DenseLiteral(dense_bytes(values, dt)), type)


def tuple_literal(elements: Sequence[Value]) -> LiteralValue:
    """A tuple literal use such as `(%a: f32, %b: <2 x f32>)`, typed by its elements."""
    return LiteralValue(
        AggregateLiteral("tuple", tuple(elements)), TupleType(tuple(v.type for v in elements))
    )


def new_function(name: str, type: FunctionType, arg_names: list[str] | None = None) -> Function:
    """A function with an entry block whose arguments match its type."""
    fn = Function(name, type)
    names = arg_names or [f"arg{i}" for i in range(len(type.arguments))]
    fn.add_block(Block("entry", [Argument(n, t) for n, t in zip(names, type.arguments)]))
    return fn


def add_block(fn: Function, name: str, arguments: Sequence[tuple[str, Type]] = ()) -> Block:
    """A new block at the end of fn, with one argument per (name, type)."""
    return fn.add_block(Block(name, [Argument(n, t) for n, t in arguments]))


def gradient_declaration(
    name: str,
    of: Function,
    wrt: tuple[int, ...],
    keeping: tuple[int, ...] = (),
    seedable: bool = False,
    source: int | None = None,
) -> Function:
    """`[gradient @of from source wrt … keeping … seedable]` as a function named `name`, typed
    by the gradient type rule (TypeRuleError when `of` cannot be differentiated so)."""
    assert isinstance(of.type, FunctionType)
    fn = Function(name, gradient_type(of.type, source, wrt, keeping, seedable))
    fn.declaration = GradientDecl(of, source, wrt, keeping, seedable)
    return fn
