"""The state of lowering one graph into one function: the IR value of each tensor, the builder's
insertion point, and the float initializers that become the function's parameters the first
time a node reads them. Handlers (dlvm/onnx/ops) read inputs and define outputs through it."""

from __future__ import annotations

from typing import Any

import numpy as np

from dlvm.ir.builder import Builder, constant, tensor_literal
from dlvm.ir.literals import AggregateLiteral, ScalarLiteral
from dlvm.ir.types import DataType, TensorType, canonical
from dlvm.ir.values import Argument, Block, Instruction, LiteralValue, Value
from dlvm.onnx.dtypes import FROM_NUMPY
from dlvm.onnx.graph import Facts
from dlvm.onnx.names import Names

# A known tensor of at most this many elements is a literal element by element, which the
# passes can fold and the kernels inline, as constant folding writes its small results; a larger
# one is a dense literal of its bytes.
NESTED_LIMIT = 16


class LoweringError(Exception):
    """Why a node cannot be lowered; the importer puts the node's description in front."""


class Lowering:
    """Lowers nodes into `block`. `param_kinds` names the float initializers the function may
    take as arguments (`param` or `buffer`); each becomes one when a node first reads it."""

    def __init__(
        self,
        block: Block,
        facts: Facts,
        names: Names,
        param_kinds: dict[str, str],
        training: bool,
    ) -> None:
        self.block = block
        self.facts = facts
        self.names = names
        self.param_kinds = param_kinds
        self.training = training
        self.builder = Builder(block)
        self.values: dict[str, Value] = {}
        self.params: dict[str, Argument] = {}  # the initializers read, in the order first read
        # In training, the next value of each buffer a node updates (BatchNormalization's
        # running statistics), which the function returns after the outputs.
        self.updates: dict[str, Value] = {}
        # Appended to the IR name of each value defined: a body graph (Scan, Loop) lowered once
        # per step defines its tensors again at each, under the step's own names.
        self.scope = ""
        # The tensors with no elements (a zero-size piece of a Split), by shape: DLVM IR has
        # none, so they have no value; an operator that can leave them out (Concat) does.
        self.empty: dict[str, tuple[int, ...]] = {}

    # Reading inputs --------------------------------------------------------------------------

    def value(self, name: str) -> Value:
        """The IR value of a tensor: computed, an argument, or a constant made a literal."""
        found = self.values.get(name)
        if found is not None:
            return found
        if name in self.empty:
            raise LoweringError(
                f"tensor '{name}' is empty (of shape {list(self.empty[name])}): DLVM IR has no "
                "empty tensors"
            )
        if name in self.param_kinds:
            initial = self.facts.initializers[name]
            arg = Argument(self.names(name), TensorType(initial.shape, _data_type(initial)))
            self.block.add_argument(arg)
            self.params[name] = arg
            self.values[name] = arg
            return arg
        array = self.facts.value(name)
        if array is None:
            raise LoweringError(f"tensor '{name}' is not computed before this node")
        v = self.literal(array)
        self.values[name] = v
        return v

    def const(self, name: str) -> np.ndarray | None:
        """The value of a tensor known at import time (a constant or an initializer)."""
        return self.facts.value(name) if name else None

    def type_of(self, name: str) -> TensorType:
        t = canonical(self.value(name).type)
        assert isinstance(t, TensorType)
        return t

    def shape(self, name: str) -> tuple[int, ...]:
        """A tensor's shape, without making a constant a literal to learn it."""
        if name in self.empty:
            return self.empty[name]
        if name not in self.values and self.facts.value(name) is not None:
            return tuple(self.facts.value(name).shape)  # type: ignore[union-attr]
        return self.type_of(name).shape

    def dtype(self, name: str) -> DataType:
        array = self.facts.value(name) if name not in self.values else None
        return _data_type(array) if array is not None else self.type_of(name).dtype

    # Producing values ------------------------------------------------------------------------

    def define(self, name: str, value: Value) -> None:
        """Output `name` of the node being lowered is `value` (an unnamed instruction is named
        after it, so that printed IR reads like the graph)."""
        if not name:
            return
        if isinstance(value, Instruction) and value.name is None:
            value.name = self.names(name + self.scope)
        self.values[name] = value

    def emit(self, opname: str, *operands: Value, **attrs: Any) -> Value:
        """One instruction at the insertion point, its type inferred (TypeRuleError when the
        operands do not fit)."""
        return self.builder.build(opname, list(operands), **attrs)

    def scalar(self, value: int | float | bool, dtype: DataType) -> Value:
        if dtype.is_float:
            value = float(value)
        elif dtype.is_int:
            value = int(value)
        return constant(value, TensorType((), dtype))

    def splat(self, value: int | float | bool, ty: TensorType) -> Value:
        """A tensor of one value: a scalar literal for a scalar, else a `literal` instruction."""
        lit = self.scalar(value, ty.dtype)
        if not ty.shape:
            return lit
        return self.emit("literal", constant(_python(lit), ty))

    def literal(self, array: np.ndarray) -> Value:
        """A known tensor in the IR: a scalar literal, a splat, or a `literal` of its elements."""
        dtype = _data_type(array)
        if array.size == 0:
            raise LoweringError(f"an empty tensor {array.shape} (DLVM IR has none)")
        if array.ndim == 0:
            return self.scalar(array.item(), dtype)
        flat = array.ravel()
        first = flat[0]
        if dtype.is_float and np.isnan(first):
            uniform = bool(np.isnan(flat).all())
        else:
            uniform = bool((flat == first).all())
        if uniform:
            return self.splat(first.item(), TensorType(array.shape, dtype))
        if array.size > NESTED_LIMIT:  # weights: their bytes, one constant
            return self.emit("literal", tensor_literal(array, TensorType(array.shape, dtype)))
        return self.emit("literal", _aggregate(array, dtype))


def _python(lit: Value) -> Any:
    assert isinstance(lit, LiteralValue) and isinstance(lit.literal, ScalarLiteral)
    return lit.literal.value


def _data_type(array: np.ndarray) -> DataType:
    dtype = FROM_NUMPY.get(array.dtype)
    if dtype is None:
        raise LoweringError(f"a constant of NumPy type {array.dtype}, which DLVM IR does not have")
    return dtype


def _aggregate(array: np.ndarray, dtype: DataType) -> LiteralValue:
    """`<<…>, <…>>` for an array of any rank ≥ 1, each element a typed scalar use."""
    if array.ndim == 1:
        convert = float if dtype.is_float else bool if dtype.is_bool else int
        items: tuple[Value, ...] = tuple(
            LiteralValue(ScalarLiteral(convert(x)), TensorType((), dtype)) for x in array.tolist()
        )
    else:
        items = tuple(_aggregate(row, dtype) for row in array)
    return LiteralValue(AggregateLiteral("tensor", items), TensorType(array.shape, dtype))
