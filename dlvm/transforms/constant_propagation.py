"""constant-propagation (ConstProp): folds instructions whose operands are all constants, turns
branches on constant conditions into plain branches, and propagates constants into block
arguments whose incoming values all agree, with a worklist until nothing changes.

Folding evaluates an instruction with the reference interpreter's own implementations
(`dlvm.interp` IMPLS), so it computes exactly what running the program would. A folded scalar
becomes a literal use (`3.0: f32`); a folded tensor becomes a `literal` instruction in its
place: a splat `literal c: T`, an explicit `<…>` of at most FOLD_LIMIT elements, or, computed
from a dense literal, a dense one (constant_folding.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from dlvm.analysis.side_effects import side_effects
from dlvm.interp import Interpreter
from dlvm.interp.interpreter import Frame
from dlvm.ir.builder import create
from dlvm.ir.cfg import CFG
from dlvm.ir.literals import (
    EnumLiteral,
)
from dlvm.ir.ops import OPS
from dlvm.ir.types import as_tensor
from dlvm.ir.values import (
    Argument,
    Block,
    Function,
    Instruction,
    LiteralValue,
    Module,
    Successor,
    Value,
)
from dlvm.transforms.constant_folding import (
    Evaluator,
    constant_use,
    evaluable,
    fold_extract,
    same_constant,
    scalar_operand,
    scalar_use,
)
from dlvm.transforms.pass_base import FunctionPass


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
        self.evaluator = Evaluator(frame)
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
            return scalar_use(inst)
        if inst.opcode == "extract":
            return fold_extract(inst)
        if not evaluable(inst):
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
        if targets and all(scalar_operand(v) for v in lit.items):
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
        uses = [constant_use(v, bool(t.shape)) for v in values]
        first = uses[0]
        if first is None or not all(u is not None and same_constant(first, u) for u in uses):
            return None
        use = LiteralValue(first.literal, arg.type)
        return create(OPS["literal"], [use]) if t.shape else use


# Constants -----------------------------------------------------------------------------------
