"""A deterministic random generator of control-flow-heavy DLVM functions, built with `Builder`,
and the other helpers the tests of the CFG passes (cfg-canonicalization, cfg-simplification,
loop-invariant-code-motion) share: hand-written programs, running functions before and after,
and the differentiated samples.

Every random function `(%n: i32, %x: f32, %y: f32) -> f32` threads an f32 accumulator through
nested regions: straight code, chains of blocks, diamonds (and triangles and
same-target conditionals), trampolines, early returns, counted loops (guarded entries without a
preheader, several latches, breaks to extra exits, single-block loops), irreducible cycles and
unreachable blocks. Loop bodies mix loop-invariant code (some of it may trap: integer division
by %n) with variant code, on the path to the latch and on conditional paths. Every loop counts
up to a bound of at most 3 on every back edge, so every function terminates.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import numpy as np
from semantics import random_args
from telhelp import sample_path

from dlvm.interp import InterpreterError, run_function
from dlvm.ir.builder import Builder, constant, new_function
from dlvm.ir.types import DataType, FunctionType, Type, scalar
from dlvm.ir.values import Argument, Block, Function, Module, Successor, Value
from dlvm.transforms.pass_manager import PassManager
from telc.driver import compile_text

F32, I32 = scalar(DataType.F32), scalar(DataType.I32)


class CFGGen:
    """Random functions; `depth` bounds the nesting of diamonds and loops."""

    def __init__(self, seed: int, depth: int = 3) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.depth = depth
        self.b = Builder()
        self.fn: Function | None = None
        self.pool: list[Value] = []  # f32 values available at the insertion point
        self.ints: list[Value] = []  # i32 values available at the insertion point

    def module(self, functions: int = 2) -> Module:
        m = Module(f"cfg{self.seed}", "raw")
        for i in range(functions):
            m.add_function(self.function(f"f{i}"))
        return m

    def function(self, name: str) -> Function:
        fn = new_function(name, FunctionType((I32, F32, F32), F32), ["n", "x", "y"])
        self.fn = fn
        n, x, y = fn.arguments
        self.pool, self.ints = [x, y], [n]
        self.b.at_end(fn.entry)
        acc = self.region(x, self.depth)
        self.b.build("return", [acc])
        for _ in range(self.rng.choice((0, 0, 1, 2))):
            self.unreachable()
        return fn

    # Blocks and values ----------------------------------------------------------------------

    def block(self, prefix: str, types: tuple[Type, ...] = ()) -> Block:
        """A new block `'<prefix><index>` with arguments of the given types."""
        assert self.fn is not None
        k = len(self.fn.blocks)
        args = [Argument(f"{prefix}{k}_{i}", t) for i, t in enumerate(types)]
        return self.fn.add_block(Block(f"{prefix}{k}", args))

    def branch(self, target: Block, *args: Value) -> None:
        self.b.branch(dest=Successor(target, list(args)))

    def conditional(self, cond: Value, then: Successor, other: Successor) -> None:
        self.b.build("conditional", [cond], then_=then, else_=other)

    def f32(self) -> Value:
        return self.rng.choice(self.pool)

    def lit(self) -> Value:
        return constant(self.rng.choice([0.5, 2.0, -1.25, 3.0, 0.25]), F32)

    def condition(self, acc: Value) -> Value:
        """A comparison of the accumulator or of %n (so both ways are taken across inputs)."""
        if self.rng.random() < 0.5:
            return self.b.greaterThan(acc, self.lit())
        return self.b.lessThan(self.rng.choice(self.ints), constant(2, I32))

    def keep(self) -> tuple[int, int]:
        return len(self.pool), len(self.ints)

    def restore(self, mark: tuple[int, int]) -> None:
        del self.pool[mark[0] :], self.ints[mark[1] :]

    # Regions: each takes the accumulator and returns its new value at the insertion point ---

    def region(self, acc: Value, depth: int) -> Value:
        pieces: list[Callable[[Value, int], Value]] = [self.straight, self.chain]
        if depth > 0:
            pieces += [self.diamond, self.diamond, self.loop, self.loop, self.irreducible]
        for _ in range(self.rng.randint(1, 3)):
            acc = self.rng.choice(pieces)(acc, depth)
        return acc

    def straight(self, acc: Value, depth: int = 0) -> Value:
        b, rng = self.b, self.rng
        for _ in range(rng.randint(1, 3)):
            r = rng.random()
            if r < 0.3:
                v = b.multiply(self.f32(), self.rng.choice([self.f32(), self.lit()]))
                self.pool.append(v)
                acc = b.add(acc, v)
            elif r < 0.5:
                acc = b.tanh(b.multiply(acc, self.lit()))
            elif r < 0.65:
                q = b.divide(self.rng.choice(self.ints), constant(3, I32))  # cannot trap
                self.ints.append(q)
                acc = b.select(acc, self.f32(), b.lessThan(q, constant(1, I32)))
            elif r < 0.7:
                q = b.modulo(constant(7, I32), self.ints[0])  # traps when %n is 0
                self.ints.append(q)
                acc = b.select(acc, self.lit(), b.equal(q, constant(1, I32)))
            else:
                acc = b.add(b.max(acc, self.f32()), self.lit())
        self.pool.append(acc)
        return acc

    def chain(self, acc: Value, depth: int = 0) -> Value:
        """Ends the block with a branch to a new one, passing acc or not."""
        nxt = self.block("bb", (F32,) if self.rng.random() < 0.5 else ())
        self.branch(nxt, *([acc] if nxt.arguments else []))
        self.b.at_end(nxt)
        if nxt.arguments:
            acc = nxt.arguments[0]
            self.pool.append(acc)
        return self.straight(acc) if self.rng.random() < 0.5 else acc

    def join(self, preds: int) -> tuple[Block, Block]:
        """A join block and the block its predecessors branch to: the join itself, or a
        trampoline forwarding to it."""
        join = self.block("join", (F32,))
        if preds < 2 or self.rng.random() < 0.6:
            return join, join
        tramp = self.block("tramp", (F32,))
        at = self.b.block, self.b.index
        self.b.at_end(tramp)
        self.branch(join, tramp.arguments[0])
        self.b.block, self.b.index = at
        return join, tramp

    def diamond(self, acc: Value, depth: int) -> Value:
        cond = self.condition(acc)
        shape = self.rng.random()
        if shape < 0.1:  # both edges to the same block with the same value
            join = self.block("join", (F32,))
            self.conditional(cond, Successor(join, [acc]), Successor(join, [acc]))
            self.b.at_end(join)
            self.pool.append(join.arguments[0])
            return join.arguments[0]
        join, target = self.join(2)
        # A triangle (one arm goes straight to the join) or a diamond.
        arms = [self.block("then"), target if shape < 0.3 else self.block("else")]
        self.conditional(
            cond,
            Successor(arms[0], []),
            Successor(arms[1], [acc] if arms[1] is target else []),
        )
        returned = 0
        for arm in arms:
            if arm is target:
                continue
            mark = self.keep()
            self.b.at_end(arm)
            value = self.region(acc, depth - 1)
            if returned == 0 and self.rng.random() < 0.2:  # an early return
                self.b.build("return", [value])
                returned += 1
            else:
                self.branch(target, value)
            self.restore(mark)
        self.b.at_end(join)
        self.pool.append(join.arguments[0])
        return join.arguments[0]

    def loop(self, acc: Value, depth: int) -> Value:
        """`for i in 0..<bound`: a header, a body ending in one or two latches, an exit; maybe
        a guard before it (no preheader), a break to another exit, or a single-block loop."""
        b, rng = self.b, self.rng
        bound: Value = constant(rng.randint(0, 3), I32)
        if rng.random() < 0.5:
            bound = b.min(self.ints[0], constant(3, I32))
        zero = constant(0, I32)
        if rng.random() < 0.25:
            return self.single_block_loop(acc, bound)
        header = self.block("loop", (I32, F32))
        exit_ = self.block("exit", (F32,))
        if rng.random() < 0.3:  # a guarded entry: the entering block also goes to the exit
            guard = self.condition(acc)
            self.conditional(guard, Successor(header, [zero, acc]), Successor(exit_, [acc]))
        else:
            self.branch(header, zero, acc)
        mark = self.keep()
        i, s = header.arguments
        self.b.at_end(header)
        body = self.block("body")
        self.conditional(b.lessThan(i, bound), Successor(body, []), Successor(exit_, [s]))
        self.b.at_end(body)
        self.invariants()
        self.pool.append(s)
        s = self.region(s, depth - 1)
        i1 = b.add(i, constant(1, I32))
        self.latches(header, i1, s, exit_)
        self.restore(mark)
        self.b.at_end(exit_)
        self.pool.append(exit_.arguments[0])
        return exit_.arguments[0]

    def latches(self, header: Block, i1: Value, s: Value, exit_: Block) -> None:
        r = self.rng.random()
        if r < 0.5:
            self.branch(header, i1, s)
            return
        cond = self.condition(s)
        if r < 0.75:  # two latches
            arms = [self.block("latch"), self.block("latch")]
            self.conditional(cond, Successor(arms[0], []), Successor(arms[1], []))
            for arm in arms:
                mark = self.keep()
                self.b.at_end(arm)
                self.branch(header, i1, self.straight(s))
                self.restore(mark)
            return
        # A break: to the loop's exit, or to a block of its own that then goes there.
        out = exit_ if self.rng.random() < 0.5 else self.block("break", (F32,))
        self.conditional(cond, Successor(out, [s]), Successor(header, [i1, s]))
        if out is not exit_:
            self.b.at_end(out)
            self.branch(exit_, self.b.negate(out.arguments[0]))

    def single_block_loop(self, acc: Value, bound: Value) -> Value:
        b = self.b
        header = self.block("self", (I32, F32))
        exit_ = self.block("exit", (F32,))
        self.branch(header, constant(0, I32), acc)
        mark = self.keep()
        i, s = header.arguments
        self.b.at_end(header)
        self.invariants()
        self.pool.append(s)
        s = self.straight(s)
        i1 = b.add(i, constant(1, I32))
        self.conditional(b.lessThan(i1, bound), Successor(header, [i1, s]), Successor(exit_, [s]))
        self.restore(mark)
        self.b.at_end(exit_)
        self.pool.append(exit_.arguments[0])
        return exit_.arguments[0]

    def invariants(self) -> None:
        """Instructions reading only values from outside the loop (called before the loop's
        own values join the pool)."""
        b = self.b
        for _ in range(self.rng.randint(0, 3)):
            r = self.rng.random()
            if r < 0.6:
                self.pool.append(b.exp(b.multiply(self.f32(), self.f32())))
            elif r < 0.8:
                self.ints.append(b.divide(self.rng.choice(self.ints), constant(2, I32)))
            else:
                self.ints.append(b.truncateDivide(constant(5, I32), self.ints[0]))  # may trap

    def irreducible(self, acc: Value, depth: int = 0) -> Value:
        """Two blocks that branch to each other, each entered from outside (no loop header)."""
        b = self.b
        first, second = self.block("irr", (I32, F32)), self.block("irr", (I32, F32))
        out = self.block("irrout", (F32,))
        cond = self.condition(acc)
        zero = constant(0, I32)
        self.conditional(cond, Successor(first, [zero, acc]), Successor(second, [zero, acc]))
        for blk, other in ((first, second), (second, first)):
            i, s = blk.arguments
            self.b.at_end(blk)
            s1 = b.add(b.multiply(s, constant(0.5, F32)), self.lit())
            i1 = b.add(i, constant(1, I32))
            more = b.lessThan(i1, constant(3, I32))
            self.conditional(more, Successor(other, [i1, s1]), Successor(out, [s1]))
        self.b.at_end(out)
        self.pool.append(out.arguments[0])
        return out.arguments[0]

    def unreachable(self) -> None:
        """A block nothing branches to: it returns, loops on itself, or enters the function's
        blocks (a branch to the first non-entry block taking only f32 arguments)."""
        assert self.fn is not None
        fn = self.fn
        dead = self.block("dead", (F32,))
        self.b.at_end(dead)
        a = dead.arguments[0]
        v = self.b.multiply(a, fn.arguments[1])
        targets = [
            blk
            for blk in fn.blocks[1:]
            if blk is not dead and all(arg.type == F32 for arg in blk.arguments)
        ]
        r = self.rng.random()
        if r < 0.3:
            self.b.build("return", [v])
        elif r < 0.5 or not targets:
            self.branch(dead, v)
        else:
            target = self.rng.choice(targets)
            self.branch(target, *[v for _ in target.arguments])


def cfg_module(seed: int, functions: int = 2, depth: int = 3) -> Module:
    """One random control-flow module of `functions` functions."""
    return CFGGen(seed, depth).module(functions)


# Hand-written functions of the same signature: branches with several returns, nested loops
# (the inner one entered from a conditional; its body divides by %n, which is 0 exactly when
# the inner loop runs no iteration), a loop with two latches and three exits (one a return),
# chains, trampolines and an unreachable block.
PROGRAMS = """\
module "programs"
stage raw

func @branches: (i32, f32, f32) -> f32 {
'entry(%n: i32, %x: f32, %y: f32):
    %0.0 = lessThan %n: i32, 2: i32
    conditional %0.0: bool then 'small() else 'large()
'small():
    %1.0 = greaterThan %x: f32, 0: f32
    conditional %1.0: bool then 'positive() else 'negative()
'positive():
    %2.0 = multiply %x: f32, %y: f32
    return %2.0: f32
'negative():
    %3.0 = negate %x: f32
    branch 'join(%3.0: f32)
'large():
    %4.0 = equal %n: i32, 3: i32
    conditional %4.0: bool then 'join(%y: f32) else 'join(%x: f32)
'join(%r: f32):
    %5.0 = add %r: f32, 1: f32
    return %5.0: f32
}

func @nested_loops: (i32, f32, f32) -> f32 {
'entry(%n: i32, %x: f32, %y: f32):
    branch 'outer(0: i32, %x: f32)
'outer(%i: i32, %acc: f32):
    %1.0 = lessThan %i: i32, 2: i32
    conditional %1.0: bool then 'guard() else 'done(%acc: f32)
'guard():
    %2.0 = greaterThan %acc: f32, 100: f32
    conditional %2.0: bool then 'outer_latch(%acc: f32) else 'inner(0: i32, %acc: f32)
'inner(%j: i32, %s: f32):
    %3.0 = lessThan %j: i32, %n: i32
    conditional %3.0: bool then 'inner_body() else 'outer_latch(%s: f32)
'inner_body():
    %4.0 = multiply %x: f32, %y: f32
    %4.1 = exp %4.0: f32
    %4.2 = truncateDivide 6: i32, %n: i32
    %4.3 = add %i: i32, %4.2: i32
    %4.4 = add %s: f32, %4.1: f32
    %4.5 = lessThan %4.3: i32, 3: i32
    %4.6 = select %4.4: f32, %s: f32 by %4.5: bool
    %4.7 = add %j: i32, 1: i32
    branch 'inner(%4.7: i32, %4.6: f32)
'outer_latch(%r: f32):
    %5.0 = add %i: i32, 1: i32
    branch 'outer(%5.0: i32, %r: f32)
'done(%d: f32):
    return %d: f32
}

func @latches_and_exits: (i32, f32, f32) -> f32 {
'entry(%n: i32, %x: f32, %y: f32):
    %0.0 = greaterThan %y: f32, 0: f32
    conditional %0.0: bool then 'loop(0: i32, %x: f32) else 'after(%x: f32)
'loop(%i: i32, %acc: f32):
    %1.0 = lessThan %i: i32, 4: i32
    conditional %1.0: bool then 'body() else 'after(%acc: f32)
'body():
    %2.0 = multiply %y: f32, 3: f32
    %2.1 = add %acc: f32, %2.0: f32
    %2.2 = add %i: i32, 1: i32
    %2.3 = equal %i: i32, %n: i32
    conditional %2.3: bool then 'skip() else 'check()
'skip():
    %3.0 = divide %n: i32, 2: i32
    %3.1 = add %2.2: i32, %3.0: i32
    branch 'loop(%3.1: i32, %acc: f32)
'check():
    %4.0 = greaterThan %2.1: f32, 5: f32
    conditional %4.0: bool then 'early() else 'step()
'step():
    branch 'loop(%2.2: i32, %2.1: f32)
'early():
    %6.0 = lessThan %n: i32, 1: i32
    conditional %6.0: bool then 'out() else 'after(%2.1: f32)
'out():
    return %2.0: f32
'after(%r: f32):
    %8.0 = tanh %r: f32
    return %8.0: f32
}

func @chains: (i32, f32, f32) -> f32 {
'entry(%n: i32, %x: f32, %y: f32):
    %0.0 = lessThan %n: i32, 1: i32
    conditional %0.0: bool then 'hop(%x: f32) else 'hop(%y: f32)
'hop(%h: f32):
    branch 'link(%h: f32)
'link(%l: f32):
    %2.0 = multiply %l: f32, 2: f32
    branch 'last()
'last():
    %3.0 = equal %n: i32, 2: i32
    conditional %3.0: bool then 'fin(%2.0: f32) else 'fin(%2.0: f32)
'fin(%f: f32):
    return %f: f32
'dead(%z: f32):
    branch 'link(%z: f32)
}
"""

# (%n, %x, %y) for every function: %n = 0 makes `truncateDivide 5, %n` and the like trap.
INPUTS = [(n, x, 0.7) for n in (0, 1, 3) for x in (-1.0, 2.5)]


def outcomes(module: Module) -> dict[tuple[str, tuple], object]:
    """What each function of module computes on INPUTS: a float ("nan" for NaN, which equals
    nothing), or "trap" where the interpreter stopped."""
    out: dict[tuple[str, tuple], object] = {}
    for fn in module.functions:
        for args in INPUTS:
            try:
                value = float(run_function(module, fn.name, [np.int32(args[0]), *args[1:]]))
                out[fn.name, args] = "nan" if math.isnan(value) else value
            except InterpreterError:
                out[fn.name, args] = "trap"
    return out


def results(module: Module, inputs: dict[str, list]) -> dict[str, object]:
    """What each function named in inputs returns on its inputs (`random` seeded alike)."""
    return {
        name: run_function(module, name, args, float64=True, seed=1)
        for name, args in inputs.items()
    }


def random_inputs(module: Module, names: list[str], seed: int) -> dict[str, list]:
    """Random arguments for each named function of module."""
    rng = np.random.default_rng(seed)
    out = {}
    for name in names:
        fn = module.function_named(name)
        assert fn is not None and isinstance(fn.type, FunctionType)
        out[name] = random_args(fn.type, rng)
    return out


def assert_same_results(before: dict[str, object], after: dict[str, object]) -> None:
    """Equal results, bit for bit (NaN equal to NaN): the CFG passes change no arithmetic."""
    assert before.keys() == after.keys()
    for name in before:
        flat_before, flat_after = _flatten(before[name]), _flatten(after[name])
        assert len(flat_before) == len(flat_after), name
        for a, b in zip(flat_before, flat_after):
            np.testing.assert_array_equal(np.asarray(b), np.asarray(a), err_msg=f"@{name}")


def _flatten(value: object) -> list:
    if isinstance(value, (tuple, list)):
        return [x for v in value for x in _flatten(v)]
    return [value]


def differentiated_sample(name: str) -> tuple[Module, list[str]]:
    """samples/NAME.tel lowered and differentiated, before the optimisations, and the names of
    its entry points."""
    with open(sample_path(name), encoding="utf-8") as f:
        compiled = compile_text(sample_path(name), f.read())
    PassManager().run(compiled.module, PassManager.resolve(["differentiation"]))
    return compiled.module, [e.name for e in compiled.interface.entries]


__all__ = [
    "INPUTS",
    "PROGRAMS",
    "CFGGen",
    "assert_same_results",
    "cfg_module",
    "differentiated_sample",
    "outcomes",
    "random_inputs",
    "results",
]
