"""The reverse sweep of a function with branches, loops or several returns.

The forward blocks run as in the primal, recording on an AD stack (`createStack`) what the
reverse sweep cannot recompute: the values its adjoint rules read that are not available
everywhere afterwards (values of loop bodies and of blocks that may not run), and which way
control came: an edge number for each block with several predecessors (pushed by a small block
on each incoming edge) and a return number when there are several returns. Each `return v`
becomes a branch to the turnaround block, which seeds the adjoint and enters the reverse sweep.

Every forward block B gets a reverse block `'B_adjoint` that pops B's values, runs B's adjoint
code in reverse, hands the adjoints of B's arguments to the values its predecessor passed, and
continues into that predecessor's reverse block (choosing by the popped edge number). Adjoints
that cross blocks travel as block arguments (the adjoint state: every active block argument,
every active value used outside its block or by a terminator, and the differentiated values);
an adjoint is taken out of the state when its definition is reached, so a loop's next
(earlier) iteration starts from zero. The entry block's reverse block returns the derivatives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from dlvm.analysis.dataflow import data_flow
from dlvm.analysis.loops import loop_info
from dlvm.ir.builder import Builder
from dlvm.ir.cfg import cfg
from dlvm.ir.dominance import dominator_tree
from dlvm.ir.literals import ScalarLiteral
from dlvm.ir.types import I64
from dlvm.ir.values import (
    Argument,
    Block,
    ElementKey,
    Instruction,
    LiteralValue,
    Successor,
    Value,
    fresh_name,
)
from dlvm.transforms.differentiation.emitter import Emitter

if TYPE_CHECKING:
    from dlvm.transforms.differentiation.function import Adjoints, FunctionDifferentiator


@dataclass
class Edge:
    """A control-flow edge: the terminator of `source` reaching `target` through the
    successor attribute `slot` (and `case`, the index in a branchEnum's case list)."""

    source: Block
    target: Block
    slot: str
    case: int | None
    args: list[Value]


class ControlFlowSweep:
    def __init__(self, fd: FunctionDifferentiator) -> None:
        self.fd = fd
        self.g = fd.g
        self.active = fd.activity.active
        self.taken: set[str] = {b.name for b in self.g.blocks}
        self.taken |= {a.name for b in self.g.blocks for a in b.arguments}
        self.taken |= {i.name for i in self.g.instructions() if i.name}
        self.tape: Value | None = None
        self.pushes: dict[Block, list[Value]] = {}
        self._return_pushes: set[Block] = set()

    # Analysis of the forward code --------------------------------------------------------------

    def run(self) -> None:
        g = self.g
        graph, dom, loops = cfg(g), dominator_tree(g), loop_info(g)
        self.blocks = [b for b in g.blocks if graph.reachable(b)]
        self.returns = [r for r in self.fd.returns if r.block in self.blocks]
        self.return_block: dict[Instruction, Block] = {}
        for r in self.returns:
            assert r.block is not None
            self.return_block[r] = r.block
        ret_blocks = list(self.return_block.values())
        entry = g.blocks[0]

        def runs_once(b: Block) -> bool:
            # Executed exactly once before the turnaround: dominates every return, no loop.
            return loops.loop_for(b) is None and all(dom.dominates(b, r) for r in ret_blocks)

        self.once = {b for b in self.blocks if runs_once(b)}
        self.entry = entry
        self.edges: dict[Block, list[Edge]] = {b: [] for b in self.blocks}
        for b in self.blocks:
            for e in _edges(b):
                if e.target in self.edges:
                    self.edges[e.target].append(e)
        self.state = self.adjoint_state()
        self.build()

    def adjoint_state(self) -> list[Value]:
        """The active values whose adjoints travel between blocks, in program order."""
        sources = set(self.fd.sources.values())
        out: list[Value] = []
        for b in self.blocks:
            out.extend(a for a in b.arguments if a in self.active)
            for inst in b.instructions:
                if inst not in self.active:
                    continue
                if inst in sources or any(
                    u.block is not b or u.is_terminator for u in _users(self.g, inst)
                ):
                    out.append(inst)
        return out

    def direct(self, v: Value) -> bool:
        """Whether the reverse sweep may use primal value v as it is."""
        if isinstance(v, Argument):
            return v.block is self.entry or v.block in self.once
        if isinstance(v, Instruction):
            return v.block in self.once
        return True  # literals, functions, globals

    # Building ----------------------------------------------------------------------------------

    def build(self) -> None:
        self.split_edges()
        result_type = self.fd.primal_type.result
        turn = self.new_block("adjoint", [("result", result_type)], state=False)
        self.reverse: dict[Block, Block] = {}
        for b in self.blocks:
            self.reverse[b] = self.new_block(b.name + "_adjoint")
        for i, r in enumerate(self.returns):
            b = self.return_block[r]
            out = r.operands[0]
            b.remove(r)
            if len(self.returns) > 1:
                Builder(b).push(_int64(i + 1), self.get_tape())
            Builder(b).branch(dest=Successor(turn, [out]))
        self.turnaround(turn)
        for b in self.blocks:
            self.reverse_block(b)
        for b, values in self.pushes.items():
            term = b.instructions[-1]
            at = b.instructions.index(term)
            if b in self._return_pushes:
                at -= 1  # the return number goes on top
            for v in values:
                Builder(b, at).push(v, self.get_tape())
                at += 1

    def new_block(
        self, base: str, args: list[tuple[str, object]] | None = None, state: bool = True
    ) -> Block:
        b = Block(self.fresh(base))
        for name, ty in args or []:
            b.add_argument(Argument(self.fresh(name), ty))  # type: ignore[arg-type]
        if state:
            for v in self.state:
                b.add_argument(Argument(self.fresh(_adjoint_name(v)), v.type))
        self.g.add_block(b)
        return b

    def fresh(self, base: str) -> str:
        return fresh_name(base, self.taken)

    def get_tape(self) -> Value:
        if self.tape is None:
            self.tape = Builder(self.entry, 0).createStack(name=self.fresh("tape"))
        return self.tape

    def split_edges(self) -> None:
        """Gives every edge into a block with several predecessors a block that pushes the
        edge's number, so that the reverse sweep knows where control came from."""
        if len(self.returns) > 1:
            self._return_pushes = set(self.return_block.values())
        for target, edges in self.edges.items():
            if len(edges) < 2:
                continue
            for number, e in enumerate(edges, 1):
                hop = Block(self.fresh(f"{e.source.name}_to_{target.name}"))
                args = list(e.args)
                if e.case is not None:  # a branchEnum passes the case's values: forward them
                    for a in target.arguments:
                        args.append(hop.add_argument(Argument(self.fresh(a.name), a.type)))
                self.g.add_block(hop)
                b = Builder(hop)
                b.push(_int64(number), self.get_tape())
                b.branch(dest=Successor(target, args))
                _retarget(e, hop)

    # Reverse code ------------------------------------------------------------------------------

    def state_args(self, e: Emitter, adjoints: Adjoints) -> list[Value]:
        out = []
        for v in self.state:
            d = adjoints.get(v)
            out.append(d if d is not None else e.zeros(v.type))
        return out

    def turnaround(self, turn: Block) -> None:
        """Seeds the adjoint of the value returned and enters the reverse of its block."""
        fd = self.fd
        b = Builder(turn)
        out = turn.arguments[0]
        seed = fd.seed_value(b, lambda: Builder(turn, 0))
        self.kept: list[Value]
        if fd.decl.source is None:
            self.kept = [out for _ in fd.decl.keeping]
        else:
            self.kept = [b.extract(out, keys=(ElementKey(k),)) for k in fd.decl.keeping]
        starts = []
        for r in self.returns:
            start = turn if len(self.returns) == 1 else Block(self.fresh("adjoint_return"))
            if start is not turn:
                self.g.add_block(start)
            e = Emitter(Builder(start), lambda v: v, self.active.__contains__)
            adjoints: Adjoints = {}
            fd.seed_adjoint(e, r, adjoints, seed)
            rb = self.reverse[self.return_block[r]]
            e.op("branch", dest=Successor(rb, self.state_args(e, adjoints)))
            starts.append(start)
        if len(starts) > 1:
            number = b.pop(self.get_tape(), type=I64)
            self.dispatch(turn, number, [(s, []) for s in starts])

    def dispatch(self, at: Block, number: Value, targets: list[tuple[Block, list[Value]]]) -> None:
        """Branches from `at` to targets[k - 1] where k is the popped `number` (1-based)."""
        current = at
        for k, (target, args) in enumerate(targets[:-1], 1):
            b = Builder(current)
            hit = b.equal(number, _int64(k))
            if k < len(targets) - 1:
                nxt = Block(self.fresh(f"{at.name}_{k + 1}"))
                self.g.add_block(nxt)
                b.conditional(hit, then_=Successor(target, args), else_=Successor(nxt, []))
                current = nxt
            else:
                last, last_args = targets[-1]
                b.conditional(hit, then_=Successor(target, args), else_=Successor(last, last_args))
        if len(targets) == 1:
            Builder(current).branch(dest=Successor(targets[0][0], targets[0][1]))

    def reverse_block(self, b: Block) -> None:
        rb = self.reverse[b]
        adjoints: Adjoints = dict(zip(self.state, rb.arguments))
        popped: dict[Value, Value] = {}

        def primal(v: Value) -> Value:
            if self.direct(v):
                return v
            got = popped.get(v)
            if got is None:
                self.pushes.setdefault(b, []).append(v)
                got = Builder(rb, 0).pop(self.get_tape(), type=v.type)
                popped[v] = got
            return got

        e = Emitter(Builder(rb), primal, self.active.__contains__)
        body = [i for i in b.instructions if not i.is_terminator]
        self.fd.sweep(e, body, adjoints)
        if b is self.entry:
            if self.tape is not None:
                e.op("destroyStack", self.tape)
            e.op("return", self.fd.results(e, adjoints, self.kept))
            return
        edges = self.edges[b]
        if len(edges) == 1:
            self.take_edge(e, b, edges[0], adjoints)
            e.op(
                "branch",
                dest=Successor(self.reverse[edges[0].source], self.state_args(e, adjoints)),
            )
            return
        number = e.op("pop", self.get_tape(), type=I64)
        args = self.state_args(e, adjoints)
        targets = []
        for edge in edges:
            hop = self.new_block(f"{edge.source.name}_to_{b.name}_adjoint")
            he = Emitter(Builder(hop), primal, self.active.__contains__)
            hop_adjoints: Adjoints = dict(zip(self.state, hop.arguments))
            self.take_edge(he, b, edge, hop_adjoints)
            target = self.reverse[edge.source]
            he.op("branch", dest=Successor(target, self.state_args(he, hop_adjoints)))
            targets.append((hop, args))
        self.dispatch(rb, number, targets)

    def take_edge(self, e: Emitter, b: Block, edge: Edge, adjoints: Adjoints) -> None:
        """Hands the adjoints of b's arguments to the values the edge passed."""
        incoming = [adjoints.pop(a, None) for a in b.arguments]
        for v, d in zip(edge.args, incoming):
            if d is None:
                continue
            if isinstance(v, LiteralValue) and v.literal.elements():
                for i, el in enumerate(v.literal.elements()):
                    if el in self.active:
                        self.fd.contribute(e, adjoints, el, e.element(d, i, v.type))
            elif v in self.active:
                self.fd.contribute(e, adjoints, v, d)


def _int64(n: int) -> LiteralValue:
    return LiteralValue(ScalarLiteral(n), I64)


def _edges(b: Block) -> list[Edge]:
    term = b.terminator
    if term is None:
        return []
    out = []
    for name, kind in term.op.attr_kinds.items():
        a = term.attrs.get(name)
        if kind == "successor" and isinstance(a, Successor):
            out.append(Edge(b, a.block, name, None, list(a.args)))
        elif kind == "cases" and a is not None:
            for i, (_, target) in enumerate(a):
                out.append(Edge(b, target, name, i, []))
    return out


def _retarget(e: Edge, hop: Block) -> None:
    term = e.source.terminator
    assert term is not None
    if e.case is None:
        term.attrs[e.slot] = Successor(hop, [])
    else:
        cases = list(term.attrs[e.slot])
        cases[e.case] = (cases[e.case][0], hop)
        term.attrs[e.slot] = type(term.attrs[e.slot])(cases)


def _users(fn, v: Value) -> list[Instruction]:
    return data_flow(fn).users(v)


def _adjoint_name(v: Value) -> str:
    name = getattr(v, "name", None)
    return f"{name}_adjoint" if name else "adjoint"
