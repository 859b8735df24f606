"""literal-broadcasting-promotion (LBP): an operand of an elementwise binary, boolean, compare or
select instruction that is a splat `literal c: <shape x dt>` becomes the scalar use `c: dt`,
which broadcasts to the same values.

Only where the instruction's result type stays exactly the same: when the literal's shape is
what shapes the result, promoting it would change the result. The literal instruction itself
stays (dead-code elimination removes it once unused).
"""

from __future__ import annotations

from collections.abc import Callable

from dlvm.ir.literals import ZERO, ScalarLiteral
from dlvm.ir.typerules import TypeRuleError
from dlvm.ir.types import as_tensor, same_type, scalar
from dlvm.ir.values import Function, Instruction, LiteralValue, Value
from dlvm.transforms.pass_base import FunctionPass

# The instruction families whose operands broadcast (docs/ir.md, "Types").
BROADCASTING = frozenset({"binary", "boolean", "shift", "compare", "select"})


class LiteralBroadcastingPromotion(FunctionPass):
    name = "literal-broadcasting-promotion"
    alias = "LBP"
    summary = "replace splat literal operands of elementwise ops by scalar literals"

    def run_on_function(self, fn: Function) -> bool:
        changed = False
        for inst in fn.instructions():
            if inst.op.family in BROADCASTING:
                changed |= promote_operands(inst)
        return changed


def promote_operands(inst: Instruction) -> bool:
    """Replaces inst's splat-literal operands by scalar literal uses, one literal instruction at
    a time in operand order, each only if inst keeps its result type; True if any was."""
    changed = False
    for splat in dict.fromkeys(v for v in inst.operands if scalar_of_splat(v) is not None):
        promoted = scalar_of_splat(splat)
        assert promoted is not None
        if _keeps_type(inst, [promoted if v is splat else v for v in inst.operands]):
            inst.map_values(_replacing(splat, promoted))
            changed = True
    return changed


def _replacing(old: Value, new: Value) -> Callable[[Value], Value]:
    return lambda v: new if v is old else v


def scalar_of_splat(v: Value) -> LiteralValue | None:
    """`c: dt` when v is the result of `literal c: T` with a scalar c (a number, a boolean or
    `zero`) and T a tensor of dt; None otherwise."""
    if not (isinstance(v, Instruction) and v.opcode == "literal"):
        return None
    use, t = v.operands[0], as_tensor(v.type)
    if t is None or not isinstance(use, LiteralValue):
        return None
    if not (isinstance(use.literal, ScalarLiteral) or use.literal == ZERO):
        return None
    return LiteralValue(use.literal, scalar(t.dtype))


def _keeps_type(inst: Instruction, operands: list[Value]) -> bool:
    try:
        ty = inst.op.infer([v.type for v in operands], inst.attrs)
    except TypeRuleError:
        return False
    return same_type(ty, inst.type)
