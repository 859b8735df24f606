"""The identities of algebra-simplification (AS) as a table: one row per rule, with the root
opcodes it applies to and a function that matches it at a root instruction and returns the
replacement value (building any new instructions through a `Rewrite`), or None.

Rules only propose; the pass (algebra_simplification.py) checks that the replacement has exactly
the root's type, commits it, and undoes the new instructions otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dlvm.ir.builder import Builder
from dlvm.ir.literals import ZERO, ScalarLiteral
from dlvm.ir.types import TensorType, as_tensor, same_type, scalar
from dlvm.ir.values import Instruction, LiteralValue, Value

# Constants -------------------------------------------------------------------------------------


def number(v: Value) -> int | float | None:
    """The constant v denotes: a scalar literal use (`1: f32`, `1.0: f32`, `zero: f32`) or a
    splat `literal c: T` instruction; None for anything else (booleans included)."""
    if isinstance(v, Instruction) and v.opcode == "literal":
        v = v.operands[0]
    if not isinstance(v, LiteralValue):
        return None
    lit = v.literal
    if lit == ZERO:
        return 0
    if isinstance(lit, ScalarLiteral) and not isinstance(lit.value, bool):
        return lit.value
    return None


def is_const(v: Value, c: float) -> bool:
    n = number(v)
    return n is not None and n == c


def defined_by(v: Value, *opcodes: str) -> Instruction | None:
    """v's defining instruction when it is one of `opcodes`."""
    return v if isinstance(v, Instruction) and v.opcode in opcodes else None


def same_value(a: Value, b: Value) -> bool:
    # Literal uses are fresh objects at every use site, so they compare by value.
    return a is b or (isinstance(a, LiteralValue) and a == b)


# What a rule sees ------------------------------------------------------------------------------


class Rewrite:
    """One attempt at one root: its operands, a builder inserting right before it (so every new
    instruction dominates the root's uses), and which values only the root uses."""

    def __init__(self, root: Instruction, used_only_by: Callable[[Value, Instruction], bool]):
        self.root = root
        self.operands = root.operands
        self.created: list[Instruction] = []
        self._builder: Builder | None = None  # made on first use: finding the root's index costs
        self._used_only_by = used_only_by

    @property
    def tensor(self) -> TensorType:
        t = as_tensor(self.root.type)
        assert t is not None, "rules only run on tensor-typed roots"
        return t

    @property
    def is_float(self) -> bool:
        return self.tensor.dtype.is_float

    def build(self, opname: str, *operands: Value) -> Instruction:
        """A new instruction before the root; raises TypeRuleError when it does not type."""
        if self._builder is None:
            self._builder = Builder().before(self.root)
        inst = self._builder.build(opname, list(operands))
        self.created.append(inst)
        return inst

    def scalar(self, c: int) -> LiteralValue:
        """The scalar constant `c: dt` of the root's data type."""
        return LiteralValue(ScalarLiteral(c), scalar(self.tensor.dtype))

    def constant(self, c: int) -> Value:
        """c at exactly the root's type: a bare `c: dt` for a scalar, else `literal c: T`."""
        lit = LiteralValue(ScalarLiteral(c), self.root.type)
        return lit if self.tensor.is_scalar else self.build("literal", lit)

    def fits(self, *candidates: Value | None) -> Value | None:
        """The first candidate with exactly the root's type: a broadcasting operand whose shape
        differs from the result's cannot stand in for it."""
        for v in candidates:
            if v is not None and same_type(v.type, self.root.type):
                return v
        return None

    def single_use(self, *values: Instruction) -> bool:
        """Whether the root is the only user of each value (so rebuilding them costs nothing)."""
        return all(self._used_only_by(v, self.root) for v in values)

    def discard(self) -> None:
        """Removes what this attempt built (nothing uses it yet)."""
        for inst in reversed(self.created):
            inst.erase()
        self.created.clear()


RuleFn = Callable[[Rewrite], Value | None]


@dataclass(frozen=True)
class Rule:
    """One identity: its name, the opcodes of the roots it applies to, and its matcher."""

    name: str
    roots: tuple[str, ...]
    apply: RuleFn


# Identities with a constant --------------------------------------------------------------------

# x ∘ c → x: the neutral element c of each operation, and whether c ∘ x → x too.
NEUTRAL: dict[str, tuple[int, bool]] = {
    "add": (0, True),
    "subtract": (0, False),
    "multiply": (1, True),
    "divide": (1, False),
    "power": (1, False),
}
# x ∘ x → c.
SELF_INVERSE: dict[str, int] = {"subtract": 0, "divide": 1, "modulo": 0}
# f(c) → r: (argument, result).
AT_CONSTANT: dict[str, tuple[int, int]] = {
    "exp": (0, 1),
    "log": (1, 0),
    "sin": (0, 0),
    "sinh": (0, 0),
    "tan": (0, 0),
    "tanh": (0, 0),
    "cos": (0, 1),
    "cosh": (0, 1),
}


def _neutral(r: Rewrite) -> Value | None:
    x, y = r.operands
    c, commutes = NEUTRAL[r.root.opcode]
    return r.fits(
        x if is_const(y, c) else None,
        y if commutes and is_const(x, c) else None,
    )


def _times_zero(r: Rewrite) -> Value | None:
    x, y = r.operands
    return r.constant(0) if is_const(x, 0) or is_const(y, 0) else None


def _power_zero(r: Rewrite) -> Value | None:
    return r.constant(1) if is_const(r.operands[1], 0) else None


def _self_inverse(r: Rewrite) -> Value | None:
    x, y = r.operands
    return r.constant(SELF_INVERSE[r.root.opcode]) if same_value(x, y) else None


def _at_constant(r: Rewrite) -> Value | None:
    argument, result = AT_CONSTANT[r.root.opcode]
    return r.constant(result) if is_const(r.operands[0], argument) else None


def _square(r: Rewrite) -> Value | None:
    x, y = r.operands
    return r.build("multiply", x, x) if is_const(y, 2) else None


def _reciprocal(r: Rewrite) -> Value | None:
    x, y = r.operands
    # Integer powers with a negative exponent trap and integer division truncates.
    if r.is_float and is_const(y, -1):
        return r.build("divide", r.scalar(1), x)
    return None


# Negation --------------------------------------------------------------------------------------


def _double_negation(r: Rewrite) -> Value | None:
    inner = defined_by(r.operands[0], "negate")
    return r.fits(inner.operands[0]) if inner is not None else None


def _add_negation(r: Rewrite) -> Value | None:
    x, y = r.operands
    if (ny := defined_by(y, "negate")) is not None:
        return r.build("subtract", x, ny.operands[0])
    if (nx := defined_by(x, "negate")) is not None:
        return r.build("subtract", y, nx.operands[0])
    return None


def _subtract_negation(r: Rewrite) -> Value | None:
    x, y = r.operands
    ny = defined_by(y, "negate")
    return r.build("add", x, ny.operands[0]) if ny is not None else None


# Exponentials ----------------------------------------------------------------------------------


def _exp_pair(p: Value, n: Value) -> Value | None:
    """x when p is `exp x` and n is `exp (negate x)`."""
    ep, en = defined_by(p, "exp"), defined_by(n, "exp")
    if ep is None or en is None:
        return None
    neg = defined_by(en.operands[0], "negate")
    x = ep.operands[0]
    return x if neg is not None and same_value(neg.operands[0], x) else None


def _hyperbolic(r: Rewrite) -> Value | None:
    """(e^x − e^−x)/2 → sinh x and (e^x + e^−x)/2 → cosh x; halving by `multiply 0.5` too."""
    x, y = r.operands
    if r.root.opcode == "divide":
        halved = [x] if is_const(y, 2) else []
    else:
        halved = [v for v, c in ((x, y), (y, x)) if is_const(c, 0.5)]
    for h in halved:
        s = defined_by(h, "subtract", "add")
        if s is None:
            continue
        a, b = s.operands
        orders = [(a, b), (b, a)] if s.opcode == "add" else [(a, b)]
        for p, n in orders:
            t = _exp_pair(p, n)
            if t is not None:
                return r.build("sinh" if s.opcode == "subtract" else "cosh", t)
    return None


def _exp_quotient(r: Rewrite) -> Value | None:
    ex, ey = (defined_by(v, "exp") for v in r.operands)
    # Only when both exponentials go away: otherwise one divide becomes a subtract and an exp.
    if ex is None or ey is None or not r.single_use(ex, ey):
        return None
    return r.build("exp", r.build("subtract", ex.operands[0], ey.operands[0]))


# Quotients -------------------------------------------------------------------------------------
# Float only: integer division truncates, so these are not identities on integers. Each needs the
# inner quotients used only here, or the rewrite would add work instead of trading divides.


def _quotient_of_quotients(r: Rewrite) -> Value | None:
    """(x/y)/(z/a) → (x·a)/(y·z)."""
    p, q = (defined_by(v, "divide") for v in r.operands)
    if not r.is_float or p is None or q is None or not r.single_use(p, q):
        return None
    (x, y), (z, a) = p.operands, q.operands
    return r.build("divide", r.build("multiply", x, a), r.build("multiply", y, z))


def _quotient_over(r: Rewrite) -> Value | None:
    """(x/y)/z → x/(y·z)."""
    p = defined_by(r.operands[0], "divide")
    if not r.is_float or p is None or not r.single_use(p):
        return None
    x, y = p.operands
    return r.build("divide", x, r.build("multiply", y, r.operands[1]))


def _over_quotient(r: Rewrite) -> Value | None:
    """x/(y/z) → (x·z)/y."""
    q = defined_by(r.operands[1], "divide")
    if not r.is_float or q is None or not r.single_use(q):
        return None
    y, z = q.operands
    return r.build("divide", r.build("multiply", r.operands[0], z), y)


# Shapes ----------------------------------------------------------------------------------------


def _double_transpose(r: Rewrite) -> Value | None:
    inner = defined_by(r.operands[0], "transpose")
    return r.fits(inner.operands[0]) if inner is not None else None


# The table, in matching order per root opcode --------------------------------------------------

RULES: tuple[Rule, ...] = (
    Rule("x+0, 0+x, x-0, x*1, 1*x, x/1, x^1 -> x", tuple(NEUTRAL), _neutral),
    Rule("x*0, 0*x -> 0", ("multiply",), _times_zero),
    Rule("x^0 -> 1", ("power",), _power_zero),
    Rule("x-x, x mod x -> 0; x/x -> 1", tuple(SELF_INVERSE), _self_inverse),
    Rule("x^-1 -> 1/x", ("power",), _reciprocal),
    Rule("x^2 -> x*x", ("power",), _square),
    Rule("negate(negate x) -> x", ("negate",), _double_negation),
    Rule("x + negate(y) -> x - y", ("add",), _add_negation),
    Rule("x - negate(y) -> x + y", ("subtract",), _subtract_negation),
    Rule("exp 0 -> 1, log 1 -> 0, sin 0 -> 0, cos 0 -> 1, ...", tuple(AT_CONSTANT), _at_constant),
    Rule("(e^x -+ e^-x)/2 -> sinh x, cosh x", ("divide", "multiply"), _hyperbolic),
    Rule("e^x/e^y -> e^(x-y)", ("divide",), _exp_quotient),
    Rule("(x/y)/(z/a) -> (x*a)/(y*z)", ("divide",), _quotient_of_quotients),
    Rule("(x/y)/z -> x/(y*z)", ("divide",), _quotient_over),
    Rule("x/(y/z) -> (x*z)/y", ("divide",), _over_quotient),
    Rule("transpose(transpose A) -> A", ("transpose",), _double_transpose),
)

BY_ROOT: dict[str, tuple[Rule, ...]] = {}
for _rule in RULES:
    for _op in _rule.roots:
        BY_ROOT[_op] = (*BY_ROOT.get(_op, ()), _rule)
del _rule, _op
