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
from dlvm.ir.values import (
    Argument,
    Block,
    Function,
    Instruction,
    LiteralValue,
    Value,
    fresh_name,
)
from dlvm.transforms.rewrite import replace_and_remove

# The largest magnitude of a quantised value: symmetric, so -128 is never used.
LEVELS = 127
# What a zero scale divides by instead (any positive number gives a quotient of 0 there).
_TINY = 1e-30


# The layout of an int8 copy (Int8Layout): the depths of a channel a 32-bit lane holds (the four
# byte products vpdpbusd sums into a lane), the channels of a 512-bit vector of lanes, and the
# channels of a panel (a multiple of those: 16 vectors, 16 accumulators of a batch-1 row).
LANE_DEPTH = 4
VECTOR_CHANNELS = 16
PANEL_CHANNELS = 256


@dataclass(frozen=True)
class Int8Layout:
    """Where an int8 copy of N channels by P depths keeps W[n, p]: the channels padded with
    zeros to N' (a multiple of VECTOR_CHANNELS), the depths to P' (a multiple of LANE_DEPTH),
    then cut into panels of PANEL_CHANNELS channels (the last one narrower when N' is not a
    multiple), one after the other; a panel of w channels holds, for each group q of
    LANE_DEPTH depths, w lanes of LANE_DEPTH bytes: W[n, 4q .. 4q + 3] at lane q·w + (n −
    the panel's first channel). A row of x then reads each panel once, from start to end, one
    vector of 16 channels' lanes per 4 bytes of x (dlvm.codegen.matmul_int8). The copy's type
    is (N'·P' / 4) x 4: a row per lane."""

    channels: int
    depth: int

    @property
    def padded_channels(self) -> int:
        return -(-self.channels // VECTOR_CHANNELS) * VECTOR_CHANNELS

    @property
    def padded_depth(self) -> int:
        return -(-self.depth // LANE_DEPTH) * LANE_DEPTH

    @property
    def quads(self) -> int:
        """The groups of LANE_DEPTH depths: the lanes of each channel."""
        return self.padded_depth // LANE_DEPTH

    @property
    def shape(self) -> tuple[int, int]:
        return (self.padded_channels * self.quads, LANE_DEPTH)

    def panels(self) -> list[tuple[int, int]]:
        """Each panel's first channel and number of channels, in order."""
        n = self.padded_channels
        return [(c, min(PANEL_CHANNELS, n - c)) for c in range(0, n, PANEL_CHANNELS)]


def pack(b: Builder, copy: Value, layout: Int8Layout, name: str | None = None) -> Value:
    """`copy` (N x P, a channel per row) in `layout`: padded with zeros, then each panel's
    rows w x P' as (w, Q, 4), reversed to (4, Q, w), seen as (4, Q·w) and transposed to (Q·w,
    4); the panels concatenated."""
    t = as_tensor(copy.type)
    assert t is not None and t.shape == (layout.channels, layout.depth)
    n, p, q = layout.padded_channels, layout.padded_depth, layout.quads
    if n > layout.channels:
        copy = b.concatenate(copy, _zeros(b, (n - layout.channels, layout.depth), t.dtype), axis=0)
    if p > layout.depth:
        copy = b.concatenate(copy, _zeros(b, (n, p - layout.depth), t.dtype), axis=1)
    parts = []
    panels = layout.panels()
    for first, width in panels:
        rows = copy if len(panels) == 1 else b.slice(copy, lo=first, hi=first + width - 1)
        lanes = b.transpose(b.shapeCast(rows, shape=(width, q, LANE_DEPTH)))
        last = name if len(panels) == 1 else None  # the copy itself
        parts.append(b.transpose(b.shapeCast(lanes, shape=(LANE_DEPTH, q * width)), name=last))
    return parts[0] if len(parts) == 1 else b.concatenate(*parts, axis=0, name=name)


def _zeros(b: Builder, shape: tuple[int, int], dtype: DataType) -> Value:
    return b.literal(constant(0, TensorType(shape, dtype)))


def unpack(b: Builder, packed: Value, layout: Int8Layout) -> Value:
    """The copy in `layout` back as the weight P x N (pack's steps undone, then transposed):
    what the product multiplies by."""
    q = layout.quads
    parts = []
    panels = layout.panels()
    for first, width in panels:
        lo = first * q
        lanes = packed if len(panels) == 1 else b.slice(packed, lo=lo, hi=lo + q * width - 1)
        wide = b.shapeCast(b.transpose(lanes), shape=(LANE_DEPTH, q, width))
        parts.append(b.shapeCast(b.transpose(wide), shape=(width, layout.padded_depth)))
    rows = parts[0] if len(parts) == 1 else b.concatenate(*parts, axis=0)
    if layout.padded_channels > layout.channels:
        rows = b.slice(rows, lo=0, hi=layout.channels - 1)
    columns = b.transpose(rows)
    if layout.padded_depth > layout.depth:
        columns = b.slice(columns, lo=0, hi=layout.depth - 1)
    return columns


@dataclass(frozen=True)
class QuantizedWeight:
    """A weight the products read in int8: the parameter `weight` of `shape`, its output
    channels its columns, or its rows when `transposed`. Its int8 copy is laid out in
    Int8Layout's panels (vpdpbusd's lanes: four depths of a channel side by side); its scales
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

    @property
    def layout(self) -> Int8Layout:
        """The layout of its int8 copy."""
        p, n = (self.shape[1], self.shape[0]) if self.transposed else self.shape
        return Int8Layout(n, p)

    def types(self) -> tuple[TensorType, TensorType, TensorType]:
        """The types of the int8 copy, the scales and the shifts."""
        layout = self.layout
        row = (1, layout.channels)
        return (
            TensorType(layout.shape, DataType.I8),
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
        replacement[inst] = _int8_product(b, inst.operands[0], q.layout, *derived)
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
        copy = b.convert(levels, dtype=DataType.I8)  # N x P
        n = q.layout.channels
        sums = b.reduce(
            b.convert(copy, dtype=DataType.I32), constant(0, i32), comb="add", dims=(1,)
        )
        shift = b.multiply(b.shapeCast(sums, shape=(1, n)), constant(128, i32))
        values += [pack(b, copy, q.layout, q.int8), scale, shift]
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


def _int8_product(
    b: Builder, x: Value, layout: Int8Layout, wq: Value, sw: Value, shift: Value
) -> Value:
    """The quantised product of x by the weight whose int8 copy (in `layout`) is wq, scales sw
    and shifts `shift`."""
    i32 = TensorType((), DataType.I32)
    w32 = b.convert(unpack(b, wq, layout), dtype=DataType.I32)
    levels, sx = _quantize(b, x, axis=1)
    xq = b.convert(b.convert(levels, dtype=DataType.I8), dtype=DataType.I32)
    acc = b.subtract(b.dot(b.add(xq, constant(128, i32)), w32), shift)
    return b.multiply(b.multiply(b.convert(acc, dtype=DataType.F32), sx), sw)


def _quantize(b: Builder, v: Value, axis: int) -> tuple[Value, Value]:
    """v (rank 2, f32) rounded to levels in [-127, 127] (still f32), each line along `axis` by
    its own scale, and the scales, keeping `axis` as a dimension of 1 (M x 1 or 1 x N)."""
    t = as_tensor(v.type)
    assert isinstance(t, TensorType) and t.rank == 2
    # The largest |v| as the largest of |v|'s bits read as integers (the same order for
    # floats of one sign, NaN above infinity): an integer maximum, which vectorises with
    # several partial results, where a float one is a chain of NaN-aware steps.
    i32 = TensorType((), DataType.I32)
    bits = b.bitCast(v, type=TensorType(t.shape, DataType.I32))
    magnitude = b.build("and", [bits, constant(0x7FFFFFFF, i32)])
    peak_bits = b.reduce(magnitude, constant(0, i32), comb="max", dims=(axis,))
    kept = tuple(1 if i == axis else n for i, n in enumerate(t.shape))
    peak = b.bitCast(b.shapeCast(peak_bits, shape=kept), type=TensorType(kept, DataType.F32))
    scale = b.divide(peak, constant(float(LEVELS), f32_scalar()))
    divisor = b.max(scale, constant(_TINY, f32_scalar()))
    return b.rint(b.divide(v, divisor)), scale


def f32_scalar() -> TensorType:
    """The type of an f32 scalar."""
    return TensorType((), DataType.F32)


# The rows of x the VNNI kernel (dlvm.codegen.matmul_int8) packs as bytes on the stack at a
# time (a group), and the most bytes they may take; the rows and vectors of channels of its
# tiles.
VNNI_GROUP_ROWS = 16
VNNI_STACK_BYTES = 1 << 16
VNNI_TILE_ROWS = 8
VNNI_TILE_VECTORS = 2


def int8_rows_product(fn: Function) -> tuple[Argument, Argument, Int8Layout] | None:
    """(x, W_int8, its layout) when [compute] fn is exactly `dot x, convert (unpack W_int8) to
    i32`, x an i32 argument (VNNI_GROUP_ROWS of its rows, as bytes, within VNNI_STACK_BYTES)
    and W_int8 an i8 argument in the layout: the product as quantize_products writes it (x then
    holds bytes, x_q + 128), which the VNNI kernel computes (checking that x's values are
    bytes); else None."""
    if len(fn.blocks) != 1:
        return None
    insts = fn.blocks[0].instructions
    if len(insts) < 3 or insts[-1].opcode != "return" or insts[-1].operands[0] is not insts[-2]:
        return None
    dot = insts[-2]
    if dot.opcode != "dot" or len(fn.arguments) != 2:
        return None
    x, w = dot.operands[0], fn.arguments[1]
    tx, tw, tout = as_tensor(x.type), as_tensor(w.type), as_tensor(dot.type)
    if x is not fn.arguments[0] or tx is None or tw is None or tout is None:
        return None
    if tx.rank != 2 or tout.rank != 2 or tw.dtype is not DataType.I8:
        return None
    rows, depth = tx.shape
    layout = Int8Layout(tout.shape[1], depth)
    if (
        tx.dtype is not DataType.I32
        or tout.dtype is not DataType.I32
        or tw.shape != layout.shape
        or min(rows, VNNI_GROUP_ROWS) * layout.padded_depth > VNNI_STACK_BYTES
    ):
        return None
    # What quantize_products writes for this layout, built aside, against fn's instructions.
    aside = Function("aside", FunctionType((tw,), tout))
    entry = aside.add_block(Block("entry", [Argument("w", tw)]))
    b = Builder().at_end(entry)
    expected = b.convert(unpack(b, entry.arguments[0], layout), dtype=DataType.I32)
    if len(entry.instructions) != len(insts) - 2:
        return None
    if not _same(expected, dot.operands[1], {entry.arguments[0]: w}):
        return None
    return x, w, layout


def _same(want: Value, got: Value, known: dict[Value, Value]) -> bool:
    """Whether `got` computes what `want` does: the same instructions (opcode, attributes,
    type) over operands that are the same, `known` pairing values already matched."""
    if want in known:
        return known[want] is got
    if isinstance(want, LiteralValue) or isinstance(got, LiteralValue):
        return want == got
    if not isinstance(want, Instruction) or not isinstance(got, Instruction):
        return False
    if (
        want.opcode != got.opcode
        or want.attrs != got.attrs
        or want.type != got.type
        or len(want.operands) != len(got.operands)
    ):
        return False
    if not all(_same(a, b, known) for a, b in zip(want.operands, got.operands)):
        return False
    known[want] = got
    return True
