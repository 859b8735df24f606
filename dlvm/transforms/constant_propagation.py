"""constant-propagation (ConstProp): folds instructions whose operands are all constants, turns
branches on constant conditions into plain branches, and propagates constants into block
arguments whose incoming values all agree, with a worklist until nothing changes.

Folding evaluates an instruction with the reference interpreter's own implementations
(`dlvm.interp` IMPLS), so it computes exactly what running the program would. A folded scalar
becomes a literal use (`3.0: f32`); a folded tensor becomes a `literal` instruction in its
place: a splat `literal c: T`, or an explicit `<…>` of at most FOLD_LIMIT elements.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from dlvm.analysis.cfg import CFG
from dlvm.analysis.side_effects import side_effects
from dlvm.interp import IMPLS, Interpreter
from dlvm.interp.aggregates import literal_value
from dlvm.interp.interpreter import Frame
from dlvm.ir.builder import create
from dlvm.ir.literals import (
    ZERO,
    AggregateLiteral,
    EnumLiteral,
    Literal,
    ScalarLiteral,
    SpecialLiteral,
    StructLiteral,
)
from dlvm.ir.ops import OPS
from dlvm.ir.typerules import TypeRuleError, check_literal_operand, element_type
from dlvm.ir.types import TensorType, Type, as_tensor
from dlvm.ir.values import (
    Argument,
    Block,
    ElementKey,
    Function,
    Instruction,
    LiteralValue,
    Module,
    Successor,
    Value,
)
from dlvm.transforms.pass_base import FunctionPass

# A non-splat tensor result is written out element by element; past this many elements the
# literal would cost more code than the instruction it replaces, so such results stay computed.
FOLD_LIMIT = 16
# Folding runs at compile time: no operand or result may have more elements than this. It also
# bounds a folded `dot` to 2^24 multiply-adds.
EVAL_LIMIT = 1 << 16

# Evaluated through IMPLS: instruction families, and single instructions of other families.
# Left out: effects (random, calls, memory, stacks, trap), combinators that call a function
# (`by @f`), and convolve / reduceWindow, whose work the element limits do not bound.
FOLDED_FAMILIES = frozenset({"unary", "binary", "boolean", "compare", "select", "shape", "query"})
FOLDED_OPS = frozenset({"dataTypeCast", "dot", "reduce", "scan"})


class ConstantPropagation(FunctionPass):
    name = "constant-propagation"
    alias = "ConstProp"
    summary = "fold instructions over literals and branches on constant conditions"

    def prepare(self, module: Module) -> None:
        self.effects = side_effects(module)
        self.interp = Interpreter(module)  # never runs code: it evaluates literals and dtypes

    def run_on_function(self, fn: Function) -> bool:
        return _Propagation(fn, Frame(self.interp, fn), self.effects.may_merge).run()


class _Propagation:
    """One function's worklist of instructions to fold and blocks whose arguments to check."""

    def __init__(self, fn: Function, frame: Frame, may_fold: Callable[[Instruction], bool]) -> None:
        self.fn = fn
        self.evaluator = _Evaluator(frame)
        self.may_fold = may_fold  # pure and deterministic, calls included
        self.users: dict[Value, list[Instruction]] = {}
        for inst in fn.instructions():
            self._add_user(inst)
        self.work: deque[Instruction | Block] = deque()
        self.queued: set[Instruction | Block] = set()
        self._cfg: CFG | None = None  # stale once a terminator is rewritten
        self.changed = False

    def run(self) -> bool:
        for inst in self.fn.instructions():
            self._push(inst)
        for block in self.fn.blocks:
            self._push(block)
        while self.work:
            item = self.work.popleft()
            self.queued.discard(item)
            if isinstance(item, Block):
                self._visit_block(item)
            elif item.block is not None:  # not folded away meanwhile
                self._visit(item)
        return self.changed

    # Worklist and users ----------------------------------------------------------------------

    def _push(self, item: Instruction | Block) -> None:
        if item not in self.queued:
            self.queued.add(item)
            self.work.append(item)

    def _add_user(self, inst: Instruction) -> None:
        for v in inst.uses():
            if isinstance(v, (Instruction, Argument)):
                self.users.setdefault(v, []).append(inst)

    def _live_users(self, v: Value) -> list[Instruction]:
        return list(dict.fromkeys(u for u in self.users.get(v, ()) if u.block is not None))

    def _replace_uses(self, old: Instruction | Argument, new: Value) -> None:
        """Makes every user of old use new, and queues them (and, for terminators, the blocks
        they pass values to) to be looked at again."""
        for user in self._live_users(old):
            user.map_values(lambda v: new if v is old else v)
            self._push(user)
            if user.is_terminator:
                for s in user.successors():
                    self._push(s.block)
            elif user.opcode == "literal":  # an aggregate that may have become constant
                for u in self._live_users(user):
                    self._push(u)
        if isinstance(new, (Instruction, Argument)):
            self.users.setdefault(new, []).extend(self.users.get(old, ()))
        self.users.pop(old, None)
        self.changed = True

    # Instructions ----------------------------------------------------------------------------

    def _visit(self, inst: Instruction) -> None:
        if inst.opcode == "conditional":
            self._fold_conditional(inst)
        elif inst.opcode == "branchEnum":
            self._fold_branch_enum(inst)
        elif not inst.is_terminator and self.may_fold(inst):
            new = self._fold(inst)
            if new is not None:
                self._replace(inst, new)

    def _fold(self, inst: Instruction) -> Value | None:
        """The value that may stand for inst: a literal use, a new (detached) `literal`
        instruction, or a value held by a literal that inst extracts; None to keep inst."""
        if inst.opcode == "literal":
            return _scalar_use(inst)
        if inst.opcode == "extract":
            return _fold_extract(inst)
        if not _evaluable(inst):
            return None
        result = self.evaluator.evaluate(inst)
        return None if result is None else self.evaluator.materialize(inst, result)

    def _replace(self, inst: Instruction, new: Value) -> None:
        """Puts a new `literal` instruction where inst was (it keeps inst's name), makes inst's
        users use new, and removes inst."""
        block = inst.block
        assert block is not None
        if isinstance(new, Instruction) and new.block is None:
            new.name, new.loc = inst.name, inst.loc
            block.insert(block.instructions.index(inst), new)
        inst.erase()
        self._replace_uses(inst, new)

    # Terminators -----------------------------------------------------------------------------

    def _fold_conditional(self, inst: Instruction) -> None:
        cond = self.evaluator.constant(inst.operands[0])
        if cond is not None:
            taken: Successor = inst.attrs["then"] if bool(cond) else inst.attrs["else"]
            self._branch_instead(inst, Successor(taken.block, list(taken.args)))

    def _fold_branch_enum(self, inst: Instruction) -> None:
        """`branchEnum` on a `literal ?case(…)` jumps to the case's block with its values."""
        source = inst.operands[0]
        if not (isinstance(source, Instruction) and source.opcode == "literal"):
            return
        use = source.operands[0]
        lit = use.literal if isinstance(use, LiteralValue) else None
        if not isinstance(lit, EnumLiteral):
            return
        targets = [block for case, block in inst.attrs["cases"] if case == lit.case]
        # No target: the interpreter fails there at run time. Branch arguments, like operands,
        # may only be scalar literals.
        if targets and all(_scalar_operand(v) for v in lit.items):
            self._branch_instead(inst, Successor(targets[0], list(lit.items)))

    def _branch_instead(self, inst: Instruction, dest: Successor) -> None:
        block = inst.block
        assert block is not None
        new = create(OPS["branch"], [], dest=dest)
        new.loc = inst.loc
        inst.erase()
        block.append(new)
        self._add_user(new)
        self._cfg = None
        self.changed = True
        # Reachability changed: any block may have lost an incoming edge.
        for b in self.fn.blocks:
            self._push(b)

    # Block arguments -------------------------------------------------------------------------

    def _cfg_now(self) -> CFG:
        if self._cfg is None:
            self._cfg = CFG(self.fn)
        return self._cfg

    def _incoming(self, block: Block) -> list[list[Value]] | None:
        """The values each reachable edge passes to block, one list per edge; None when an
        edge passes values we cannot see (branchEnum payloads) or does not fit."""
        cfg = self._cfg_now()
        edges = []
        for pred in cfg.predecessors.get(block, ()):
            term = pred.terminator
            if not cfg.reachable(pred) or term is None:
                continue
            if term.opcode == "branchEnum":
                return None
            for s in term.successors():
                if s.block is block:
                    if len(s.args) != len(block.arguments):
                        return None
                    edges.append(s.args)
        return edges

    def _visit_block(self, block: Block) -> None:
        if block is self.fn.blocks[0] or not self._cfg_now().reachable(block):
            return  # the entry's arguments are the function's; nothing reaches dead blocks
        edges = self._incoming(block)
        if not edges:
            return
        for i, arg in enumerate(block.arguments):
            if not self._live_users(arg):
                continue
            values = [e[i] for e in edges if e[i] is not arg]  # a loop passing it unchanged
            new = self._agreed_constant(arg, values)
            if new is not None:
                if isinstance(new, Instruction):
                    block.insert(0, new)
                self._replace_uses(arg, new)

    def _agreed_constant(self, arg: Argument, values: list[Value]) -> Value | None:
        """The constant every incoming value is, as a literal use for a scalar argument and as
        a new `literal` instruction for a tensor one; None when they are not all one constant."""
        t = as_tensor(arg.type)
        if t is None or not values:
            return None
        uses = [_constant_use(v, bool(t.shape)) for v in values]
        first = uses[0]
        if first is None or not all(u is not None and _same_constant(first, u) for u in uses):
            return None
        use = LiteralValue(first.literal, arg.type)
        return create(OPS["literal"], [use]) if t.shape else use


# Constants -----------------------------------------------------------------------------------


def _evaluable(inst: Instruction) -> bool:
    """Whether inst is folded by evaluating it (a combinator `by @f` would be a call)."""
    folded = inst.op.family in FOLDED_FAMILIES or inst.opcode in FOLDED_OPS
    return folded and isinstance(inst.attrs.get("comb", ""), str)


def _is_constant(use: Value) -> bool:
    """A literal use holding no values and nothing undetermined (`undefined`, `null`)."""
    if not isinstance(use, LiteralValue):
        return False
    lit = use.literal
    if isinstance(lit, SpecialLiteral):
        return lit == ZERO
    return all(_is_constant(e) for e in lit.elements())


def _scalar_operand(v: Value) -> bool:
    """Whether v may be an operand or branch argument: anything but a non-scalar literal."""
    if not isinstance(v, LiteralValue):
        return True
    t = as_tensor(v.type)
    return t is not None and not t.shape and not v.literal.elements()


def _constant_use(v: Value, shaped: bool) -> LiteralValue | None:
    """The constant literal that v is (scalars) or that its `literal` instruction holds
    (tensors, which only a `literal` instruction may hold); None otherwise."""
    if shaped and isinstance(v, Instruction) and v.opcode == "literal":
        v = v.operands[0]
    elif shaped:
        return None
    return v if isinstance(v, LiteralValue) and _is_constant(v) else None


def _same_constant(a: LiteralValue, b: LiteralValue) -> bool:
    # Compared as written: `0.0` and `-0.0` are equal numbers but different constants.
    return a.type == b.type and str(a.literal) == str(b.literal)


def _scalar_use(inst: Instruction) -> Value | None:
    """`literal c: T` of a scalar type T is the use `c: T`."""
    use = inst.operands[0]
    t = as_tensor(inst.type)
    if t is None or t.shape or not _is_constant(use) or not isinstance(use, LiteralValue):
        return None
    return LiteralValue(use.literal, inst.type)


# Extract from a literal ----------------------------------------------------------------------


def _fold_extract(inst: Instruction) -> Value | None:
    """`extract keys from %l` where %l is a `literal` instruction: the element the keys select,
    as a literal use or `literal` instruction, or the value the literal holds there."""
    source = inst.operands[0]
    if not (isinstance(source, Instruction) and source.opcode == "literal"):
        return None
    v: Value | None = source.operands[0]
    for key in inst.attrs["keys"]:
        v = _element(v, key) if isinstance(v, LiteralValue) else None
        if v is None:
            return None
    if not isinstance(v, LiteralValue):
        # A value the literal holds dominates the literal, hence every use of inst; only in
        # unreachable code can that value be inst itself.
        return v if v is not inst else None
    use = LiteralValue(v.literal, inst.type)
    if _scalar_operand(use):
        return use
    if _leaf_count(use) > FOLD_LIMIT:  # code size, as for computed tensors
        return None
    return create(OPS["literal"], [use])


def _element(use: LiteralValue, key: ElementKey) -> Value | None:
    """The element of a literal at one key, or None (unknown key, `undefined`, `null`)."""
    index = _key_index(key)
    if index is None and key.field is None:
        return None
    plain = ElementKey(index=index) if key.field is None else key
    try:
        ty = element_type(use.type, plain)
    except TypeRuleError:
        return None
    lit = use.literal
    if isinstance(lit, AggregateLiteral):
        return lit.items[index] if index is not None and 0 <= index < len(lit.items) else None
    if isinstance(lit, StructLiteral):
        return next((v for name, v in lit.fields if name == key.field), None)
    if isinstance(lit, ScalarLiteral) or lit == ZERO:  # a splat: every element is the same
        out = LiteralValue(lit, ty)
        try:
            check_literal_operand(out, aggregate_ok=True)
        except TypeRuleError:
            return None
        return out
    return None


def _key_index(key: ElementKey) -> int | None:
    """An integer key, also one given as a constant value (`extract 1: i64 from …`)."""
    if key.index is not None:
        return key.index
    v = key.value
    if isinstance(v, LiteralValue) and isinstance(v.literal, ScalarLiteral):
        value = v.literal.value
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _leaf_count(use: Value) -> int:
    if not isinstance(use, LiteralValue) or not use.literal.elements():
        return 1
    return sum(_leaf_count(e) for e in use.literal.elements())


# Evaluation ----------------------------------------------------------------------------------


class _Evaluator:
    """Evaluates instructions over constants with the interpreter's implementations, and turns
    results back into literals that reproduce them bit for bit."""

    def __init__(self, frame: Frame) -> None:
        self.frame = frame
        self.values: dict[Value, Any] = {}  # constant operands evaluated so far

    def constant(self, v: Value) -> np.ndarray | None:
        """The tensor a constant operand denotes: a constant literal use, or the result of a
        `literal` instruction with one; None for anything else."""
        if isinstance(v, Instruction) and v.opcode == "literal":
            use = v.operands[0]
        elif isinstance(v, LiteralValue):
            use = v
        else:
            return None
        if not _is_constant(use) or _units(use.type) > EVAL_LIMIT:
            return None
        if v not in self.values:
            try:
                self.values[v] = self.frame.value(use)
            except Exception:  # a literal that does not fit its type fails at run time
                self.values[v] = None
        value = self.values[v]
        return value if isinstance(value, np.ndarray) else None

    def evaluate(self, inst: Instruction) -> np.ndarray | None:
        """inst's result when its operands are constants (for rank, shape and unitCount the
        operand's type suffices); None when they are not, or when evaluating it fails."""
        if _units(inst.type) > EVAL_LIMIT:
            return None
        args = self._arguments(inst)
        if args is None:
            return None
        try:
            with np.errstate(all="ignore"):
                result = IMPLS[inst.opcode](self.frame, inst, args)
        except Exception:
            # The interpreter reports any failure of an implementation as an error of the
            # program (integer division by zero, a bad slice): leave it to happen at run time.
            return None
        t = as_tensor(inst.type)
        ok = (
            t is not None
            and isinstance(result, np.ndarray)
            and result.shape == t.shape
            and result.dtype == self.frame.dtype(t)
        )
        return result if ok else None

    def _arguments(self, inst: Instruction) -> list[np.ndarray] | None:
        """The operand values, or None when one is not constant. rank, shape and unitCount
        read only their operand's type: they get a stand-in of that type (no memory)."""
        if inst.op.family == "query":
            t = as_tensor(inst.operands[0].type)
            if t is None:
                return None
            return [np.broadcast_to(np.zeros((), self.frame.dtype(t)), t.shape)]
        args = []
        for v in inst.operands:
            value = self.constant(v)
            if value is None:
                return None
            args.append(value)
        return args

    def materialize(self, inst: Instruction, result: np.ndarray) -> Value | None:
        """The literal use (scalar) or new `literal` instruction (tensor) holding result, or
        None when it is too large to write out or no literal reproduces it exactly."""
        t = as_tensor(inst.type)
        assert t is not None
        lit = _encode(result, t)
        if lit is None:
            return None
        use = LiteralValue(lit, inst.type)
        try:
            exact = literal_value(self.frame, use)
        except Exception:
            return None
        if not _same_values(exact, result):
            return None
        return create(OPS["literal"], [use]) if t.shape else use


def _same_values(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal bit for bit (so -0.0 is not 0.0), except that NaN matches NaN: the literal `nan`
    carries no sign or payload, and arithmetic gives NaNs no meaningful sign either."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind == "f":
        nan_a, nan_b = np.isnan(a), np.isnan(b)
        if not np.array_equal(nan_a, nan_b):
            return False
        a, b = np.where(nan_a, 0, a), np.where(nan_b, 0, b)
    return np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


def _units(ty: Type) -> int:
    t = as_tensor(ty)
    return t.unit_count if t is not None else 0


def _encode(result: np.ndarray, t: TensorType) -> Literal | None:
    """A scalar literal when every element has the same bits (a splat), else a tensor literal
    of at most FOLD_LIMIT elements, else None."""
    flat = np.ascontiguousarray(result).reshape(-1)
    bits = flat.view(np.uint8).reshape(flat.size, -1)
    if (bits == bits[0]).all():
        return _scalar_literal(flat[0])
    if flat.size > FOLD_LIMIT:
        return None
    return _tensor_literal(result, t)


def _tensor_literal(result: np.ndarray, t: TensorType) -> Literal:
    """`<…>` with one element per row of dimension 0, nested down to scalar literals."""
    if not t.shape:
        return _scalar_literal(result.reshape(1)[0])
    row = t.with_shape(t.shape[1:])
    return AggregateLiteral(
        "tensor", tuple(LiteralValue(_tensor_literal(r, row), row) for r in result)
    )


def _scalar_literal(x: np.generic) -> ScalarLiteral:
    """The literal of one element: floats in the shortest text that converts back to the same
    value of their own type (`0.1` for float32 0.1, not float64's `0.10000000149011612`)."""
    kind = x.dtype.kind
    if kind == "b":
        return ScalarLiteral(bool(x))
    if kind in "iu":
        return ScalarLiteral(int(x))
    short = float(str(x))
    return ScalarLiteral(short if np.asarray(short, x.dtype) == x else float(x))
