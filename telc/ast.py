"""The TEL syntax tree: one frozen dataclass per grammar rule (telc/grammar.lark names them in
snake case), each carrying the span of source it was parsed from."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from dlvm.diagnostics import Location, Source


@dataclass(frozen=True, slots=True)
class Span:
    """Characters [start, end) of a source file."""

    source: Source = field(repr=False, compare=False)
    start: int
    end: int

    @property
    def loc(self) -> Location:
        return Location(self.source, self.start, max(1, self.end - self.start))

    def text(self) -> str:
        return self.source.text[self.start : self.end]

    def to(self, other: Span) -> Span:
        return Span(self.source, self.start, other.end)


@dataclass(frozen=True, slots=True)
class Node:
    span: Span = field(repr=False, compare=False)


# Types ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Dim(Node):
    """One dimension of a written shape: a number, a name, or arithmetic on dimensions
    (`4 * H`: `op`, one of + - * /, with its two `operands`; `value` is then the text that
    messages show, `4 * H`)."""

    value: int | str
    op: str | None = None
    operands: tuple[Dim, ...] = ()

    @property
    def variable(self) -> str | None:
        """The name, for a dimension that is a name alone."""
        return self.value if self.op is None and isinstance(self.value, str) else None

    def names(self) -> list[str]:
        """The names the dimension uses, in order of first use."""
        out: list[str] = []
        stack = [self]
        while stack:
            d = stack.pop()
            if d.op is not None:
                stack.extend(reversed(d.operands))
            elif isinstance(d.value, str) and d.value not in out:
                out.append(d.value)
        return out


DIM_OPS = {"+": 1, "-": 1, "*": 2, "/": 2}  # the operators of dimensions, by precedence


def dim_binary(span: Span, op: str, left: Dim, right: Dim) -> Dim:
    """`left op right` as a dimension, with its text (parenthesised only where needed)."""

    def text(d: Dim, tighter: bool) -> str:
        loose = d.op is not None and (
            DIM_OPS[d.op] < DIM_OPS[op] or (tighter and DIM_OPS[d.op] == DIM_OPS[op])
        )
        return f"({d.value})" if loose else str(d.value)

    return Dim(span, f"{text(left, False)} {op} {text(right, op in '-/')}", op, (left, right))


@dataclass(frozen=True, slots=True)
class Shape(Node):
    """`[d x d …]`, `[]`, or (with `rest` set) `[S...]`."""

    dims: tuple[Dim, ...] = ()
    rest: str | None = None


@dataclass(frozen=True, slots=True)
class TensorType(Node):
    """`f32[B x 64]` or `[B x 64]` (dtype None: the default or, in a signature, the call's)."""

    dtype: str | None
    shape: Shape


@dataclass(frozen=True, slots=True)
class ScalarType(Node):
    dtype: str


@dataclass(frozen=True, slots=True)
class TupleType(Node):
    elements: tuple[TypeSpec, ...]


TypeSpec = TensorType | ScalarType | TupleType


# Expressions ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Name(Node):
    id: str


@dataclass(frozen=True, slots=True)
class Number(Node):
    value: int | float


@dataclass(frozen=True, slots=True)
class Boolean(Node):
    value: bool


@dataclass(frozen=True, slots=True)
class Binary(Node):
    """Every infix operator: `+ - * / % ** . • < <= > >= == != and or`."""

    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class Unary(Node):
    op: str  # "-" or "not"
    operand: Expr


@dataclass(frozen=True, slots=True)
class Transpose(Node):
    operand: Expr


@dataclass(frozen=True, slots=True)
class At(Node):
    """A subscript that picks one index: `x[i]`, `h[t-1]`."""

    index: Expr


@dataclass(frozen=True, slots=True)
class Range(Node):
    """A half-open slice subscript `lo:hi` (either bound may be omitted)."""

    lo: Expr | None
    hi: Expr | None


@dataclass(frozen=True, slots=True)
class Every(Node):
    """`h[*]`: every step of a recurrent declaration."""


Subscript = At | Range | Every


@dataclass(frozen=True, slots=True)
class Index(Node):
    operand: Expr
    subscripts: tuple[Subscript, ...]


@dataclass(frozen=True, slots=True)
class Keyword(Node):
    """A keyword argument `axis: 1`."""

    name: str
    value: Expr


@dataclass(frozen=True, slots=True)
class Call(Node):
    callee: Expr
    arguments: tuple[Expr | Keyword, ...]

    @property
    def positional(self) -> list[Expr]:
        return [a for a in self.arguments if not isinstance(a, Keyword)]

    @property
    def keywords(self) -> list[Keyword]:
        return [a for a in self.arguments if isinstance(a, Keyword)]


@dataclass(frozen=True, slots=True)
class Tuple(Node):
    elements: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Concat(Node):
    """`[a, b]` or `[a, b] @ axis`."""

    elements: tuple[Expr, ...]
    axis: int | None


@dataclass(frozen=True, slots=True)
class ShapeLiteral(Node):
    """A shape in an expression: the `shape:` argument of random, normal, zeros, ones."""

    shape: Shape


@dataclass(frozen=True, slots=True)
class Conditional(Node):
    """`if c then a else b`."""

    condition: Expr
    then: Expr
    else_: Expr


@dataclass(frozen=True, slots=True)
class Reshape(Node):
    """`e as [shape]`."""

    operand: Expr
    shape: Shape


@dataclass(frozen=True, slots=True)
class Imported(Node):
    """What a file other than TEL gives the model (`use ./model.onnx`): the initial value of one
    of the graph's parameters, or the body of the graph's def. `value` is the array or the graph
    (telc/onnx_use.py); `reads` names the declarations and flags it depends on, so that the
    queries that walk the tree (which parameters a def reads, whether it reads `training`) see
    them. Never parsed: the spans are the `use`'s."""

    what: str
    value: object = field(repr=False, compare=False)
    reads: tuple[Name, ...] = ()


Expr = (
    Name
    | Number
    | Boolean
    | Binary
    | Unary
    | Transpose
    | Index
    | Call
    | Tuple
    | Concat
    | ShapeLiteral
    | Conditional
    | Reshape
    | Imported
)


# Statements ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Let(Node):
    name: str
    type: TypeSpec | None
    value: Expr


@dataclass(frozen=True, slots=True)
class LetTuple(Node):
    names: tuple[str, ...]
    value: Expr


@dataclass(frozen=True, slots=True)
class Var(Node):
    name: str
    type: TypeSpec | None
    value: Expr


@dataclass(frozen=True, slots=True)
class Assign(Node):
    name: str
    value: Expr


@dataclass(frozen=True, slots=True)
class Block(Node):
    statements: tuple[Statement, ...]


@dataclass(frozen=True, slots=True)
class IfStatement(Node):
    condition: Expr
    then: Block
    else_: Block | IfStatement | None


@dataclass(frozen=True, slots=True)
class ForStatement(Node):
    var: str
    lo: Expr
    hi: Expr
    body: Block


@dataclass(frozen=True, slots=True)
class Return(Node):
    value: Expr


Statement = Let | LetTuple | Var | Assign | IfStatement | ForStatement | Return


# Module items --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ModuleDecl(Node):
    name: str


@dataclass(frozen=True, slots=True)
class TypeDecl(Node):
    dtype: str
    dtype_span: Span = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class UseDecl(Node):
    """`use nn` (a stdlib module) or `use ./layers` (is_path: a file next to this one)."""

    target: str
    is_path: bool
    target_span: Span = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class DimDecl(Node):
    name: str
    value: Expr


@dataclass(frozen=True, slots=True)
class ConstDecl(Node):
    name: str
    value: Expr


ROLES = ("in", "param", "buffer", "hidden", "out")


@dataclass(frozen=True, slots=True)
class Declaration(Node):
    """`name: role [type] [init e] [= e]` (classic TEL)."""

    name: str
    role: str
    type: TypeSpec | None
    init: Expr | None
    value: Expr | None
    name_span: Span = field(repr=False, compare=False)
    role_span: Span = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class Recurrent(Node):
    var: str
    lo: Expr
    hi: Expr
    declarations: tuple[Declaration, ...]


@dataclass(frozen=True, slots=True)
class Update(Node):
    """`name <- e`: the value buffer `name` holds after each train step."""

    name: str
    value: Expr
    name_span: Span = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class Train(Node):
    name: str | None
    objective: Expr
    optimizer: str
    arguments: tuple[Expr | Keyword, ...]
    optimizer_span: Span = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class Parameter(Node):
    name: str
    type: TypeSpec
    default: Expr | None


@dataclass(frozen=True, slots=True)
class Function(Node):
    name: str
    parameters: tuple[Parameter, ...]
    result: TypeSpec | None
    body: Expr | Block
    export: bool
    name_span: Span = field(repr=False, compare=False)
    bare: bool = False  # written without a parameter list: `export def grads = grad(loss, …)`


Item = (
    ModuleDecl
    | TypeDecl
    | UseDecl
    | DimDecl
    | ConstDecl
    | Declaration
    | Recurrent
    | Update
    | Train
    | Function
)


@dataclass(frozen=True, slots=True)
class Module(Node):
    """One parsed `.tel` file."""

    items: tuple[Item, ...]


def dump(module: Module) -> str:
    """The tree as indented text, one node per line with its line:col and its plain fields
    (`telc --emit ast`); child nodes follow indented under the field that holds them. The walk
    keeps its own stack: a chain `a + b + c …` is as deep as it is long."""
    lines: list[str] = []
    stack: list[tuple[Node, str, int]] = [(item, "", 0) for item in reversed(module.items)]
    while stack:
        node, label, depth = stack.pop()
        line, col = node.span.loc.line_col
        plain = []
        children: list[tuple[Node, str, int]] = []
        for f in fields(node):
            value = getattr(node, f.name)
            if isinstance(value, Span):
                continue
            items = value if isinstance(value, tuple) else (value,)
            if value != () and all(isinstance(v, Node) for v in items):
                many = isinstance(value, tuple)
                labels = [f"{f.name}[{i}]" if many else f.name for i in range(len(items))]
                children += [(v, name, depth + 1) for v, name in zip(items, labels)]
            elif value is not None and value != () and value is not False:
                plain.append(
                    f"{f.name}={value!r}" if isinstance(value, str) else f"{f.name}={value}"
                )
        head = "  " * depth + (f"{label}: " if label else "") + type(node).__name__
        lines.append(" ".join([head, f"<{line}:{col}>", *plain]))
        stack.extend(reversed(children))
    return "\n".join(lines) + "\n"
