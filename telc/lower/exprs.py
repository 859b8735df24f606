"""Expressions: each construct checks its operands' shapes and element types (with messages
that show both shapes and the named dimensions) and emits its IR at the insertion point."""

from __future__ import annotations

import math

from dlvm.ir.types import BOOL, DataType, TensorType, TupleType
from dlvm.ir.values import ElementKey, Successor, Value
from telc import ast
from telc.lower.builtins import BUILTINS
from telc.lower.context import Abort, Context, Scope
from telc.lower.dependencies import previous_step
from telc.lower.imported import ImportedLowerer
from telc.lower.interfaces import CallLowering
from telc.lower.resolve import Resolver
from telc.lower.tensor_ops import TensorOps
from telc.lower.values import (
    POISON,
    TV,
    Elaborated,
    FnRef,
    ShapeVal,
    _Poison,
    describe,
    number,
    shape_of,
    show,
)
from telc.program import stdlib_help, suggest
from telc.types import fits, shape_str


class ExprLowerer:
    """Elaboration of expressions. Calls go to the call lowering given to `connect`."""

    calls: CallLowering

    def __init__(self, cx: Context, resolve: Resolver, ops: TensorOps) -> None:
        self.cx = cx
        self.resolve = resolve
        self.ops = ops
        self.imported = ImportedLowerer(cx, ops)

    def connect(self, calls: CallLowering) -> None:
        self.calls = calls

    def lower_expr(self, e: ast.Expr, scope: Scope) -> Elaborated:
        with self.cx.deeper(e.span) as within:
            return self.elaborate(e, scope) if within else POISON

    def elaborate(self, e: ast.Expr, scope: Scope) -> Elaborated:
        match e:
            case ast.Number():
                return self.number_literal(e, scope)
            case ast.Boolean():
                return TV(BOOL, const=e.value)
            case ast.Name():
                return self.name(e, scope)
            case ast.ShapeLiteral():
                shape = self.resolve.resolve_shape(e.shape, scope)
                return POISON if shape is None else ShapeVal(shape)
            case ast.Binary():
                return self.binary(e, scope)
            case ast.Unary():
                return self.unary(e, scope)
            case ast.Transpose():
                return self.transpose(e, scope)
            case ast.Reshape():
                return self.reshape(e, scope)
            case ast.Tuple():
                return self.tuple_value(e, scope)
            case ast.Concat():
                return self.concat(e, scope)
            case ast.Index():
                return self.index(e, scope)
            case ast.Conditional():
                return self.conditional(e, scope)
            case ast.Imported():
                return self.imported.lower(e, scope)
            case ast.Call():
                return self.calls.lower_call(e, scope)

    def tensor_of(self, e: ast.Expr, scope: Scope, what: str) -> TV | _Poison:
        """An expression that must be a tensor (or a number)."""
        return self.as_tensor(self.lower_expr(e, scope), e, what)

    def as_tensor(self, tv: Elaborated, e: ast.Expr, what: str) -> TV | _Poison:
        """tv, the value of e, if it is a tensor (or a number)."""
        if isinstance(tv, _Poison):
            return tv
        if isinstance(tv, TV) and isinstance(tv.ty, TensorType):
            return tv
        return self.cx.error(e.span, f"{what} must be a tensor, found {describe(tv)}")

    # Leaves ---------------------------------------------------------------------------------

    def number_literal(self, e: ast.Number, scope: Scope) -> Elaborated:
        if isinstance(e.value, int) and not fits(e.value, DataType.I64):
            return self.cx.error(
                e.span, f"the number {e.value} does not fit in i64; write {e.value}.0 for a float"
            )
        if isinstance(e.value, float) and not fits(e.value, DataType.F64):
            return self.cx.error(e.span, "the number is too large for f64")
        return number(e.value, scope.default_float)

    def name(self, e: ast.Name, scope: Scope) -> Elaborated:
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
            imp = self.resolve.imported(scope.unit, name, e.span)
            if isinstance(imp, _Poison):
                return imp
            if imp is not None:
                unit, found = imp
        if isinstance(found, ast.DimDecl):
            v = self.resolve.dim_value(unit, found)
            if v is None:
                return POISON
            return TV(TensorType((), DataType.I64), weak=True, const=v)
        if isinstance(found, ast.ConstDecl):
            return self.resolve.const_value(unit, found)
        if isinstance(found, ast.Function):
            return FnRef(found, unit, span=e.span)
        if isinstance(found, ast.Declaration):
            return self.declaration_value(found, e, scope)
        if name in BUILTINS:
            return self.cx.error(e.span, f"'{name}' is a built-in function; call it: {name}(…)")
        helps = stdlib_help(name)
        hint = "" if helps else suggest(name, self.resolve.visible_names(scope))
        return self.cx.error(e.span, f"unknown name '{name}'{hint}", helps)

    def declaration_value(self, decl: ast.Declaration, e: ast.Name, scope: Scope) -> Elaborated:
        """A model declaration named where it is not available (the model lowering puts the
        available ones in scope.values)."""
        if decl.role in ("param", "buffer"):
            what = "parameter" if decl.role == "param" else "buffer"
            if scope.paramless is None:
                return self.cx.error(e.span, f"internal error: {what} '{decl.name}' is not at hand")
            return self.cx.error(e.span, f"{scope.paramless}: it cannot use {what} '{decl.name}'")
        return self.cx.error(
            e.span,
            f"'{decl.name}' is {_role_noun(decl.role)} of the model; functions can use "
            "parameters, dims and consts, and take everything else as arguments",
        )

    # Operators ------------------------------------------------------------------------------

    def binary(self, e: ast.Binary, scope: Scope) -> Elaborated:
        # A chain `a + b + c …` is a spine of binary nodes down their left operands: it is
        # walked with a loop, so that its length takes no stack and no depth (MAX_DEPTH).
        spine = [e]
        while isinstance(spine[-1].left, ast.Binary):
            spine.append(spine[-1].left)
        first = spine[-1]
        value = self.lower_expr(first.left, scope)
        for node in reversed(spine):
            value = self.binary_step(node, value, scope)
        return value

    def binary_step(self, e: ast.Binary, left: Elaborated, scope: Scope) -> Elaborated:
        """e, given the value of its left operand."""
        a = self.as_tensor(left, e.left, f"the left operand of '{e.op}'")
        b = self.tensor_of(e.right, scope, f"the right operand of '{e.op}'")
        if isinstance(a, _Poison) or isinstance(b, _Poison):
            return POISON
        if e.op == ".":
            return self.ops.matmul(e, a, b)
        return self.ops.elementwise(e.op, a, b, e.span, e.left, e.right)

    def unary(self, e: ast.Unary, scope: Scope) -> Elaborated:
        a = self.tensor_of(e.operand, scope, f"the operand of '{e.op}'")
        if isinstance(a, _Poison):
            return a
        if e.op == "not":
            if a.dtype is not DataType.BOOL:
                return self.cx.error(e.span, f"'not' needs a bool operand, found {show(a.ty)}")
            if a.const is not None:
                return TV(BOOL, const=not a.const)
            value = self.cx.emit("not", [a.ir()], e.span)
            return TV(value.type, value, sym=a.sym)
        if a.dtype.is_bool:
            return self.cx.error(e.span, f"cannot negate a bool tensor ({show(a.ty)})")
        if a.const is not None and a.value is None:
            return TV(a.ty, weak=a.weak, const=-a.const)
        value = self.cx.emit("negate", [a.ir()], e.span)
        return TV(value.type, value, sym=a.sym)

    def transpose(self, e: ast.Transpose, scope: Scope) -> Elaborated:
        a = self.tensor_of(e.operand, scope, "the operand of '^T'")
        if isinstance(a, _Poison) or len(a.shape) < 2:
            return a
        value = self.cx.emit("transpose", [a.ir()], e.span)
        return TV(value.type, value, sym=tuple(reversed(a.sym)) if a.sym else None)

    def reshape(self, e: ast.Reshape, scope: Scope) -> Elaborated:
        a = self.tensor_of(e.operand, scope, "the operand of 'as'")
        shape = self.resolve.resolve_shape(e.shape, scope)
        if isinstance(a, _Poison) or shape is None:
            return POISON
        if math.prod(a.shape) != math.prod(shape):
            return self.cx.error(
                e.span,
                f"cannot reshape {shape_of(a)} ({math.prod(a.shape)} elements) to "
                f"{shape_str(shape)} ({math.prod(shape)} elements)",
            )
        if a.weak or a.value is None:
            a = TV(a.ty, a.ir(), sym=a.sym)
        if a.shape == shape:
            return a
        value = self.cx.emit("shapeCast", [a.ir()], e.span, shape=shape)
        return TV(value.type, value, sym=tuple(d.value for d in e.shape.dims) or None)

    # Aggregates -----------------------------------------------------------------------------

    def tuple_value(self, e: ast.Tuple, scope: Scope) -> Elaborated:
        parts = [self.lower_expr(x, scope) for x in e.elements]
        if any(isinstance(p, _Poison) for p in parts):
            return POISON
        tvs: list[TV] = []
        for p, x in zip(parts, e.elements):
            if not isinstance(p, TV):
                return self.cx.error(
                    x.span, f"a tuple element must be a value, found {describe(p)}"
                )
            tvs.append(p)
        return self.ops.make_tuple(tvs, e.span)

    def concat(self, e: ast.Concat, scope: Scope) -> Elaborated:
        parts = [self.tensor_of(x, scope, "a concatenated operand") for x in e.elements]
        if any(isinstance(p, _Poison) for p in parts):
            return POISON
        tvs = [p for p in parts if isinstance(p, TV)]
        axis = e.axis if e.axis is not None else 0
        return self.ops.concatenate(tvs, list(e.elements), axis, e.span)

    # Indexing -------------------------------------------------------------------------------

    def index(self, e: ast.Index, scope: Scope) -> Elaborated:
        special = self.recurrent_read(e, scope)
        if special is not None:
            return special
        base = self.lower_expr(e.operand, scope)
        if isinstance(base, _Poison):
            return base
        if isinstance(base, TV) and isinstance(base.ty, TupleType):
            return self.tuple_element(e, base, scope)
        if not isinstance(base, TV):
            return self.cx.error(e.operand.span, f"cannot index {describe(base)}")
        if len(e.subscripts) > len(base.shape):
            return self.cx.error(
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
                return self.cx.error(
                    sub.span, "'[*]' is only for declarations of a recurrent block"
                )
            if isinstance(sub, ast.Range):
                lo = self.index_constant(sub.lo, scope, 0, shape[axis], "slice start")
                hi = self.index_constant(sub.hi, scope, shape[axis], shape[axis], "slice end")
                if lo is None or hi is None:
                    return POISON
                if not 0 <= lo < hi <= shape[axis]:
                    return self.cx.error(
                        sub.span, f"slice {lo}:{hi} is empty or out of range for size {shape[axis]}"
                    )
                if (lo, hi) != (0, shape[axis]):
                    value = self.ops.slice_along(value, axis, lo, hi - 1, sub.span)
                    shape[axis] = hi - lo
                continue
            idx = self.lower_expr(sub.index, scope)
            if isinstance(idx, _Poison):
                return idx
            if not isinstance(idx, TV) or idx.shape or not idx.dtype.is_int:
                return self.cx.error(
                    sub.span, f"an index must be an integer, found {describe(idx)}"
                )
            if idx.const is not None:
                i = int(idx.const)
                if i < 0:
                    i += shape[axis]
                if not 0 <= i < shape[axis]:
                    return self.cx.error(
                        sub.span, f"index {idx.const} is out of range for size {shape[axis]}"
                    )
                value = self.ops.slice_along(value, axis, i, i, sub.span)
                picks.append(axis)
            elif axis == 0:
                dynamic = idx.ir()
            else:
                return self.cx.error(
                    sub.span,
                    "only the first subscript may be computed at run time; others must be numbers",
                )
        for axis in picks:  # descending: drop the picked unit dimensions
            value = self.cx.emit("squeezeShape", [value], e.span, index=axis)
        if dynamic is not None:
            value = self.cx.emit("extract", [value], e.span, keys=(ElementKey(value=dynamic),))
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
            self.cx.error(expr.span, f"the {what} must be an integer known at compile time")
            return None
        v = int(tv.const)
        return v + size if v < 0 else v

    def tuple_element(self, e: ast.Index, base: TV, scope: Scope) -> Elaborated:
        assert isinstance(base.ty, TupleType)
        n = len(base.ty.elements)
        sub = e.subscripts[0]
        if len(e.subscripts) != 1 or not isinstance(sub, ast.At):
            return self.cx.error(e.span, "a tuple takes one index, a number: t[0]")
        i = self.index_constant(sub.index, scope, 0, n, "tuple index")
        if i is None:
            return POISON
        if not 0 <= i < n:
            return self.cx.error(sub.span, f"index {i} is out of range for a tuple of {n}")
        value = self.cx.emit("extract", [base.ir()], e.span, keys=(ElementKey(index=i),))
        return TV(value.type, value)

    def recurrent_read(self, e: ast.Index, scope: Scope) -> Elaborated | None:
        """`h[t-1]` and `h[*]` of a recurrent declaration `h` of the model, which the
        declaration lowering puts in scope under those names; None for ordinary indexing."""
        if not isinstance(e.operand, ast.Name):
            return None
        name = e.operand.id
        root = self.cx.program.root
        block = root.recurrent_of.get(name)
        if block is None or scope.unit is not root:
            return None
        if len(e.subscripts) == 1 and isinstance(e.subscripts[0], ast.Every):
            tv = scope.values.get(f"{name}[*]")
            if tv is not None:
                return tv
            return self.cx.error(e.span, f"'{name}[*]' is only available after its recurrent block")
        if previous_step(e, block.var):
            tv = scope.values.get(f"{name}[{block.var}-1]")
            if tv is None:
                return self.cx.error(
                    e.span, f"'{name}[{block.var}-1]' is only available inside its recurrent block"
                )
            return tv
        sub = e.subscripts[0]
        if (
            len(e.subscripts) == 1
            and isinstance(sub, ast.At)
            and f"{name}[{block.var}-1]" in scope.values
        ):
            return self.cx.error(
                e.span,
                f"inside its block, '{name}' can be read as {name} (this step) or "
                f"{name}[{block.var}-1] (the previous one)",
            )
        return None

    # Conditionals ---------------------------------------------------------------------------

    def conditional(self, e: ast.Conditional, scope: Scope) -> Elaborated:
        c = self.tensor_of(e.condition, scope, "the condition")
        if isinstance(c, _Poison):
            return c
        if c.dtype is not DataType.BOOL:
            return self.cx.error(
                e.condition.span, f"the condition must be bool, found {show(c.ty)}"
            )
        if c.const is not None:
            return self.lower_expr(e.then if c.const else e.else_, scope)
        if c.shape:  # elementwise
            a = self.tensor_of(e.then, scope, "the 'then' value")
            b = self.tensor_of(e.else_, scope, "the 'else' value")
            if isinstance(a, _Poison) or isinstance(b, _Poison):
                return POISON
            return self.ops.select(c, a, b, e.span)
        return self.branch_values(c.ir(), e, scope)

    def branch_values(self, cond: Value, e: ast.Conditional, scope: Scope) -> Elaborated:
        """`if c then a else b` with a scalar condition: only the chosen side runs."""
        cx = self.cx
        then_block, else_block = cx.new_block("then"), cx.new_block("else")
        cx.emit(
            "conditional",
            [cond],
            e.span,
            then_=Successor(then_block, []),
            else_=Successor(else_block, []),
        )
        cx.b.at_end(then_block)
        a = self.tensor_of(e.then, scope, "the 'then' value")
        then_end = cx.b.block
        cx.b.at_end(else_block)
        b = self.tensor_of(e.else_, scope, "the 'else' value")
        else_end = cx.b.block
        assert then_end is not None and else_end is not None
        if isinstance(a, _Poison) or isinstance(b, _Poison):
            raise Abort
        dtype = self.ops.unify_dtypes("if", a, b, e.span)
        if dtype is None:
            raise Abort
        if a.shape != b.shape:
            cx.error(e.span, f"the branches have different shapes: {shape_of(a)} and {shape_of(b)}")
            raise Abort
        ty = TensorType(a.shape, dtype)
        join = cx.new_block("join", [("if_value", ty)])
        cx.b.at_end(then_end)
        cx.emit("branch", [], e.span, dest=Successor(join, [a.ir(dtype)]))
        cx.b.at_end(else_end)
        cx.emit("branch", [], e.span, dest=Successor(join, [b.ir(dtype)]))
        cx.b.at_end(join)
        return TV(ty, join.arguments[0], sym=a.sym)


def _role_noun(role: str) -> str:
    return {"in": "an input", "hidden": "a hidden value", "out": "an output"}.get(role, role)
