"""A deterministic random generator of well-typed DLVM modules, built with `Builder` only.

Shared by the property tests and `bench/ir_speed.py`: `IRGen(seed).module(...)` makes helper
functions (a scalar combinator and callees for `apply`) and functions whose bodies mix
elementwise, compare/select, linear-algebra, shape, reduction, literal, tuple and call
instructions over random tensor shapes, optionally with diamonds and loops that pass values
through block arguments.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import numpy as np

from dlvm.ir.builder import Builder, constant, new_function, tensor_literal
from dlvm.ir.literals import AggregateLiteral
from dlvm.ir.ops import BINARY, COMPARE, UNARY_FLOAT, UNARY_NUMERIC
from dlvm.ir.types import (
    DataType,
    FunctionType,
    TensorType,
    TupleType,
    Type,
    broadcast_shapes,
    scalar,
)
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

F32, F64, I32, I64 = DataType.F32, DataType.F64, DataType.I32, DataType.I64
NUMERIC = (F32, F32, F32, F64, I32, I64)  # float-heavy, like real models
WIDER = {F32: (F32, F64), F64: (F64,), I32: (I32, I64), I64: (I64,), DataType.BOOL: ()}
# Integers get no division: a module that may divide by zero would be useless to interpret.
INT_BINARY = ("add", "subtract", "multiply", "min", "max")
COMBINATORS = ("add", "multiply", "max", "min")
# The instruction mix: an IRGen method and its share of the instructions, in percent.
MIX = (
    ("unary", 16),
    ("binary", 20),
    ("compare", 6),
    ("select", 4),
    ("boolean", 3),
    ("dot", 8),
    ("transpose", 3),
    ("reduce", 7),
    ("concatenate", 3),
    ("slice", 3),
    ("shape_cast", 4),
    ("pad_or_squeeze", 3),
    ("cast", 3),
    ("literal", 4),
    ("tuple_ops", 4),
    ("apply", 4),
    ("repeat", 3),
    ("misc", 2),
)


def _factor(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


class IRGen:
    """Random well-typed IR. `dims` are the dimension sizes drawn; `max_rank` bounds ranks;
    `branch_rate` is how often a function with control flow opens a diamond or a loop."""

    def __init__(
        self,
        seed: int,
        dims: Sequence[int] = (1, 2, 3, 4),
        max_rank: int = 3,
        branch_rate: float = 0.08,
    ) -> None:
        self.rng = random.Random(seed)
        self.branch_rate = branch_rate  # chance per instruction of a diamond or loop
        self.dims = tuple(dims)
        self.max_rank = max_rank
        self.pool: list[Value] = []  # tensor values available at the insertion point
        self.tuples: list[Value] = []  # tuple values available at the insertion point
        self.callees: list[Function] = []
        self.comb: Function | None = None
        self.b = Builder()
        self.fn: Function | None = None
        self.counter = 0

    # Module and functions --------------------------------------------------------------------

    def module(
        self,
        name: str = "random",
        functions: int = 1,
        size: int = 30,
        helpers: int = 1,
        control_flow: bool = False,
    ) -> Module:
        """`helpers` small callees, then `functions` functions of about `size` instructions."""
        m = Module(name, "raw")
        self.comb = m.add_function(self._combinator())
        self.callees = []
        for i in range(helpers):
            self.callees.append(m.add_function(self.function(f"helper{i}", max(4, size // 4))))
        for i in range(functions):
            m.add_function(self.function(f"f{i}", size, control_flow))
        return m

    def _combinator(self) -> Function:
        fn = new_function("comb", FunctionType((scalar(F32), scalar(F32)), scalar(F32)), ["p", "q"])
        b = Builder(fn.entry)
        p, q = fn.arguments
        s = b.add(p, q)
        b.build("return", [b.max(s, constant(0, scalar(F32)))])
        return fn

    def random_type(self, dtype: DataType | None = None, rank: int | None = None) -> TensorType:
        rng = self.rng
        if rank is None:
            rank = rng.choice([r for r in (0, 1, 2, 2, 2, 3, 3) if r <= self.max_rank])
        shape = tuple(rng.choice(self.dims) for _ in range(rank))
        return TensorType(shape, dtype or rng.choice(NUMERIC))

    def function(self, name: str, size: int, control_flow: bool = False) -> Function:
        """A function of about `size` instructions over random argument tensors."""
        rng = self.rng
        n_args = rng.randint(1, 4)
        arg_types = [self.random_type(F32, 2)] + [self.random_type() for _ in range(n_args - 1)]
        if rng.random() < 0.3:
            arg_types.append(self.random_type(DataType.BOOL))
        fn = new_function(
            name,
            FunctionType(tuple(arg_types), scalar(F32)),
            [f"a{i}" for i in range(len(arg_types))],
        )
        self.fn = fn
        self.counter = 0
        self.pool = list(fn.arguments)
        self.tuples = []
        self.b.at_end(fn.entry)
        built = 0
        while built < size:
            if control_flow and size - built > 12 and rng.random() < self.branch_rate:
                built += self.diamond() if rng.random() < 0.5 else self.loop()
            elif self.step():
                built += 1
        self.finish(fn)
        return fn

    def finish(self, fn: Function) -> None:
        """Returns a tuple of a few recent values (so most of the body stays live)."""
        recent = self.pool[-6:]
        picked = self.rng.sample(recent, min(len(recent), self.rng.randint(1, 3)))
        if len(picked) == 1:
            result = picked[0]
        else:
            ty = TupleType(tuple(v.type for v in picked))
            result = self.b.literal(LiteralValue(AggregateLiteral("tuple", tuple(picked)), ty))
        self.b.build("return", [result])
        fn.type = FunctionType(fn.type.arguments, result.type)

    # Helpers ---------------------------------------------------------------------------------

    def name(self) -> str | None:
        """Half the results are named (`%v3`), half anonymous (`%B.I`)."""
        self.counter += 1
        return f"v{self.counter}" if self.rng.random() < 0.5 else None

    def emit(self, opname: str, operands: list[Value], **attrs) -> Instruction:
        inst = self.b.build(opname, operands, self.name(), **attrs)
        ty = inst.type
        if isinstance(ty, TensorType):
            self.pool.append(inst)
        elif isinstance(ty, TupleType):
            self.tuples.append(inst)
        return inst

    def pick(self, pred: Callable[[TensorType], bool] = lambda t: True) -> Value | None:
        """A random available tensor value whose type satisfies pred (recent ones favoured)."""
        pool = self.pool
        for _ in range(8):
            idx = len(pool) - 1 - min(int(self.rng.expovariate(0.15)), len(pool) - 1)
            v = pool[idx]
            if pred(v.type):
                return v
        cands = [v for v in pool if pred(v.type)]
        return self.rng.choice(cands) if cands else None

    def scalar_literal(self, dtype: DataType) -> LiteralValue:
        rng = self.rng
        if dtype is DataType.BOOL:
            return constant(rng.random() < 0.5, scalar(dtype))
        if dtype in (F32, F64) and rng.random() < 0.7:
            value = rng.choice([0.5, 2.0, -1.25, 1e-05, 3.0, 0.1, 1024.0])
            return constant(value, scalar(dtype))
        return constant(rng.choice([0, 1, 2, -3, 7]), scalar(dtype))

    def partner(self, t: TensorType, dtype: DataType | None = None) -> Value:
        """A value broadcast-compatible with t (same dtype), or a scalar literal."""
        dtype = dtype or t.dtype
        if self.rng.random() < 0.75:
            v = self.pick(
                lambda u: (
                    u.dtype is dtype
                    and (u.rank == t.rank or not u.shape)
                    and broadcast_shapes(t.shape, u.shape) is not None
                )
            )
            if v is not None:
                return v
        return self.scalar_literal(dtype)

    def splat(self, ty: TensorType) -> Value:
        """A value of exactly ty: an existing one, a scalar literal, or a `literal` splat."""
        v = self.pick(lambda u: u == ty)
        if v is not None and self.rng.random() < 0.8:
            return v
        if not ty.shape:
            return self.scalar_literal(ty.dtype)
        return self.emit("literal", [LiteralValue(self.scalar_literal(ty.dtype).literal, ty)])

    # One random instruction ------------------------------------------------------------------

    def step(self) -> bool:
        """Emits one random instruction (a few emit two); False when the choice did not apply."""
        r = self.rng.random() * 100
        for method, share in MIX:
            r -= share
            if r < 0:
                return getattr(self, method)()
        return self.misc()

    def unary(self) -> bool:
        v = self.pick(lambda t: t.dtype.is_numeric)
        if v is None:
            return False
        ops = UNARY_FLOAT + UNARY_NUMERIC if v.type.dtype.is_float else UNARY_NUMERIC
        self.emit(self.rng.choice(ops), [v])
        return True

    def binary(self) -> bool:
        a = self.pick(lambda t: t.dtype.is_numeric)
        if a is None:
            return False
        ops = BINARY if a.type.dtype.is_float else INT_BINARY
        b = self.partner(a.type)
        if self.rng.random() < 0.3:
            a, b = b, a
        self.emit(self.rng.choice(ops), [a, b])
        return True

    def compare(self) -> bool:
        a = self.pick(lambda t: t.dtype.is_numeric)
        if a is None:
            return False
        self.emit(self.rng.choice(COMPARE), [a, self.partner(a.type)])
        return True

    def select(self) -> bool:
        a = self.pick(lambda t: t.dtype.is_numeric)
        if a is None:
            return False
        b = self.partner(a.type)
        shape = broadcast_shapes(a.type.shape, b.type.shape)
        flags = self.pick(
            lambda t: (
                t.dtype.is_bool
                and (t.rank == len(shape) or not t.shape)
                and broadcast_shapes(shape, t.shape) is not None
            )
        )
        if flags is None:
            flags = self.emit("lessThan", [a, self.scalar_literal(a.type.dtype)])
        self.emit("select", [a, b, flags])
        return True

    def boolean(self) -> bool:
        a = self.pick(lambda t: t.dtype.is_bool)
        if a is None:
            return False
        if self.rng.random() < 0.3:
            self.emit("not", [a])
        else:
            self.emit(self.rng.choice(["and", "or"]), [a, self.partner(a.type)])
        return True

    def dot(self) -> bool:
        a = self.pick(lambda t: t.dtype.is_numeric and t.rank in (1, 2, 3))
        if a is None:
            return False
        t = a.type
        if t.rank == 1:
            b = self.pick(lambda u: u == t) or a
            self.emit("dot", [a, b])
            return True
        if t.rank == 3:
            b = self.pick(
                lambda u: (
                    u.dtype is t.dtype
                    and u.rank == 3
                    and u.shape[0] == t.shape[0]
                    and u.shape[1] == t.shape[2]
                )
            )
            if b is None:
                return False
            self.emit("dot", [a, b])
            return True
        k = t.shape[1]
        b = self.pick(lambda u: u.dtype is t.dtype and u.rank == 2 and u.shape[0] == k)
        if b is None or self.rng.random() < 0.3:
            b = (
                self.emit("transpose", [a])
                if self.rng.random() < 0.5
                else self.splat(TensorType((k, self.rng.choice(self.dims)), t.dtype))
            )
        self.emit("dot", [a, b])
        return True

    def transpose(self) -> bool:
        a = self.pick(lambda t: bool(t.shape))
        if a is None:
            return False
        if self.rng.random() < 0.5:
            self.emit("transpose", [a])
        else:
            rank = a.type.rank
            dims = tuple(sorted(self.rng.sample(range(rank), self.rng.randint(1, rank))))
            self.emit("reverse", [a], dims=dims)
        return True

    def reduce(self) -> bool:
        a = self.pick(lambda t: bool(t.shape))
        if a is None:
            return False
        t = a.type
        dims = tuple(sorted(self.rng.sample(range(t.rank), self.rng.randint(1, t.rank))))
        if t.dtype.is_bool:
            comb: object = self.rng.choice(["and", "or"])
        elif t.dtype is F32 and self.rng.random() < 0.15:
            comb = self.comb
        else:
            comb = self.rng.choice(COMBINATORS)
        if self.rng.random() < 0.2:
            self.emit("scan", [a], comb=comb, dims=dims)
        else:
            self.emit("reduce", [a, self.scalar_literal(t.dtype)], comb=comb, dims=dims)
        return True

    def concatenate(self) -> bool:
        a = self.pick(lambda t: bool(t.shape))
        if a is None:
            return False
        t = a.type
        axis = self.rng.randrange(t.rank)

        def fits(u: TensorType) -> bool:
            return (
                u.dtype is t.dtype
                and u.rank == t.rank
                and all(x == y for i, (x, y) in enumerate(zip(u.shape, t.shape)) if i != axis)
            )

        rest = [self.pick(fits) or a for _ in range(self.rng.randint(1, 2))]
        self.emit("concatenate", [a, *rest], axis=axis)
        return True

    def slice(self) -> bool:
        a = self.pick(lambda t: bool(t.shape))
        if a is None:
            return False
        n = a.type.shape[0]
        lo = self.rng.randrange(n)
        self.emit("slice", [a], lo=lo, hi=self.rng.randrange(lo, n))
        return True

    def shape_cast(self) -> bool:
        a = self.pick(lambda t: t.rank >= 1)
        if a is None:
            return False
        factors = _factor(a.type.unit_count)
        self.rng.shuffle(factors)
        rank = self.rng.randint(1, self.max_rank)
        dims = [1] * rank
        for f in factors:
            dims[self.rng.randrange(rank)] *= f
        shape = tuple(dims)
        if not factors and self.rng.random() < 0.5:
            shape = ()  # one element: `to scalar`
        self.emit("shapeCast", [a], shape=shape)
        return True

    def pad_or_squeeze(self) -> bool:
        a = self.pick()
        if a is None:
            return False
        t = a.type
        ones = [i for i, d in enumerate(t.shape) if d == 1]
        if ones and self.rng.random() < 0.5:
            self.emit("squeezeShape", [a], index=self.rng.choice(ones))
        elif t.rank < self.max_rank + 1:
            self.emit("padShape", [a], index=self.rng.randint(0, t.rank))
        else:
            return False
        return True

    def cast(self) -> bool:
        a = self.pick(lambda t: bool(WIDER[t.dtype]))
        if a is None:
            return False
        self.emit("dataTypeCast", [a], dtype=self.rng.choice(WIDER[a.type.dtype]))
        return True

    def literal(self) -> bool:
        rng = self.rng
        if rng.random() < 0.7:
            ty = self.random_type()
            self.emit("literal", [LiteralValue(self.scalar_literal(ty.dtype).literal, ty)])
            return True
        if rng.random() < 0.5:  # a dense one: a tensor's bytes
            ty = self.random_type(rank=rng.randint(1, max(1, self.max_rank)))
            values = [self.scalar_literal(ty.dtype).literal.value for _ in range(ty.unit_count)]
            self.emit("literal", [tensor_literal(np.reshape(values, ty.shape), ty)])
            return True
        # A small tensor literal whose elements are scalar values or scalar literals.
        dtype = rng.choice(NUMERIC)
        n = rng.randint(1, 4)
        items = []
        for _ in range(n):
            v = self.pick(lambda t, d=dtype: t == scalar(d)) if rng.random() < 0.5 else None
            items.append(v if v is not None else self.scalar_literal(dtype))
        ty = TensorType((n,), dtype)
        self.emit("literal", [LiteralValue(AggregateLiteral("tensor", tuple(items)), ty)])
        return True

    def tuple_ops(self) -> bool:
        rng = self.rng
        if self.tuples and rng.random() < 0.6:
            t = rng.choice(self.tuples)
            elements = t.type.elements
            i = rng.randrange(len(elements))
            if rng.random() < 0.3 and isinstance(elements[i], TensorType):
                self.emit("insert", [self.splat(elements[i]), t], keys=(ElementKey(index=i),))
            else:
                self.emit("extract", [t], keys=(ElementKey(index=i),))
            return True
        items = [self.pick() for _ in range(rng.randint(1, 3))]
        items = [v for v in items if v is not None]
        if not items:
            return False
        ty = TupleType(tuple(v.type for v in items))
        self.emit("literal", [LiteralValue(AggregateLiteral("tuple", tuple(items)), ty)])
        return True

    def apply(self) -> bool:
        if not self.callees:
            return False
        f = self.rng.choice(self.callees)
        args = [self.splat(t) for t in f.type.arguments]
        self.emit("apply", [f, *args])
        return True

    def repeat(self) -> bool:
        """A copy of an available instruction: work for common-subexpression elimination."""
        insts = [v for v in self.pool[-20:] if isinstance(v, Instruction)]
        if not insts:
            return False
        inst = self.rng.choice(insts)
        self.emit(inst.opcode, list(inst.operands), **inst.attrs)
        return True

    def misc(self) -> bool:
        rng = self.rng
        r = rng.random()
        if r < 0.3:
            dtype = rng.choice((F32, F64))
            shape = tuple(rng.choice(self.dims) for _ in range(rng.randint(0, 2)))
            self.emit(
                "random", [constant(0, scalar(dtype)), constant(1, scalar(dtype))], shape=shape
            )
            return True
        a = self.pick(lambda t: bool(t.shape))
        if a is None:
            return False
        self.emit(rng.choice(["rank", "shape", "unitCount"]), [a])
        return True

    # Control flow ----------------------------------------------------------------------------

    def _scalar_condition(self) -> Value:
        v = self.pick(lambda t: not t.shape and t.dtype.is_numeric)
        if v is None:
            v = self.pick(lambda t: t.dtype is F32) or self.splat(scalar(F32))
            if v.type.shape:
                dims = tuple(range(v.type.rank))
                v = self.emit("reduce", [v, constant(0, scalar(F32))], comb="add", dims=dims)
        return self.emit("greaterThan", [v, self.scalar_literal(v.type.dtype)])

    def _block(self, prefix: str, arg_types: Sequence[Type] = ()) -> Block:
        assert self.fn is not None
        n = len(self.fn.blocks)
        block = Block(
            f"{prefix}{n}", [Argument(f"{prefix}{n}_{i}", t) for i, t in enumerate(arg_types)]
        )
        self.fn.add_block(block)
        return block

    def _straight(self, count: int) -> int:
        built = 0
        while built < count:
            if self.step():
                built += 1
        return built

    def diamond(self) -> int:
        """`conditional` into two arms that each pass a value to a join block's argument."""
        cond = self._scalar_condition()
        carried = self.pick(lambda t: t.dtype.is_float) or self.splat(scalar(F32))
        ty = carried.type
        then, other = self._block("then"), self._block("else")
        join = self._block("join", [ty])
        self.b.build("conditional", [cond], then_=Successor(then, []), else_=Successor(other, []))
        mark, tmark, built = len(self.pool), len(self.tuples), 2
        for arm in (then, other):
            self.b.at_end(arm)
            built += self._straight(self.rng.randint(1, 4))
            value = self.emit(
                self.rng.choice(["add", "multiply"]), [carried, self.scalar_literal(ty.dtype)]
            )
            self.b.build("branch", [], dest=Successor(join, [value]))
            built += 2
            del self.pool[mark:], self.tuples[tmark:]
        self.b.at_end(join)
        self.pool.append(join.arguments[0])
        return built

    def loop(self) -> int:
        """A counted loop: a header with an induction variable and an accumulator."""
        init = self.pick(lambda t: t.dtype.is_float) or self.splat(scalar(F32))
        ty = init.type
        header = self._block("loop", [scalar(I64), ty])
        exit_ = self._block("exit", [ty])
        self.b.build("branch", [], dest=Successor(header, [constant(0, scalar(I64)), init]))
        self.b.at_end(header)
        i, acc = header.arguments
        self.pool.extend([i, acc])
        built = 1 + self._straight(self.rng.randint(1, 5))
        nxt = self.emit("add", [acc, self.pick(lambda t: t == ty) or self.scalar_literal(ty.dtype)])
        i1 = self.emit("add", [i, constant(1, scalar(I64))])
        cond = self.emit("lessThan", [i1, constant(4, scalar(I64))])
        self.b.build(
            "conditional", [cond], then_=Successor(header, [i1, nxt]), else_=Successor(exit_, [nxt])
        )
        self.b.at_end(exit_)
        self.pool.append(exit_.arguments[0])
        return built + 4


def random_module(seed: int, size: int = 30, control_flow: bool = False) -> Module:
    """One small random module (a combinator, a helper and one function)."""
    return IRGen(seed).module(f"random{seed}", functions=1, size=size, control_flow=control_flow)


__all__ = ["IRGen", "random_module"]
