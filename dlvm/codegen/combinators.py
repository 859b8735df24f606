"""Which functions a kernel can compute inline as the combinator of a scan or reduceWindow
(`by @f`): straight-line code on scalars, whose instructions a kernel computes as it does its
fused elements (dlvm.codegen.kernel)."""

from __future__ import annotations

from dlvm.ir.types import TensorType
from dlvm.ir.values import Function

# Inlined besides the elementwise instructions (OpDef.elementwise) and literals.
_INLINE_FAMILIES = {"cast"}


def not_inlinable(fn: Function, active: frozenset[Function] = frozenset()) -> str | None:
    """Why a combinator's body cannot be computed inline (None when it can): it must be one
    block of elementwise instructions on scalars and calls of such functions, and return."""
    if fn in active:
        return f"@{fn.name} is recursive"
    if len(fn.blocks) != 1:
        return f"@{fn.name} is not one block of straight-line code"
    for inst in fn.blocks[0].instructions:
        if inst.opcode == "return":
            continue
        t = inst.type
        if not (isinstance(t, TensorType) and not t.shape):
            return f"'{inst.opcode}' in @{fn.name} does not compute a scalar"
        if inst.opcode == "apply":
            callee = inst.operands[0]
            if not isinstance(callee, Function):
                return f"@{fn.name} calls a function value"
            why = not_inlinable(callee, active | {fn})
            if why is not None:
                return why
        elif not (
            inst.op.elementwise or inst.op.family in _INLINE_FAMILIES or inst.opcode == "literal"
        ):
            return f"'{inst.opcode}' in @{fn.name} is not an elementwise instruction"
    return None
