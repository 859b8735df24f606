"""IR nodes: values (arguments, instructions, literals, functions, globals), blocks, functions
and modules, with their parent links kept consistent here and nowhere else.

Every structural edit bumps the owning function's `revision`, which keys the analysis caches.
Values may also appear inside instruction attributes (successor arguments, value element keys,
combinator functions) and inside aggregate literals; `Instruction.uses()` walks all of them and
`Instruction.map_values()` rewrites all of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dlvm.ir.literals import Literal, ScalarLiteral
from dlvm.ir.schedule import Schedule
from dlvm.ir.types import FunctionType, PointerType, Type, is_void

if TYPE_CHECKING:
    from dlvm.diagnostics import Location
    from dlvm.ir.ops import OpDef


class Value:
    """Anything an operand can refer to. `type` is the type every use is annotated with."""

    __slots__ = ()
    type: Type

    def use_text(self) -> str:
        return f"{self.ref_text()}: {self.type}"

    def ref_text(self) -> str:  # pragma: no cover - every subclass overrides
        raise NotImplementedError


class LiteralValue(Value):
    """A literal at a use site, with the type it is annotated with (`1: f32`)."""

    __slots__ = ("literal", "type")

    def __init__(self, literal: Literal, type: Type) -> None:
        self.literal = literal
        self.type = type

    def ref_text(self) -> str:
        return str(self.literal)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, LiteralValue)
            and self.type == other.type
            and _literal_key(self.literal) == _literal_key(other.literal)
        )

    def __hash__(self) -> int:
        return hash((_literal_key(self.literal), self.type))

    def __repr__(self) -> str:
        return f"LiteralValue({self.use_text()})"


def _literal_key(lit: Literal) -> Any:
    # 1 and 1.0 denote the same constant, but True must not equal 1, nor -0.0 equal 0.0.
    if isinstance(lit, ScalarLiteral):
        v = lit.value
        return (type(v) is bool, v, math.copysign(1.0, v) if isinstance(v, float) else 1.0)
    return lit


def literal(value: int | float | bool, type: Type) -> LiteralValue:
    return LiteralValue(ScalarLiteral(value), type)


class Argument(Value):
    """A block argument (the entry block's arguments are the function's)."""

    __slots__ = ("name", "type", "block", "loc")

    def __init__(self, name: str, type: Type, loc: Location | None = None) -> None:
        self.name = name
        self.type = type
        self.block: Block | None = None
        self.loc = loc

    def ref_text(self) -> str:
        return "%" + self.name

    def __repr__(self) -> str:
        return f"Argument(%{self.name}: {self.type})"


@dataclass(slots=True)
class Successor:
    """A branch target with the values passed to its block arguments."""

    block: Block
    args: list[Value]


@dataclass(frozen=True, slots=True)
class ElementKey:
    """An `extract`/`insert`/`elementPointer` key: an index, a `#field`, or a value."""

    index: int | None = None
    field: str | None = None
    value: Value | None = None

    def __str__(self) -> str:
        if self.index is not None:
            return str(self.index)
        if self.field is not None:
            return "#" + self.field
        assert self.value is not None
        return self.value.use_text()


def map_attr_values(attr: Any, fn: Callable[[Value], Value]) -> Any:
    """Rewrites the values held by an attribute (successors, keys, combinators, lists)."""
    if isinstance(attr, Value):
        return fn(attr)
    if isinstance(attr, Successor):
        return Successor(attr.block, [fn(v) for v in attr.args])
    if isinstance(attr, ElementKey):
        return ElementKey(value=fn(attr.value)) if attr.value is not None else attr
    if isinstance(attr, tuple):
        return tuple(map_attr_values(a, fn) for a in attr)
    if isinstance(attr, list):
        return [map_attr_values(a, fn) for a in attr]
    return attr


def attr_values(attr: Any) -> Iterator[Value]:
    if isinstance(attr, Value):
        yield attr
    elif isinstance(attr, Successor):
        yield from attr.args
    elif isinstance(attr, ElementKey):
        if attr.value is not None:
            yield attr.value
    elif isinstance(attr, (tuple, list)):
        for a in attr:
            if not isinstance(a, _PLAIN):  # dims and the like hold no values
                yield from attr_values(a)


_PLAIN = (int, str, type(None))


def map_value_deep(value: Value, fn: Callable[[Value], Value]) -> Value:
    """Applies fn to a value, and inside aggregate literals to their element values."""
    if isinstance(value, LiteralValue) and value.literal.elements():
        lit = value.literal.map_elements(lambda v: map_value_deep(v, fn))
        return LiteralValue(lit, value.type) if lit != value.literal else value
    return fn(value)


def deep_values(value: Value) -> Iterator[Value]:
    """A value and, for aggregate literals, every value nested in it (not the literal itself)."""
    if isinstance(value, LiteralValue):
        for v in value.literal.elements():
            yield from deep_values(v)
    else:
        yield value


class Instruction(Value):
    """One operation: `op` is its declaration, `operands` its typed uses, `attrs` the rest."""

    __slots__ = ("op", "operands", "attrs", "type", "name", "block", "loc")

    def __init__(
        self,
        op: OpDef,
        operands: list[Value],
        attrs: dict[str, Any],
        type: Type,
        name: str | None = None,
        loc: Location | None = None,
    ) -> None:
        self.op = op
        self.operands = operands
        self.attrs = attrs
        self.type = type
        self.name = name
        self.block: Block | None = None
        self.loc = loc

    @property
    def opcode(self) -> str:
        return self.op.name

    @property
    def is_terminator(self) -> bool:
        return self.op.terminator

    @property
    def is_void(self) -> bool:
        return is_void(self.type)

    @property
    def function(self) -> Function | None:
        return self.block.function if self.block is not None else None

    def ref_text(self) -> str:
        if self.name is not None:
            return "%" + self.name
        if self.block is None or self.block.function is None:
            return "%<detached>"
        b, i = self.position()
        return f"%{b}.{i}"

    def position(self) -> tuple[int, int]:
        """(block index, instruction index) — the numbers of an anonymous `%B.I` name."""
        assert self.block is not None and self.block.function is not None
        return self.block.index, self.block.instructions.index(self)

    def uses(self) -> Iterator[Value]:
        """Every value this instruction reads: operands, attribute values, literal elements."""
        # Written out for speed (this runs for every instruction in every analysis and pass):
        # the same as `deep_values` of every operand and of every `attr_values`.
        for v in self.operands:
            if not isinstance(v, LiteralValue):
                yield v
            elif v.literal.elements():
                yield from deep_values(v)
        for a in self.attrs.values():
            if not isinstance(a, _PLAIN):
                for v in attr_values(a):
                    if not isinstance(v, LiteralValue):
                        yield v
                    elif v.literal.elements():
                        yield from deep_values(v)

    def map_values(self, fn: Callable[[Value], Value]) -> None:
        """Rewrites every value this instruction reads through fn (literals included)."""
        self.operands = [map_value_deep(v, fn) for v in self.operands]
        self.attrs = {
            k: map_attr_values(a, lambda v: map_value_deep(v, fn)) for k, a in self.attrs.items()
        }
        self._touch()

    def successors(self) -> list[Successor]:
        return self.op.successors_of(self)

    def erase(self) -> None:
        """Removes this instruction from its block."""
        assert self.block is not None
        self.block.remove(self)

    def _touch(self) -> None:
        if self.block is not None and self.block.function is not None:
            self.block.function.revision += 1

    def __repr__(self) -> str:
        return f"Instruction({self.opcode} -> {self.type})"


class GlobalVariable(Value):
    """`var @g: T`, used as `@g: *T`."""

    __slots__ = ("name", "value_type", "type", "module", "loc")

    def __init__(self, name: str, value_type: Type, loc: Location | None = None) -> None:
        self.name = name
        self.value_type = value_type
        self.type = PointerType(value_type)
        self.module: Module | None = None
        self.loc = loc

    def ref_text(self) -> str:
        return "@" + self.name


class Block:
    """A basic block: arguments (no phi), instructions, the last one a terminator."""

    __slots__ = ("name", "arguments", "instructions", "function", "loc")

    def __init__(self, name: str, arguments: list[Argument] | None = None, loc=None) -> None:
        self.name = name
        self.arguments: list[Argument] = []
        self.instructions: list[Instruction] = []
        self.function: Function | None = None
        self.loc = loc
        for a in arguments or []:
            self.add_argument(a)

    @property
    def index(self) -> int:
        assert self.function is not None
        return self.function.blocks.index(self)

    @property
    def terminator(self) -> Instruction | None:
        if self.instructions and self.instructions[-1].is_terminator:
            return self.instructions[-1]
        return None

    def add_argument(self, arg: Argument, index: int | None = None) -> Argument:
        arg.block = self
        if index is None:
            self.arguments.append(arg)
        else:
            self.arguments.insert(index, arg)
        self._touch()
        return arg

    def remove_argument(self, arg: Argument) -> None:
        self.arguments.remove(arg)
        arg.block = None
        self._touch()

    def insert(self, index: int, inst: Instruction) -> Instruction:
        assert inst.block is None, "instruction already has a parent"
        inst.block = self
        self.instructions.insert(index, inst)
        self._touch()
        return inst

    def append(self, inst: Instruction) -> Instruction:
        return self.insert(len(self.instructions), inst)

    def remove(self, inst: Instruction) -> None:
        self.instructions.remove(inst)
        inst.block = None
        self._touch()

    def remove_all(self, insts: set[Instruction]) -> None:
        """Removes every instruction of `insts` that is in this block, in one sweep."""
        kept = []
        for inst in self.instructions:
            if inst in insts:
                inst.block = None
            else:
                kept.append(inst)
        if len(kept) != len(self.instructions):
            self.instructions = kept
            self._touch()

    def successors(self) -> list[Block]:
        term = self.terminator
        return [s.block for s in term.successors()] if term is not None else []

    def _touch(self) -> None:
        if self.function is not None:
            self.function.revision += 1

    def __repr__(self) -> str:
        return f"Block('{self.name})"


@dataclass(slots=True)
class GradientDecl:
    """`[gradient @of from S wrt i, j keeping k seedable]` (or the `[adjoint …]` spelling)."""

    of: Function
    source: int | None = None
    wrt: tuple[int, ...] | None = None
    keeping: tuple[int, ...] = ()
    seedable: bool = False
    spelling: str = "gradient"

    def __str__(self) -> str:
        parts = [f"[{self.spelling} @{self.of.name}"]
        if self.source is not None:
            parts.append(f"from {self.source}")
        if self.wrt is not None:
            parts.append("wrt " + ", ".join(map(str, self.wrt)))
        if self.keeping:
            parts.append("keeping " + ", ".join(map(str, self.keeping)))
        if self.seedable:
            parts.append("seedable")
        return " ".join(parts) + "]"


EXTERN = "extern"


class Function(Value):
    """A function definition, an `[extern]` declaration or a gradient declaration."""

    __slots__ = (
        "name",
        "type",
        "blocks",
        "attributes",
        "declaration",
        "compute",
        "schedule",
        "cuda_schedule",
        "module",
        "revision",
        "loc",
        "analyses",
    )

    def __init__(self, name: str, type: FunctionType, loc: Location | None = None) -> None:
        self.name = name
        self.type = type
        self.blocks: list[Block] = []
        self.attributes: list[str] = []  # `!inline` and friends, without the `!`
        self.declaration: GradientDecl | str | None = None  # EXTERN, a GradientDecl, or None
        self.compute = False  # `[compute]`: a kernel outlined by compute generation
        self.schedule: Schedule | None = None  # `[schedule …]`, from compute scheduling
        # `[schedule cuda …]`: how a [compute] function also runs as a GPU kernel, beside its
        # CPU schedule (a library built for CUDA runs on either device).
        self.cuda_schedule: Schedule | None = None
        self.module: Module | None = None
        self.revision = 0
        self.loc = loc
        self.analyses: dict = {}  # analysis -> (revision, result); see dlvm.ir.analysis_cache

    @property
    def is_declaration(self) -> bool:
        return self.declaration is not None

    @property
    def gradient(self) -> GradientDecl | None:
        return self.declaration if isinstance(self.declaration, GradientDecl) else None

    @property
    def entry(self) -> Block | None:
        return self.blocks[0] if self.blocks else None

    @property
    def arguments(self) -> list[Argument]:
        return self.blocks[0].arguments if self.blocks else []

    def ref_text(self) -> str:
        return "@" + self.name

    def add_block(self, block: Block, index: int | None = None) -> Block:
        block.function = self
        if index is None:
            self.blocks.append(block)
        else:
            self.blocks.insert(index, block)
        self.revision += 1
        return block

    def remove_block(self, block: Block) -> None:
        self.blocks.remove(block)
        block.function = None
        self.revision += 1

    def instructions(self) -> Iterator[Instruction]:
        for b in self.blocks:
            yield from b.instructions

    def block_named(self, name: str) -> Block | None:
        for b in self.blocks:
            if b.name == name:
                return b
        return None

    def __repr__(self) -> str:
        return f"Function(@{self.name}: {self.type})"


def fresh_name(base: str, taken: set[str]) -> str:
    """`base`, else the first of `base_0`, `base_1`… not in taken (the fresh-name rule of
    docs/ir.md); the name returned is added to taken."""
    name, i = base, 0
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    taken.add(name)
    return name


STAGES = ("raw", "optimizable", "compute", "schedule")
STAGE_ALIASES = {"canonical": "optimizable", "scheduled": "schedule"}


class Module:
    """Type definitions, global variables and functions, in declaration order per kind."""

    def __init__(self, name: str, stage: str = "raw") -> None:
        self.name = name
        self.stage = stage
        self.types: list = []  # StructType | EnumType | AliasType, in declaration order
        self.globals: list[GlobalVariable] = []
        self.functions: list[Function] = []

    def add_type(self, ty) -> None:
        self.types.append(ty)

    def add_global(self, g: GlobalVariable) -> GlobalVariable:
        g.module = self
        self.globals.append(g)
        return g

    def add_function(self, f: Function, index: int | None = None) -> Function:
        f.module = self
        if index is None:
            self.functions.append(f)
        else:
            self.functions.insert(index, f)
        return f

    def remove_function(self, f: Function) -> None:
        self.functions.remove(f)
        f.module = None

    def function_named(self, name: str) -> Function | None:
        for f in self.functions:
            if f.name == name:
                return f
        return None

    def type_named(self, name: str):
        for t in self.types:
            if t.name == name:
                return t
        return None

    def global_named(self, name: str) -> GlobalVariable | None:
        for g in self.globals:
            if g.name == name:
                return g
        return None
