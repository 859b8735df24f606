"""What a TEL expression elaborates to: a typed IR value (TV), a compile-time function (FnRef),
a shape (ShapeVal), or POISON after an error has been reported."""

from __future__ import annotations

from dataclasses import dataclass, field

from dlvm.ir.builder import constant
from dlvm.ir.types import BOOL, DataType, TensorType, Type
from dlvm.ir.values import Value
from telc import ast


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
        """The IR value; a weak or constant scalar becomes a literal of `dtype` (default its "
        "own)."""
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
    unit: object  # telc.program.Unit of the function
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
