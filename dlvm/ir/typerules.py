"""Result-type rules of the instructions (docs/ir.md, "Instructions"), one function per rule.

Each rule takes the operand types and the attributes and returns the result type, or raises
`TypeRuleError` with a message saying what is wrong. ops.py attaches one rule to each
instruction; the parser, builder and verifier all call it through the declaration.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from dlvm.ir.literals import (
    AggregateLiteral,
    DenseLiteral,
    EnumLiteral,
    ScalarLiteral,
    SpecialLiteral,
    StructLiteral,
    fits,
    literal_brief,
)
from dlvm.ir.types import (
    BOOL,
    I64,
    MAX_TENSOR_BYTES,
    STACK,
    VOID,
    ArrayType,
    Base,
    BoxType,
    DataType,
    EnumType,
    FunctionType,
    PointerType,
    StackType,
    StructType,
    TensorType,
    TupleType,
    Type,
    broadcast_shapes,
    byte_size,
    canonical,
    same_type,
    shape_text,
)
from dlvm.ir.values import ElementKey, LiteralValue
from dlvm.ir.windows import window_count

# The rules run for every instruction the parser reads and the verifier checks: they compare a
# data type's base directly, as DataType's is_* properties look the Base member up every time.
_BOOL, _INT, _FLOAT = Base.BOOL, Base.INT, Base.FLOAT


class TypeRuleError(Exception):
    """An instruction's operands or attributes do not fit its type rule."""


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


# One TensorType object per shape and data type: results built here are shared, so comparing a
# result with the type a use or an instruction states is usually an identity test.
_TENSOR_TYPES: dict[tuple[tuple[int, ...], str], TensorType] = {}


def tensor_type(shape: tuple[int, ...], dtype: DataType) -> TensorType:
    """The shared TensorType of `shape` and `dtype`."""
    key = (shape, dtype.text)  # hashes in C, unlike the dataclass or the enum
    try:
        ty = _TENSOR_TYPES.get(key)
    except TypeError:  # an unhashable shape (a list): not shared
        return TensorType(shape, dtype)
    if ty is None:
        ty = TensorType(shape, dtype)
        # Only plain int dimensions are shared: a numpy or bool one equals its int but is not
        # what a later caller would expect back.
        if len(_TENSOR_TYPES) < 65536 and all(d.__class__ is int for d in shape):
            _TENSOR_TYPES[key] = ty
    return ty


def tensor(ty: Type, what: str = "operand") -> TensorType:
    if ty.__class__ is TensorType:  # the common case, without canonical's alias walk
        return ty  # type: ignore[return-value]
    t = canonical(ty)
    if not isinstance(t, TensorType):
        raise TypeRuleError(f"{what} must be a tensor, found {ty}")
    return t


def _broadcast(*tys: TensorType) -> tuple[int, ...]:
    shape = tys[0].shape
    for t in tys[1:]:
        if t.shape == shape:
            continue
        out = broadcast_shapes(shape, t.shape)
        if out is None:
            shapes = " and ".join(str(x) for x in tys)
            raise TypeRuleError(f"cannot broadcast {shapes}")
        shape = out
    return shape


def _same_dtype(a: TensorType, b: TensorType) -> None:
    if a.dtype is not b.dtype:
        raise TypeRuleError(f"operand data types differ: {a.dtype} and {b.dtype}")


def _check_dims(dims: tuple[int, ...], rank: int, what: str = "dimension") -> None:
    if len(set(dims)) != len(dims):
        raise TypeRuleError(f"repeated {what} in {', '.join(map(str, dims))}")
    for d in dims:
        if not 0 <= d < rank:
            raise TypeRuleError(f"{what} {d} is out of range for rank {rank}")


# Elementwise families ----------------------------------------------------------------------


def unary_float(ops: list[Type], attrs: dict[str, Any]) -> Type:
    t = tensor(ops[0])
    if t.dtype.base is not _FLOAT:
        raise TypeRuleError(f"operand must have a float data type, found {t.dtype}")
    return ops[0]


def unary_numeric(ops: list[Type], attrs: dict[str, Any]) -> Type:
    t = tensor(ops[0])
    if t.dtype.base is _BOOL:
        raise TypeRuleError(f"operand must be numeric, found {t.dtype}")
    return ops[0]


def binary_numeric(ops: list[Type], attrs: dict[str, Any]) -> Type:
    a, b = tensor(ops[0], "left operand"), tensor(ops[1], "right operand")
    _same_dtype(a, b)
    if a.dtype.base is _BOOL:
        raise TypeRuleError(f"operands must be numeric, found {a.dtype}")
    return tensor_type(_broadcast(a, b), a.dtype)


def binary_logic(ops: list[Type], attrs: dict[str, Any]) -> Type:
    """and, or, xor: logic on bools, bitwise on integers; both operands of one type."""
    a, b = tensor(ops[0], "left operand"), tensor(ops[1], "right operand")
    if a.dtype.is_float or b.dtype.is_float or a.dtype is not b.dtype:
        raise TypeRuleError(
            f"operands must be bools or integers of one type, found {a.dtype} and {b.dtype}"
        )
    return tensor_type(_broadcast(a, b), a.dtype)


def unary_logic(ops: list[Type], attrs: dict[str, Any]) -> Type:
    t = tensor(ops[0])
    if t.dtype.is_float:
        raise TypeRuleError(f"operand must be bool or an integer, found {t.dtype}")
    return ops[0]


def binary_int(ops: list[Type], attrs: dict[str, Any]) -> Type:
    a, b = tensor(ops[0], "left operand"), tensor(ops[1], "right operand")
    _same_dtype(a, b)
    if not a.dtype.is_int:
        raise TypeRuleError(f"operands must be integers, found {a.dtype}")
    return tensor_type(_broadcast(a, b), a.dtype)


def compare(ops: list[Type], attrs: dict[str, Any]) -> Type:
    a, b = tensor(ops[0], "left operand"), tensor(ops[1], "right operand")
    _same_dtype(a, b)
    return tensor_type(_broadcast(a, b), DataType.BOOL)


def compare_ordered(ops: list[Type], attrs: dict[str, Any]) -> Type:
    result = compare(ops, attrs)
    if tensor(ops[0]).dtype.base is _BOOL:
        raise TypeRuleError("ordered comparison needs numeric operands")
    return result


def select(ops: list[Type], attrs: dict[str, Any]) -> Type:
    a, b, flags = tensor(ops[0]), tensor(ops[1]), tensor(ops[2], "flags")
    _same_dtype(a, b)
    if flags.dtype.base is not _BOOL:
        raise TypeRuleError(f"select flags must be bool, found {flags.dtype}")
    return tensor_type(_broadcast(a, b, flags), a.dtype)


# Casts and shapes --------------------------------------------------------------------------


def data_type_cast(ops: list[Type], attrs: dict[str, Any]) -> Type:
    t = tensor(ops[0])
    to: DataType = attrs["dtype"]
    if not t.dtype.can_cast_to(to):
        raise TypeRuleError(
            f"cannot cast {t.dtype} to {to} (within one base; only floats may narrow)"
        )
    return tensor_type(t.shape, to)


def convert(ops: list[Type], attrs: dict[str, Any]) -> Type:
    """Any data type to any other, across bases (docs/ir.md, "convert")."""
    t = tensor(ops[0])
    return tensor_type(t.shape, attrs["dtype"])


def bit_cast(ops: list[Type], attrs: dict[str, Any]) -> Type:
    src, dst = canonical(ops[0]), canonical(attrs["type"])
    if isinstance(src, TensorType) and isinstance(dst, TensorType):
        bits = src.unit_count * src.dtype.bits, dst.unit_count * dst.dtype.bits
        if bits[0] != bits[1]:
            raise TypeRuleError(
                f"cannot bit-cast {ops[0]} ({bits[0]} bits) to {attrs['type']} ({bits[1]} bits)"
            )
    return attrs["type"]


def dot(ops: list[Type], attrs: dict[str, Any]) -> Type:
    a, b = tensor(ops[0], "left operand"), tensor(ops[1], "right operand")
    _same_dtype(a, b)
    if a.dtype.base is _BOOL:
        raise TypeRuleError("operands must be numeric")
    if a.rank == 1 and b.rank == 1:
        if a.shape != b.shape:
            raise TypeRuleError(f"vectors must have equal shapes, found {a} and {b}")
        return tensor_type((), a.dtype)
    if a.rank < 2 or a.rank != b.rank:
        raise TypeRuleError(f"operands must have equal rank >= 2, found {a} and {b}")
    if a.shape[:-2] != b.shape[:-2]:
        raise TypeRuleError(f"batch dimensions differ: {a} and {b}")
    if a.shape[-1] != b.shape[-2]:
        raise TypeRuleError(
            f"inner dimensions differ: {a} has {a.shape[-1]} columns, {b} has {b.shape[-2]} rows"
        )
    return tensor_type(a.shape[:-1] + (b.shape[-1],), a.dtype)


def transpose(ops: list[Type], attrs: dict[str, Any]) -> Type:
    t = tensor(ops[0])
    return tensor_type(tuple(reversed(t.shape)), t.dtype)


def reverse(ops: list[Type], attrs: dict[str, Any]) -> Type:
    t = tensor(ops[0])
    _check_dims(attrs["dims"], t.rank)
    return ops[0]


def concatenate(ops: list[Type], attrs: dict[str, Any]) -> Type:
    if not ops:
        raise TypeRuleError("concatenate needs at least one operand")
    ts = [tensor(o) for o in ops]
    axis: int = attrs["axis"]
    first = ts[0]
    if not 0 <= axis < first.rank:
        raise TypeRuleError(f"axis {axis} is out of range for rank {first.rank}")
    total = 0
    for t in ts:
        _same_dtype(first, t)
        if t.rank != first.rank or any(
            x != y for i, (x, y) in enumerate(zip(t.shape, first.shape)) if i != axis
        ):
            raise TypeRuleError(f"cannot concatenate {first} and {t} along {axis}")
        total += t.shape[axis]
    shape = list(first.shape)
    shape[axis] = total
    return tensor_type(tuple(shape), first.dtype)


def slice_(ops: list[Type], attrs: dict[str, Any]) -> Type:
    t = tensor(ops[0])
    lo, hi = attrs["lo"], attrs["hi"]
    if t.rank == 0:
        raise TypeRuleError("cannot slice a scalar")
    if not 0 <= lo <= hi < t.shape[0]:
        raise TypeRuleError(f"slice range {lo} upto {hi} is out of bounds for {t}")
    return tensor_type((hi - lo + 1,) + t.shape[1:], t.dtype)


def _indices(ty: Type) -> TensorType:
    ids = tensor(ty, "indices")
    if not ids.dtype.is_int:
        raise TypeRuleError(f"indices must be integers, found {ids.dtype}")
    return ids


def _taken_shape(t: TensorType, ids: TensorType, axis: int) -> tuple[int, ...]:
    """The shape of `gather t at ids along axis`: t's dimension `axis` replaced by ids' shape."""
    if not 0 <= axis < t.rank:
        raise TypeRuleError(f"axis {axis} is out of range for rank {t.rank}")
    return t.shape[:axis] + ids.shape + t.shape[axis + 1 :]


def gather(ops: list[Type], attrs: dict[str, Any]) -> Type:
    t, ids = tensor(ops[0]), _indices(ops[1])
    return tensor_type(_taken_shape(t, ids, attrs["axis"]), t.dtype)


def scatter_add(ops: list[Type], attrs: dict[str, Any]) -> Type:
    updates, ids, base = tensor(ops[0]), _indices(ops[1]), tensor(ops[2], "base")
    _same_dtype(updates, base)
    if not base.dtype.is_numeric:
        raise TypeRuleError(f"scatterAdd needs numeric data, found {base.dtype}")
    shape = _taken_shape(base, ids, attrs["axis"])
    if updates.shape != shape:
        want = tensor_type(shape, base.dtype)
        raise TypeRuleError(
            f"updates must have type {want} to scatter into {base}, found {updates}"
        )
    return base


@cache
def _declared_ops() -> dict[str, Any]:
    from dlvm.ir.ops import OPS  # ops.py imports this module: bound at the first use

    return OPS


def _combinator(comb: Any, dtype: DataType) -> None:
    if isinstance(comb, str):
        op = _declared_ops().get(comb)
        if op is None or op.family not in ("binary", "boolean"):
            raise TypeRuleError(f"'{comb}' is not a binary operation")
        if op.family == "boolean" and dtype.base is not _BOOL:
            raise TypeRuleError(f"combinator '{comb}' needs bool data, found {dtype}")
        if op.family == "binary" and dtype.base is _BOOL:
            raise TypeRuleError(f"combinator '{comb}' needs numeric data, found {dtype}")
        return
    fty = canonical(comb.type)
    s = TensorType((), dtype)
    if not (
        isinstance(fty, FunctionType)
        and len(fty.arguments) == 2
        and all(same_type(a, s) for a in fty.arguments)
        and same_type(fty.result, s)
    ):
        raise TypeRuleError(f"combinator must have type ({s}, {s}) -> {s}, found {comb.type}")


def _init(ty: Type, dtype: DataType) -> None:
    t = tensor(ty, "init")
    if t.shape or t.dtype is not dtype:
        raise TypeRuleError(f"init must be a scalar {dtype}, found {ty}")


def reduce(ops: list[Type], attrs: dict[str, Any]) -> Type:
    t = tensor(ops[0])
    _combinator(attrs["comb"], t.dtype)
    _init(ops[1], t.dtype)
    dims = attrs["dims"]
    _check_dims(dims, t.rank)
    return tensor_type(tuple(d for i, d in enumerate(t.shape) if i not in dims), t.dtype)


def scan(ops: list[Type], attrs: dict[str, Any]) -> Type:
    t = tensor(ops[0])
    _combinator(attrs["comb"], t.dtype)
    _check_dims(attrs["dims"], t.rank)
    return ops[0]


def reduce_window(ops: list[Type], attrs: dict[str, Any]) -> Type:
    t = tensor(ops[0])
    if not t.shape:
        raise TypeRuleError("reduceWindow needs a tensor of rank 1 or more, not a scalar")
    _combinator(attrs["comb"], t.dtype)
    _init(ops[1], t.dtype)
    dims, strides, mode = attrs["dims"], attrs["strides"], attrs["padding"]
    if len(dims) != t.rank or len(strides) != t.rank:
        raise TypeRuleError(f"window dims and strides need {t.rank} entries (the rank)")
    if any(d <= 0 for d in dims) or any(s <= 0 for s in strides):
        raise TypeRuleError("window dims and strides must be positive")
    return t.with_shape(
        tuple(window_count(n, d, s, mode) for n, d, s in zip(t.shape, dims, strides))
    )


def convolve(ops: list[Type], attrs: dict[str, Any]) -> Type:
    x, k = tensor(ops[0], "input"), tensor(ops[1], "kernel")
    _same_dtype(x, k)
    if x.rank < 3 or x.rank != k.rank:
        raise TypeRuleError(f"convolve needs input and kernel of equal rank >= 3, found {x}, {k}")
    n = x.rank - 2
    strides = attrs.get("strides") or (1,) * n
    padding = attrs.get("padding") or ((0, 0),) * n
    ld = attrs.get("leftDilation") or (1,) * n
    rd = attrs.get("rightDilation") or (1,) * n
    groups = attrs.get("groups") or 1
    for name, lst in (("strides", strides), ("padding", padding), ("leftDilation", ld)):
        if len(lst) != n:
            raise TypeRuleError(f"{name} needs {n} entries, found {len(lst)}")
    if len(rd) != n:
        raise TypeRuleError(f"rightDilation needs {n} entries, found {len(rd)}")
    if any(s < 1 for s in strides) or any(d < 1 for d in ld + rd):
        raise TypeRuleError("strides and dilations must be positive")
    if any(lo < 0 or hi < 0 for lo, hi in padding):
        raise TypeRuleError("padding must not be negative")
    # Truncating division, as in the original DLVM (its convolve.dl relies on 10 // 6 == 1).
    if not 1 <= groups <= k.shape[0] or x.shape[1] // groups != k.shape[1]:
        raise TypeRuleError(
            f"input channels {x.shape[1]} / groups {groups} must equal kernel channels {k.shape[1]}"
        )
    out = [x.shape[0], (k.shape[0] // groups) * groups]
    for i in range(n):
        base = (x.shape[i + 2] - 1) * ld[i] + 1
        padded = padding[i][0] + base + padding[i][1]
        win = (k.shape[i + 2] - 1) * rd[i] + 1
        out.append(0 if win > padded else (padded - win) // strides[i] + 1)
    return x.with_shape(tuple(out))


def pad_shape(ops: list[Type], attrs: dict[str, Any]) -> Type:
    t = tensor(ops[0])
    i = attrs["index"]
    if not 0 <= i <= t.rank:
        raise TypeRuleError(f"padShape index {i} is out of range for rank {t.rank}")
    return tensor_type(t.shape[:i] + (1,) + t.shape[i:], t.dtype)


def squeeze_shape(ops: list[Type], attrs: dict[str, Any]) -> Type:
    t = tensor(ops[0])
    i = attrs["index"]
    if not 0 <= i < t.rank or t.shape[i] != 1:
        raise TypeRuleError(f"squeezeShape index {i} must name a dimension of size 1 in {t}")
    return tensor_type(t.shape[:i] + t.shape[i + 1 :], t.dtype)


def shape_cast(ops: list[Type], attrs: dict[str, Any]) -> Type:
    t = tensor(ops[0])
    shape = attrs["shape"]
    new = tensor_type(tuple(shape), t.dtype)
    if new.unit_count != t.unit_count:
        raise TypeRuleError(f"cannot cast {t} to {shape_text(shape)}: element counts differ")
    return new


def random(ops: list[Type], attrs: dict[str, Any]) -> Type:
    lo, hi = tensor(ops[0], "lower bound"), tensor(ops[1], "upper bound")
    _same_dtype(lo, hi)
    if lo.shape or hi.shape or lo.dtype.base is _BOOL:
        raise TypeRuleError("random bounds must be numeric scalars")
    return TensorType(attrs["shape"], lo.dtype)


def rank_of(ops: list[Type], attrs: dict[str, Any]) -> Type:
    tensor(ops[0])
    return I64


def shape_of(ops: list[Type], attrs: dict[str, Any]) -> Type:
    t = tensor(ops[0])
    if not t.rank:
        raise TypeRuleError("a scalar has no shape to take (its rank is 0)")
    return tensor_type((t.rank,), DataType.I64)


def unit_count_of(ops: list[Type], attrs: dict[str, Any]) -> Type:
    tensor(ops[0])
    return I64


def literal(ops: list[Type], attrs: dict[str, Any]) -> Type:
    return ops[0]


# Aggregates ----------------------------------------------------------------------------------


def element_type(ty: Type, key: ElementKey) -> Type:
    """The type at one key of an aggregate (tuple, struct, tensor, array, pointer)."""
    t = canonical(ty)
    if key.value is not None:
        kt = canonical(key.value.type)
        if not (isinstance(kt, TensorType) and not kt.shape and kt.dtype.base is _INT):
            raise TypeRuleError(f"a value key must be an integer scalar, found {key.value.type}")
    if isinstance(t, StructType):
        if key.field is None:
            raise TypeRuleError(f"a struct {ty} needs a #field key")
        ft = t.field_type(key.field)
        if ft is None:
            raise TypeRuleError(f"struct {ty} has no field #{key.field}")
        return ft
    if key.field is not None:
        raise TypeRuleError(f"#{key.field} can only index a struct, not {ty}")
    if isinstance(t, TupleType):
        if key.index is None:
            raise TypeRuleError(f"a tuple {ty} needs an integer key")
        if not 0 <= key.index < len(t.elements):
            raise TypeRuleError(f"index {key.index} is out of range for {ty}")
        return t.elements[key.index]
    if isinstance(t, TensorType):
        if not t.shape:
            raise TypeRuleError("cannot index a scalar")
        if key.index is not None and not 0 <= key.index < t.shape[0]:
            raise TypeRuleError(f"index {key.index} is out of range for {ty}")
        return t.with_shape(t.shape[1:])
    if isinstance(t, ArrayType):
        if key.index is not None and not 0 <= key.index < t.count:
            raise TypeRuleError(f"index {key.index} is out of range for {ty}")
        return t.element
    if isinstance(t, PointerType):
        return t.pointee
    raise TypeRuleError(f"cannot index into {ty}")


def _walk_keys(ty: Type, keys: tuple[ElementKey, ...]) -> Type:
    if not keys:
        raise TypeRuleError("at least one key is needed")
    for k in keys:
        ty = element_type(ty, k)
    return ty


def extract(ops: list[Type], attrs: dict[str, Any]) -> Type:
    return _walk_keys(ops[0], attrs["keys"])


def insert(ops: list[Type], attrs: dict[str, Any]) -> Type:
    elt = _walk_keys(ops[1], attrs["keys"])
    if not same_type(elt, ops[0]):
        raise TypeRuleError(f"inserted value has type {ops[0]}, the destination holds {elt}")
    return ops[1]


def apply(ops: list[Type], attrs: dict[str, Any]) -> Type:
    fty = canonical(ops[0])
    if isinstance(fty, PointerType):
        fty = canonical(fty.pointee)
    if not isinstance(fty, FunctionType):
        raise TypeRuleError(f"callee must be a function, found {ops[0]}")
    args = ops[1:]
    if len(args) != len(fty.arguments):
        raise TypeRuleError(
            f"callee takes {_count(len(fty.arguments), 'argument')}, {len(args)} given"
        )
    for i, (a, p) in enumerate(zip(args, fty.arguments)):
        if not same_type(a, p):
            raise TypeRuleError(f"argument {i} has type {a}, the callee expects {p}")
    return fty.result


# Stack and memory ----------------------------------------------------------------------------


def void(ops: list[Type], attrs: dict[str, Any]) -> Type:
    return VOID


def terminator(ops: list[Type], attrs: dict[str, Any]) -> Type:
    return VOID


def conditional(ops: list[Type], attrs: dict[str, Any]) -> Type:
    if not same_type(ops[0], BOOL):
        raise TypeRuleError(f"condition must be bool, found {ops[0]}")
    return VOID


def branch_enum(ops: list[Type], attrs: dict[str, Any]) -> Type:
    t = canonical(ops[0])
    if not isinstance(t, EnumType):
        raise TypeRuleError(f"branchEnum needs an enum value, found {ops[0]}")
    for case, _ in attrs["cases"]:
        if t.case_types(case) is None:
            raise TypeRuleError(f"enum {ops[0]} has no case ?{case}")
    return VOID


def create_stack(ops: list[Type], attrs: dict[str, Any]) -> Type:
    return STACK


def _stack(ty: Type) -> None:
    if not isinstance(canonical(ty), StackType):
        raise TypeRuleError(f"expected a stack, found {ty}")


def destroy_stack(ops: list[Type], attrs: dict[str, Any]) -> Type:
    _stack(ops[0])
    return VOID


def push(ops: list[Type], attrs: dict[str, Any]) -> Type:
    _stack(ops[1])
    return VOID


def pop(ops: list[Type], attrs: dict[str, Any]) -> Type:
    _stack(ops[0])
    return attrs["type"]


def allocate_stack(ops: list[Type], attrs: dict[str, Any]) -> Type:
    count, ty = attrs["count"], attrs["type"]
    if count <= 0:
        raise TypeRuleError("allocation count must be positive")
    if count * max(byte_size(ty), 1) > MAX_TENSOR_BYTES:
        raise TypeRuleError(
            f"{count} values of type {ty} take more than the 2^62 - 1 bytes allowed"
        )
    return PointerType(ty)


def allocate_heap(ops: list[Type], attrs: dict[str, Any]) -> Type:
    if not same_type(ops[0], I64):
        raise TypeRuleError(f"allocation count must be i64, found {ops[0]}")
    return PointerType(attrs["type"])


def allocate_box(ops: list[Type], attrs: dict[str, Any]) -> Type:
    return BoxType(attrs["type"])


def _box(ty: Type) -> BoxType:
    t = canonical(ty)
    if not isinstance(t, BoxType):
        raise TypeRuleError(f"expected a box, found {ty}")
    return t


def project_box(ops: list[Type], attrs: dict[str, Any]) -> Type:
    return PointerType(_box(ops[0]).content)


def box_refcount(ops: list[Type], attrs: dict[str, Any]) -> Type:
    _box(ops[0])
    return VOID


def deallocate(ops: list[Type], attrs: dict[str, Any]) -> Type:
    if not isinstance(canonical(ops[0]), (PointerType, BoxType)):
        raise TypeRuleError(f"can only deallocate a pointer or a box, found {ops[0]}")
    return VOID


def _pointer(ty: Type) -> PointerType:
    t = canonical(ty)
    if not isinstance(t, PointerType):
        raise TypeRuleError(f"expected a pointer, found {ty}")
    return t


def load(ops: list[Type], attrs: dict[str, Any]) -> Type:
    return _pointer(ops[0]).pointee


def store(ops: list[Type], attrs: dict[str, Any]) -> Type:
    p = _pointer(ops[1])
    if not same_type(p.pointee, ops[0]):
        raise TypeRuleError(f"cannot store {ops[0]} to {ops[1]}")
    return VOID


def element_pointer(ops: list[Type], attrs: dict[str, Any]) -> Type:
    _pointer(ops[0])
    return PointerType(_walk_keys(ops[0], attrs["keys"]))


def copy(ops: list[Type], attrs: dict[str, Any]) -> Type:
    src, dst = _pointer(ops[0]), _pointer(ops[1])
    if not same_type(src, dst):
        raise TypeRuleError(f"copy needs equal pointer types, found {ops[0]} and {ops[1]}")
    if not same_type(ops[2], I64):
        raise TypeRuleError(f"copy count must be i64, found {ops[2]}")
    return VOID


# Literals ------------------------------------------------------------------------------------


def _check_scalar_literal(lit: ScalarLiteral, t: TensorType) -> None:
    dt = t.dtype
    if fits(lit.value, dt):
        return
    why = ""
    if dt.is_int and isinstance(lit.value, int) and not isinstance(lit.value, bool):
        half = 1 << (dt.bits - 1)
        why = f" ({-half} to {half - 1})"
    elif dt.is_float and isinstance(lit.value, int):
        why = " (an integer past the range of f64)"
    raise TypeRuleError(f"literal {lit} does not fit data type {dt}{why}")


def _check_dense_literal(lit: DenseLiteral, ty: Type) -> None:
    """A dense literal holds exactly its tensor type's bytes; a bool's are each 0 or 1."""
    t = canonical(ty)
    if not isinstance(t, TensorType) or not t.shape:  # a scalar has its own literal
        raise TypeRuleError(f"a dense literal needs a tensor type with dimensions, found {ty}")
    size = t.unit_count * t.dtype.size
    if len(lit.data) != size:
        raise TypeRuleError(f"dense literal has {_count(len(lit.data), 'byte')}, {ty} needs {size}")
    if t.dtype.is_bool and lit.data.translate(None, b"\x00\x01"):
        raise TypeRuleError("a dense literal of bools has a byte other than 00 or 01")


def check_literal_operand(value: Any, aggregate_ok: bool) -> None:
    """Checks that a literal use fits its type; outside `literal`, only scalars may appear."""
    lit, ty = value.literal, value.type
    # The common case directly: a scalar literal with a tensor type it may have here.
    if (
        lit.__class__ is ScalarLiteral
        and ty.__class__ is TensorType
        and (aggregate_ok or not ty.shape)
    ):
        _check_scalar_literal(lit, ty)
        return
    t = canonical(ty)
    dense = isinstance(lit, DenseLiteral)
    if not aggregate_ok and (dense or lit.elements() or (isinstance(t, TensorType) and t.shape)):
        raise TypeRuleError(
            f"only 'literal' may take the non-scalar literal {literal_brief(lit)}: {ty}; "
            "define it with a literal instruction"
        )
    if dense:
        _check_dense_literal(lit, ty)
        return
    if isinstance(lit, ScalarLiteral):
        if not isinstance(t, TensorType):
            raise TypeRuleError(f"scalar literal {lit} cannot have type {ty}")
        _check_scalar_literal(lit, t)
        return
    # Only a special literal can spell one of these words (str() of an aggregate would write
    # out every element).
    word = str(lit) if isinstance(lit, SpecialLiteral) else ""
    if word == "undefined":
        return
    if word == "zero":
        if not isinstance(t, (TensorType, TupleType, ArrayType, StructType)):
            raise TypeRuleError(f"zero cannot have type {ty}")
        return
    if word == "null":
        if not isinstance(t, (PointerType, BoxType, FunctionType)):
            raise TypeRuleError(f"null needs a pointer or box type, found {ty}")
        return

    def expect(elements: tuple, count: int, type_at: Callable[[int], Type]) -> None:
        """The elements against their types, the i-th of type type_at(i). A type may declare
        far more elements than memory holds (`<300000000 x f32>`): they are never listed."""
        if len(elements) != count:
            raise TypeRuleError(
                f"literal has {_count(len(elements), 'element')}, {ty} needs {count}"
            )
        for i, e in enumerate(elements):
            et = type_at(i)
            if not same_type(e.type, et):
                raise TypeRuleError(f"element {e.ref_text()} has type {e.type}, expected {et}")
            if isinstance(e, LiteralValue):
                check_literal_operand(e, aggregate_ok=True)

    if isinstance(lit, AggregateLiteral):
        if lit.kind == "tensor":
            if not isinstance(t, TensorType) or not t.shape:
                raise TypeRuleError(f"a tensor literal needs a tensor type, found {ty}")
            row = tensor_type(t.shape[1:], t.dtype)
            expect(lit.items, t.shape[0], lambda _: row)
        elif lit.kind == "tuple":
            if not isinstance(t, TupleType):
                raise TypeRuleError(f"a tuple literal needs a tuple type, found {ty}")
            expect(lit.items, len(t.elements), t.elements.__getitem__)
        else:
            if not isinstance(t, ArrayType):
                raise TypeRuleError(f"an array literal needs an array type, found {ty}")
            element = t.element
            expect(lit.items, t.count, lambda _: element)
    elif isinstance(lit, StructLiteral):
        if not isinstance(t, StructType):
            raise TypeRuleError(f"a struct literal needs a struct type, found {ty}")
        names = [n for n, _ in lit.fields]
        if names != [n for n, _ in t.fields]:
            raise TypeRuleError(f"struct literal fields must be those of {ty}, in order")
        fields = [ft for _, ft in t.fields]
        expect(lit.elements(), len(fields), fields.__getitem__)
    elif isinstance(lit, EnumLiteral):
        if not isinstance(t, EnumType):
            raise TypeRuleError(f"an enum literal needs an enum type, found {ty}")
        types = t.case_types(lit.case)
        if types is None:
            raise TypeRuleError(f"enum {ty} has no case ?{lit.case}")
        expect(lit.items, len(types), types.__getitem__)


# Gradient declarations -----------------------------------------------------------------------


def gradient_type(
    of: FunctionType,
    source: int | None,
    wrt: tuple[int, ...] | None,
    keeping: tuple[int, ...],
    seedable: bool,
) -> FunctionType:
    """The type `[gradient @f from S wrt … keeping … seedable]` must declare (docs/ir.md, "Textual
    format"): `(args… [, seed]) -> (d_wrt…, kept…)`, derivatives first, always a tuple."""
    from dlvm.ir.types import is_differentiable

    result = canonical(of.result)
    if isinstance(result, TupleType) and result.elements:
        if source is None:
            raise TypeRuleError(
                f"the function returns a tuple {of.result}; say which element "
                "to differentiate with 'from'"
            )
        if not 0 <= source < len(result.elements):
            raise TypeRuleError(f"'from {source}' is out of range for {of.result}")
        src = result.elements[source]
        outputs = list(result.elements)
    else:
        if source is not None:
            raise TypeRuleError(f"'from' needs a tuple result, the function returns {of.result}")
        src = of.result
        outputs = [of.result]
    if not is_differentiable(src):
        raise TypeRuleError(f"the differentiated result {src} is not a float tensor")
    if len(set(keeping)) != len(keeping):
        raise TypeRuleError("'keeping' repeats an index")
    for k in keeping:
        if not 0 <= k < len(outputs):
            raise TypeRuleError(f"'keeping {k}' is out of range for {of.result}")
    args = of.arguments
    indices = tuple(range(len(args))) if wrt is None else wrt
    if len(set(indices)) != len(indices):
        raise TypeRuleError("'wrt' repeats an index")
    for i in indices:
        if not 0 <= i < len(args):
            raise TypeRuleError(
                f"'wrt {i}' is out of range: the function takes {_count(len(args), 'argument')}"
            )
        if not is_differentiable(args[i]):
            raise TypeRuleError(f"argument {i} has type {args[i]}, which is not differentiable")
    params = tuple(args) + ((src,) if seedable else ())
    return FunctionType(
        params, TupleType(tuple(args[i] for i in indices) + tuple(outputs[k] for k in keeping))
    )
