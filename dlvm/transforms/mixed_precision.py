"""Mixed precision (`telc build --precision bf16`): a function's tensor work moved to bf16 in
place, its signature kept, so that its callers, and the gradient differentiation derives from it,
still see f32 (docs/telc.md, "Mixed precision").

Which instruction computes in bf16:

- products (`dot`, `convolve`) always: their f32 operands are converted to bf16 (the products
  still accumulate in f32 and round their result once);
- an elementwise or shape instruction (transpose, slice, shapeCast…), `gather`, or a maximum or
  minimum (`reduce`, `reduceWindow`: max-pooling; exact in bf16, a choice among its operands)
  when one of its f32 operands is a bf16 value: the others are converted (a scalar literal is
  retyped);
- nothing else: sums (means, softmax's and batch norm's statistics, the loss), calls
  that were not inlined, block arguments, casts and results read f32, so a bf16 operand of
  theirs is converted back to f32 first.

The function's calls are inlined first (single-block callees), so that the activations and
losses of `nn` are decided instruction by instruction. Every converted value is converted once,
right after its definition."""

from __future__ import annotations

from dlvm.analysis.call_graph import CallGraph
from dlvm.ir.builder import create
from dlvm.ir.literals import ScalarLiteral
from dlvm.ir.ops import OPS
from dlvm.ir.typerules import TypeRuleError
from dlvm.ir.types import DataType, TensorType, Type
from dlvm.ir.values import (
    Argument,
    Function,
    Instruction,
    LiteralValue,
    Value,
    map_attr_values,
)
from dlvm.transforms.function_inlining import inlinable, inline_calls

WIDE, NARROW = DataType.F32, DataType.BF16
PRODUCTS = frozenset({"dot", "convolve"})
# What follows its operands into bf16 besides the elementwise families: data movement.
FOLLOWERS = frozenset(
    {"transpose", "reverse", "concatenate", "slice", "padShape", "squeezeShape", "shapeCast",
     "gather"}
)  # fmt: skip
# Reductions that follow too when they pick one of their operands (max, min): exact in bf16.
SELECTIONS = frozenset({"reduce", "reduceWindow"})


def to_mixed_precision(fn: Function) -> bool:
    """Rewrites fn (a definition of a module) to compute its products and what follows them in
    bf16, as the module docstring says; True if any instruction changed."""
    _inline_callees(fn)
    narrowed = _narrowed(fn)
    if not narrowed:
        return False
    _Rewrite(fn, narrowed).run()
    return True


def _inline_callees(fn: Function) -> None:
    """Inlines every call of a single-block, non-recursive definition into fn, to a fixpoint
    (an inlined body's own calls come next), whatever the callee's size."""
    module = fn.module
    assert module is not None, "a function of a module"
    graph = CallGraph(module)
    while inline_calls(fn, lambda callee: inlinable(callee, graph, sites=1)):
        pass


def _narrowed(fn: Function) -> dict[Instruction, Type]:
    """The instructions to compute in bf16, each with its new result type (its own if it is not
    f32: a comparison's bool); found by growing the set to a fixpoint, since a value computed in
    bf16 pulls its elementwise users along."""
    out: dict[Instruction, Type] = {}
    changed = True
    while changed:
        changed = False
        for inst in fn.instructions():
            if inst in out or not _may_narrow(inst):
                continue
            wide = [v for v in inst.operands if _is_wide(v.type)]
            if not wide:
                continue
            if inst.opcode not in PRODUCTS and not any(
                isinstance(v, Instruction) and _is_narrow(out.get(v)) for v in wide
            ):
                continue
            try:
                ty = inst.op.infer([_narrow_type(v.type) for v in inst.operands], inst.attrs)
            except TypeRuleError:
                continue  # an operation bf16 does not fit stays f32
            out[inst] = ty
            changed = True
    return out


def _may_narrow(inst: Instruction) -> bool:
    op = inst.op
    if op.name in SELECTIONS:
        return inst.attrs.get("comb") in ("max", "min")
    return op.elementwise or op.name in PRODUCTS or op.name in FOLLOWERS


def _is_wide(ty: Type | None) -> bool:
    return isinstance(ty, TensorType) and ty.dtype is WIDE


def _is_narrow(ty: Type | None) -> bool:
    return isinstance(ty, TensorType) and ty.dtype is NARROW


def _narrow_type(ty: Type) -> Type:
    return TensorType(ty.shape, NARROW) if isinstance(ty, TensorType) and ty.dtype is WIDE else ty


class _Rewrite:
    """Applies a decision of _narrowed: new result types, converted operands."""

    def __init__(self, fn: Function, narrowed: dict[Instruction, Type]) -> None:
        self.fn = fn
        self.narrowed = narrowed
        # The values whose type becomes bf16 (a narrowed comparison's result does not).
        self.narrow_values = {
            i for i, ty in narrowed.items() if _is_narrow(ty) and _is_wide(i.type)
        }
        self.converted: dict[tuple[Value, DataType], Instruction] = {}

    def run(self) -> None:
        insts = list(self.fn.instructions())
        for inst, ty in self.narrowed.items():
            inst.type = ty
        for inst in insts:
            if inst in self.narrowed:
                inst.operands = [self.narrow(v) for v in inst.operands]
                inst.attrs = {k: map_attr_values(a, _narrow_literal) for k, a in inst.attrs.items()}
                inst.map_values(lambda v: v)  # marks the function changed
            else:
                inst.map_values(self.widen)

    def narrow(self, v: Value) -> Value:
        """v as an operand of a narrowed instruction."""
        if v in self.narrow_values or not _is_wide(v.type):
            return v
        if isinstance(v, LiteralValue):  # only `literal` takes a tensor's literal
            assert isinstance(v.literal, ScalarLiteral), v
            return LiteralValue(v.literal, _narrow_type(v.type))
        return self.convert(v, NARROW)

    def widen(self, v: Value) -> Value:
        """v as an f32 operand of an instruction that stays f32."""
        return self.convert(v, WIDE) if v in self.narrow_values else v

    def convert(self, v: Value, dtype: DataType) -> Instruction:
        """`convert v to dtype`, made once, right after v's definition."""
        key = (v, dtype)
        if key not in self.converted:
            convert = create(OPS["convert"], [v], dtype=dtype)
            if isinstance(v, Argument):
                assert v.block is not None
                v.block.insert(0, convert)
            else:
                assert isinstance(v, Instruction) and v.block is not None
                v.block.insert(v.block.instructions.index(v) + 1, convert)
            self.converted[key] = convert
        return self.converted[key]


def _narrow_literal(v: Value) -> Value:
    """A scalar f32 literal of a narrowed instruction's attributes, retyped bf16."""
    if isinstance(v, LiteralValue) and isinstance(v.literal, ScalarLiteral) and _is_wide(v.type):
        return LiteralValue(v.literal, _narrow_type(v.type))
    return v
