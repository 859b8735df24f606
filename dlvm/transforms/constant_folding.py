"""Folding one instruction for constant-propagation: which values are constants, evaluating
an instruction over them with the reference interpreter's own implementations (`dlvm.interp`
IMPLS), and writing a result back as a literal that reads back to exactly the same values."""

from __future__ import annotations

from typing import Any

import numpy as np

from dlvm.interp import IMPLS
from dlvm.interp.aggregates import literal_value
from dlvm.interp.interpreter import Frame
from dlvm.ir.builder import create
from dlvm.ir.literals import (
    ZERO,
    AggregateLiteral,
    DenseLiteral,
    Literal,
    ScalarLiteral,
    SpecialLiteral,
    StructLiteral,
    dense_array,
    dense_bytes,
)
from dlvm.ir.ops import OPS
from dlvm.ir.typerules import TypeRuleError, check_literal_operand, element_type
from dlvm.ir.types import TensorType, Type, as_tensor
from dlvm.ir.values import (
    ElementKey,
    Instruction,
    LiteralValue,
    Value,
)

# A non-splat tensor result of at most this many elements is written out element by element.
# A larger one is folded only from a dense operand (weights: a transpose, a cast), into a dense
# literal of its bytes; computed from splats and small literals, it stays computed.
FOLD_LIMIT = 16
# Folding runs at compile time: no operand or result may have more elements than this. It also
# bounds a folded `dot` to 2^24 multiply-adds.
EVAL_LIMIT = 1 << 16

# Evaluated through IMPLS: instruction families, and single instructions of other families.
# Left out: effects (random, calls, memory, stacks, trap), combinators that call a function
# (`by @f`), and convolve / reduceWindow, whose work the element limits do not bound.
FOLDED_FAMILIES = frozenset({"shape", "query"})  # and the elementwise ones (OpDef.elementwise)
FOLDED_OPS = frozenset({"dataTypeCast", "convert", "dot", "reduce", "scan"})


def evaluable(inst: Instruction) -> bool:
    """Whether inst is folded by evaluating it (a combinator `by @f` would be a call)."""
    folded = inst.op.elementwise or inst.op.family in FOLDED_FAMILIES or inst.opcode in FOLDED_OPS
    return folded and isinstance(inst.attrs.get("comb", ""), str)


def _is_constant(use: Value) -> bool:
    """A literal use holding no values and nothing undetermined (`undefined`, `null`)."""
    if not isinstance(use, LiteralValue):
        return False
    lit = use.literal
    if isinstance(lit, SpecialLiteral):
        return lit == ZERO
    return all(_is_constant(e) for e in lit.elements())


def scalar_operand(v: Value) -> bool:
    """Whether v may be an operand or branch argument: anything but a non-scalar literal."""
    if not isinstance(v, LiteralValue):
        return True
    t = as_tensor(v.type)
    return t is not None and not t.shape and not v.literal.elements()


def constant_use(v: Value, shaped: bool) -> LiteralValue | None:
    """The constant literal that v is (scalars) or that its `literal` instruction holds
    (tensors, which only a `literal` instruction may hold); None otherwise."""
    if shaped and isinstance(v, Instruction) and v.opcode == "literal":
        v = v.operands[0]
    elif shaped:
        return None
    return v if isinstance(v, LiteralValue) and _is_constant(v) else None


def same_constant(a: LiteralValue, b: LiteralValue) -> bool:
    if isinstance(a.literal, DenseLiteral) or isinstance(b.literal, DenseLiteral):
        return a.type == b.type and a.literal == b.literal  # their bytes, not megabytes of text
    # Compared as written: `0.0` and `-0.0` are equal numbers but different constants.
    return a.type == b.type and str(a.literal) == str(b.literal)


def scalar_use(inst: Instruction) -> Value | None:
    """`literal c: T` of a scalar type T is the use `c: T`."""
    use = inst.operands[0]
    t = as_tensor(inst.type)
    if t is None or t.shape or not _is_constant(use) or not isinstance(use, LiteralValue):
        return None
    return LiteralValue(use.literal, inst.type)


# Extract from a literal ----------------------------------------------------------------------


def fold_extract(inst: Instruction) -> Value | None:
    """`extract keys from %l` where %l is a `literal` instruction: the element the keys select,
    as a literal use or `literal` instruction, or the value the literal holds there."""
    source = inst.operands[0]
    if not (isinstance(source, Instruction) and source.opcode == "literal"):
        return None
    v: Value | None = source.operands[0]
    for key in inst.attrs["keys"]:
        v = _element(v, key) if isinstance(v, LiteralValue) else None
        if v is None:
            return None
    if not isinstance(v, LiteralValue):
        # A value the literal holds dominates the literal, hence every use of inst; only in
        # unreachable code can that value be inst itself.
        return v if v is not inst else None
    use = LiteralValue(v.literal, inst.type)
    if scalar_operand(use):
        return use
    if _leaf_count(use) > FOLD_LIMIT:  # code size, as for computed tensors
        return None
    return create(OPS["literal"], [use])


def _element(use: LiteralValue, key: ElementKey) -> Value | None:
    """The element of a literal at one key, or None (unknown key, `undefined`, `null`)."""
    index = _key_index(key)
    if index is None and key.field is None:
        return None
    plain = ElementKey(index=index) if key.field is None else key
    try:
        ty = element_type(use.type, plain)
    except TypeRuleError:
        return None
    lit = use.literal
    if isinstance(lit, AggregateLiteral):
        return lit.items[index] if index is not None and 0 <= index < len(lit.items) else None
    if isinstance(lit, StructLiteral):
        return next((v for name, v in lit.fields if name == key.field), None)
    if isinstance(lit, DenseLiteral):
        return _dense_row(lit, ty, index) if index is not None else None
    if isinstance(lit, ScalarLiteral) or lit == ZERO:  # a splat: every element is the same
        out = LiteralValue(lit, ty)
        try:
            check_literal_operand(out, aggregate_ok=True)
        except TypeRuleError:
            return None
        return out
    return None


def _dense_row(lit: DenseLiteral, row: Type, index: int) -> LiteralValue | None:
    """Row `index` of a dense literal: its bytes, or a scalar literal for a scalar row."""
    t = as_tensor(row)
    assert t is not None
    size = t.unit_count * t.dtype.size
    if not 0 <= index < len(lit.data) // size:
        return None
    data = lit.data[index * size : (index + 1) * size]
    if t.shape:
        return LiteralValue(DenseLiteral(data), row)
    return LiteralValue(_scalar_literal(dense_array(data, t.dtype)[0]), row)


def _key_index(key: ElementKey) -> int | None:
    """An integer key, also one given as a constant value (`extract 1: i64 from …`)."""
    if key.index is not None:
        return key.index
    v = key.value
    if isinstance(v, LiteralValue) and isinstance(v.literal, ScalarLiteral):
        value = v.literal.value
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _leaf_count(use: Value) -> int:
    if not isinstance(use, LiteralValue) or not use.literal.elements():
        return 1
    return sum(_leaf_count(e) for e in use.literal.elements())


# Evaluation ----------------------------------------------------------------------------------


class Evaluator:
    """Evaluates instructions over constants with the interpreter's implementations, and turns
    results back into literals that reproduce them bit for bit."""

    def __init__(self, frame: Frame) -> None:
        self.frame = frame
        self.values: dict[Value, Any] = {}  # constant operands evaluated so far

    def constant(self, v: Value) -> np.ndarray | None:
        """The tensor a constant operand denotes: a constant literal use, or the result of a
        `literal` instruction with one; None for anything else."""
        if isinstance(v, Instruction) and v.opcode == "literal":
            use = v.operands[0]
        elif isinstance(v, LiteralValue):
            use = v
        else:
            return None
        if not _is_constant(use) or _units(use.type) > EVAL_LIMIT:
            return None
        if v not in self.values:
            try:
                self.values[v] = self.frame.value(use)
            except Exception:  # a literal that does not fit its type fails at run time
                self.values[v] = None
        value = self.values[v]
        return value if isinstance(value, np.ndarray) else None

    def evaluate(self, inst: Instruction) -> np.ndarray | None:
        """inst's result when its operands are constants (for rank, shape and unitCount the
        operand's type suffices); None when they are not, or when evaluating it fails."""
        if _units(inst.type) > EVAL_LIMIT:
            return None
        args = self._arguments(inst)
        if args is None:
            return None
        try:
            with np.errstate(all="ignore"):
                result = IMPLS[inst.opcode](self.frame, inst, args)
        except Exception:
            # The interpreter reports any failure of an implementation as an error of the
            # program (integer division by zero, a bad slice): leave it to happen at run time.
            return None
        t = as_tensor(inst.type)
        ok = (
            t is not None
            and isinstance(result, np.ndarray)
            and result.shape == t.shape
            and result.dtype == self.frame.dtype(t)
        )
        return result if ok else None

    def _arguments(self, inst: Instruction) -> list[np.ndarray] | None:
        """The operand values, or None when one is not constant. rank, shape and unitCount
        read only their operand's type: they get a stand-in of that type (no memory)."""
        if inst.op.family == "query":
            t = as_tensor(inst.operands[0].type)
            if t is None:
                return None
            return [np.broadcast_to(np.zeros((), self.frame.dtype(t)), t.shape)]
        args = []
        for v in inst.operands:
            value = self.constant(v)
            if value is None:
                return None
            args.append(value)
        return args

    def materialize(self, inst: Instruction, result: np.ndarray) -> Value | None:
        """The literal use (scalar) or new `literal` instruction (tensor) holding result, or
        None when it is too large to write out or no literal reproduces it exactly."""
        t = as_tensor(inst.type)
        assert t is not None
        dense = any(isinstance(_literal_of(v), DenseLiteral) for v in inst.operands)
        lit = _encode(result, t, dense)
        if lit is None:
            return None
        use = LiteralValue(lit, inst.type)
        try:
            exact = literal_value(self.frame, use)
        except Exception:
            return None
        if not _same_values(exact, result):
            return None
        return create(OPS["literal"], [use]) if t.shape else use


def _same_values(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal bit for bit (so -0.0 is not 0.0), except that NaN matches NaN: the literal `nan`
    carries no sign or payload, and arithmetic gives NaNs no meaningful sign either."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind == "f":
        nan_a, nan_b = np.isnan(a), np.isnan(b)
        if not np.array_equal(nan_a, nan_b):
            return False
        a, b = np.where(nan_a, 0, a), np.where(nan_b, 0, b)
    return np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


def _units(ty: Type) -> int:
    t = as_tensor(ty)
    return t.unit_count if t is not None else 0


def _literal_of(v: Value) -> Literal | None:
    """The literal v is, or that its `literal` instruction holds."""
    if isinstance(v, Instruction) and v.opcode == "literal":
        v = v.operands[0]
    return v.literal if isinstance(v, LiteralValue) else None


def _encode(result: np.ndarray, t: TensorType, dense: bool) -> Literal | None:
    """A scalar literal when every element has the same bits (a splat), else a tensor literal
    of at most FOLD_LIMIT elements, else, when `dense` allows it, a dense literal; else None."""
    flat = np.ascontiguousarray(result).reshape(-1)
    bits = flat.view(np.uint8).reshape(flat.size, -1)
    if (bits == bits[0]).all():
        return _scalar_literal(flat[0])
    if flat.size <= FOLD_LIMIT:
        return _tensor_literal(result, t)
    return DenseLiteral(dense_bytes(flat, t.dtype)) if dense else None


def _tensor_literal(result: np.ndarray, t: TensorType) -> Literal:
    """`<…>` with one element per row of dimension 0, nested down to scalar literals."""
    if not t.shape:
        return _scalar_literal(result.reshape(1)[0])
    row = t.with_shape(t.shape[1:])
    return AggregateLiteral(
        "tensor", tuple(LiteralValue(_tensor_literal(r, row), row) for r in result)
    )


def _scalar_literal(x: np.generic) -> ScalarLiteral:
    """The literal of one element: floats in the shortest text that converts back to the same
    value of their own type (`0.1` for float32 0.1, not float64's `0.10000000149011612`)."""
    kind = x.dtype.kind
    if kind == "b":
        return ScalarLiteral(bool(x))
    if kind in "iu":
        return ScalarLiteral(int(x))
    short = float(str(x))
    return ScalarLiteral(short if np.asarray(short, x.dtype) == x else float(x))
