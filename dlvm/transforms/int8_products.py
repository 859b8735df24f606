"""int8 products of an inference function (`telc build --quantize int8`, docs/quantization.md):
each rank-2 f32 `dot` whose right operand is a weight (an argument of the function the caller
names, used as `x · W` or `x · transpose W`) becomes the same product in integers.

The weight is quantised per output column c, symmetrically: s_w[c] = max_p |W[p, c]| / 127 and
W_q = rint(W / s_w) in i8 (|W_q| <= 127). The left operand is quantised the same way per row
m, at run time: s_x[m] = max_p |x[m, p]| / 127, x_q = rint(x / s_x) in i8. The product sums
x_q · W_q exactly in i32 and is dequantised as acc · s_x[m] · s_w[c] in f32, before whatever
followed the product (bias, activation) runs in f32 as it did. A row or column of zeros has a
scale of 0 and gives 0 (its division is by a tiny number instead, so never 0/0).

Everything is existing instructions, so the interpreter computes the scheme exactly and every
pass and code generator handles it; the code generator recognises the integer product and
runs it on VNNI where the CPU has it."""

from __future__ import annotations

from collections.abc import Collection

from dlvm.ir.builder import Builder, constant
from dlvm.ir.types import DataType, TensorType, as_tensor
from dlvm.ir.values import Function, Instruction, Value
from dlvm.transforms.rewrite import replace_and_remove

# The largest magnitude of a quantised value: symmetric, so -128 is never used.
LEVELS = 127
# What a zero scale divides by instead (any positive number gives a quotient of 0 there).
_TINY = 1e-30


def quantize_products(fn: Function, weights: Collection[Value]) -> int:
    """Rewrites fn's products by `weights` (arguments of fn) as above; returns how many."""
    replacement: dict[Value, Value] = {}
    dead: set[Instruction] = set()
    for inst in list(fn.instructions()):  # a copy: new instructions go in as it runs
        found = _weight_of(inst, weights)
        if found is None:
            continue
        weight, transposed = found
        assert inst.block is not None
        old = set(inst.block.instructions)
        b = Builder().before(inst)
        replacement[inst] = _int8_product(b, inst.operands[0], weight, transposed)
        for new in inst.block.instructions:
            if new not in old:
                new.loc = inst.loc
        dead.add(inst)
    replace_and_remove(fn, replacement, dead)
    return len(dead)


def _weight_of(inst: Instruction, weights: Collection[Value]) -> tuple[Value, bool] | None:
    """(W, transposed) when inst is `dot x, W` or `dot x, transpose W` of rank-2 f32 tensors
    with W one of `weights`; else None."""
    if inst.opcode != "dot":
        return None
    t = as_tensor(inst.type)
    if t is None or t.dtype is not DataType.F32 or t.rank != 2:
        return None
    right = inst.operands[1]
    if right in weights:
        return right, False
    if isinstance(right, Instruction) and right.opcode == "transpose":
        inner = right.operands[0]
        if inner in weights:
            return inner, True
    return None


def _int8_product(b: Builder, x: Value, w: Value, transposed: bool) -> Value:
    """The quantised product of x and w (w's output channels its columns, or its rows when
    transposed)."""
    # The output channel is w's axis 1 (x · W) or axis 0 (x · Wᵀ); its scale is a row 1 x N.
    wq, sw = _quantize(b, w, axis=0 if not transposed else 1)
    if transposed:
        wq = b.transpose(wq)
        sw = b.transpose(sw)
    xq, sx = _quantize(b, x, axis=1)
    acc = b.dot(xq, wq)
    return b.multiply(b.multiply(b.convert(acc, dtype=DataType.F32), sx), sw)


def _quantize(b: Builder, v: Value, axis: int) -> tuple[Value, Value]:
    """v (rank 2, f32) as i8 values widened to i32, each line along `axis` by its own scale,
    and the scales, keeping `axis` as a dimension of 1 (an M x 1 column or 1 x N row)."""
    t = as_tensor(v.type)
    assert isinstance(t, TensorType) and t.rank == 2
    magnitude = b.max(v, b.negate(v))
    peak = b.reduce(magnitude, constant(0.0, f32_scalar()), comb="max", dims=(axis,))
    kept = tuple(1 if i == axis else n for i, n in enumerate(t.shape))
    scale = b.divide(b.shapeCast(peak, shape=kept), constant(float(LEVELS), f32_scalar()))
    divisor = b.max(scale, constant(_TINY, f32_scalar()))
    levels = b.rint(b.divide(v, divisor))
    q8 = b.convert(levels, dtype=DataType.I8)
    return b.convert(q8, dtype=DataType.I32), scale


def f32_scalar() -> TensorType:
    """The type of an f32 scalar."""
    return TensorType((), DataType.F32)
