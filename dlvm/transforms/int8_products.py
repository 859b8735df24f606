"""int8 products of an inference function (`telc build --quantize int8`, docs/quantization.md):
each rank-2 f32 `dot` whose right operand is a weight (an argument of the function the caller
names, used as `x · W` or `x · transpose W`) becomes the same product in integers.

The weight is quantised per output channel c, symmetrically: s_w[c] = max_p |W[p, c]| / 127 and
W_q = rint(W / s_w) in i8 (|W_q| <= 127), by a separate function of the parameters
(`weights_function`) whose results the inference function takes as arguments of its own: the
runtime keeps them in the model and recomputes them only when the parameters changed. The left
operand is quantised the same way per row m, at run time: s_x[m] = max_p |x[m, p]| / 127,
x_q = rint(x / s_x) in i8. The product sums x_q · W_q exactly in i32, in the form VNNI takes
(unsigned bytes times signed ones): Σ_p (x_q + 128) · W_q minus shift[c] = 128 · Σ_p W_q[p, c],
which the weights function computes with the copy. It is dequantised as acc · s_x[m] · s_w[c] in
f32, before whatever followed the product (bias, activation) runs in f32 as it did. A row or
column of zeros has a scale of 0 and gives 0 (its division is by a tiny number instead, so
never 0/0).

Everything is existing instructions, so the interpreter computes the scheme exactly and every
pass and code generator handles it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dlvm.ir.builder import Builder, constant, tuple_literal
from dlvm.ir.types import DataType, FunctionType, TensorType, TupleType, Type, as_tensor
from dlvm.ir.values import Argument, Block, Function, Instruction, Value, fresh_name
from dlvm.transforms.rewrite import replace_and_remove

# The largest magnitude of a quantised value: symmetric, so -128 is never used.
LEVELS = 127
# What a zero scale divides by instead (any positive number gives a quotient of 0 there).
_TINY = 1e-30


@dataclass(frozen=True)
class QuantizedWeight:
    """A weight the products read in int8: the parameter `weight` of `shape`, its output
    channels its columns, or its rows when `transposed`. Its int8 copy is laid out N x P, an
    output channel per row (the weight's transpose, or the weight itself when transposed), so
    that each channel's sum reads contiguous bytes (dlvm.codegen.matmul_int8); its scales
    are a row 1 x N, and so is its shift (128 times each channel's sum of the copy, i32)."""

    weight: str
    shape: tuple[int, int]
    transposed: bool

    @property
    def int8(self) -> str:
        """The name of its int8 copy (`_t` at the end when transposed: one weight read both
        ways, by two infer entries, has two copies)."""
        return f"{self.weight}_int8{self._suffix}"

    @property
    def scale(self) -> str:
        """The name of its scales."""
        return f"{self.weight}_scale{self._suffix}"

    @property
    def shift(self) -> str:
        """The name of its shifts."""
        return f"{self.weight}_shift{self._suffix}"

    @property
    def _suffix(self) -> str:
        return "_t" if self.transposed else ""

    def names(self) -> tuple[str, str, str]:
        """The names of the int8 copy, the scales and the shifts, in the order of types()."""
        return self.int8, self.scale, self.shift

    @property
    def axis(self) -> int:
        """The weight's axis each scale is the maximum along."""
        return 1 if self.transposed else 0

    def types(self) -> tuple[TensorType, TensorType, TensorType]:
        """The types of the int8 copy, the scales and the shifts."""
        p, n = (self.shape[1], self.shape[0]) if self.transposed else self.shape
        row = (1, n)
        return (
            TensorType((n, p), DataType.I8),
            TensorType(row, DataType.F32),
            TensorType(row, DataType.I32),
        )


def quantize_products(fn: Function, weights: Mapping[Value, str]) -> list[QuantizedWeight]:
    """Rewrites fn's products by `weights` (arguments of fn, with their parameters' names) as
    above. fn takes, after its arguments, the int8 copy and the scales of each weight it now
    reads in int8, in the order returned: its int8 copy, scales and shifts (types())."""
    replacement: dict[Value, Value] = {}
    dead: set[Instruction] = set()
    copies: dict[Value, tuple[QuantizedWeight, list[Argument]]] = {}
    entry = fn.blocks[0] if fn.blocks else None
    for inst in list(fn.instructions()):  # a copy: new instructions go in as it runs
        found = _weight_of(inst, weights)
        if found is None or entry is None:
            continue
        weight, transposed = found
        if weight not in copies:
            copies[weight] = _new_arguments(fn, entry, weight, weights[weight], transposed)
        q, derived = copies[weight]
        if q.transposed != transposed:  # read both ways: the second stays f32
            continue
        assert inst.block is not None
        old = set(inst.block.instructions)
        b = Builder().before(inst)
        replacement[inst] = _int8_product(b, inst.operands[0], *derived)
        for new in inst.block.instructions:
            if new not in old:
                new.loc = inst.loc
        dead.add(inst)
    replace_and_remove(fn, replacement, dead)
    return [q for q, _ in copies.values()]


def weights_function(
    name: str, params: Sequence[tuple[str, Type]], quantized: Sequence[QuantizedWeight]
) -> Function:
    """@name: the parameters -> the int8 copy, the scales and the shifts of each of
    `quantized`, in order (what the runtime stores for quantize_products' new arguments)."""
    results = [t for q in quantized for t in q.types()]
    i32 = TensorType((), DataType.I32)
    fn = Function(name, FunctionType(tuple(t for _, t in params), TupleType(tuple(results))))
    entry = fn.add_block(Block("entry", [Argument(n, t) for n, t in params]))
    by_name = {a.name: a for a in entry.arguments}
    b = Builder().at_end(entry)
    values: list[Value] = []
    for q in quantized:
        levels, scale = _quantize(b, by_name[q.weight], q.axis)
        if not q.transposed:  # an output channel per row
            levels = b.transpose(levels)
        else:
            scale = b.transpose(scale)
        copy = b.convert(levels, dtype=DataType.I8, name=q.int8)
        n = q.types()[0].shape[0]
        sums = b.reduce(
            b.convert(copy, dtype=DataType.I32), constant(0, i32), comb="add", dims=(1,)
        )
        shift = b.multiply(b.shapeCast(sums, shape=(1, n)), constant(128, i32))
        values += [copy, scale, shift]
    b.build("return", [b.build("literal", [tuple_literal(values)])])
    return fn


def _new_arguments(
    fn: Function, entry: Block, weight: Value, param: str, transposed: bool
) -> tuple[QuantizedWeight, list[Argument]]:
    t = as_tensor(weight.type)
    assert t is not None and t.rank == 2
    q = QuantizedWeight(param, (t.shape[0], t.shape[1]), transposed)
    taken = {a.name for b in fn.blocks for a in b.arguments}
    taken |= {i.name for i in fn.instructions() if i.name}
    types = q.types()
    derived = [
        entry.add_argument(Argument(fresh_name(n, taken), ty)) for n, ty in zip(q.names(), types)
    ]
    assert isinstance(fn.type, FunctionType)
    fn.type = FunctionType((*fn.type.arguments, *types), fn.type.result)
    return q, derived


def _weight_of(inst: Instruction, weights: Mapping[Value, str]) -> tuple[Value, bool] | None:
    """(W, transposed) when inst is `dot x, W` or `dot x, transpose W` of rank-2 f32 tensors
    with W one of `weights`; else None."""
    if inst.opcode != "dot":
        return None
    t = as_tensor(inst.type)
    x = as_tensor(inst.operands[0].type)
    if t is None or x is None or t.dtype is not DataType.F32 or t.rank != 2:
        return None
    if not all(t.shape) or not all(x.shape):  # nothing to sum, or no output
        return None
    right = inst.operands[1]
    if right in weights:
        return right, False
    if isinstance(right, Instruction) and right.opcode == "transpose":
        inner = right.operands[0]
        if inner in weights:
            return inner, True
    return None


def _int8_product(b: Builder, x: Value, wq: Value, sw: Value, shift: Value) -> Value:
    """The quantised product of x by the weight whose int8 copy (N x P) is wq, scales sw and
    shifts `shift`."""
    i32 = TensorType((), DataType.I32)
    w32 = b.transpose(b.convert(wq, dtype=DataType.I32))
    levels, sx = _quantize(b, x, axis=1)
    xq = b.convert(b.convert(levels, dtype=DataType.I8), dtype=DataType.I32)
    acc = b.subtract(b.dot(b.add(xq, constant(128, i32)), w32), shift)
    return b.multiply(b.multiply(b.convert(acc, dtype=DataType.F32), sx), sw)


def _quantize(b: Builder, v: Value, axis: int) -> tuple[Value, Value]:
    """v (rank 2, f32) rounded to levels in [-127, 127] (still f32), each line along `axis` by
    its own scale, and the scales, keeping `axis` as a dimension of 1 (M x 1 or 1 x N)."""
    t = as_tensor(v.type)
    assert isinstance(t, TensorType) and t.rank == 2
    magnitude = b.max(v, b.negate(v))
    peak = b.reduce(magnitude, constant(0.0, f32_scalar()), comb="max", dims=(axis,))
    kept = tuple(1 if i == axis else n for i, n in enumerate(t.shape))
    scale = b.divide(b.shapeCast(peak, shape=kept), constant(float(LEVELS), f32_scalar()))
    divisor = b.max(scale, constant(_TINY, f32_scalar()))
    return b.rint(b.divide(v, divisor)), scale


def f32_scalar() -> TensorType:
    """The type of an f32 scalar."""
    return TensorType((), DataType.F32)


# The rows of x the VNNI kernel (dlvm.codegen.matmul_int8) packs as bytes on the stack at a
# time (a group), and the most bytes they may take; the rows and channels of its tiles.
VNNI_GROUP_ROWS = 16
VNNI_STACK_BYTES = 1 << 16
VNNI_TILE_ROWS = 4


def int8_rows_product(fn: Function) -> tuple[Argument, Argument] | None:
    """(x, W_int8) when [compute] fn is exactly `dot x, transpose (convert W_int8 to i32)`, x
    an i32 argument (VNNI_GROUP_ROWS of its rows, as bytes, within VNNI_STACK_BYTES) and
    W_int8 an i8 argument N x P: the product as
    quantize_products writes it (x then holds bytes, x_q + 128), which the VNNI kernel computes
    (checking that x's values are bytes); else None."""
    if len(fn.blocks) != 1:
        return None
    insts = fn.blocks[0].instructions
    if len(insts) != 4 or insts[-1].opcode != "return" or insts[-1].operands[0] is not insts[2]:
        return None
    convert, transpose, dot = insts[:3]
    opcodes = (convert.opcode, transpose.opcode, dot.opcode)
    if opcodes != ("convert", "transpose", "dot"):
        return None
    x, w = dot.operands[0], convert.operands[0]
    if (
        transpose.operands[0] is not convert
        or dot.operands[1] is not transpose
        or not isinstance(x, Argument)
        or not isinstance(w, Argument)
    ):
        return None
    tx, tw, tout = as_tensor(x.type), as_tensor(w.type), as_tensor(dot.type)
    if tx is None or tw is None or tout is None or tx.rank != 2 or tw.rank != 2:
        return None
    rows, depth = tx.shape
    padded = -(-depth // 64) * 64
    if (
        tx.dtype is not DataType.I32
        or tw.dtype is not DataType.I8
        or tout.dtype is not DataType.I32
        or min(rows, VNNI_GROUP_ROWS) * padded > VNNI_STACK_BYTES
    ):
        return None
    return x, w
