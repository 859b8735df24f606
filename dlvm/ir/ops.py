"""The instruction set, each instruction declared once (docs/ir.md, "Instructions").

A declaration holds the name, the textual syntax template, the result-type rule, the effects and
differentiability. The parser, printer, builder and verifier read it; the interpreter and the
transforms key their own tables by `name`.

Syntax templates: `$0` is a typed use of operand 0, `$0:name` / `$0:type` its two halves,
`$0:literal` a use that may be an aggregate literal, `$*` a comma list of the remaining operands,
`{name:kind}` an attribute, `[ … ]` an optional group, anything else a word or punctuation.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dlvm.ir import adjoints as A
from dlvm.ir import typerules as R
from dlvm.ir.types import Type
from dlvm.ir.values import Instruction, Successor

TypeRule = Callable[[list[Type], dict[str, Any]], Type]

# The families whose instructions are elementwise (OpDef.elementwise): the passes and the code
# generator ask the declaration, not a list of their own.
ELEMENTWISE_FAMILIES = frozenset({"unary", "binary", "boolean", "shift", "compare", "select"})

# Attribute kinds and their Python representation:
#   int: int            ints: tuple[int, ...]       dtype: DataType      type: Type
#   shape: tuple[int]   comb: str | Value            padmode: str         pairs: tuple[(int, int)]
#   keys: tuple[ElementKey]   successor: Successor   cases: tuple[(str, Block), ...]
ATTR_KINDS = (
    "int",
    "ints",
    "dtype",
    "type",
    "shape",
    "comb",
    "padmode",
    "pairs",
    "keys",
    "successor",
    "cases",
)


@dataclass(frozen=True, slots=True)
class Piece:
    """One element of a parsed syntax template."""

    kind: str  # word | operand | operands | attr | optional
    text: str = ""  # word text, operand mode (use|name|type|literal), or attr kind
    index: int = 0  # operand index
    name: str = ""  # attribute name
    group: tuple[Piece, ...] = ()


_TEMPLATE_TOKEN = re.compile(r"\$\*|\$\d+(?::\w+)?|\{[^}]*\}|[\[\](),:]|[^\s\[\](),:]+")


def parse_template(syntax: str) -> tuple[Piece, ...]:
    tokens = _TEMPLATE_TOKEN.findall(syntax)
    pos = 0

    def seq(stop: str | None) -> tuple[Piece, ...]:
        nonlocal pos
        out: list[Piece] = []
        while pos < len(tokens):
            tok = tokens[pos]
            pos += 1
            if tok == stop:
                return tuple(out)
            if tok == "[":
                out.append(Piece("optional", group=seq("]")))
            elif tok == "$*":
                out.append(Piece("operands"))
            elif tok.startswith("$"):
                idx, _, mode = tok[1:].partition(":")
                out.append(Piece("operand", mode or "use", int(idx)))
            elif tok.startswith("{") and tok.endswith("}"):
                name, _, kind = tok[1:-1].partition(":")
                assert kind in ATTR_KINDS, f"unknown attribute kind {kind!r} in {syntax!r}"
                out.append(Piece("attr", kind, name=name))
            else:
                out.append(Piece("word", tok))
        assert stop is None, f"unclosed group in {syntax!r}"
        return tuple(out)

    return seq(None)


@dataclass(eq=False)
class OpDef:
    """The declaration of one instruction."""

    name: str
    family: str
    syntax: str
    rule: TypeRule
    aliases: tuple[str, ...] = ()
    terminator: bool = False
    writes: bool = False  # writes memory or other state (stack, refcounts)
    reads: bool = False  # reads memory: not movable across writes
    traps: bool = False
    nondet: bool = False  # two evaluations may differ (random): never merged by CSE
    adjoint: A.AdjointRule | None = None  # how derivatives flow back (dlvm.ir.adjoints)
    gradient_slots: tuple[int, ...] | None = None  # what the adjoint differentiates; None: all
    commutative: bool = False
    doc: str = ""
    pieces: tuple[Piece, ...] = field(init=False)
    attr_kinds: dict[str, str] = field(init=False)
    fixed_operands: int = field(init=False)
    variadic: bool = field(init=False)

    def __post_init__(self) -> None:
        self.pieces = parse_template(self.syntax)
        kinds: dict[str, str] = {}
        fixed = -1
        variadic = False

        def visit(pieces: tuple[Piece, ...]) -> None:
            nonlocal fixed, variadic
            for p in pieces:
                if p.kind == "attr":
                    kinds[p.name] = p.text
                elif p.kind == "operand":
                    fixed = max(fixed, p.index)
                elif p.kind == "operands":
                    variadic = True
                elif p.kind == "optional":
                    visit(p.group)

        visit(self.pieces)
        self.attr_kinds = kinds
        self.fixed_operands = fixed + 1
        self.variadic = variadic

    @property
    def elementwise(self) -> bool:
        """Computes each element of its result from its operands' elements at that index (a
        scalar operand stands for every element; an operand of size 1 along an axis is
        broadcast): the unary, binary, boolean, shift and compare families, and select."""
        return self.family in ELEMENTWISE_FAMILIES

    @property
    def differentiable(self) -> bool:
        return self.adjoint is not None

    @property
    def pure(self) -> bool:
        """No effects and deterministic: safe to remove when unused and to merge when equal."""
        return not (self.writes or self.reads or self.traps or self.nondet or self.terminator)

    def infer(self, operand_types: list[Type], attrs: dict[str, Any]) -> Type:
        """The result type, or TypeRuleError."""
        return self.rule(operand_types, attrs)

    def successors_of(self, inst: Instruction) -> list[Successor]:
        out: list[Successor] = []
        for name, kind in self.attr_kinds.items():
            a = inst.attrs.get(name)
            if kind == "successor" and a is not None:
                out.append(a)
            elif kind == "cases" and a is not None:
                out.extend(Successor(block, []) for _, block in a)
        return out

    def __repr__(self) -> str:
        return f"OpDef({self.name})"


OPS: dict[str, OpDef] = {}
OP_ALIASES: dict[str, str] = {}


def declare(op: OpDef) -> OpDef:
    assert op.name not in OPS, op.name
    OPS[op.name] = op
    for a in op.aliases:
        OP_ALIASES[a] = op.name
    return op


def lookup(name: str) -> OpDef | None:
    op = OPS.get(name)
    return op if op is not None else OPS.get(OP_ALIASES.get(name, name))


# Elementwise families: one row per operation ---------------------------------------------------

UNARY_FLOAT = [
    "sinh",
    "cosh",
    "tanh",
    "log",
    "exp",
    "sqrt",
    "rsqrt",
    "tan",
    "cos",
    "sin",
    "acos",
    "asin",
    "atan",
    "lgamma",
    "digamma",
    "erf",
    "erfc",
    "softplus",
]
UNARY_NUMERIC = ["negate", "sign", "square", "round", "ceil", "floor", "rint"]
PIECEWISE_CONSTANT = {"sign", "round", "ceil", "floor", "rint"}  # derivative zero


NOT_DIFFERENTIABLE = {"digamma"}  # its derivative (trigamma) is not an instruction


def _unary_adjoint(name: str) -> A.AdjointRule | None:
    """The adjoint rule of a unary function: every one has a rule in adjoints.UNARY (a missing
    one fails at import, not as a silently non-differentiable instruction), unless its
    derivative is zero or it is listed as not differentiable."""
    if name in PIECEWISE_CONSTANT:
        return A.zero
    if name in NOT_DIFFERENTIABLE:
        return None
    return A.UNARY[name]


BINARY = [
    "add",
    "subtract",
    "multiply",
    "divide",
    "min",
    "max",
    "truncateDivide",
    "floorDivide",
    "modulo",
    "power",
]
COMMUTATIVE = {"add", "multiply", "min", "max", "and", "or", "xor", "equal", "notEqual"}
# Logic on bools, bitwise on integers (LLVM's and/or/xor on i1 and iN).
LOGIC = ["and", "or", "xor"]
SHIFTS = ["shiftLeft", "shiftRight"]
COMPARE = ["lessThan", "lessThanOrEqual", "greaterThan", "greaterThanOrEqual", "equal", "notEqual"]

for _n in UNARY_FLOAT:
    declare(OpDef(_n, "unary", "$0", R.unary_float, adjoint=_unary_adjoint(_n)))
for _n in UNARY_NUMERIC:
    declare(OpDef(_n, "unary", "$0", R.unary_numeric, adjoint=_unary_adjoint(_n)))
for _n in BINARY:
    declare(
        OpDef(
            _n,
            "binary",
            "$0, $1",
            R.binary_numeric,
            adjoint=A.BINARY.get(_n),  # none for the integer divisions and modulo
            commutative=_n in COMMUTATIVE,
        )
    )
for _n in LOGIC:
    declare(OpDef(_n, "boolean", "$0, $1", R.binary_logic, commutative=True))
declare(OpDef("not", "boolean", "$0", R.unary_logic))
for _n in SHIFTS:
    declare(OpDef(_n, "shift", "$0, $1", R.binary_int))
for _n in COMPARE:
    rule = R.compare if _n in ("equal", "notEqual") else R.compare_ordered
    declare(OpDef(_n, "compare", "$0, $1", rule, commutative=_n in COMMUTATIVE))
del _n

# Everything else -------------------------------------------------------------------------------

declare(OpDef("literal", "literal", "$0:literal", R.literal, adjoint=A.literal))
declare(
    OpDef("select", "select", "$0, $1 by $2", R.select, adjoint=A.select, gradient_slots=(0, 1))
)
declare(
    OpDef("dataTypeCast", "cast", "$0 to {dtype:dtype}", R.data_type_cast, adjoint=A.data_type_cast)
)
declare(OpDef("convert", "cast", "$0 to {dtype:dtype}", R.convert, adjoint=A.convert))
declare(OpDef("bitCast", "cast", "$0 to {type:type}", R.bit_cast))
declare(OpDef("dot", "linalg", "$0, $1", R.dot, aliases=("matrixMultiply",), adjoint=A.dot))
declare(OpDef("transpose", "shape", "$0", R.transpose, adjoint=A.transpose))
declare(OpDef("reverse", "shape", "$0 along {dims:ints}", R.reverse, adjoint=A.reverse))
declare(OpDef("concatenate", "shape", "$* along {axis:int}", R.concatenate, adjoint=A.concatenate))
declare(OpDef("slice", "shape", "$0 from {lo:int} upto {hi:int}", R.slice_, adjoint=A.slice_))
declare(
    OpDef(
        "reduce",
        "reduce",
        "$0 by {comb:comb} init $1 along {dims:ints}",
        R.reduce,
        adjoint=A.reduce,
    )
)
declare(OpDef("scan", "reduce", "$0 by {comb:comb} along {dims:ints}", R.scan, adjoint=A.scan))
declare(
    OpDef(
        "reduceWindow",
        "reduce",
        "$0 by {comb:comb} init $1 dims {dims:ints} strides {strides:ints} "
        "padding {padding:padmode}",
        R.reduce_window,
        adjoint=A.reduce_window,
    )
)
declare(
    OpDef(
        "convolve",
        "linalg",
        "$0 kernel $1 [ strides {strides:ints} ] [ padding {padding:pairs} ] "
        "[ leftDilation {leftDilation:ints} ] [ rightDilation {rightDilation:ints} ] "
        "[ groups {groups:int} ]",
        R.convolve,
        adjoint=A.convolve,
    )
)
declare(
    OpDef(
        "gather",
        "index",
        "$0 at $1 along {axis:int}",
        R.gather,
        adjoint=A.gather,
        gradient_slots=(0,),
    )
)
declare(
    OpDef(
        "scatterAdd",
        "index",
        "$0 at $1 into $2 along {axis:int}",
        R.scatter_add,
        adjoint=A.scatter_add,
        gradient_slots=(0, 2),
    )
)
declare(OpDef("padShape", "shape", "$0 at {index:int}", R.pad_shape, adjoint=A.pad_shape))
declare(
    OpDef("squeezeShape", "shape", "$0 at {index:int}", R.squeeze_shape, adjoint=A.squeeze_shape)
)
declare(OpDef("shapeCast", "shape", "$0 to {shape:shape}", R.shape_cast, adjoint=A.shape_cast))
declare(OpDef("random", "random", "{shape:shape} from $0 upto $1", R.random, nondet=True))
declare(OpDef("rank", "query", "of $0", R.rank_of))
declare(OpDef("shape", "query", "of $0", R.shape_of))
declare(OpDef("unitCount", "query", "of $0", R.unit_count_of))
declare(OpDef("extract", "aggregate", "{keys:keys} from $0", R.extract, adjoint=A.extract))
declare(OpDef("insert", "aggregate", "$0 to $1 at {keys:keys}", R.insert, adjoint=A.insert))
declare(OpDef("apply", "call", "$0:name ( $* ) : $0:type", R.apply, adjoint=A.apply))

declare(OpDef("branch", "terminator", "{dest:successor}", R.terminator, terminator=True))
declare(
    OpDef(
        "conditional",
        "terminator",
        "$0 then {then:successor} else {else:successor}",
        R.conditional,
        terminator=True,
    )
)
declare(OpDef("branchEnum", "terminator", "$0 {cases:cases}", R.branch_enum, terminator=True))
declare(OpDef("return", "terminator", "[ $0 ]", R.terminator, terminator=True))

declare(OpDef("createStack", "stack", "", R.create_stack, writes=True))
declare(OpDef("destroyStack", "stack", "$0", R.destroy_stack, writes=True))
declare(OpDef("push", "stack", "$0 to $1", R.push, writes=True))
declare(OpDef("pop", "stack", "{type:type} from $0", R.pop, writes=True))

declare(
    OpDef("allocateStack", "memory", "{type:type} count {count:int}", R.allocate_stack, nondet=True)
)
declare(OpDef("allocateHeap", "memory", "{type:type} count $0", R.allocate_heap, nondet=True))
declare(OpDef("allocateBox", "memory", "{type:type}", R.allocate_box, nondet=True))
declare(OpDef("projectBox", "memory", "$0", R.project_box))
declare(OpDef("retain", "memory", "$0", R.box_refcount, writes=True))
declare(OpDef("release", "memory", "$0", R.box_refcount, writes=True))
declare(OpDef("deallocate", "memory", "$0", R.deallocate, writes=True))
declare(OpDef("load", "memory", "$0", R.load, reads=True))
declare(OpDef("store", "memory", "$0 to $1", R.store, writes=True))
declare(OpDef("elementPointer", "memory", "$0 at {keys:keys}", R.element_pointer))
declare(OpDef("copy", "memory", "from $0 to $1 count $2", R.copy, writes=True))
declare(OpDef("trap", "memory", "", R.void, traps=True))
