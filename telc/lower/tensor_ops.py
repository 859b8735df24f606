"""The tensor operations that operators and built-ins share: elementwise operations over
broadcast operands (folded when both are compile-time numbers), the matrix product, select,
concatenation, tuples and slices, each checking shapes and element types with messages that
show both operands."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

from dlvm.ir.builder import tuple_literal
from dlvm.ir.compose import slice_along
from dlvm.ir.types import BOOL, DataType, TensorType
from dlvm.ir.values import Value
from telc import ast
from telc.lower.context import Context
from telc.lower.values import POISON, TV, Elaborated, shape_of, show, weak_misfit
from telc.types import fits, numpy_broadcast, shape_str

ARITHMETIC = {"+": "add", "-": "subtract", "*": "multiply", "/": "divide", "%": "modulo"}
ARITHMETIC["**"] = "power"
COMPARE = {
    "<": "lessThan",
    "<=": "lessThanOrEqual",
    ">": "greaterThan",
    ">=": "greaterThanOrEqual",
    "==": "equal",
    "!=": "notEqual",
}
LOGIC = {"and": "and", "or": "or"}
OPERATOR_NAMES = {"+": "addition", "-": "subtraction", "*": "multiplication", "/": "division"}
OPERATOR_NAMES.update({"%": "remainder", "**": "power", "and": "'and'", "or": "'or'"})

Number = int | float | bool


def _c_div(a: Number, b: Number) -> Number:
    if isinstance(a, int) and isinstance(b, int):
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    return a / b


def _exact_div(a: Number, b: Number) -> Number:
    """`/` on two compile-time numbers: exact, as Python's `/` (an integer where it divides,
    else a decimal). Truncating here would make `x * (1 / 3)` silently `x * 0`; typed
    integer tensors still divide as C does."""
    if isinstance(a, int) and isinstance(b, int) and b and a % b == 0:
        return a // b
    return a / b


def _c_mod(a: Number, b: Number) -> Number:
    if isinstance(a, int) and isinstance(b, int):
        return a - b * _c_div(a, b)
    return math.fmod(a, b)


def _pow(a: Number, b: Number) -> Any:
    # A guard before computing: 2 ** 10000000 as a Python int would take minutes.
    ints = isinstance(a, int) and isinstance(b, int)
    if ints and b > 0 and abs(a) > 1 and b * math.log2(abs(a)) > 64:
        raise OverflowError
    return operator.pow(a, b)


FOLD: dict[str, Callable[[Number, Number], Any]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": _exact_div,
    "%": _c_mod,
    "**": _pow,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
    "and": lambda a, b: a and b,
    "or": lambda a, b: a or b,
}

# One operand of a shape error's details: its label, its expression and its value.
Operand = tuple[str, ast.Expr | None, TV]


class TensorOps:
    """Checked tensor operations emitted at the context's insertion point."""

    def __init__(self, cx: Context) -> None:
        self.cx = cx

    def elementwise(
        self,
        op: str,
        a: TV,
        b: TV,
        span: ast.Span,
        left: ast.Expr | None = None,
        right: ast.Expr | None = None,
    ) -> Elaborated:
        """An operator or built-in over two broadcast operands: arithmetic, comparison,
        logic, or `max`/`min` (op is then the IR name)."""
        if a.const is not None and b.const is not None and a.weak and b.weak and op in FOLD:
            what = f"{a.const} {op} {b.const}"
            try:
                return fold(op, a.const, b.const, a, b)
            except ZeroDivisionError:
                return self.cx.error(span, f"{what} divides by zero")
            except OverflowError:
                return self.cx.error(
                    span, f"{what} is too large: compile-time numbers must fit in i64 or f64"
                )
            except (ValueError, TypeError):
                return self.cx.error(span, f"{what} is not a real number")
        dtype = self.unify_dtypes(op, a, b, span)
        if dtype is None:
            return POISON
        shape = numpy_broadcast(a.shape, b.shape)
        if shape is None:
            return self.cx.error(
                span,
                f"cannot broadcast {shape_of(a)} and {shape_of(b)} for {op_noun(op)}",
                operand_details(("left", left, a), ("right", right, b)),
            )
        irop = ARITHMETIC.get(op) or COMPARE.get(op) or LOGIC.get(op) or op
        if op in LOGIC and not dtype.is_bool:
            return self.cx.error(span, f"'{op}' needs bool operands, found {dtype}")
        if (op in ARITHMETIC or op in ("max", "min")) and dtype.is_bool:
            return self.cx.error(span, f"{op_noun(op)} needs numbers, found bool tensors")
        if op in ("<", "<=", ">", ">=") and dtype.is_bool:
            return self.cx.error(span, f"'{op}' compares numbers, found bool tensors")
        rank = len(shape)
        x = self.cx.to_rank(a.ir(dtype), rank, span)
        y = self.cx.to_rank(b.ir(dtype), rank, span)
        value = self.cx.emit(irop, [x, y], span)
        sym = a.sym if a.shape == shape else b.sym if b.shape == shape else None
        return TV(value.type, value, sym=sym)

    def unify_dtypes(self, op: str, a: TV, b: TV, span: ast.Span) -> DataType | None:
        """The element type two operands meet at (weak numbers adapt), or None after an error."""
        if a.weak and not b.weak:
            a, b = b, a
        if b.weak and not a.weak:
            misfit = weak_misfit(b, a.dtype)
            if misfit is not None:
                if misfit == "kind":
                    misfit = f"{op_noun(op)} of {a.dtype} with the number {b.const}"
                self.cx.error(span, misfit)
                return None
            return a.dtype
        if a.weak and b.weak:  # a weak and a non-constant: cannot happen, both fold
            return a.dtype if a.dtype.is_float else b.dtype
        if a.dtype is not b.dtype:
            self.cx.error(
                span,
                f"{op_noun(op)} of different element types: {show(a.ty)} and {show(b.ty)}",
                ["use cast(x, dtype) to convert one of them"],
            )
            return None
        return a.dtype

    def matmul(self, e: ast.Binary, a: TV, b: TV) -> Elaborated:
        """`a . b` as NumPy's `matmul`: vectors, matrices, or stacks of matrices whose batch
        dimensions broadcast (docs/tel.md, "Matrix products")."""
        span = e.span
        if a.weak or b.weak or not a.shape or not b.shape:
            return self.cx.error(span, "matrix product of a scalar; use '*' to scale")
        dtype = self.unify_dtypes(".", a, b, span)
        if dtype is None:
            return POISON
        if dtype.is_bool:
            return self.cx.error(span, f"matrix product needs numbers, found {show(a.ty)}")
        sa, sb = a.shape, b.shape
        details = operand_details(("left", e.left, a), ("right", e.right, b))
        if len(sa) == 1 and len(sb) == 1:
            if sa != sb:
                return self.cx.error(span, "matrix product: the vectors differ in length", details)
            value = self.cx.emit("dot", [a.ir(dtype), b.ir(dtype)], span)
            return TV(value.type, value)
        # A vector is a matrix of one row (on the left) or one column (on the right) whose
        # unit dimension is dropped from the result, as NumPy does.
        ma = (1,) + sa if len(sa) == 1 else sa
        mb = sb + (1,) if len(sb) == 1 else sb
        if ma[-1] != mb[-2]:
            return self.cx.error(span, "matrix product: inner dimensions differ", details)
        batch = numpy_broadcast(ma[:-2], mb[:-2])
        if batch is None:
            return self.cx.error(
                span,
                f"matrix product: the batch dimensions differ: {_batch_str(a)} and "
                f"{_batch_str(b)} do not broadcast",
                details,
            )
        m, k, n = ma[-2], ma[-1], mb[-1]
        x, y = a.ir(dtype), b.ir(dtype)
        if ma[:-2] == mb[:-2]:  # the IR's dot: one matrix, or a batch of equal batches
            x, y = self._reshape(x, ma, span), self._reshape(y, mb, span)
        elif math.prod(mb[:-2]) == 1:
            # One matrix on the right: the left's matrices stacked into one taller matrix make
            # a single product (the packed kernel's best case) instead of a batch of small ones.
            x = self._reshape(x, (math.prod(ma[:-2]) * m, k), span)
            y = self._reshape(y, (k, n), span)
        else:  # batches that broadcast: both stretched to the common batch
            ones = len(batch) + 2
            x = self._reshape(x, (1,) * (ones - len(ma)) + ma, span)
            y = self._reshape(y, (1,) * (ones - len(mb)) + mb, span)
            x = self.cx.broadcast_to(x, batch + (m, k), span)
            y = self.cx.broadcast_to(y, batch + (k, n), span)
        value = self.cx.emit("dot", [x, y], span)
        shape = batch + ((m,) if len(sa) > 1 else ()) + ((n,) if len(sb) > 1 else ())
        value = self._reshape(value, shape, span)
        return TV(value.type, value, sym=_product_sym(a, b, len(batch)))

    def _reshape(self, value: Value, shape: tuple[int, ...], span: ast.Span) -> Value:
        """value as `shape` (a `shapeCast`, none when it already has it)."""
        t = value.type
        assert isinstance(t, TensorType)
        if t.shape == shape:
            return value
        return self.cx.emit("shapeCast", [value], span, shape=shape)

    def select(self, c: TV, a: TV, b: TV, span: ast.Span) -> Elaborated:
        """a where c holds, else b, elementwise over the three broadcast operands."""
        dtype = self.unify_dtypes("select", a, b, span)
        if dtype is None:
            return POISON
        shape = numpy_broadcast(numpy_broadcast(a.shape, b.shape) or (), c.shape)
        ab = numpy_broadcast(a.shape, b.shape)
        if ab is None or shape is None:
            return self.cx.error(
                span,
                f"cannot broadcast {shape_of(c)}, {shape_of(a)} and {shape_of(b)} in a select",
            )
        rank = len(shape)
        x = self.cx.to_rank(a.ir(dtype), rank, span)
        y = self.cx.to_rank(b.ir(dtype), rank, span)
        flags = self.cx.to_rank(c.ir(), rank, span)
        value = self.cx.emit("select", [x, y, flags], span)
        return TV(value.type, value)

    def concatenate(
        self, tvs: list[TV], exprs: list[ast.Expr], axis: int, span: ast.Span
    ) -> Elaborated:
        """The tensors joined along axis; the others must match."""
        first = tvs[0]
        if any(not tv.shape for tv in tvs):
            return self.cx.error(
                span, "cannot concatenate scalars; give them a shape with `as [1]`"
            )
        rank = len(first.shape)
        if axis < 0:
            axis += rank
        if not 0 <= axis < rank:
            return self.cx.error(span, f"concatenation axis {axis} is out of range for rank {rank}")
        for tv, x in zip(tvs[1:], exprs[1:]):
            if tv.dtype is not first.dtype:
                return self.cx.error(
                    x.span, f"cannot concatenate {show(first.ty)} and {show(tv.ty)}"
                )
            ok = len(tv.shape) == rank and all(
                p == q for i, (p, q) in enumerate(zip(tv.shape, first.shape)) if i != axis
            )
            if not ok:
                return self.cx.error(
                    x.span,
                    f"cannot concatenate {shape_of(first)} and {shape_of(tv)} along axis {axis}: "
                    "the other dimensions must match",
                )
        if len(tvs) == 1:
            return first
        value = self.cx.emit("concatenate", [tv.ir() for tv in tvs], span, axis=axis)
        return TV(value.type, value)

    def make_tuple(self, tvs: list[TV], span: ast.Span) -> TV:
        """A tuple of the values, as a `literal` instruction."""
        lit = tuple_literal([tv.ir() for tv in tvs])
        value = self.cx.emit("literal", [lit], span)
        return TV(lit.type, value)

    def slice_along(self, v: Value, axis: int, lo: int, hi: int, span: ast.Span) -> Value:
        """v[…, lo..hi (closed), …] along any axis (dlvm.ir.compose.slice_along)."""

        def op(name: str, *operands: Value, **attrs: Any) -> Value:
            return self.cx.emit(name, list(operands), span, **attrs)

        return slice_along(op, v, axis, lo, hi)


def fold(op: str, x: Number, y: Number, a: TV, b: TV) -> TV:
    """A weak-number operation computed at compile time."""
    result = FOLD[op](x, y)
    if isinstance(result, complex):
        raise ValueError("the result is not a real number")
    if isinstance(result, bool):
        return TV(BOOL, const=result)
    if not fits(result, DataType.I64 if isinstance(result, int) else DataType.F64):
        raise OverflowError
    dtype = a.dtype if a.dtype.is_float else b.dtype
    if isinstance(result, float):
        dtype = dtype if dtype.is_float else DataType.F32
    return TV(TensorType((), dtype), weak=True, const=result)


def _batch_str(tv: TV) -> str:
    """The batch dimensions of a product's operand as written: `[B x H]`."""
    written = tv.sym if tv.sym is not None and len(tv.sym) == len(tv.shape) else tv.shape
    return shape_str(written[:-2])


def _product_sym(a: TV, b: TV, batch: int) -> tuple[int | str, ...] | None:
    """The written shape of `a . b`: each batch dimension as the operand that sets it wrote it,
    then a's rows and b's columns (for messages)."""
    if a.sym is None or b.sym is None or len(a.sym) != len(a.shape) or len(b.sym) != len(b.shape):
        return None
    ra, rb = a.sym[:-2], b.sym[:-2]
    sa, sb = a.shape[:-2], b.shape[:-2]
    out: list[int | str] = []
    for i in range(batch, 0, -1):
        if i <= len(sa) and (i > len(sb) or sb[-i] == 1):
            out.append(ra[-i])
        else:
            out.append(rb[-i])
    if len(a.shape) > 1:
        out.append(a.sym[-2])
    if len(b.shape) > 1:
        out.append(b.sym[-1])
    return tuple(out)


def operand_details(*operands: Operand) -> list[str]:
    """The `left  x  : [B x 64]     (B = 32)` lines under a shape error."""
    dims = _named_dims(*(tv for _, _, tv in operands))
    rows = []
    for label, expr, tv in operands:
        rows.append((label, _snippet(expr), shape_of(tv)))
    w1 = max(len(r[0]) for r in rows)
    w2 = max(len(r[1]) for r in rows)
    w3 = max(len(r[2]) for r in rows)
    out = []
    for (label, text, shape), (_, _, tv) in zip(rows, operands):
        named = [f"{n} = {dims[n]}" for n in (tv.sym or ()) if isinstance(n, str) and n in dims]
        line = f"  {label.ljust(w1)} {text.ljust(w2)} : {shape.ljust(w3)}"
        if named:
            line += "     (" + ", ".join(dict.fromkeys(named)) + ")"
        out.append(line.rstrip())
    return out


def _named_dims(*tvs: TV) -> dict[str, int]:
    """The values of the named dimensions in the operands' written shapes."""
    out: dict[str, int] = {}
    for tv in tvs:
        if tv.sym is None:
            continue
        for name, value in zip(tv.sym, tv.shape):
            if isinstance(name, str):
                out[name] = value
    return out


def _snippet(expr: ast.Expr | None) -> str:
    if expr is None:
        return ""
    text = " ".join(expr.span.text().split())
    return text if len(text) <= 24 else text[:21] + "…"


def op_noun(op: str) -> str:
    """An operator for messages: `addition`, `comparison '<'`, `'max'`."""
    if op in OPERATOR_NAMES:
        return OPERATOR_NAMES[op]
    if op in COMPARE:
        return f"comparison '{op}'"
    return f"'{op}'"
