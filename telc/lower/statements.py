"""Function bodies: `let`, `var` and assignment as SSA values, `if` and `for` as IR blocks whose
arguments carry the variables assigned inside them, `return`."""

from __future__ import annotations

from dlvm.ir.types import DataType, TensorType, TupleType, Type
from dlvm.ir.values import ElementKey, Successor, Value
from telc import ast
from telc.lower.context import Abort, Context, FnState, InlineReturn, Scope
from telc.lower.exprs import ExprLowerer
from telc.lower.resolve import Resolver
from telc.lower.values import POISON, TV, Elaborated, _Poison, describe, show
from telc.lower.walk import assigned_names


def _binds(stmt: ast.Statement) -> list[str]:
    if isinstance(stmt, ast.Let | ast.Var | ast.Assign):
        return [stmt.name]
    if isinstance(stmt, ast.LetTuple):
        return list(stmt.names)
    return []


def _values(scope: Scope, names: list[str]) -> list[tuple[str, TV]]:
    """The names of `names` whose values in scope are values (not POISON), with them."""
    out = []
    for n in names:
        tv = scope.values.get(n)
        if isinstance(tv, TV):
            out.append((n, tv))
    return out


class StatementLowerer:
    """Elaboration of statements and function bodies."""

    def __init__(self, cx: Context, exprs: ExprLowerer, resolve: Resolver) -> None:
        self.cx = cx
        self.exprs = exprs
        self.resolve = resolve

    def lower_body(self, fn: ast.Function, scope: Scope, state: FnState, declared: bool) -> None:
        """fn's body into the current function; Abort when it leaves the result type unknown
        (`declared`: the signature gives it)."""
        if isinstance(fn.body, ast.Block):
            end = self.block(fn.body, scope)
            if end is not None:
                self.cx.error(
                    fn.body.span.to(fn.body.span), f"'{fn.name}' can end without 'return'"
                )
        else:
            self.return_value(fn.body, fn.body.span, scope)
        if state.result is None and not declared:
            raise Abort

    def block(self, block: ast.Block, scope: Scope) -> Scope | None:
        """Lowers the statements; the scope after them, or None when every path returned."""
        with self.cx.deeper(block.span) as within:
            if not within:
                raise Abort
            return self.statements(block, scope)

    def statements(self, block: ast.Block, scope: Scope) -> Scope | None:
        current: Scope | None = scope.child()
        for stmt in block.statements:
            if current is None:
                self.cx.error(
                    stmt.span, "this statement is never reached: every path before it returns"
                )
                return None
            before = current
            try:
                current = self.statement(stmt, current)
            except Abort:
                # Reported; names it binds become POISON so later statements are still checked
                # without repeating the error.
                current = before
                for name in _binds(stmt):
                    current.values[name] = POISON
                if isinstance(stmt, ast.Var):
                    current.mutable.add(stmt.name)
                if isinstance(stmt, ast.Return):
                    current = None
        if current is None:
            return None
        # Only variables that existed before the block leave it.
        out = scope.child()
        for name in scope.mutable:
            if name in current.values:
                out.values[name] = current.values[name]
        return out

    def statement(self, s: ast.Statement, scope: Scope) -> Scope | None:
        if isinstance(s, ast.Let | ast.Var):
            tv = self.bound_value(s.value, s.type, scope, s.name)
            scope.values[s.name] = tv
            if isinstance(s, ast.Var):
                scope.mutable.add(s.name)
            else:
                scope.mutable.discard(s.name)
            return scope
        if isinstance(s, ast.LetTuple):
            return self.unpack(s, scope)
        if isinstance(s, ast.Assign):
            return self.assign(s, scope)
        if isinstance(s, ast.Return):
            self.return_value(s.value, s.span, scope)
            return None
        if isinstance(s, ast.IfStatement):
            return self.if_statement(s, scope)
        if isinstance(s, ast.ForStatement):
            return self.for_statement(s, scope)
        raise AssertionError(s)

    def unpack(self, s: ast.LetTuple, scope: Scope) -> Scope:
        tv = self.exprs.lower_expr(s.value, scope)
        if isinstance(tv, _Poison):
            raise Abort
        if not isinstance(tv, TV) or not isinstance(tv.ty, TupleType):
            self.cx.error(s.value.span, f"cannot unpack {describe(tv)}: it is not a tuple")
            raise Abort
        n = len(tv.ty.elements)
        if n != len(s.names):
            self.cx.error(s.span, f"cannot unpack a tuple of {n} into {len(s.names)} names")
            raise Abort
        for i, name in enumerate(s.names):
            v = self.cx.emit("extract", [tv.ir()], s.span, keys=(ElementKey(index=i),))
            self.cx.name_value(v, name)
            scope.values[name] = TV(v.type, v)
            scope.mutable.discard(name)
        return scope

    def bound_value(
        self, value: ast.Expr, spec: ast.TypeSpec | None, scope: Scope, name: str
    ) -> Elaborated:
        tv = self.exprs.lower_expr(value, scope)
        if isinstance(tv, _Poison):
            raise Abort
        if spec is not None and isinstance(tv, TV):
            ty = self.resolve.resolve_type(spec, scope)
            if ty is None:
                raise Abort
            v = self.cx.coerce(tv, ty, value.span, f"'{name}'")
            if isinstance(v, _Poison):
                raise Abort
            tv = TV(
                ty,
                v,
                sym=tuple(d.value for d in spec.shape.dims)
                if isinstance(spec, ast.TensorType)
                else None,
            )
        if isinstance(tv, TV):
            self.cx.name_value(tv.value, name)
        return tv

    def assign(self, s: ast.Assign, scope: Scope) -> Scope:
        if s.name not in scope.values:
            self.cx.error(
                s.span, f"'{s.name}' is not declared; declare it first with 'var {s.name} = …'"
            )
            raise Abort
        if s.name not in scope.mutable:
            self.cx.error(
                s.span,
                f"cannot assign to '{s.name}': it is bound with 'let' (use 'var' to reassign)",
            )
            raise Abort
        old = scope.values[s.name]
        tv = self.exprs.lower_expr(s.value, scope)
        if isinstance(tv, _Poison):
            raise Abort
        if isinstance(old, TV) and isinstance(tv, TV):
            ty = old.ty
            if not tv.weak and tv.ty != ty:
                self.cx.error(
                    s.value.span,
                    f"'{s.name}' holds {show(ty)}; the new value is {show(tv.ty)} (a variable "
                    "keeps its type)",
                )
                raise Abort
            v = self.cx.coerce(tv, ty, s.value.span, f"'{s.name}'")
            if isinstance(v, _Poison):
                raise Abort
            self.cx.name_value(v, s.name)
            scope.values[s.name] = TV(ty, v, sym=old.sym)
        else:
            scope.values[s.name] = tv
        return scope

    def return_value(self, value: ast.Expr, span: ast.Span, scope: Scope) -> None:
        fn = self.cx.fn
        assert fn is not None
        tv = self.exprs.lower_expr(value, scope)
        if isinstance(tv, _Poison):
            raise Abort
        if not isinstance(tv, TV):
            self.cx.error(value.span, f"cannot return {describe(tv)}")
            raise Abort
        if self.cx.inlining:  # the block branches to the call's result block once all are known
            frame = self.cx.inlining[-1]
            if frame.result is None:
                frame.result = TV(tv.ty, tv.ir()).ty if tv.weak else tv.ty
            assert self.cx.b.block is not None
            frame.returns.append(InlineReturn(self.cx.b.block, tv, value.span))
            return
        ty = fn.result or tv.ty
        v = self.cx.coerce(tv, ty, value.span, f"the result of '{fn.tel_name}'")
        if isinstance(v, _Poison):
            raise Abort
        fn.result = ty
        self.cx.emit("return", [v], span)

    # Control flow ---------------------------------------------------------------------------

    def condition(self, e: ast.Expr, scope: Scope) -> TV:
        c = self.exprs.tensor_of(e, scope, "the condition")
        if isinstance(c, _Poison):
            raise Abort
        if c.dtype is not DataType.BOOL or c.shape:
            self.cx.error(
                e.span, f"the condition of 'if' must be a bool scalar, found {show(c.ty)}"
            )
            raise Abort
        return c

    def if_statement(self, s: ast.IfStatement, scope: Scope) -> Scope | None:
        cx = self.cx
        c = self.condition(s.condition, scope)
        else_: ast.Block | None
        if isinstance(s.else_, ast.IfStatement):
            else_ = ast.Block(s.else_.span, (s.else_,))
        else:
            else_ = s.else_
        if c.const is not None:
            taken = s.then if c.const else else_
            return self.block(taken, scope) if taken is not None else scope
        then_block, else_block = cx.new_block("then"), cx.new_block("else")
        cx.emit(
            "conditional",
            [c.ir()],
            s.span,
            then_=Successor(then_block, []),
            else_=Successor(else_block, []),
        )
        ends = []
        for blk, body in ((then_block, s.then), (else_block, else_)):
            cx.b.at_end(blk)
            after = self.block(body, scope) if body is not None else scope.child()
            if after is not None:
                assert cx.b.block is not None
                ends.append((cx.b.block, after))
        if not ends:
            return None
        changed = [
            n
            for n in sorted(scope.mutable)
            if any(a.values.get(n) is not scope.values.get(n) for _, a in ends)
        ]
        carried = _values(scope, changed)
        join = cx.new_block("endif", [(n, tv.ty) for n, tv in carried])
        for blk, after in ends:
            cx.b.at_end(blk)
            values = [self.carried_value(after, n, tv.ty, s.span) for n, tv in carried]
            cx.emit("branch", [], s.span, dest=Successor(join, values))
        cx.b.at_end(join)
        out = scope.child()
        for (n, tv), a in zip(carried, join.arguments):
            out.values[n] = TV(a.type, a, sym=tv.sym)
        return out

    def carried_value(self, scope: Scope, name: str, ty: Type, span: ast.Span) -> Value:
        tv = scope.values[name]
        if not isinstance(tv, TV):  # its assignment had an error, already reported
            raise Abort
        v = self.cx.coerce(tv, ty, span, f"'{name}'")
        if isinstance(v, _Poison):
            raise Abort
        return v

    def for_statement(self, s: ast.ForStatement, scope: Scope) -> Scope:
        cx = self.cx
        lo = self.exprs.tensor_of(s.lo, scope, "the loop start")
        hi = self.exprs.tensor_of(s.hi, scope, "the loop end")
        if isinstance(lo, _Poison) or isinstance(hi, _Poison):
            raise Abort
        for tv, e in ((lo, s.lo), (hi, s.hi)):
            if tv.shape or not tv.dtype.is_int:
                cx.error(e.span, f"a loop bound must be an integer scalar, found {describe(tv)}")
                raise Abort
        dtype = hi.dtype if not hi.weak else lo.dtype if not lo.weak else DataType.I64
        counter = TensorType((), dtype)
        carried = _values(scope, [n for n in assigned_names(s.body) if n in scope.mutable])
        header = cx.new_block(
            "for_" + s.var, [(s.var, counter)] + [(n, tv.ty) for n, tv in carried]
        )
        body_block, exit_block = cx.new_block(s.var + "_body"), cx.new_block(s.var + "_exit")
        start = [self.carried_value(scope, n, tv.ty, s.span) for n, tv in carried]
        cx.emit("branch", [], s.span, dest=Successor(header, [lo.ir(dtype), *start]))
        cx.b.at_end(header)
        i = header.arguments[0]
        more = cx.emit("lessThan", [i, hi.ir(dtype)], s.span)
        cx.emit(
            "conditional",
            [more],
            s.span,
            then_=Successor(body_block, []),
            else_=Successor(exit_block, []),
        )
        inner = scope.child()
        inner.values[s.var] = TV(counter, i)
        inner.mutable.discard(s.var)
        for (n, tv), a in zip(carried, header.arguments[1:]):
            inner.values[n] = TV(a.type, a, sym=tv.sym)
        cx.b.at_end(body_block)
        after = self.block(s.body, inner)
        if after is not None:
            nxt = cx.emit("add", [i, TV(counter, weak=True, const=1).ir(dtype)], s.span)
            values = [self.carried_value(after, n, tv.ty, s.span) for n, tv in carried]
            cx.emit("branch", [], s.span, dest=Successor(header, [nxt, *values]))
        cx.b.at_end(exit_block)
        out = scope.child()
        for (n, tv), a in zip(carried, header.arguments[1:]):
            out.values[n] = TV(a.type, a, sym=tv.sym)
        return out
