"""What a TEL expression elaborates to: a typed IR value (TV), a compile-time function (FnRef),
a shape (ShapeVal), or POISON after an error has been reported; and how messages show them."""

from __future__ import annotations

from dataclasses import dataclass, field

from dlvm.ir.builder import constant
from dlvm.ir.types import BOOL, DataType, TensorType, TupleType, Type
from dlvm.ir.values import Value
from telc import ast
from telc.program import Unit
from telc.types import fits, shape_str


@dataclass
class TV:
    """A typed value. `weak` numbers (literals, dims, consts) have no IR value until they meet
    a tensor and take its element type; `const` is the value known at compile time, if any.
    `sym` is the shape as the user wrote it (`('B', 64)`), for messages."""

    ty: Type
    value: Value | None = None
    weak: bool = False
    const: int | float | bool | None = None
    sym: tuple[int | str, ...] | None = None

    @property
    def tensor(self) -> TensorType | None:
        return self.ty if isinstance(self.ty, TensorType) else None

    @property
    def shape(self) -> tuple[int, ...]:
        assert isinstance(self.ty, TensorType)
        return self.ty.shape

    @property
    def dtype(self) -> DataType:
        assert isinstance(self.ty, TensorType)
        return self.ty.dtype

    def ir(self, dtype: DataType | None = None) -> Value:
        """The IR value; a weak or constant scalar becomes a literal of `dtype` (default its
        own)."""
        if self.value is not None and not (self.weak and dtype is not None):
            return self.value
        assert self.const is not None, "a value without IR form or constant"
        t = self.tensor
        dt = dtype or (t.dtype if t is not None else DataType.F32)
        value = self.const
        if dt.is_float and not isinstance(value, bool):
            value = value if isinstance(value, float) else int(value)
        return constant(value, TensorType((), dt))


def number(value: int | float, default_float: DataType) -> TV:
    """A weak number: an integer is i64 and a decimal the module's float type until used."""
    if isinstance(value, bool):
        return TV(BOOL, const=value)
    dt = DataType.I64 if isinstance(value, int) else default_float
    return TV(TensorType((), dt), weak=True, const=value)


def int_const(tv: TV) -> int | None:
    """The value of a scalar integer known at compile time (not a bool or a float), else None."""
    c = tv.const
    if c is None or isinstance(c, bool | float) or tv.shape:
        return None
    return int(c)


@dataclass
class GradSpec:
    """`grad(f, wrt: …, keeping: …, seed: …)` before it is called."""

    wrt: list[ast.Expr] | None  # names or positions; None: every float argument
    single: bool  # `wrt: x` rather than `wrt: (x, y)`: the result is not a tuple
    keeping: bool
    seed: TV | None


@dataclass
class FnRef:
    """A function known at compile time: a `def`, or the gradient of one."""

    function: ast.Function
    unit: Unit  # the file that defines the function
    grad: GradSpec | None = None
    span: ast.Span | None = field(default=None, compare=False)


@dataclass
class ShapeVal:
    """A shape written in an expression (`shape: [N x M]`)."""

    shape: tuple[int, ...]


class _Poison:
    """The result of an expression whose error has been reported; using it reports nothing."""

    def __repr__(self) -> str:
        return "POISON"


POISON = _Poison()

Elaborated = TV | FnRef | ShapeVal | _Poison


# Messages ------------------------------------------------------------------------------------


def show(ty: Type) -> str:
    """A type for messages: `f32[32 x 64]`, `f32` for a scalar."""
    if isinstance(ty, TensorType):
        return ty.dtype.text + (shape_str(ty.shape) if ty.shape else "")
    if isinstance(ty, TupleType):
        return "(" + ", ".join(show(t) for t in ty.elements) + ")"
    return str(ty)


def describe(x: Elaborated) -> str:
    """What an elaborated expression is, for messages (`the function 'f'`, `f32[3]`)."""
    if isinstance(x, FnRef):
        return f"the function '{x.function.name}'"
    if isinstance(x, ShapeVal):
        return f"the shape {shape_str(x.shape)}"
    if isinstance(x, TV):
        if x.weak:
            return f"the number {x.const}"
        return show(x.ty)
    return "an invalid value"


def shape_of(tv: TV) -> str:
    """A tensor's shape for messages, with the dimension names it was written with."""
    if tv.sym is not None and len(tv.sym) == len(tv.shape):
        return shape_str(tv.sym)
    return shape_str(tv.shape)


def weak_misfit(tv: TV, dtype: DataType) -> str | None:
    """Why a weak number cannot take the element type dtype (None when it can): the kinds
    differ ("kind"), or the number is out of the type's range."""
    c = tv.const
    if isinstance(c, bool):
        return None if dtype.is_bool else "kind"
    if c is None or not dtype.is_numeric or (isinstance(c, float) and not dtype.is_float):
        return "kind"
    if not fits(c, dtype):
        return f"the number {c} does not fit in {dtype}"
    return None
