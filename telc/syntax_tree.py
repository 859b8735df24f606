"""Lark's parse tree to the syntax tree of telc/ast.py, each node with its span. Chains of one
operator (`a + b + c`), which the grammar keeps flat, become left-nested binary nodes here; a
number with too many digits (docs/tel.md, "Limits") is a located error."""

from __future__ import annotations

from typing import Any

from lark import Token, Transformer_NonRecursive, Tree, v_args

from dlvm.diagnostics import Diagnostic, DiagnosticError, Source
from telc import ast
from telc.limits import MAX_DIGITS, digits, help_line


def build(tree: Tree, source: Source) -> ast.Module:
    """The syntax tree of a parse tree; DiagnosticError for a number with too many digits."""
    builder = _Build(source, _chain_ends(tree))
    module = builder.transform(tree)
    if builder.diags:
        raise DiagnosticError(builder.diags)
    return module


def _chain_ends(tree: Tree) -> dict[int, list[int]]:
    """For each chain of an operator (a `binary` node of more than one operator), where each
    of its operands ends, parentheses included: the span of `(a) + (b)` in `(a) + (b) + c`
    ends after `(b)`, where its own syntax tree node ends before the `)`."""
    ends: dict[int, list[int]] = {}
    stack = [tree]
    while stack:
        node = stack.pop()
        if node.data == "binary" and len(node.children) > 3:
            ends[id(node.meta)] = [_end(c) for c in node.children[::2]]
        stack.extend(c for c in node.children if isinstance(c, Tree))
    return ends


def _end(child: Tree | Token) -> int:
    if isinstance(child, Token):
        return child.end_pos or 0
    return int(getattr(child.meta, "container_end_pos", child.meta.end_pos))


@v_args(meta=True)
class _Build(Transformer_NonRecursive):
    """Turns lark's tree into telc.ast nodes with spans (bottom-up, without recursion, so a
    tree of any depth is fine)."""

    def __init__(self, source: Source, chain_ends: dict[int, list[int]]) -> None:
        super().__init__()
        self.source = source
        self.chain_ends = chain_ends
        self.diags: list[Diagnostic] = []

    def _span(self, meta: Any) -> ast.Span:
        if getattr(meta, "empty", True):
            return ast.Span(self.source, 0, 0)
        return ast.Span(self.source, meta.start_pos, meta.end_pos)

    def _tok(self, tok: Token) -> ast.Span:
        return ast.Span(self.source, tok.start_pos or 0, tok.end_pos or 0)

    # Items
    def start(self, meta, items):
        return ast.Module(self._span(meta), tuple(items))

    def module_decl(self, meta, c):
        return ast.ModuleDecl(self._span(meta), str(c[0]))

    def type_decl(self, meta, c):
        return ast.TypeDecl(self._span(meta), str(c[0]), self._tok(c[0]))

    def use_decl(self, meta, c):
        return ast.UseDecl(self._span(meta), str(c[0]), c[0].type == "PATH", self._tok(c[0]))

    def dim_decl(self, meta, c):
        return ast.DimDecl(self._span(meta), str(c[0]), c[1])

    def const_decl(self, meta, c):
        return ast.ConstDecl(self._span(meta), str(c[0]), c[1])

    def declaration(self, meta, c):
        name, role, type_, init, value = c
        return ast.Declaration(
            self._span(meta),
            str(name),
            str(role),
            type_,
            init,
            value,
            self._tok(name),
            self._tok(role),
        )

    def recurrent(self, meta, c):
        return ast.Recurrent(self._span(meta), str(c[0]), c[1], c[2], tuple(c[3:]))

    def update(self, meta, c):
        return ast.Update(self._span(meta), str(c[0]), c[1], self._tok(c[0]))

    def train(self, meta, c):
        name, objective, opt, args = c
        return ast.Train(
            self._span(meta),
            str(name) if name is not None else None,
            objective,
            str(opt),
            tuple(args or ()),
            self._tok(opt),
        )

    def function(self, meta, c):
        export, name, params, result, body = c
        return ast.Function(
            self._span(meta),
            str(name),
            tuple(params or ()),
            result,
            body,
            export is not None,
            self._tok(name),
            params is None,
        )

    def parameters(self, meta, c):
        return [p for p in c if p is not None]

    def parameter(self, meta, c):
        return ast.Parameter(self._span(meta), str(c[0]), c[1], c[2])

    # Types
    def tensor_type(self, meta, c):
        return ast.TensorType(self._span(meta), str(c[0]) if c[0] is not None else None, c[1])

    def scalar_type(self, meta, c):
        return ast.ScalarType(self._span(meta), str(c[0]))

    def tuple_type(self, meta, c):
        return ast.TupleType(self._span(meta), tuple(c))

    def type_spec(self, meta, c):
        return c[0]

    def _dim(self, tok: Token | ast.Dim) -> ast.Dim:
        if isinstance(tok, ast.Dim):
            return tok
        value: int | str = self._number(tok) if tok.type == "INT" else str(tok)  # type: ignore[assignment]
        return ast.Dim(self._tok(tok), value)

    def dim_binary(self, meta, c):
        left, op, right = c
        if op == "%":
            self.diags.append(
                Diagnostic(
                    "'%' in a dimension: a dimension is an integer expression of dims and "
                    "integers with + - * / and parentheses",
                    self._tok(op).loc,
                )
            )
        return ast.dim_binary(self._span(meta), str(op), self._dim(left), self._dim(right))

    def _dim_of(self, e: ast.Expr) -> ast.Dim:
        """A dimension of a shape written in an expression (`[B x 4 * H]`), where the grammar
        reads each one as an expression: numbers and names, with + - * / (docs/tel.md,
        "Shape arithmetic"). Anything else is reported."""
        if isinstance(e, ast.Name):
            return ast.Dim(e.span, e.id)
        if isinstance(e, ast.Number) and isinstance(e.value, int):
            return ast.Dim(e.span, e.value)
        if isinstance(e, ast.Binary) and e.op in ast.DIM_OPS:
            return ast.dim_binary(e.span, e.op, self._dim_of(e.left), self._dim_of(e.right))
        self.diags.append(
            Diagnostic(
                "a dimension is an integer expression of dims and integers with + - * / and "
                "parentheses",
                e.span.loc,
            )
        )
        return ast.Dim(e.span, 1)

    def _number(self, tok: Token) -> int | float:
        """The value of an INT or FLOAT token; 0 after reporting one with too many digits
        (Python would refuse to convert an integer of more than 4300, and take time over
        fewer)."""
        text = str(tok)
        count = digits(text)
        if count > MAX_DIGITS:
            kind = "integer" if tok.type == "INT" else "number"
            fix = (
                "an integer must fit in i64 (at most 9223372036854775807); "
                "write a large float with an exponent, such as 1e300"
                if tok.type == "INT"
                else "write it with an exponent, such as 1.5e300"
            )
            self.diags.append(
                Diagnostic(
                    f"{kind} literal too large: {count} digits, above the limit of {MAX_DIGITS}",
                    self._tok(tok).loc,
                    notes=(help_line(fix),),
                )
            )
            return 0
        return int(text.lstrip("0") or "0") if tok.type == "INT" else float(text)

    def shape(self, meta, c):
        return ast.Shape(self._span(meta), tuple(self._dim(t) for t in c))

    def rest_shape(self, meta, c):
        return ast.Shape(self._span(meta), (), str(c[0]))

    # Statements
    def block(self, meta, c):
        return ast.Block(self._span(meta), tuple(c))

    def let(self, meta, c):
        return ast.Let(self._span(meta), str(c[0]), c[1], c[2])

    def let_tuple(self, meta, c):
        return ast.LetTuple(self._span(meta), tuple(str(n) for n in c[:-1]), c[-1])

    def var(self, meta, c):
        return ast.Var(self._span(meta), str(c[0]), c[1], c[2])

    def assign(self, meta, c):
        return ast.Assign(self._span(meta), str(c[0]), c[1])

    def if_statement(self, meta, c):
        return ast.IfStatement(self._span(meta), c[0], c[1], c[2])

    def for_statement(self, meta, c):
        return ast.ForStatement(self._span(meta), str(c[0]), c[1], c[2], c[3])

    def return_(self, meta, c):
        return ast.Return(self._span(meta), c[0])

    # Expressions
    def conditional(self, meta, c):
        return ast.Conditional(self._span(meta), c[0], c[1], c[2])

    def binary(self, meta, c):
        """`a OP b`, or a chain `a OP b OP c …` folded to the left: ((a OP b) OP c) …"""
        ends = self.chain_ends.get(id(meta))
        left = c[0]
        for i in range(1, len(c), 2):
            op = "." if c[i] == "•" else str(c[i])
            span = self._span(meta)
            if ends is not None:
                span = ast.Span(self.source, span.start, ends[(i + 1) // 2])
            left = ast.Binary(span, op, left, c[i + 1])
        return left

    def unary(self, meta, c):
        return ast.Unary(self._span(meta), str(c[0]), c[1])

    def reshape(self, meta, c):
        return ast.Reshape(self._span(meta), c[0], c[1])

    def transpose(self, meta, c):
        return ast.Transpose(self._span(meta), c[0])

    def index(self, meta, c):
        return ast.Index(self._span(meta), c[0], tuple(c[1:]))

    def call(self, meta, c):
        return ast.Call(self._span(meta), c[0], tuple(c[1] or ()))

    def name(self, meta, c):
        return ast.Name(self._tok(c[0]), str(c[0]))

    def number(self, meta, c):
        return ast.Number(self._tok(c[0]), self._number(c[0]))

    def boolean(self, meta, c):
        return ast.Boolean(self._tok(c[0]), c[0] == "true")

    def tuple(self, meta, c):
        return ast.Tuple(self._span(meta), tuple(e for e in c if e is not None))

    def concat(self, meta, c):
        axis = c[-1]
        return ast.Concat(
            self._span(meta), tuple(c[:-1]), self._number(axis) if axis is not None else None
        )

    def shape_literal(self, meta, c):
        span = self._span(meta)
        if (
            len(c) == 1
            and isinstance(c[0], Token)
            and c[0].type == "NAME"
            and "..." in (span.text())
        ):
            return ast.ShapeLiteral(span, ast.Shape(span, (), str(c[0])))
        dims = tuple(self._dim(t) if isinstance(t, Token) else self._dim_of(t) for t in c)
        return ast.ShapeLiteral(span, ast.Shape(span, dims))

    def at(self, meta, c):
        return ast.At(self._span(meta), c[0])

    def range(self, meta, c):
        return ast.Range(self._span(meta), c[0], c[1])

    def every(self, meta, c):
        return ast.Every(self._span(meta))

    def arguments(self, meta, c):
        return list(c)

    def keyword(self, meta, c):
        return ast.Keyword(self._span(meta), str(c[0]), c[1])


# `return` is a Python keyword: lark looks up the rule's method by name.
setattr(_Build, "return", _Build.return_)
