"""Symbolic tensors of NNKit: what a staged Python function computes on, each one a value of the
DLVM IR function being built. Operators and the built-ins (dlvm.nnkit.builtins) emit IR
instructions through the builder, their types checked by the instructions' own rules; a misfit
is a StagingError located at the user's line of Python."""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Self

from dlvm.diagnostics import Diagnostic, DiagnosticError, Location, Source
from dlvm.ir.builder import Builder, constant
from dlvm.ir.typerules import TypeRuleError
from dlvm.ir.types import DataType, TensorType
from dlvm.ir.values import Value

if TYPE_CHECKING:
    from dlvm.nnkit.staging import Staging

_HERE = os.path.dirname(os.path.abspath(__file__))


class StagingError(DiagnosticError, TypeError):
    """A staged function does not type-check: shapes or element types that do not fit, located
    at the line of the user's Python source that staged the offending operation."""


def user_location() -> Location | None:
    """The innermost frame outside dlvm.nnkit: the user's line that is being staged."""
    frame = inspect.currentframe()
    while frame is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == _HERE:
        frame = frame.f_back
    if frame is None:
        return None
    path, line = frame.f_code.co_filename, frame.f_lineno
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines(keepends=True)
    except OSError:
        return None
    if not 0 < line <= len(lines):
        return None
    body = lines[line - 1].rstrip("\r\n")
    offset = sum(len(x) for x in lines[: line - 1]) + len(body) - len(body.lstrip())
    return Location(Source(path, "".join(lines)), offset, max(1, len(body.strip())))


def staging_error(message: str) -> StagingError:
    return StagingError([Diagnostic(message, user_location())])


@dataclass(frozen=True)
class TensorSpec:
    """The type an annotation `Tensor[f32, 1, 784]` gives an argument."""

    dtype: DataType
    shape: tuple[int, ...]

    @property
    def ir(self) -> TensorType:
        return TensorType(self.shape, self.dtype)


class Tensor:
    """A symbolic tensor while a function is staged, an instance of the class of its element
    type (`f32`, …, below); `Tensor[f32, 1, 784]` as an annotation.

    For a static type checker `Tensor` is `typing.Annotated` (dlvm.nnkit says so), so that
    `Tensor[f32, 1, 784]` is the type `f32` with its shape as metadata: the operators below,
    typed on `Self`, then let a checker reject mixed element types (`f32 + f64`) and
    non-tensors, while shapes are checked when the function is staged."""

    __array_priority__ = 1000  # NumPy defers to our operators: `2.0 * x` stays symbolic
    element: ClassVar[DataType | None] = None  # of the classes f32, …

    def __new__(cls, value: Value, staging: Staging) -> Tensor:
        t = value.type
        if cls is Tensor and isinstance(t, TensorType):
            # a new tensor is an instance of its element type's class
            return object.__new__(ELEMENT_CLASSES.get(t.dtype, Tensor))
        return object.__new__(cls)

    def __init__(self, value: Value, staging: Staging) -> None:
        self.value = value
        self.staging = staging

    def __class_getitem__(cls, params: Any) -> TensorSpec:
        params = params if isinstance(params, tuple) else (params,)
        dtype, *shape = params
        element = getattr(dtype, "element", None)
        if not isinstance(element, DataType) or not all(
                isinstance(d, int) and not isinstance(d, bool) for d in shape):  # fmt: skip
            raise TypeError("annotate tensors as Tensor[dtype, dim, …], e.g. Tensor[f32, 1, 784]")
        return TensorSpec(element, tuple(shape))

    @property
    def type(self) -> TensorType:
        t = self.value.type
        assert isinstance(t, TensorType)
        return t

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> DataType:
        return self.type.dtype

    def __repr__(self) -> str:
        return f"<staged tensor {self.type}>"

    # Emitting ----------------------------------------------------------------------------------

    def lift(self, other: Any) -> Tensor:
        """A Python number as a scalar of this tensor's element type; a Tensor as it is."""
        if isinstance(other, Tensor):
            return other
        if isinstance(other, bool | int | float):
            return Tensor(constant(other, TensorType((), self.dtype)), self.staging)
        raise staging_error(f"cannot combine a staged tensor with {type(other).__name__}")

    def emit(self, opname: str, *operands: Any, **attrs: Any) -> Tensor:
        return self.staging.emit(opname, [self.lift(o).value for o in operands], **attrs)

    def same(self, opname: str, *operands: Any, **attrs: Any) -> Self:
        """An instruction whose result has this tensor's element type."""
        result = self.emit(opname, *operands, **attrs)
        assert isinstance(result, type(self))
        return result

    def test(self, opname: str, *operands: Any) -> bool_:
        """A comparison: a bool tensor."""
        result = self.emit(opname, *operands)
        assert isinstance(result, bool_)
        return result

    # Operators ---------------------------------------------------------------------------------

    def __add__(self, other: Self | float) -> Self:
        return self.same("add", self, other)

    def __radd__(self, other: float) -> Self:
        return self.same("add", other, self)

    def __sub__(self, other: Self | float) -> Self:
        return self.same("subtract", self, other)

    def __rsub__(self, other: float) -> Self:
        return self.same("subtract", other, self)

    def __mul__(self, other: Self | float) -> Self:
        return self.same("multiply", self, other)

    def __rmul__(self, other: float) -> Self:
        return self.same("multiply", other, self)

    def __truediv__(self, other: Self | float) -> Self:
        return self.same("divide", self, other)

    def __rtruediv__(self, other: float) -> Self:
        return self.same("divide", other, self)

    def __pow__(self, other: Self | float) -> Self:
        return self.same("power", self, other)

    def __neg__(self) -> Self:
        return self.same("negate", self)

    def __matmul__(self, other: Self) -> Self:
        return self.same("dot", self, other)

    def __rmatmul__(self, other: Self) -> Self:
        return self.same("dot", other, self)

    # Comparisons give bool tensors (== and != keep Python's meaning: identity).
    def __lt__(self, other: Self | float) -> bool_:
        return self.test("lessThan", self, other)

    def __le__(self, other: Self | float) -> bool_:
        return self.test("lessThanOrEqual", self, other)

    def __gt__(self, other: Self | float) -> bool_:
        return self.test("greaterThan", self, other)

    def __ge__(self, other: Self | float) -> bool_:
        return self.test("greaterThanOrEqual", self, other)

    __hash__ = object.__hash__

    @property
    def T(self) -> Self:  # noqa: N802 - NumPy's name
        return self.same("transpose", self)

    def __bool__(self) -> bool:
        raise staging_error(
            "a staged tensor has no truth value while staging: use dlvm.cond for control flow "
            "on tensor values"
        )


# The element types, as classes: `Tensor[f32, …]` names them, a staged tensor is an instance of
# one, and a static type checker sees its operators keep it (class names as TEL spells types).
class f16(Tensor):  # noqa: N801
    element = DataType.F16


class bf16(Tensor):  # noqa: N801
    element = DataType.BF16


class f32(Tensor):  # noqa: N801
    element = DataType.F32


class f64(Tensor):  # noqa: N801
    element = DataType.F64


class i8(Tensor):  # noqa: N801
    element = DataType.I8


class i16(Tensor):  # noqa: N801
    element = DataType.I16


class i32(Tensor):  # noqa: N801
    element = DataType.I32


class i64(Tensor):  # noqa: N801
    element = DataType.I64


class bool_(Tensor):  # noqa: N801
    element = DataType.BOOL


ELEMENT_CLASSES: dict[DataType, type[Tensor]] = {
    c.element: c for c in (f16, bf16, f32, f64, i8, i16, i32, i64, bool_) if c.element is not None
}


def emit(builder: Builder, opname: str, operands: list[Value], **attrs: Any) -> Value:
    """One instruction, or a StagingError at the user's line."""
    try:
        return builder.build(opname, operands, **attrs)
    except TypeRuleError as e:
        raise staging_error(f"{opname}: {e}") from None
