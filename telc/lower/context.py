"""What the parts of one lowering share: the IR module and its insertion point, the diagnostics,
the function being filled in, scopes, and the emission helpers every construct uses (explicit
broadcasting, splats, coercion to a written type, new blocks, IR naming)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from dlvm.diagnostics import Diagnostic
from dlvm.ir.builder import Builder, add_block, constant
from dlvm.ir.typerules import TypeRuleError
from dlvm.ir.types import DataType, FunctionType, TensorType, TupleType, Type
from dlvm.ir.values import Block, Function, Instruction, Module, Value, fresh_name
from telc import ast
from telc.limits import MAX_DEPTH, help_line, too_large
from telc.lower.values import POISON, TV, Elaborated, _Poison, show, weak_misfit
from telc.lower.walk import ProgramFacts
from telc.program import Program, Unit
from telc.types import numpy_broadcast, shape_str


class Abort(Exception):
    """Stops lowering the current function after an error that leaves no sensible IR."""


@dataclass
class FnState:
    """The IR function being filled in."""

    ir: Function
    tel_name: str
    result: Type | None
    taken: set[str] = field(default_factory=set)


@dataclass
class InlineReturn:
    """A `return` of an inlined call: the block it ends and the value it returns."""

    block: Block
    value: TV
    span: ast.Span


@dataclass
class InlineFrame:
    """A call being inlined: its name, result type (once known) and the `return`s seen (each
    branched to the call's result block afterwards)."""

    name: str
    result: Type | None
    returns: list[InlineReturn] = field(default_factory=list)


@dataclass
class Scope:
    """Names visible at one point: locals (or a model's computed declarations), dimension
    variables, the module parameters at hand, and the compile-time `training` flag."""

    unit: Unit
    values: dict[str, Elaborated] = field(default_factory=dict)
    mutable: set[str] = field(default_factory=set)
    dims: dict[str, int] = field(default_factory=dict)
    rests: dict[str, tuple[int, ...]] = field(default_factory=dict)  # `S` of `[S...]`
    params: dict[str, TV] = field(default_factory=dict)
    training: bool = False
    dtype_var: DataType | None = None  # the element type of unannotated signature types
    int_var: DataType | None = None  # the integer type of a signature's `int[...]` types
    # Where the model's parameters are not at hand, why, for the message ("const c is a
    # compile-time constant (…)").
    paramless: str | None = None

    def child(self) -> Scope:
        return Scope(
            self.unit,
            dict(self.values),
            set(self.mutable),
            self.dims,
            self.rests,
            self.params,
            self.training,
            self.dtype_var,
            self.int_var,
            self.paramless,
        )

    @property
    def default_float(self) -> DataType:
        return self.dtype_var if self.dtype_var and self.dtype_var.is_float else self.unit.dtype


class Context:
    """The shared state of one lowering and the helpers that emit IR at its insertion point."""

    def __init__(self, program: Program, distributed: bool = False) -> None:
        self.program = program
        # Whether each train entry also gets its halves E.grads and E.apply (--distributed).
        self.distributed = distributed
        self.module = Module(program.root.name)
        self.diags: list[Diagnostic] = []
        self._seen: set[tuple[int, int, str]] = set()
        self.b = Builder()
        self.fn: FnState | None = None
        self.refusal = "internal error: an instruction outside any function"
        self.inlining: list[InlineFrame] = []
        self.facts = ProgramFacts(program)
        # What the model declares, set before any function is lowered: the types of its
        # parameters and buffers (functions read both the same way; `buffers` names the
        # latter), and the entry points' names, which no specialisation of a def may take.
        self.param_types: dict[str, TensorType] = {}
        self.buffers: set[str] = set()
        self.reserved: set[str] = set()
        # The next values of buffers that an imported graph computes when it is called in
        # training (its BatchNormalization's running statistics), for the train entry.
        self.graph_updates: dict[str, TV] = {}
        self.depth = 0  # expressions and blocks being lowered, one inside the other (MAX_DEPTH)

    # Diagnostics ----------------------------------------------------------------------------

    def error(self, span: ast.Span, message: str, details: list[str] | None = None) -> _Poison:
        """Records a located error (once per place and message) and returns POISON."""
        key = (id(span.source), span.start, message)
        if key not in self._seen:
            self._seen.add(key)
            notes = tuple(Diagnostic(d, None, "detail") for d in details or ())
            self.diags.append(Diagnostic(message, span.loc, notes=notes))
        return POISON

    @contextmanager
    def deeper(self, span: ast.Span) -> Iterator[bool]:
        """One level deeper for what runs inside (an expression, a block, a dim): yields True,
        or False after too_deep's error when that would pass MAX_DEPTH."""
        if self.depth >= MAX_DEPTH:
            self.too_deep(span)
            yield False
            return
        self.depth += 1
        try:
            yield True
        finally:
            self.depth -= 1

    def too_deep(self, span: ast.Span) -> _Poison:
        """The error for an expression or block that would go deeper than MAX_DEPTH."""
        key = (id(span.source), span.start, "too deep")
        if key not in self._seen:
            self._seen.add(key)
            fix = (
                "shorten the chain of functions that call each other (or of dims or consts "
                "defined through each other), or give parts of deep expressions a name"
            )
            message = (
                f"nested deeper than {MAX_DEPTH} levels, counting the expressions and blocks of "
                "the functions, dims and consts it uses"
            )
            self.diags.append(Diagnostic(message, span.loc, notes=(help_line(fix),)))
        return POISON

    def missing_parameter(self, span: ast.Span, fn: str, param: str, scope: Scope) -> _Poison:
        """A call of `fn`, which uses the model's parameter `param`, where none is at hand."""
        if scope.paramless is None:
            return self.error(span, f"internal error: parameter '{param}' is not at hand")
        return self.error(
            span, f"{fn} uses parameter '{param}', which is not at hand: {scope.paramless}"
        )

    # Emission -------------------------------------------------------------------------------

    @contextmanager
    def compile_time(self, refusal: str) -> Iterator[None]:
        """While a compile-time constant (a dim, a const) is evaluated, nothing may run: there is
        no insertion point, and an expression that would emit an instruction is reported with
        `refusal`."""
        saved = (self.b, self.fn, self.refusal)
        self.b, self.fn, self.refusal = Builder(), None, refusal
        try:
            yield
        finally:
            self.b, self.fn, self.refusal = saved

    def emit(self, opname: str, operands: list[Value], span: ast.Span, **attrs: Any) -> Value:
        """One instruction at the insertion point. The checker has already proved it well
        typed, so a refusal here is our bug: reported as an internal error, never a crash.
        Without an insertion point (a compile-time constant), the expression is reported."""
        if self.b.block is None:
            self.error(span, self.refusal)
            raise Abort
        try:
            value = self.b.build(opname, operands, None, **attrs)
        except TypeRuleError as e:
            self.error(span, f"internal error: telc produced an ill-typed '{opname}': {e}")
            raise Abort from None
        # The TEL expression it computes, which run-time errors name (`model.tel:12:5: in @infer,
        # gather: id 7 out of range …`).
        value.loc = span.loc
        ty = value.type
        if isinstance(ty, TensorType) and ty.shape:
            error = too_large(ty.dtype.size, ty.shape, lambda: show(ty))
            if error is not None:  # a broadcast, a concatenation… larger than any tensor
                self.error(span, error)
                raise Abort
        return value

    def name_value(self, value: Value | None, name: str) -> None:
        """Gives an instruction the TEL name it is bound to (unique within the function)."""
        if (
            isinstance(value, Instruction)
            and value.name is None
            and self.fn is not None
            and value.block is not None
            and value.block.function is self.fn.ir
        ):
            value.name = fresh_name(name, self.fn.taken)

    def new_block(self, name: str, args: list[tuple[str, Type]] | None = None) -> Block:
        """A block at the end of the current function; its name and its arguments' names are
        made unique."""
        assert self.fn is not None
        taken = {b.name for b in self.fn.ir.blocks}
        block_name = fresh_name(name, taken)
        arguments = [(fresh_name(n, self.fn.taken), t) for n, t in args or []]
        return add_block(self.fn.ir, block_name, arguments)

    def splat(self, value: int | float | bool, ty: TensorType, span: ast.Span) -> Value:
        """A tensor of one value: a scalar literal for scalars, else a `literal` instruction."""
        lit = constant(value, ty)
        if not ty.shape:
            return lit
        return self.emit("literal", [lit], span)

    def to_rank(self, value: Value, rank: int, span: ast.Span) -> Value:
        """value with leading unit dimensions added up to rank (NumPy broadcasting made
        explicit; the IR stretches unit dimensions itself)."""
        t = value.type
        assert isinstance(t, TensorType)
        if not t.shape or t.rank >= rank:
            return value
        return self.emit("shapeCast", [value], span, shape=(1,) * (rank - t.rank) + t.shape)

    def broadcast_to(self, value: Value, shape: tuple[int, ...], span: ast.Span) -> Value:
        """value stretched to exactly `shape` (for results that must have it, such as a
        branch of a select or a declaration)."""
        t = value.type
        assert isinstance(t, TensorType)
        if t.shape == shape:
            return value
        if not t.shape:
            zero = self.splat(0, TensorType(shape, t.dtype), span)
            return self.emit("add", [zero, value], span)
        v = self.to_rank(value, len(shape), span)
        ranked = v.type
        assert isinstance(ranked, TensorType)
        if ranked.shape == shape:
            return v
        zero = self.splat(0, TensorType(shape, t.dtype), span)
        return self.emit("add", [zero, v], span)

    def coerce(self, tv: TV, ty: Type, span: ast.Span, what: str) -> Value | _Poison:
        """tv as a value of exactly type ty: weak numbers take ty's element type and scalars
        and broadcastable shapes stretch; anything else is an error naming `what`."""
        if isinstance(ty, TupleType) or isinstance(tv.ty, TupleType):
            if tv.ty == ty:
                return tv.ir()
            return self.error(span, f"{what}: expected {show(ty)}, found {show(tv.ty)}")
        assert isinstance(ty, TensorType)
        t = tv.tensor
        assert t is not None
        if tv.weak:
            misfit = weak_misfit(tv, ty.dtype)
            if misfit == "kind":
                return self.error(span, f"{what}: expected {show(ty)}, found the number {tv.const}")
            if misfit is not None:
                return self.error(span, f"{what}: {misfit}")
            if tv.value is None and tv.const is not None:
                return self.splat(tv.const, ty, span)
            return self.broadcast_to(tv.ir(ty.dtype), ty.shape, span)
        if t.dtype is not ty.dtype:
            message = f"{what}: expected element type {ty.dtype}, found {t.dtype} ({show(t)})"
            # such as i32 class indices where a stdlib loss takes i64 ones
            fix = [f"  help: cast(…, {ty.dtype}) converts it"]
            return self.error(span, message, fix if t.dtype.can_cast_to(ty.dtype) else None)
        if t.shape != ty.shape:
            if numpy_broadcast(t.shape, ty.shape) != ty.shape:
                return self.error(
                    span,
                    f"{what}: expected shape {shape_str(ty.shape)}, found {shape_str(t.shape)}",
                )
            return self.broadcast_to(tv.ir(), ty.shape, span)
        return tv.ir()


def compile_time(what: str) -> str:
    """The `Scope.paramless` of a compile-time constant."""
    return f"{what} is a compile-time constant (numbers, dims and consts only)"


def ftype(fn: Function) -> FunctionType:
    """An IR function's type (Value.type is typed as any Type)."""
    t = fn.type
    assert isinstance(t, FunctionType)
    return t
