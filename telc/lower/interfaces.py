"""The interfaces through which parts of the lowering that need each other both ways see each
other: expressions contain calls and calls lower expressions; dims, consts and built-in
arguments are expressions that written types and the built-in registry evaluate."""

from __future__ import annotations

from typing import Protocol

from telc import ast
from telc.lower.context import Scope
from telc.lower.values import TV, Elaborated, _Poison


class ExprLowering(Protocol):
    """Elaborates expressions (telc.lower.exprs.ExprLowerer)."""

    def lower_expr(self, e: ast.Expr, scope: Scope) -> Elaborated: ...

    def tensor_of(self, e: ast.Expr, scope: Scope, what: str) -> TV | _Poison:
        """An expression that must be a tensor (or a number); `what` names it in the error."""
        ...


class CallLowering(Protocol):
    """Elaborates calls of built-ins and defs (telc.lower.calls.CallLowerer)."""

    def lower_call(self, e: ast.Call, scope: Scope) -> Elaborated: ...
