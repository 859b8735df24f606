"""Expressions: each construct checks its operands' shapes and element types (with messages
that show both shapes and the named dimensions) and emits its IR at the insertion point."""

from __future__ import annotations

import math
import operator

from dlvm.ir.compose import slice_along
from dlvm.ir.types import BOOL, DataType, TensorType, TupleType, Type
from dlvm.ir.values import Block, ElementKey, Successor, Value
from telc import ast
from telc.lower.core import Abort, Core, Scope, constant, show, weak_misfit
from telc.lower.values import POISON, TV, Elaborated, FnRef, ShapeVal, _Poison, number
from telc.program import suggest
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


def _c_div(a, b):
    if isinstance(a, int) and isinstance(b, int):
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    return a / b


def _c_mod(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a - b * _c_div(a, b)
    return math.fmod(a, b)


def _pow(a, b):
    # A guard before computing: 2 ** 10000000 as a Python int would take minutes.
    ints = isinstance(a, int) and isinstance(b, int)
    if ints and b > 0 and abs(a) > 1 and b * math.log2(abs(a)) > 64:
        raise OverflowError
    return operator.pow(a, b)


FOLD = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": _c_div,
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


class Exprs(Core):
    """Elaboration of expressions."""

    def lower_expr(self, e: ast.Expr, scope: Scope) -> Elaborated:
        method = getattr(self, "x_" + type(e).__name__.lower())
        return method(e, scope)  # type: ignore[no-any-return]

    def tensor_of(self, e: ast.Expr, scope: Scope, what: str) -> TV | _Poison:
        """An expression that must be a tensor (or a number)."""
        tv = self.lower_expr(e, scope)
        if isinstance(tv, _Poison):
            return tv
        if isinstance(tv, TV) and isinstance(tv.ty, TensorType):
            return tv
        return self.error(e.span, f"{what} must be a tensor, found {describe(tv)}")

    # Leaves ---------------------------------------------------------------------------------

    def x_number(self, e: ast.Number, scope: Scope) -> Elaborated:
        if isinstance(e.value, int) and not fits(e.value, DataType.I64):
            return self.error(
                e.span, f"the number {e.value} does not fit in i64; write {e.value}.0 for a float"
            )
        if isinstance(e.value, float) and not fits(e.value, DataType.F64):
            return self.error(e.span, "the number is too large for f64")
        return number(e.value, scope.default_float)

    def x_boolean(self, e: ast.Boolean, scope: Scope) -> Elaborated:
        return TV(BOOL, const=e.value)

    def x_name(self, e: ast.Name, scope: Scope) -> Elaborated:
        name = e.id
        if name in scope.values:
            return scope.values[name]
        if name in scope.dims:
            return TV(TensorType((), DataType.I64), weak=True, const=scope.dims[name])
        if name == "training":
            return TV(BOOL, const=scope.training)
        if name in scope.params:
            return scope.params[name]
        found = scope.unit.own(name)
        unit = scope.unit
        if found is None:
            imp = self.imported(scope.unit, name, e.span)
            if isinstance(imp, _Poison):
                return imp
            if imp is not None:
                unit, found = imp  # type: ignore[misc]
        if isinstance(found, ast.DimDecl):
            v = self.dim_value(unit, found)
            if v is None:
                return POISON
            return TV(TensorType((), DataType.I64), weak=True, const=v)
        if isinstance(found, ast.ConstDecl):
            return self.const_value(unit, found)
        if isinstance(found, ast.Function):
            return FnRef(found, unit, span=e.span)
        if isinstance(found, ast.Declaration):
            return self.declaration_value(found, e, scope)
        if name in BUILTIN_NAMES:
            return self.error(e.span, f"'{name}' is a built-in function; call it: {name}(…)")
        hint = suggest(name, self.visible_names(scope))
        return self.error(e.span, f"unknown name '{name}'{hint}")

    def declaration_value(self, decl: ast.Declaration, e: ast.Name, scope: Scope) -> Elaborated:
        """A model declaration named where it is not available (the model lowering puts the
        available ones in scope.values)."""
        if decl.role == "param":
            if scope.paramless is None:
                return self.error(e.span, f"internal error: parameter '{decl.name}' is not at hand")
            return self.error(e.span, f"{scope.paramless}: it cannot use parameter '{decl.name}'")
        return self.error(
            e.span,
            f"'{decl.name}' is {_role_noun(decl.role)} of the model; functions can use "
            "parameters, dims and consts, and take everything else as arguments",
        )

    def const_value(self, unit, decl: ast.ConstDecl) -> Elaborated:
        override = self.program.defines.get(decl.name)
        if override is not None:
            return TV(TensorType((), DataType.I64 if isinstance(override, int) else unit.dtype),
                      weak=True, const=override)  # fmt: skip
        key = ("const", id(unit), decl.name)
        cached = self.const_cache.get(key)
        if cached is not None:
            return cached
        self.const_cache[key] = POISON  # a const defined through itself
        tv = self.lower_expr(decl.value, Scope(unit, paramless=constant(f"const {decl.name}")))
        if isinstance(tv, TV) and tv.const is None and not isinstance(tv, _Poison):
            tv = self.error(decl.value.span, "a const must be a number known at compile time")
        self.const_cache[key] = tv
        return tv

    def x_shapeliteral(self, e: ast.ShapeLiteral, scope: Scope) -> Elaborated:
        shape = self.resolve_shape(e.shape, scope)
        return POISON if shape is None else ShapeVal(shape)

    # Operators ------------------------------------------------------------------------------

    def x_binary(self, e: ast.Binary, scope: Scope) -> Elaborated:
        a = self.tensor_of(e.left, scope, f"the left operand of '{e.op}'")
        b = self.tensor_of(e.right, scope, f"the right operand of '{e.op}'")
        if isinstance(a, _Poison) or isinstance(b, _Poison):
            return POISON
        if e.op == ".":
            return self.matmul(e, a, b)
        return self.elementwise(e.op, a, b, e.span, e.left, e.right)

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
                return self.error(span, f"{what} divides by zero")
            except OverflowError:
                return self.error(
                    span, f"{what} is too large: compile-time numbers must fit in i64 or f64"
                )
            except (ValueError, TypeError):
                return self.error(span, f"{what} is not a real number")
        dtype = self.unify_dtypes(op, a, b, span)
        if dtype is None:
            return POISON
        shape = numpy_broadcast(a.shape, b.shape)
        if shape is None:
            return self.error(
                span,
                f"cannot broadcast {_shape_of(a)} and {_shape_of(b)} for {_op_noun(op)}",
                self.operand_details(
                    ("left", left, a), ("right", right, b), scope_dims(self, a, b)
                ),
            )
        irop = ARITHMETIC.get(op) or COMPARE.get(op) or LOGIC.get(op) or op
        if op in LOGIC and not dtype.is_bool:
            return self.error(span, f"'{op}' needs bool operands, found {dtype}")
        if (op in ARITHMETIC or op in ("max", "min")) and dtype.is_bool:
            return self.error(span, f"{_op_noun(op)} needs numbers, found bool tensors")
        if op in ("<", "<=", ">", ">=") and dtype.is_bool:
            return self.error(span, f"'{op}' compares numbers, found bool tensors")
        rank = len(shape)
        x = self.to_rank(a.ir(dtype), rank, span)
        y = self.to_rank(b.ir(dtype), rank, span)
        value = self.emit(irop, [x, y], span)
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
                    misfit = f"{_op_noun(op)} of {a.dtype} with the number {b.const}"
                self.error(span, misfit)
                return None
            return a.dtype
        if a.weak and b.weak:  # a weak and a non-constant: cannot happen, both fold
            return a.dtype if a.dtype.is_float else b.dtype
        if a.dtype is not b.dtype:
            self.error(
                span,
                f"{_op_noun(op)} of different element types: {show(a.ty)} and {show(b.ty)}",
                ["use cast(x, dtype) to convert one of them"],
            )
            return None
        return a.dtype

    def matmul(self, e: ast.Binary, a: TV, b: TV) -> Elaborated:
        span = e.span
        if a.weak or b.weak or not a.shape or not b.shape:
            return self.error(span, "matrix product of a scalar; use '*' to scale")
        dtype = self.unify_dtypes(".", a, b, span)
        if dtype is None:
            return POISON
        if dtype.is_bool:
            return self.error(span, f"matrix product needs numbers, found {show(a.ty)}")
        sa, sb = a.shape, b.shape
        details = self.operand_details(
            ("left", e.left, a), ("right", e.right, b), scope_dims(self, a, b)
        )
        if len(sa) == 1 and len(sb) == 1:
            if sa != sb:
                return self.error(span, "matrix product: the vectors differ in length", details)
        elif len(sa) != len(sb):
            return self.error(
                span,
                f"matrix product of rank {len(sa)} and rank {len(sb)} tensors; both need the "
                "same rank (reshape a vector with `as [1 x n]`)",
                details,
            )
        elif sa[-1] != sb[-2]:
            return self.error(span, "matrix product: inner dimensions differ", details)
        elif sa[:-2] != sb[:-2]:
            return self.error(span, "matrix product: the batch dimensions differ", details)
        value = self.emit("dot", [a.ir(), b.ir()], span)
        sym = None
        if a.sym is not None and b.sym is not None and len(sa) >= 2:
            sym = a.sym[:-1] + b.sym[-1:]
        return TV(value.type, value, sym=sym)

    def operand_details(self, *parts) -> list[str]:
        """The `left  x  : [B x 64]     (B = 32)` lines under a shape error."""
        *operands, dims = parts
        rows = []
        for label, expr, tv in operands:
            text = _snippet(expr)
            rows.append((label, text, _shape_of(tv)))
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

    def x_unary(self, e: ast.Unary, scope: Scope) -> Elaborated:
        a = self.tensor_of(e.operand, scope, f"the operand of '{e.op}'")
        if isinstance(a, _Poison):
            return a
        if e.op == "not":
            if a.dtype is not DataType.BOOL:
                return self.error(e.span, f"'not' needs a bool operand, found {show(a.ty)}")
            if a.const is not None:
                return TV(BOOL, const=not a.const)
            value = self.emit("not", [a.ir()], e.span)
            return TV(value.type, value, sym=a.sym)
        if a.dtype.is_bool:
            return self.error(e.span, f"cannot negate a bool tensor ({show(a.ty)})")
        if a.const is not None and a.value is None:
            return TV(a.ty, weak=a.weak, const=-a.const)
        value = self.emit("negate", [a.ir()], e.span)
        return TV(value.type, value, sym=a.sym)

    def x_transpose(self, e: ast.Transpose, scope: Scope) -> Elaborated:
        a = self.tensor_of(e.operand, scope, "the operand of '^T'")
        if isinstance(a, _Poison) or len(a.shape) < 2:
            return a
        value = self.emit("transpose", [a.ir()], e.span)
        return TV(value.type, value, sym=tuple(reversed(a.sym)) if a.sym else None)

    def x_reshape(self, e: ast.Reshape, scope: Scope) -> Elaborated:
        a = self.tensor_of(e.operand, scope, "the operand of 'as'")
        shape = self.resolve_shape(e.shape, scope)
        if isinstance(a, _Poison) or shape is None:
            return POISON
        if math.prod(a.shape) != math.prod(shape):
            return self.error(
                e.span,
                f"cannot reshape {_shape_of(a)} ({math.prod(a.shape)} elements) to "
                f"{shape_str(shape)} ({math.prod(shape)} elements)",
            )
        if a.weak or a.value is None:
            a = TV(a.ty, a.ir(), sym=a.sym)
        if a.shape == shape:
            return a
        value = self.emit("shapeCast", [a.ir()], e.span, shape=shape)
        return TV(value.type, value, sym=tuple(d.value for d in e.shape.dims) or None)

    # Aggregates -----------------------------------------------------------------------------

    def x_tuple(self, e: ast.Tuple, scope: Scope) -> Elaborated:
        parts = [self.lower_expr(x, scope) for x in e.elements]
        if any(isinstance(p, _Poison) for p in parts):
            return POISON
        for p, x in zip(parts, e.elements):
            if not isinstance(p, TV):
                return self.error(x.span, f"a tuple element must be a value, found {describe(p)}")
        tvs = [p for p in parts if isinstance(p, TV)]
        return self.make_tuple(tvs, e.span)

    def make_tuple(self, tvs: list[TV], span: ast.Span) -> TV:
        from dlvm.ir.literals import AggregateLiteral
        from dlvm.ir.values import LiteralValue

        values = [tv.ir() for tv in tvs]
        ty = TupleType(tuple(v.type for v in values))
        value = self.emit(
            "literal", [LiteralValue(AggregateLiteral("tuple", tuple(values)), ty)], span
        )
        return TV(ty, value)

    def x_concat(self, e: ast.Concat, scope: Scope) -> Elaborated:
        parts = [self.tensor_of(x, scope, "a concatenated operand") for x in e.elements]
        if any(isinstance(p, _Poison) for p in parts):
            return POISON
        tvs = [p for p in parts if isinstance(p, TV)]
        axis = e.axis if e.axis is not None else 0
        return self.concatenate(tvs, list(e.elements), axis, e.span)

    def concatenate(
        self, tvs: list[TV], exprs: list[ast.Expr], axis: int, span: ast.Span
    ) -> Elaborated:
        first = tvs[0]
        if any(not tv.shape for tv in tvs):
            return self.error(span, "cannot concatenate scalars; give them a shape with `as [1]`")
        rank = len(first.shape)
        if axis < 0:
            axis += rank
        if not 0 <= axis < rank:
            return self.error(span, f"concatenation axis {axis} is out of range for rank {rank}")
        for tv, x in zip(tvs[1:], exprs[1:]):
            if tv.dtype is not first.dtype:
                return self.error(x.span, f"cannot concatenate {show(first.ty)} and {show(tv.ty)}")
            ok = len(tv.shape) == rank and all(
                p == q for i, (p, q) in enumerate(zip(tv.shape, first.shape)) if i != axis
            )
            if not ok:
                return self.error(
                    x.span,
                    f"cannot concatenate {_shape_of(first)} and {_shape_of(tv)} along axis {axis}: "
                    "the other dimensions must match",
                )
        if len(tvs) == 1:
            return first
        value = self.emit("concatenate", [tv.ir() for tv in tvs], span, axis=axis)
        return TV(value.type, value)

    # Indexing -------------------------------------------------------------------------------

    def x_index(self, e: ast.Index, scope: Scope) -> Elaborated:
        special = self.recurrent_index(e, scope)
        if special is not None:
            return special
        base = self.lower_expr(e.operand, scope)
        if isinstance(base, _Poison):
            return base
        if isinstance(base, TV) and isinstance(base.ty, TupleType):
            return self.tuple_element(e, base, scope)
        if not isinstance(base, TV):
            return self.error(e.operand.span, f"cannot index {describe(base)}")
        if len(e.subscripts) > len(base.shape):
            return self.error(
                e.span, f"{len(e.subscripts)} subscripts for a tensor of rank {len(base.shape)}"
            )
        value = base.ir()
        shape = list(base.shape)
        dynamic: Value | None = None
        # Ranges and constant indices first, from the last axis, so axis numbers stay valid;
        # a computed index (only the first subscript may be one) is applied last.
        picks: list[int] = []
        for axis in reversed(range(len(e.subscripts))):
            sub = e.subscripts[axis]
            if isinstance(sub, ast.Every):
                return self.error(sub.span, "'[*]' is only for declarations of a recurrent block")
            if isinstance(sub, ast.Range):
                lo = self.index_constant(sub.lo, scope, 0, shape[axis], "slice start")
                hi = self.index_constant(sub.hi, scope, shape[axis], shape[axis], "slice end")
                if lo is None or hi is None:
                    return POISON
                if not 0 <= lo < hi <= shape[axis]:
                    return self.error(
                        sub.span, f"slice {lo}:{hi} is empty or out of range for size {shape[axis]}"
                    )
                if (lo, hi) != (0, shape[axis]):
                    value = self.slice_along(value, axis, lo, hi - 1, sub.span)
                    shape[axis] = hi - lo
                continue
            idx = self.lower_expr(sub.index, scope)
            if isinstance(idx, _Poison):
                return idx
            if not isinstance(idx, TV) or idx.shape or not idx.dtype.is_int:
                return self.error(sub.span, f"an index must be an integer, found {describe(idx)}")
            if idx.const is not None:
                i = int(idx.const)
                if i < 0:
                    i += shape[axis]
                if not 0 <= i < shape[axis]:
                    return self.error(
                        sub.span, f"index {idx.const} is out of range for size {shape[axis]}"
                    )
                value = self.slice_along(value, axis, i, i, sub.span)
                picks.append(axis)
            elif axis == 0:
                dynamic = idx.ir()
            else:
                return self.error(
                    sub.span,
                    "only the first subscript may be computed at run time; others must be numbers",
                )
        for axis in picks:  # descending: drop the picked unit dimensions
            value = self.emit("squeezeShape", [value], e.span, index=axis)
        if dynamic is not None:
            value = self.emit("extract", [value], e.span, keys=(ElementKey(value=dynamic),))
        return TV(value.type, value)

    def index_constant(
        self, expr: ast.Expr | None, scope: Scope, default: int, size: int, what: str
    ) -> int | None:
        if expr is None:
            return default
        tv = self.lower_expr(expr, scope)
        if isinstance(tv, _Poison):
            return None
        if not isinstance(tv, TV) or tv.const is None or isinstance(tv.const, bool | float):
            self.error(expr.span, f"the {what} must be an integer known at compile time")
            return None
        v = int(tv.const)
        return v + size if v < 0 else v

    def slice_along(self, v: Value, axis: int, lo: int, hi: int, span: ast.Span) -> Value:
        """v[…, lo..hi (closed), …] along any axis (dlvm.ir.compose.slice_along)."""

        def op(name: str, *operands: Value, **attrs) -> Value:
            return self.emit(name, list(operands), span, **attrs)

        return slice_along(op, v, axis, lo, hi)

    def tuple_element(self, e: ast.Index, base: TV, scope: Scope) -> Elaborated:
        assert isinstance(base.ty, TupleType)
        n = len(base.ty.elements)
        sub = e.subscripts[0]
        if len(e.subscripts) != 1 or not isinstance(sub, ast.At):
            return self.error(e.span, "a tuple takes one index, a number: t[0]")
        i = self.index_constant(sub.index, scope, 0, n, "tuple index")
        if i is None:
            return POISON
        if not 0 <= i < n:
            return self.error(sub.span, f"index {i} is out of range for a tuple of {n}")
        value = self.emit("extract", [base.ir()], e.span, keys=(ElementKey(index=i),))
        return TV(value.type, value)

    def recurrent_index(self, e: ast.Index, scope: Scope) -> Elaborated | None:
        """`h[t-1]` and `h[*]` of recurrent declarations; None for ordinary indexing."""
        return None

    # Conditionals ---------------------------------------------------------------------------

    def x_conditional(self, e: ast.Conditional, scope: Scope) -> Elaborated:
        c = self.tensor_of(e.condition, scope, "the condition")
        if isinstance(c, _Poison):
            return c
        if c.dtype is not DataType.BOOL:
            return self.error(e.condition.span, f"the condition must be bool, found {show(c.ty)}")
        if c.const is not None:
            return self.lower_expr(e.then if c.const else e.else_, scope)
        if c.shape:  # elementwise
            a = self.tensor_of(e.then, scope, "the 'then' value")
            b = self.tensor_of(e.else_, scope, "the 'else' value")
            if isinstance(a, _Poison) or isinstance(b, _Poison):
                return POISON
            return self.select(c, a, b, e.span)
        return self.branch_values(c.ir(), e, scope)

    def select(self, c: TV, a: TV, b: TV, span: ast.Span) -> Elaborated:
        dtype = self.unify_dtypes("select", a, b, span)
        if dtype is None:
            return POISON
        shape = numpy_broadcast(numpy_broadcast(a.shape, b.shape) or (), c.shape)
        ab = numpy_broadcast(a.shape, b.shape)
        if ab is None or shape is None:
            return self.error(
                span,
                f"cannot broadcast {_shape_of(c)}, {_shape_of(a)} and {_shape_of(b)} in a select",
            )
        rank = len(shape)
        x = self.to_rank(a.ir(dtype), rank, span)
        y = self.to_rank(b.ir(dtype), rank, span)
        flags = self.to_rank(c.ir(), rank, span)
        value = self.emit("select", [x, y, flags], span)
        return TV(value.type, value)

    def new_block(self, name: str, args: list[tuple[str, Type]] | None = None) -> Block:
        from dlvm.ir.values import Argument

        assert self.fn is not None
        taken = {b.name for b in self.fn.ir.blocks}
        block = Block(
            _fresh(name, taken), [Argument(_fresh_arg(self, n), t) for n, t in args or []]
        )
        self.fn.ir.add_block(block)
        return block

    def branch_values(self, cond: Value, e: ast.Conditional, scope: Scope) -> Elaborated:
        """`if c then a else b` with a scalar condition: only the chosen side runs."""
        then_block, else_block = self.new_block("then"), self.new_block("else")
        self.emit(
            "conditional",
            [cond],
            e.span,
            then_=Successor(then_block, []),
            else_=Successor(else_block, []),
        )
        self.b.at_end(then_block)
        a = self.tensor_of(e.then, scope, "the 'then' value")
        then_end = self.b.block
        self.b.at_end(else_block)
        b = self.tensor_of(e.else_, scope, "the 'else' value")
        else_end = self.b.block
        if isinstance(a, _Poison) or isinstance(b, _Poison):
            raise Abort
        dtype = self.unify_dtypes("if", a, b, e.span)
        if dtype is None:
            raise Abort
        if a.shape != b.shape:
            self.error(
                e.span, f"the branches have different shapes: {_shape_of(a)} and {_shape_of(b)}"
            )
            raise Abort
        ty = TensorType(a.shape, dtype)
        join = self.new_block("join", [("if_value", ty)])
        self.b.at_end(then_end)  # type: ignore[arg-type]
        self.emit("branch", [], e.span, dest=Successor(join, [a.ir(dtype)]))
        self.b.at_end(else_end)  # type: ignore[arg-type]
        self.emit("branch", [], e.span, dest=Successor(join, [b.ir(dtype)]))
        self.b.at_end(join)
        return TV(ty, join.arguments[0], sym=a.sym)

    # Calls are elaborated by telc.lower.calls.
    def x_call(self, e: ast.Call, scope: Scope) -> Elaborated:  # pragma: no cover - overridden
        raise NotImplementedError


def fold(op: str, x, y, a: TV, b: TV) -> TV:
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


def describe(x: Elaborated) -> str:
    if isinstance(x, FnRef):
        return f"the function '{x.function.name}'"
    if isinstance(x, ShapeVal):
        return f"the shape {shape_str(x.shape)}"
    if isinstance(x, TV):
        if x.weak:
            return f"the number {x.const}"
        return show(x.ty)
    return "an invalid value"


def _shape_of(tv: TV) -> str:
    if tv.sym is not None and len(tv.sym) == len(tv.shape):
        return shape_str(tv.sym)
    return shape_str(tv.shape)


def _snippet(expr: ast.Expr | None) -> str:
    if expr is None:
        return ""
    text = " ".join(expr.span.text().split())
    return text if len(text) <= 24 else text[:21] + "…"


def scope_dims(core: Core, a: TV, b: TV) -> dict[str, int]:
    """The values of the named dimensions in two operands' written shapes."""
    out: dict[str, int] = {}
    for tv in (a, b):
        if tv.sym is None:
            continue
        for name, value in zip(tv.sym, tv.shape):
            if isinstance(name, str):
                out[name] = value
    return out


def _op_noun(op: str) -> str:
    if op in OPERATOR_NAMES:
        return OPERATOR_NAMES[op]
    if op in COMPARE:
        return f"comparison '{op}'"
    return f"'{op}'"


def _role_noun(role: str) -> str:
    return {"in": "an input", "hidden": "a hidden value", "out": "an output"}.get(role, role)


def _fresh(name: str, taken: set[str]) -> str:
    from dlvm.ir.values import fresh_name

    return fresh_name(name, taken)


def _fresh_arg(core: Core, name: str) -> str:
    from dlvm.ir.values import fresh_name

    assert core.fn is not None
    return fresh_name(name, core.fn.taken)


BUILTIN_NAMES: set[str] = set()  # filled by telc.lower.builtins
