"""Which inputs of a `[compute]` kernel its output may overwrite: those the kernel reads only at
the index it is writing, so that an in-place call reads each element before storing over it.

The CPU lowering (dlvm/codegen/kernel.py, `pointwise`) computes out[i] from the inputs'
elements and then stores it, one index at a time (a vector of lanes: loads before stores), and
a parallel kernel gives each thread a disjoint range of outer indices for reading and writing."""

from __future__ import annotations

from dlvm.ir.types import TensorType, Type
from dlvm.ir.values import Function, Instruction, Value
from dlvm.transforms.compute_generation import is_pointwise

# Instructions that read each operand of their own shape at exactly the index they compute:
# the elementwise ones (OpDef.elementwise), and these.
_ELEMENTWISE_OPS = {"dataTypeCast", "convert"}


def aligned_inputs(kernel: Function) -> set[int]:
    """Positions of the kernel's arguments that it reads only at the output's index, with
    elements as wide as the output's: inputs its result may be written over."""
    root = _root(kernel)
    if root is None:
        return set()
    body = kernel.blocks[0].instructions[:-1]
    if not all(is_pointwise(inst) for inst in body):
        return set()  # a dot, reduction, convolution or scan reads across indices
    users: dict[Value, list[Instruction]] = {}
    for inst in body:
        for v in dict.fromkeys(inst.uses()):
            users.setdefault(v, []).append(inst)
    # Backwards from the root: a value is aligned when every reader is an elementwise
    # instruction of its shape reading it directly, and is itself aligned.
    aligned: set[Value] = {root}

    def only_aligned_readers(v: Value) -> bool:
        found = users.get(v, [])
        return bool(found) and all(u in aligned and _reads_at_index(u, v) for u in found)

    for inst in reversed(body):
        if inst is not root and only_aligned_readers(inst):
            aligned.add(inst)
    return {
        k
        for k, a in enumerate(kernel.arguments)
        if _same_layout(a.type, root.type) and only_aligned_readers(a)
    }


def _root(kernel: Function) -> Instruction | None:
    """The value a one-block kernel returns, or None when it has another form."""
    if not kernel.compute or len(kernel.blocks) != 1:
        return None
    ret = kernel.blocks[0].instructions[-1]
    if ret.opcode != "return" or len(ret.operands) != 1:
        return None
    root = ret.operands[0]
    return root if isinstance(root, Instruction) else None


def _same_layout(a: Type, b: Type) -> bool:
    """Tensors of one shape whose elements take the same bytes: element i at one offset."""
    return (
        isinstance(a, TensorType)
        and isinstance(b, TensorType)
        and a.shape == b.shape
        and a.dtype.size == b.dtype.size
    )


def _reads_at_index(user: Instruction, v: Value) -> bool:
    """Whether user reads v only at the index it computes: an elementwise instruction of v's
    shape with v among its operands (and not inside a literal, read elsewhere)."""
    elementwise = user.op.elementwise or user.opcode in _ELEMENTWISE_OPS
    t, u = v.type, user.type
    same_shape = isinstance(t, TensorType) and isinstance(u, TensorType) and t.shape == u.shape
    direct = sum(x is v for x in user.operands)
    return elementwise and same_shape and direct > 0 and direct == sum(x is v for x in user.uses())
