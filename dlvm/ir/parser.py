"""Reads the textual IR (IR.md section 5) into a Module.

Instructions are parsed through their declaration's syntax template. Errors are located
diagnostics; an error inside an instruction skips to the end of its line and parsing goes on, so
one run reports every mistake. A value whose definition failed is "poisoned": later uses of it
are dropped quietly instead of cascading into more errors.
"""

from __future__ import annotations

import gc
from typing import Any, NoReturn

from dlvm.diagnostics import Diagnostic, DiagnosticError, Location, Source
from dlvm.ir import lexer as L
from dlvm.ir.literals import (
    NULL,
    UNDEFINED,
    ZERO,
    AggregateLiteral,
    EnumLiteral,
    ScalarLiteral,
    StructLiteral,
)
from dlvm.ir.ops import OPS, OpDef, Piece, lookup
from dlvm.ir.typerules import TypeRuleError, check_literal_operand
from dlvm.ir.types import (
    DATA_TYPES,
    STACK,
    VOID,
    AliasType,
    ArrayType,
    BoxType,
    EnumType,
    FunctionType,
    NominalType,
    PointerType,
    StructType,
    TensorType,
    TupleType,
    Type,
    same_type,
)
from dlvm.ir.values import (
    EXTERN,
    STAGE_ALIASES,
    STAGES,
    Argument,
    Block,
    ElementKey,
    Function,
    GlobalVariable,
    GradientDecl,
    Instruction,
    LiteralValue,
    Module,
    Successor,
    Value,
)

_INF = float("inf")
_STRING_OR_NL = (L.STRING, L.NL)
_SPECIAL_LITERALS = {"zero": ZERO, "undefined": UNDEFINED, "null": NULL}
_PADMODES = ("none", "half", "full")
# Deeper nesting of types or literals is refused: the recursive parser, printer and verifier
# would otherwise run out of Python stack (a RecursionError instead of a diagnostic).
_MAX_NESTING = 64


class _Error(Exception):
    def __init__(self, message: str, offset: int, length: int = 1) -> None:
        self.message = message
        self.offset = offset
        self.length = length


class _Poisoned(Exception):
    """A use of a value whose definition already failed: skip quietly."""


_TENSOR_CACHE: dict[str, TensorType] = {}


def _tensor_token(text: str) -> TensorType:
    ty = _TENSOR_CACHE.get(text)
    if ty is None:
        parts = text[1:-1].split()
        dims = tuple(int(p) for p in parts[:-1:2])
        ty = TensorType(dims, DATA_TYPES[parts[-1]])
        _TENSOR_CACHE[text] = ty
    return ty


class _Forward(Value):
    """A use of a local value whose definition comes later in the text. Valid SSA may do this
    (a dominating block may be printed after the blocks it dominates); the placeholder is
    replaced when the body ends."""

    __slots__ = ("text", "type", "offset")

    def __init__(self, text: str, type: Type, offset: int) -> None:
        self.text = text
        self.type = type
        self.offset = offset

    def ref_text(self) -> str:
        return self.text


_USE_TYPES: dict[str, TensorType] = {}


def _split_use(text: str) -> tuple[str, int, TensorType]:
    """A USE token's name, the offset of its type within the token, and the type."""
    colon = text.index(":")
    start = colon + 1
    while text[start] in " \t":
        start += 1
    tytext = text[start:]
    ty = _USE_TYPES.get(tytext)
    if ty is None:
        ty = _tensor_token(tytext) if tytext[0] == "<" else TensorType((), DATA_TYPES[tytext])
        _USE_TYPES[tytext] = ty
    return text[:colon], start, ty


class _FunctionScope:
    """Names visible inside one function body."""

    def __init__(self, fn: Function) -> None:
        self.fn = fn
        self.values: dict[str, Value] = {}
        self.anon: dict[tuple[int, int], Instruction] = {}
        self.anon_text: dict[str, Instruction] = {}  # the same, keyed by the defining `%B.I`
        self.blocks: dict[str, Block] = {}
        self.block_refs: dict[str, int] = {}  # first reference offset of a not-yet-seen block
        self.defined_blocks: set[str] = set()
        self.poisoned: set[str] = set()
        self.forward: dict[str, _Forward] = {}  # uses before definitions, by spelling
        self.settled: dict[Value, Value] = {}  # placeholder -> definition
        # Position of the next instruction as written (failed lines count too, so one error
        # does not make every later %B.I look misplaced).
        self.block_index = -1
        self.inst_index = 0


class Parser:
    def __init__(self, text: str, filename: str = "<input>") -> None:
        self.source = Source(filename, text)
        self.kinds, self.texts, self.offsets = L.tokenize(text)
        self.pos = 0
        self.diags: list[Diagnostic] = []
        self.module = Module("")
        self.types: dict[str, NominalType] = {}
        self.globals: dict[str, Value] = {}
        self.scope: _FunctionScope | None = None
        self.pending_callee: list[tuple[str, int]] = []
        self.depth = 0  # nesting of the type or literal being parsed
        self._line_starts: list[int] | None = None

    # Token helpers ---------------------------------------------------------------------------

    def loc(self, offset: int, length: int = 1) -> Location:
        return Location(self.source, offset, length)

    def error(self, message: str, pos: int | None = None) -> NoReturn:
        p = self.pos if pos is None else pos
        text = self.texts[p]
        raise _Error(message, self.offsets[p], max(1, len(text.rstrip("\r\n")) or 1))

    def nested(self, parse: Any, *args: Any) -> Any:
        """parse(*args) one nesting level deeper; deeper than _MAX_NESTING is an error."""
        if self.depth >= _MAX_NESTING:
            self.error(f"types or literals nested more than {_MAX_NESTING} levels deep")
        self.depth += 1
        try:
            return parse(*args)
        finally:
            self.depth -= 1

    def too_long(self, pos: int) -> NoReturn:
        # int() refuses more than sys.get_int_max_str_digits() digits with a ValueError.
        self.error(f"'{self.texts[pos][:12]}…' has a number with too many digits", pos)

    def describe(self, pos: int | None = None) -> str:
        p = self.pos if pos is None else pos
        kind = self.kinds[p]
        if kind == L.EOF:
            return "end of file"
        if kind == L.NL:
            return "end of line"
        return f"'{self.texts[p]}'"

    def at(self, text: str) -> bool:
        return self.texts[self.pos] == text and self.kinds[self.pos] not in (L.STRING, L.NL)

    def accept(self, text: str) -> bool:
        p = self.pos
        if self.texts[p] == text and self.kinds[p] not in _STRING_OR_NL:  # self.at, inlined
            self.pos = p + 1
            return True
        return False

    def expect(self, text: str, what: str | None = None) -> None:
        p = self.pos
        if self.texts[p] != text or self.kinds[p] in _STRING_OR_NL:  # not self.at, inlined
            self.error(f"expected {what or repr(text)}, found {self.describe()}")
        self.pos = p + 1

    def expect_kind(self, kind: str, what: str) -> str:
        if self.kinds[self.pos] != kind:
            self.error(f"expected {what}, found {self.describe()}")
        text = self.texts[self.pos]
        self.pos += 1
        return text

    def skip_newlines(self) -> None:
        while self.kinds[self.pos] == L.NL:
            self.pos += 1

    def expect_newline(self) -> None:
        if self.kinds[self.pos] == L.NL:
            self.pos += 1
        elif self.kinds[self.pos] != L.EOF and not self.at("}"):
            self.error(f"expected end of line, found {self.describe()}")

    def skip_line(self) -> None:
        kinds = self.kinds
        while kinds[self.pos] not in (L.NL, L.EOF):
            self.pos += 1
        if kinds[self.pos] == L.NL:
            self.pos += 1

    def record(self, e: _Error) -> None:
        self.diags.append(Diagnostic(e.message, self.loc(e.offset, e.length)))

    def int_(self, what: str = "an integer") -> int:
        if self.kinds[self.pos] != L.INT:
            self.error(f"expected {what}, found {self.describe()}")
        try:
            v = int(self.texts[self.pos])
        except ValueError:
            self.too_long(self.pos)
        self.pos += 1
        return v

    def dimension(self) -> int:
        d = self.int_("a dimension")
        if d <= 0:
            self.error(f"dimension {d} must be positive", self.pos - 1)
        return d

    def int_list(self, what: str = "an integer") -> tuple[int, ...]:
        out = [self.int_(what)]
        while self.accept(","):
            out.append(self.int_(what))
        return tuple(out)

    # Module ----------------------------------------------------------------------------------

    def parse_module(self) -> Module:
        try:
            self.skip_newlines()
            self.expect("module", "'module' at the start of the file")
            name = self.expect_kind(L.STRING, "the module name as a string")
            self.module.name = _unescape(name[1:-1])
            self.expect_newline()
            self.skip_newlines()
            self.expect("stage", "'stage'")
            stage_pos = self.pos
            stage = self.expect_kind(L.WORD, "a stage name")
            stage = STAGE_ALIASES.get(stage, stage)
            if stage not in STAGES:
                self.error(
                    f"unknown stage '{stage}' (expected one of {', '.join(STAGES)})", stage_pos
                )
            self.module.stage = stage
            self.expect_newline()
        except _Error as e:
            self.record(e)
            return self.module
        self.prescan()
        type_starts = self.type_declarations()
        while True:
            self.skip_newlines()
            if self.kinds[self.pos] == L.EOF:
                break
            start = self.pos
            if start in type_starts:
                self.recover_toplevel(start)  # parsed already
                continue
            try:
                self.toplevel()
            except _Error as e:
                self.record(e)
                self.scope = None
                self.recover_toplevel(start)
        return self.module

    def recover_toplevel(self, start: int) -> None:
        """Skips to the next line that starts a top-level item. A failed attribute or
        declaration line takes its `func` with it, so the function is not reported again."""
        starters = ("struct", "enum", "type", "var", "func", "[")
        header_only = (self.texts[start] == "[" or self.kinds[start] == L.ATTR) and (
            "func" not in self.texts[start : self.pos]
        )
        self.pos = max(self.pos, start + 1)
        while self.kinds[self.pos] != L.EOF:
            if self.kinds[self.pos - 1] == L.NL and (
                self.texts[self.pos] in starters or self.kinds[self.pos] == L.ATTR
            ):
                if not (header_only and self.texts[self.pos] == "func"):
                    return
                header_only = False
            self.pos += 1

    def line_starts(self) -> list[int]:
        """Indices of the tokens that begin a line (computed once: the scans below would
        otherwise walk every token in Python)."""
        if self._line_starts is None:
            find, starts, i = self.kinds.index, [0], 0
            try:
                while True:  # list.index scans in C
                    i = find(L.NL, i) + 1
                    starts.append(i)
            except ValueError:
                pass
            self._line_starts = starts
        return self._line_starts

    def prescan(self) -> None:
        """Declares nominal types, function signatures and global variables so they may be used
        before they appear."""
        kinds, texts = self.kinds, self.texts
        n = len(kinds)
        for i in self.line_starts():
            if i >= n - 2:
                continue
            t = texts[i]
            if t in ("struct", "enum", "type") and kinds[i] == L.WORD and kinds[i + 1] == L.TYPE:
                name = texts[i + 1][1:]
                if name in self.types:
                    continue  # reported when the duplicate is parsed
                cls = {"struct": StructType, "enum": EnumType, "type": AliasType}[t]
                ty = cls(name)
                ty.loc = self.loc(self.offsets[i + 1], len(texts[i + 1]))
                self.types[name] = ty
        for i in self.line_starts():
            if i >= n - 2 or texts[i] not in ("func", "var"):
                continue
            if kinds[i + 1] != L.GLOBAL:
                continue
            name = texts[i + 1][1:]
            if name in self.globals:
                continue
            save = self.pos
            self.pos = i + 2
            loc = self.loc(self.offsets[i + 1], len(texts[i + 1]))
            try:
                self.expect(":")
                ty = self.type_()
                if texts[i] == "var":
                    self.globals[name] = GlobalVariable(name, ty, loc)
                elif not isinstance(ty, FunctionType):
                    self.error(f"a function needs a function type, found {ty}", i + 3)
            except _Error:
                ty = FunctionType((), VOID)  # reported again when the item is parsed
            self.pos = save
            if texts[i] == "func":
                self.globals[name] = Function(name, ty, loc)

    def type_declarations(self) -> set[int]:
        """Parses every struct, enum and alias before anything else, so that a type used before
        its declaration already has its fields, cases or target. Returns where each starts."""
        kinds, texts = self.kinds, self.texts
        save, starts = self.pos, set()
        for i in self.line_starts():
            if i >= len(kinds) - 1 or kinds[i] != L.WORD or kinds[i + 1] != L.TYPE:
                continue
            if texts[i] not in ("struct", "enum", "type"):
                continue
            starts.add(i)
            self.pos = i
            try:
                self.toplevel()
            except _Error as e:
                self.record(e)
        self.pos = save
        return starts

    def toplevel(self) -> None:
        t = self.texts[self.pos]
        kind = self.kinds[self.pos]
        if kind == L.WORD and t in ("struct", "enum"):
            self.nominal_decl(t)
        elif kind == L.WORD and t == "type":
            self.alias_decl()
        elif kind == L.WORD and t == "var":
            self.var_decl()
        elif kind == L.ATTR or (kind == L.PUNCT and t == "[") or (kind == L.WORD and t == "func"):
            self.function()
        else:
            self.error(
                f"expected a top-level declaration (struct, enum, type, var or func), "
                f"found {self.describe()}"
            )

    def declared_type(self, cls: type) -> NominalType:
        pos = self.pos
        name = self.expect_kind(L.TYPE, "a type name ($Name)")[1:]
        ty = self.types.get(name)
        if any(t.name == name for t in self.module.types) or not isinstance(ty, cls):
            self.error(f"type ${name} is already defined", pos)
        return ty

    def nominal_decl(self, word: str) -> None:
        self.pos += 1
        ty = self.declared_type(StructType if word == "struct" else EnumType)
        self.module.add_type(ty)
        self.expect("{")
        self.skip_newlines()
        seen: set[str] = set()
        while not self.at("}"):
            pos = self.pos
            if word == "struct":
                name = self.expect_kind(L.KEY, "a field (#name)")[1:]
                self.expect(":")
                member: Any = self.type_()
            else:
                name = self.expect_kind(L.CASE, "an enum case (?name)")[1:]
                self.expect("(")
                member = self.type_list(")")
                self.expect(")")
            if name in seen:
                what = "field #" if word == "struct" else "case ?"
                self.error(f"duplicate {what}{name} in ${ty.name}", pos)
            seen.add(name)
            if word == "struct":
                ty.fields.append((name, member))
            else:
                ty.cases.append((name, member))
            if not self.accept(",") and not self.at("}"):
                self.expect_newline()
            self.skip_newlines()
        self.expect("}")
        self.expect_newline()

    def alias_decl(self) -> None:
        self.pos += 1
        ty = self.declared_type(AliasType)
        self.module.add_type(ty)
        self.expect("=")
        if not self.accept("opaque"):
            target_pos = self.pos
            ty.target = self.type_()
            probe, steps = ty.target, 0
            while isinstance(probe, AliasType) and probe.target is not None and steps < 100:
                probe, steps = probe.target, steps + 1
            if probe is ty or steps >= 100:
                self.error(f"type alias ${ty.name} refers to itself", target_pos)
        self.expect_newline()

    def var_decl(self) -> None:
        self.pos += 1
        pos = self.pos
        name = self.expect_kind(L.GLOBAL, "a global name (@name)")[1:]
        prior = self.globals.get(name)
        # The prescan made this very variable already (so it may be used before it appears).
        own = (
            isinstance(prior, GlobalVariable)
            and prior.module is None
            and prior.loc is not None
            and prior.loc.offset == self.offsets[pos]
        )
        if prior is not None and not own:
            self.error(f"@{name} is already defined", pos)
        self.expect(":")
        ty = self.type_()
        if own:
            g = prior
        else:
            g = GlobalVariable(name, ty, self.loc(self.offsets[pos], len(self.texts[pos])))
        self.globals[name] = g
        self.module.add_global(g)
        self.expect_newline()

    # Functions -------------------------------------------------------------------------------

    def function(self) -> None:
        attributes: list[str] = []
        declaration: Any = None
        while self.kinds[self.pos] == L.ATTR:
            attributes.append(self.texts[self.pos][1:])
            self.pos += 1
            self.expect_newline()
            self.skip_newlines()
        if self.at("["):
            declaration = self.declaration_line()
            self.skip_newlines()
        self.expect("func", "'func'")
        pos = self.pos
        name = self.expect_kind(L.GLOBAL, "a function name (@name)")[1:]
        fn = self.globals.get(name)
        if not isinstance(fn, Function) or fn.module is not None:
            self.error(f"@{name} is already defined", pos)
        self.expect(":")
        type_pos = self.pos
        ty = self.type_()
        if not isinstance(ty, FunctionType):
            self.error(f"a function needs a function type, found {ty}", type_pos)
        fn.type = ty
        fn.attributes = attributes
        if isinstance(declaration, tuple):
            of_name, of_pos, decl = declaration
            of = self.globals.get(of_name)
            if not isinstance(of, Function):
                self.error(f"unknown function @{of_name} in gradient declaration", of_pos)
            decl.of = of
            declaration = decl
        fn.declaration = declaration
        self.module.add_function(fn)
        if self.at("{"):
            if declaration is not None:
                self.error(f"a declaration ([{_decl_word(declaration)}]) has no body")
            self.body(fn)
        elif declaration is None:
            self.error(f"expected '{{' to begin the body of @{name}, found {self.describe()}")
        self.expect_newline()

    def declaration_line(self) -> Any:
        self.expect("[")
        pos = self.pos
        word = self.expect_kind(L.WORD, "'extern', 'gradient' or 'adjoint'")
        if word == "extern":
            self.expect("]")
            self.expect_newline()
            return EXTERN
        if word not in ("gradient", "adjoint"):
            self.error(f"unknown declaration kind '{word}'", pos)
        of_pos = self.pos
        of_name = self.expect_kind(L.GLOBAL, "the function to differentiate (@name)")[1:]
        decl = GradientDecl(of=None, spelling=word)  # type: ignore[arg-type]
        if self.accept("from"):
            decl.source = self.int_("a result index after 'from'")
        if self.accept("wrt"):
            decl.wrt = self.int_list("an argument index after 'wrt'")
        if self.accept("keeping"):
            decl.keeping = self.int_list("a result index after 'keeping'")
        if self.accept("seedable"):
            decl.seedable = True
        self.expect("]", "']' or one of 'from', 'wrt', 'keeping', 'seedable'")
        self.expect_newline()
        return (of_name, of_pos, decl)

    def body(self, fn: Function) -> None:
        self.expect("{")
        self.skip_newlines()
        errors_before = len(self.diags)
        scope = self.scope = _FunctionScope(fn)
        while not self.at("}"):
            if self.kinds[self.pos] == L.EOF:
                self.error(f"expected '}}' to close the body of @{fn.name}, found end of file")
            self.block(scope)
            self.skip_newlines()
        self.pos += 1
        for name, off in scope.block_refs.items():
            if name not in scope.defined_blocks:
                self.diags.append(
                    Diagnostic(f"unknown block '{name}", self.loc(off, len(name) + 1))
                )
        self.settle_forward_uses(scope)
        if not fn.blocks and len(self.diags) == errors_before:
            self.diags.append(Diagnostic(f"function @{fn.name} has no blocks", fn.loc))
        self.scope = None

    def settle_forward_uses(self, scope: _FunctionScope) -> None:
        """Replaces placeholders by their definitions; reports the names never defined."""
        for text, fwd in scope.forward.items():
            if text[1:] in scope.poisoned:
                continue
            hint = _suggest(text[1:], scope.values, "%") if not text[1].isdigit() else ""
            self.diags.append(
                Diagnostic(f"use of undefined value {text}{hint}", self.loc(fwd.offset, len(text)))
            )
        if scope.settled:
            settled = scope.settled
            for inst in scope.fn.instructions():
                if any(type(v) is _Forward for v in inst.uses()):
                    inst.map_values(lambda v: settled.get(v, v))

    def defined(self, scope: _FunctionScope, text: str, value: Value) -> None:
        """Settles earlier uses of `text`, now that it is defined."""
        fwd = scope.forward.pop(text, None)
        if fwd is None:
            return
        if not same_type(fwd.type, value.type):
            self.diags.append(
                Diagnostic(
                    f"{text} has type {value.type}, but an earlier use says {fwd.type}",
                    self.loc(fwd.offset, len(text)),
                )
            )
        scope.settled[fwd] = value

    def block_ref(self, scope: _FunctionScope) -> Block:
        pos = self.pos
        name = self.expect_kind(L.BLOCK, "a block name ('name)")[1:]
        b = scope.blocks.get(name)
        if b is None:
            b = scope.blocks[name] = Block(name)
            scope.block_refs[name] = self.offsets[pos]
        return b

    def block(self, scope: _FunctionScope) -> None:
        pos = self.pos
        scope.block_index += 1
        scope.inst_index = 0
        try:
            if self.kinds[pos] != L.BLOCK:
                self.error(f"expected a block label ('name(...):), found {self.describe()}")
            name = self.texts[pos][1:]
            if name in scope.defined_blocks:
                self.error(f"block '{name} is already defined", pos)
            b = self.block_ref(scope)
            b.loc = self.loc(self.offsets[pos], len(self.texts[pos]))
            scope.defined_blocks.add(name)
            scope.fn.add_block(b)
            self.expect("(")
            while not self.at(")"):
                apos = self.pos
                if self.kinds[apos] == L.USE:
                    aname, _, aty = _split_use(self.texts[apos])
                    aname = aname[1:]
                    if aname[0].isdigit():
                        self.error(f"expected an argument (%name: type), found %{aname}", apos)
                    self.pos += 1
                else:
                    aname = self.expect_kind(L.LOCAL, "an argument (%name: type)")[1:]
                    self.expect(":")
                    aty = self.type_()
                arg = Argument(aname, aty, self.loc(self.offsets[apos], len(aname) + 1))
                self.define(scope, aname, arg, apos)
                b.add_argument(arg)
                if not self.accept(","):
                    break
            self.expect(")")
            self.expect(":")
            self.expect_newline()
        except _Error as e:
            self.record(e)
            self.skip_line()
            if self.kinds[pos] != L.BLOCK:
                # Lines before the next label belong to no block: skip them quietly.
                while self.kinds[self.pos] not in (L.BLOCK, L.EOF) and not self.at("}"):
                    self.skip_line()
                return
        self.skip_newlines()
        b = scope.fn.blocks[-1] if scope.fn.blocks else None
        while b is not None and self.kinds[self.pos] not in (L.BLOCK, L.EOF) and not self.at("}"):
            self.instruction(scope, b)
            self.skip_newlines()

    def define(self, scope: _FunctionScope, name: str, value: Value, pos: int) -> None:
        if name in scope.values or name in scope.poisoned:
            self.error(f"%{name} is already defined in @{scope.fn.name}", pos)
        scope.values[name] = value
        if scope.forward:
            self.defined(scope, "%" + name, value)

    # Instructions ----------------------------------------------------------------------------

    def instruction(self, scope: _FunctionScope, block: Block) -> None:
        start = self.pos
        result_name: str | None = None
        anon: tuple[int, int] | None = None
        position = (scope.block_index, scope.inst_index)
        scope.inst_index += 1
        try:
            kind = self.kinds[start]
            if kind in (L.LOCAL, L.ANON) and self.texts[start + 1] == "=":
                text = self.texts[start]
                if kind == L.LOCAL:
                    result_name = text[1:]
                    if result_name in scope.values or result_name in scope.poisoned:
                        self.error(f"%{result_name} is already defined in @{scope.fn.name}")
                else:
                    b, _, i = text[1:].partition(".")
                    try:
                        anon = (int(b), int(i))
                    except ValueError:
                        self.too_long(start)
                    expected = position
                    if anon != expected:
                        self.error(
                            f"anonymous name {text} does not match its position; "
                            f"it must be %{expected[0]}.{expected[1]}"
                        )
                self.pos += 2
            op_pos = self.pos
            opname = self.expect_kind(L.WORD, "an instruction")
            op = lookup(opname)
            if op is None:
                self.error(f"unknown instruction '{opname}'{_suggest(opname)}", op_pos)
            arity = _PLAIN_OPERANDS.get(op.syntax)
            if arity is not None:  # `$0` or `$0, $1`: most instructions, so a direct path
                attrs: dict[str, Any] = {}
                operands: list[Value] = [self.use(scope)]
                if arity == 2:
                    if self.texts[self.pos] != "," or self.kinds[self.pos] != L.PUNCT:
                        self.error(f"expected ',', found {self.describe()}")
                    self.pos += 1
                    operands.append(self.use(scope))
            else:
                operands = []
                attrs = dict.fromkeys(op.attr_kinds)
                self.pieces(op.pieces, op, operands, attrs, scope)
            end_pos = self.pos
            self.expect_newline()
            if op.name != "literal":
                for v in operands:
                    if isinstance(v, LiteralValue):
                        try:
                            check_literal_operand(v, aggregate_ok=False)
                        except TypeRuleError as e:
                            self.error(f"{e}", op_pos)
            try:
                ty = op.infer([v.type for v in operands], attrs)
            except TypeRuleError as e:
                end = self.offsets[end_pos - 1] + len(self.texts[end_pos - 1])
                raise _Error(
                    f"{opname}: {e}", self.offsets[op_pos], max(1, end - self.offsets[op_pos])
                ) from None
            if op.name == "literal":
                if not isinstance(operands[0], LiteralValue):
                    self.error("literal: the operand must be a literal, not a value", op_pos + 1)
                try:
                    check_literal_operand(operands[0], aggregate_ok=True)
                except TypeRuleError as e:
                    self.error(f"literal: {e}", op_pos + 1)
            inst = Instruction(
                op,
                operands,
                attrs,
                ty,
                result_name,
                self.loc(self.offsets[start], len(self.texts[start])),
            )
            if (result_name is not None or anon is not None) and inst.is_void:
                self.error(f"cannot name the result of '{opname}', which produces no value", start)
            block.append(inst)
            if result_name is not None:
                scope.values[result_name] = inst
            else:
                scope.anon[position] = inst
                if anon is not None:
                    scope.anon_text[self.texts[start]] = inst
            if scope.forward:
                text = "%" + result_name if result_name is not None else "%{}.{}".format(*position)
                self.defined(scope, text, inst)
        except _Error as e:
            self.record(e)
            self._poison(scope, result_name, anon)
            self.pos = max(self.pos, start)
            self._finish_line(start)
        except _Poisoned:
            self._poison(scope, result_name, anon)
            self._finish_line(start)

    def _finish_line(self, start: int) -> None:
        # Errors found after the instruction's newline was consumed must not skip the next line.
        if not (self.pos > start and self.kinds[self.pos - 1] == L.NL):
            self.skip_line()

    def _poison(self, scope: _FunctionScope, name: str | None, anon: tuple | None) -> None:
        if name is not None and name not in scope.values:
            scope.poisoned.add(name)
        if anon is not None:
            scope.poisoned.add(f"{anon[0]}.{anon[1]}")

    def pieces(
        self,
        pieces: tuple[Piece, ...],
        op: OpDef,
        operands: list[Value],
        attrs: dict[str, Any],
        scope: _FunctionScope,
    ) -> None:
        for idx, p in enumerate(pieces):
            kind = p.kind
            if kind == "word":
                self.expect(p.text)
            elif kind == "operand":
                mode = p.text
                if mode == "name":
                    self.pending_callee.append((self.texts[self.pos], self.pos))
                    if self.kinds[self.pos] not in (L.GLOBAL, L.LOCAL, L.ANON):
                        self.error(f"expected a callee (@name or %value), found {self.describe()}")
                    self.pos += 1
                    operands.append(None)  # type: ignore[arg-type]
                elif mode == "type":
                    text, pos = self.pending_callee.pop()
                    ty_pos = self.pos
                    ty = self.type_()
                    operands[p.index] = self.resolve(text, pos, ty, scope, ty_pos)
                else:
                    operands.append(self.use(scope, aggregate=mode == "literal"))
            elif kind == "operands":
                stop = _next_word(pieces, idx)
                if not self.at(stop):
                    operands.append(self.use(scope))
                    while self.accept(","):
                        operands.append(self.use(scope))
            elif kind == "attr":
                attrs[p.name] = self.attr(p.text, scope)
            else:
                first = p.group[0]
                if first.kind == "word":
                    present = self.at(first.text)
                else:
                    present = self.kinds[self.pos] not in (L.NL, L.EOF) and not self.at("}")
                if present:
                    self.pieces(p.group, op, operands, attrs, scope)

    def attr(self, kind: str, scope: _FunctionScope) -> Any:
        if kind == "int":
            return self.int_()
        if kind == "ints":
            return self.int_list()
        if kind == "dtype":
            pos = self.pos
            word = self.expect_kind(L.WORD, "a data type")
            dt = DATA_TYPES.get(word)
            if dt is None:
                self.error(f"unknown data type '{word}'", pos)
            return dt
        if kind == "type":
            return self.type_()
        if kind == "shape":
            if self.accept("scalar"):
                return ()
            dims = [self.dimension()]
            while self.accept("x"):
                dims.append(self.dimension())
            return tuple(dims)
        if kind == "comb":
            if self.kinds[self.pos] == L.WORD:
                pos = self.pos
                word = self.texts[pos]
                op = OPS.get(word)
                if op is None or op.family not in ("binary", "boolean"):
                    self.error(f"'{word}' is not a binary operation usable as a combinator", pos)
                self.pos += 1
                return word
            return self.use(scope)
        if kind == "padmode":
            pos = self.pos
            word = self.expect_kind(L.WORD, "a padding mode (none, half or full)")
            if word not in _PADMODES:
                self.error(f"unknown padding mode '{word}' (expected none, half or full)", pos)
            return word
        if kind == "pairs":
            pairs = []
            while True:
                self.expect("(")
                lo = self.int_()
                self.expect(",")
                hi = self.int_()
                self.expect(")")
                pairs.append((lo, hi))
                if not self.accept(","):
                    return tuple(pairs)
        if kind == "keys":
            keys = [self.key(scope)]
            while self.accept(","):
                keys.append(self.key(scope))
            return tuple(keys)
        if kind == "successor":
            b = self.block_ref(scope)
            self.expect("(")
            args: list[Value] = []
            if not self.at(")"):
                args.append(self.use(scope))
                while self.accept(","):
                    args.append(self.use(scope))
            self.expect(")")
            return Successor(b, args)
        if kind == "cases":
            cases = []
            while self.accept("case"):
                case = self.expect_kind(L.CASE, "an enum case (?name)")[1:]
                cases.append((case, self.block_ref(scope)))
            if not cases:
                self.error(f"expected 'case ?name 'block', found {self.describe()}")
            return tuple(cases)
        raise AssertionError(kind)

    def key(self, scope: _FunctionScope) -> ElementKey:
        kind = self.kinds[self.pos]
        if kind == L.INT and self.texts[self.pos + 1] != ":":
            return ElementKey(index=self.int_())
        if kind == L.KEY:
            self.pos += 1
            return ElementKey(field=self.texts[self.pos - 1][1:])
        return ElementKey(value=self.use(scope))

    # Uses ------------------------------------------------------------------------------------

    def use(self, scope: _FunctionScope | None, aggregate: bool = True) -> Value:
        pos = self.pos
        kind = self.kinds[pos]
        text = self.texts[pos]
        if kind == L.USE:
            self.pos = pos + 1
            name, ty_start, ty = _split_use(text)
            name_kind = L.ANON if name[1].isdigit() else L.LOCAL
            start = self.offsets[pos]
            return self.resolve(name, pos, ty, scope, pos, name_kind, start + ty_start,
                                len(text) - ty_start)  # fmt: skip
        if kind in (L.LOCAL, L.ANON, L.GLOBAL):
            self.pos = ty_pos = pos + 2
            if self.texts[pos + 1] != ":":  # only a PUNCT token reads ':'
                self.pos = pos + 1
                self.expect(":")
            ty = self.type_()
            return self.resolve(text, pos, ty, scope, ty_pos)
        lit = self.literal_payload(scope)
        self.expect(":", "':' and the literal's type")
        return LiteralValue(lit, self.type_())

    def resolve(
        self,
        text: str,
        pos: int,
        ty: Type,
        scope: _FunctionScope | None,
        ty_pos: int,
        kind: str | None = None,
        ty_offset: int | None = None,
        ty_length: int = 1,
    ) -> Value:
        """The value named `text` (at token pos), checked against its annotated type."""
        if kind is None:
            kind = self.kinds[pos]
        if kind == L.GLOBAL:
            v = self.globals.get(text[1:])
            if v is None:
                hint = _suggest(text[1:], self.globals, "@")
                raise _Error(f"unknown function or global {text}{hint}", self.offsets[pos],
                             len(text))  # fmt: skip
        elif scope is None:
            raise _Error(f"{text} cannot be used outside a function body", self.offsets[pos],
                         len(text))  # fmt: skip
        elif kind == L.ANON:
            if text[1:] in scope.poisoned:
                raise _Poisoned
            v = scope.anon_text.get(text)  # a use spelt as its definition: no int parsing
            if v is None:
                b, _, i = text[1:].partition(".")
                try:
                    v = scope.anon.get((int(b), int(i)))
                except ValueError:
                    self.too_long(pos)
            if v is None:
                v = self.forward_use(scope, text, ty, pos)
        else:
            name = text[1:]
            if name in scope.poisoned:
                raise _Poisoned
            v = scope.values.get(name)
            if v is None:
                v = self.forward_use(scope, text, ty, pos)
        if v.type is not ty and not same_type(v.type, ty):
            message = f"{text} has type {v.type}, but this use says {ty}"
            if ty_offset is not None:
                raise _Error(message, ty_offset, ty_length)
            self.error(message, ty_pos)
        return v

    def forward_use(self, scope: _FunctionScope, text: str, ty: Type, pos: int) -> Value:
        """A placeholder for a value defined later in the body (or never: reported then)."""
        fwd = scope.forward.get(text)
        if fwd is None:
            fwd = scope.forward[text] = _Forward(text, ty, self.offsets[pos])
        return fwd

    def literal_payload(self, scope: _FunctionScope | None) -> Any:
        kind = self.kinds[self.pos]
        text = self.texts[self.pos]
        if kind == L.INT:
            try:
                value: int | float = int(text)
            except ValueError:
                self.too_long(self.pos)
            self.pos += 1
            return ScalarLiteral(value)
        if kind == L.FLOAT:
            value = float(text)
            if value in (_INF, -_INF) and text != "-inf":
                self.error(f"float literal {text} is out of range")
            self.pos += 1
            return ScalarLiteral(value)
        if kind == L.WORD:
            if text in ("inf", "nan"):
                self.pos += 1
                return ScalarLiteral(float(text))
            if text in ("true", "false"):
                self.pos += 1
                return ScalarLiteral(text == "true")
            if text in _SPECIAL_LITERALS:
                self.pos += 1
                return _SPECIAL_LITERALS[text]
        if kind == L.PUNCT and text in ("<", "(", "["):
            close = {"<": ">", "(": ")", "[": "]"}[text]
            self.pos += 1
            items = self.nested(self.use_list, close, scope)
            return AggregateLiteral({"<": "tensor", "(": "tuple", "[": "array"}[text], items)
        if kind == L.PUNCT and text == "{":
            self.pos += 1
            fields = []
            while not self.at("}"):
                name = self.expect_kind(L.KEY, "a field (#name)")[1:]
                self.expect("=")
                fields.append((name, self.nested(self.use, scope)))
                if not self.accept(","):
                    break
            self.expect("}")
            return StructLiteral(tuple(fields))
        if kind == L.CASE:
            self.pos += 1
            self.expect("(")
            return EnumLiteral(text[1:], self.nested(self.use_list, ")", scope))
        if kind == L.TENSOR:
            self.error("expected a value, found a type")
        self.error(f"expected a value (%name, @name or a literal), found {self.describe()}")

    def use_list(self, close: str, scope: _FunctionScope | None) -> tuple[Value, ...]:
        items: list[Value] = []
        while not self.at(close):
            items.append(self.use(scope))
            if not self.accept(","):
                break
        self.expect(close)
        return tuple(items)

    # Types -----------------------------------------------------------------------------------

    def type_(self) -> Type:
        pos = self.pos
        kind = self.kinds[pos]
        text = self.texts[pos]
        if kind == L.TENSOR:
            try:
                ty = _tensor_token(text)
            except ValueError:
                self.too_long(pos)
            if 0 in ty.shape:
                self.error(f"dimension 0 must be positive in {text}")
            self.pos += 1
            return ty
        if kind == L.WORD:
            dt = DATA_TYPES.get(text)
            if dt is not None:
                self.pos += 1
                return TensorType((), dt)
            if text == "void":
                self.pos += 1
                return VOID
            if text == "stack":
                self.pos += 1
                return STACK
            if text == "box":
                self.pos += 1
                self.expect("{")
                inner = self.nested(self.type_)
                self.expect("}")
                return BoxType(inner)
            self.error(f"unknown type '{text}'{_suggest(text, DATA_TYPES)}")
        if kind == L.TYPE:
            ty = self.types.get(text[1:])
            if ty is None:
                self.error(f"unknown type {text}{_suggest(text[1:], self.types, '$')}")
            self.pos += 1
            return ty
        if text == "<" and kind == L.PUNCT:
            self.pos += 1
            dims = []
            while self.kinds[self.pos] == L.INT:
                dims.append(self.dimension())
                self.expect("x", "'x'")
            if not dims:
                self.error(f"expected a dimension in a tensor type, found {self.describe()}")
            dpos = self.pos
            word = self.expect_kind(L.WORD, "a data type")
            dt = DATA_TYPES.get(word)
            if dt is None:
                self.error(f"unknown data type '{word}'", dpos)
            self.expect(">")
            return TensorType(tuple(dims), dt)
        if text == "[" and kind == L.PUNCT:
            self.pos += 1
            n = self.int_("an array size")
            if n <= 0:
                self.error(f"array size {n} must be positive", self.pos - 1)
            self.expect("x")
            elt = self.nested(self.type_)
            self.expect("]")
            return ArrayType(n, elt)
        if text == "(" and kind == L.PUNCT:
            self.pos += 1
            elts = self.nested(self.type_list, ")")
            self.expect(")")
            if self.kinds[self.pos] == L.ARROW:
                self.pos += 1
                return FunctionType(elts, self.nested(self.type_))
            return TupleType(elts)
        if text == "*" and kind == L.PUNCT:
            self.pos += 1
            return PointerType(self.nested(self.type_))
        self.error(f"expected a type, found {self.describe()}")

    def type_list(self, close: str) -> tuple[Type, ...]:
        out: list[Type] = []
        while not self.at(close):
            out.append(self.type_())
            if not self.accept(","):
                break
        return tuple(out)


_PLAIN_OPERANDS = {"$0": 1, "$0, $1": 2}


def _next_word(pieces: tuple[Piece, ...], idx: int) -> str:
    for p in pieces[idx + 1 :]:
        if p.kind == "word":
            return p.text
    return "\n"


def _decl_word(decl: Any) -> str:
    return decl if isinstance(decl, str) else decl.spelling


def _unescape(s: str) -> str:
    out = []
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            out.append({"n": "\n", "t": "\t", "r": "\r"}.get(s[i + 1], s[i + 1]))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _suggest(name: str, candidates: Any = None, sigil: str = "") -> str:
    """A "did you mean" hint for a misspelt name: the closest names, ties listed together."""
    import difflib

    pool = sorted(candidates) if candidates is not None else sorted(OPS)
    scored = []
    for cand in pool:
        m = difflib.SequenceMatcher(None, name, cand)
        if m.real_quick_ratio() >= 0.75 and m.quick_ratio() >= 0.75:
            r = m.ratio()
            if r >= 0.75:
                scored.append((r, cand))
    if not scored:
        return ""
    best = max(r for r, _ in scored)
    names = [f"'{sigil}{c}'" for r, c in scored if r == best][:3]
    return f" (did you mean {' or '.join(names)}?)"


def parse_module(text: str, filename: str = "<input>") -> Module:
    """Parses a module; raises DiagnosticError with every syntax and name error found."""
    # Parsing builds many long-lived objects and no garbage: the cyclic collector would only
    # rescan them again and again (a fifth of the time on a big module).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        p = Parser(text, filename)
        module = p.parse_module()
    finally:
        if gc_was_enabled:
            gc.enable()
    if p.diags:
        # Type declarations are parsed first: report in the order of the text.
        p.diags.sort(key=lambda d: d.loc.offset if d.loc is not None else -1)
        raise DiagnosticError(p.diags)
    module.source = p.source  # type: ignore[attr-defined]
    return module
