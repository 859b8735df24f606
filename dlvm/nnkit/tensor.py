"""Symbolic tensors of NNKit: what a staged Python function computes on, each one a value of the
DLVM IR function being built. Operators and the built-ins (dlvm.nnkit.builtins) emit IR
instructions through the builder, their types checked by the instructions' own rules; a misfit
is a StagingError located at the user's line of Python."""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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
    """A symbolic tensor while a function is staged; `Tensor[f32, 1, 784]` as an annotation."""

    __array_priority__ = 1000  # NumPy defers to our operators: `2.0 * x` stays symbolic

    def __init__(self, value: Value, staging: Staging) -> None:
        self.value = value
        self.staging = staging

    def __class_getitem__(cls, params: Any) -> TensorSpec:
        params = params if isinstance(params, tuple) else (params,)
        dtype, *shape = params
        if not isinstance(dtype, DataType) or not all(isinstance(d, int) for d in shape):
            raise TypeError("annotate tensors as Tensor[dtype, dim, …], e.g. Tensor[f32, 1, 784]")
        return TensorSpec(dtype, tuple(shape))

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

    # Operators ---------------------------------------------------------------------------------

    def __add__(self, other: Any) -> Tensor:
        return self.emit("add", self, other)

    def __radd__(self, other: Any) -> Tensor:
        return self.emit("add", other, self)

    def __sub__(self, other: Any) -> Tensor:
        return self.emit("subtract", self, other)

    def __rsub__(self, other: Any) -> Tensor:
        return self.emit("subtract", other, self)

    def __mul__(self, other: Any) -> Tensor:
        return self.emit("multiply", self, other)

    def __rmul__(self, other: Any) -> Tensor:
        return self.emit("multiply", other, self)

    def __truediv__(self, other: Any) -> Tensor:
        return self.emit("divide", self, other)

    def __rtruediv__(self, other: Any) -> Tensor:
        return self.emit("divide", other, self)

    def __pow__(self, other: Any) -> Tensor:
        return self.emit("power", self, other)

    def __neg__(self) -> Tensor:
        return self.emit("negate", self)

    def __matmul__(self, other: Any) -> Tensor:
        return self.emit("dot", self, other)

    def __rmatmul__(self, other: Any) -> Tensor:
        return self.emit("dot", other, self)

    # Comparisons give bool tensors (== and != keep Python's meaning: identity).
    def __lt__(self, other: Any) -> Tensor:
        return self.emit("lessThan", self, other)

    def __le__(self, other: Any) -> Tensor:
        return self.emit("lessThanOrEqual", self, other)

    def __gt__(self, other: Any) -> Tensor:
        return self.emit("greaterThan", self, other)

    def __ge__(self, other: Any) -> Tensor:
        return self.emit("greaterThanOrEqual", self, other)

    __hash__ = object.__hash__

    @property
    def T(self) -> Tensor:  # noqa: N802 - NumPy's name
        return self.emit("transpose", self)

    def __bool__(self) -> bool:
        raise staging_error(
            "a staged tensor has no truth value while staging: use dlvm.cond for control flow "
            "on tensor values"
        )


def emit(builder: Builder, opname: str, operands: list[Value], **attrs: Any) -> Value:
    """One instruction, or a StagingError at the user's line."""
    try:
        return builder.build(opname, operands, **attrs)
    except TypeRuleError as e:
        raise staging_error(f"{opname}: {e}") from None
