"""Function bodies: blocks, instructions read through their syntax templates, typed uses,
literals, and uses of values defined later in the text."""

from __future__ import annotations

from typing import Any

from dlvm.diagnostics import Diagnostic, Location
from dlvm.ir import lexer as L
from dlvm.ir.literals import (
    AggregateLiteral,
    DenseLiteral,
    EnumLiteral,
    ScalarLiteral,
    StructLiteral,
)
from dlvm.ir.ops import OPS, OpDef, Piece, lookup
from dlvm.ir.parse_tokens import (
    _INF,
    _PADMODES,
    _SPECIAL_LITERALS,
    _STRING_OR_NL,
    _USE_SPLITS,
    TokenReader,
    _Error,
    _Poisoned,
    _suggest,
)
from dlvm.ir.typerules import TypeRuleError, check_literal_operand
from dlvm.ir.types import (
    DATA_TYPES,
    TensorType,
    Type,
    same_type,
)
from dlvm.ir.values import (
    Argument,
    Block,
    ElementKey,
    Function,
    Instruction,
    LiteralValue,
    Successor,
    Value,
)


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


class BodyParser(TokenReader):
    """Reads function bodies into blocks and instructions."""

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
                aty: Type
                if self.kinds[apos] == L.USE:
                    use_name, aname, anonymous, _, aty = self.use_token(apos)
                    if anonymous:
                        aname = use_name[1:]
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
        if not scope.fn.blocks:
            return
        last = scope.fn.blocks[-1]
        kinds, texts = self.kinds, self.texts
        while True:  # instructions to the next label or '}' (not a string: never in a line)
            kind = kinds[self.pos]
            if kind == L.BLOCK or kind == L.EOF or texts[self.pos] == "}":
                return
            self.instruction(scope, last)
            while kinds[self.pos] == L.NL:
                self.pos += 1

    def define(self, scope: _FunctionScope, name: str, value: Value, pos: int) -> None:
        if name in scope.values or name in scope.poisoned:
            self.error(f"%{name} is already defined in @{scope.fn.name}", pos)
        scope.values[name] = value
        if scope.forward:
            self.defined(scope, "%" + name, value)

    # Instructions ----------------------------------------------------------------------------

    def instruction(self, scope: _FunctionScope, block: Block) -> None:
        start = self.pos
        kinds, texts = self.kinds, self.texts
        result_name: str | None = None
        anon: tuple[int, int] | None = None
        text = ""  # the result's name as spelt, `%x` or `%B.I`
        position = (scope.block_index, scope.inst_index)
        scope.inst_index += 1
        try:
            if kinds[start] == L.DEF:
                result = _DEF_SPLITS.get(texts[start])
                if result is None:
                    result = self.split_def(start)
                text, result_name, anon = result
                if result_name is not None:
                    if result_name in scope.values or result_name in scope.poisoned:
                        raise _Error(f"{text} is already defined in @{scope.fn.name}",
                                     self.offsets[start], len(text))  # fmt: skip
                elif anon != position:
                    raise _Error(
                        f"anonymous name {text} does not match its position; "
                        f"it must be %{position[0]}.{position[1]}",
                        self.offsets[start],
                        len(text),
                    )
                self.pos = op_pos = start + 1
            else:
                op_pos = start
            if kinds[op_pos] != L.WORD:
                self.error(f"expected an instruction, found {self.describe()}")
            opname = texts[op_pos]
            self.pos = op_pos + 1
            entry = _OPCODES.get(opname)
            if entry is None:
                op = lookup(opname)
                if op is None:
                    self.error(f"unknown instruction '{opname}'{_suggest(opname)}", op_pos)
                entry = _OPCODES[opname] = (op, _PLAIN_OPERANDS.get(op.syntax, 0))
            op, arity = entry
            if arity:  # `$0` or `$0, $1` (see _PLAIN_OPERANDS): most instructions, directly
                attrs: dict[str, Any] = {}
                first = self.use(scope)
                if arity == 1:
                    operands: list[Value] = [first]
                    types = [first.type]
                else:
                    if texts[self.pos] != "," or kinds[self.pos] != L.PUNCT:
                        self.error(f"expected ',', found {self.describe()}")
                    self.pos += 1
                    second = self.use(scope)
                    operands = [first, second]
                    types = [first.type, second.type]
            else:
                operands = []
                attrs = dict.fromkeys(op.attr_kinds)
                self.pieces(op.pieces, op, operands, attrs, scope)
                types = [v.type for v in operands]
            end_pos = self.pos
            if kinds[end_pos] == L.NL:  # self.expect_newline, inlined
                self.pos = end_pos + 1
            else:
                self.expect_newline()
            if op.name != "literal":
                for v in operands:
                    if v.__class__ is LiteralValue:
                        try:
                            check_literal_operand(v, aggregate_ok=False)
                        except TypeRuleError as e:
                            self.error(f"{e}", op_pos)
            try:
                ty = op.rule(types, attrs)  # op.infer, without its call
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
            loc = Location(self.source, self.offsets[start], len(text) or len(opname))
            inst = Instruction(op, operands, attrs, ty, result_name, loc)
            named = result_name is not None or anon is not None
            if named and ty.__class__ is not TensorType and inst.is_void:
                raise _Error(f"cannot name the result of '{opname}', which produces no value",
                             self.offsets[start], len(text))  # fmt: skip
            # Block.append without its revision bump: the function is being built.
            inst.block = block
            block.instructions.append(inst)
            if result_name is not None:
                scope.values[result_name] = inst
            else:
                scope.anon[position] = inst
                if anon is not None:
                    scope.anon_text[text] = inst
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

    def split_def(self, pos: int) -> tuple[str, str | None, tuple[int, int] | None]:
        """A DEF token's name as spelt, and either the name without its sigil or the numbers of
        an anonymous `%B.I`."""
        text = self.texts[pos][:-1].rstrip(" \t")
        if not text[1].isdigit():
            result: tuple[str, str | None, tuple[int, int] | None] = (text, text[1:], None)
        else:
            b, _, i = text[1:].partition(".")
            try:
                result = (text, None, (int(b), int(i)))
            except ValueError:
                self.too_long(pos)
        if len(_DEF_SPLITS) < 65536:
            _DEF_SPLITS[self.texts[pos]] = result
        return result

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
        kinds, texts = self.kinds, self.texts
        for idx, p in enumerate(pieces):
            kind = p.kind
            if kind == "word":
                pos = self.pos
                if texts[pos] == p.text and kinds[pos] not in _STRING_OR_NL:  # self.expect, inlined
                    self.pos = pos + 1
                else:
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
                    operands.append(self.use(scope))  # `literal` too: checked afterwards
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

    def use(self, scope: _FunctionScope | None) -> Value:
        pos = self.pos
        kind = self.kinds[pos]
        text = self.texts[pos]
        ty: Type
        if kind == L.USE:
            self.pos = pos + 1
            name, key, anonymous, ty_start, ty = _USE_SPLITS.get(text) or self.use_token(pos)
            # Most uses name a value already defined: look it up here, without resolve's
            # generality (a poisoned name, a forward use and a mismatch go through resolve).
            if scope is not None and not scope.poisoned:
                v = (scope.anon_text if anonymous else scope.values).get(key)
                if v is not None and v.type is ty:
                    return v
            return self.resolve(name, pos, ty, scope, pos, L.ANON if anonymous else L.LOCAL,
                                self.offsets[pos] + ty_start, len(text) - ty_start)  # fmt: skip
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
        if kind == L.INT or kind == L.FLOAT:
            # Number literals are values: one object per spelling (INT and FLOAT spellings
            # differ), shared by every use.
            lit = _NUMBERS.get(text)
            if lit is None:
                lit = self.number_literal(kind, text)
                if len(_NUMBERS) < 65536:
                    _NUMBERS[text] = lit
            self.pos += 1
            return lit
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
            if text == "dense":
                self.pos += 1
                return self.dense_literal()
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

    def dense_literal(self) -> DenseLiteral:
        """The bytes of `dense "…"`, two hex digits each; the type rule checks their count."""
        pos = self.pos
        text = self.expect_kind(L.STRING, 'the bytes as a hex string ("0000803f")')
        digits = text[1:-1]
        try:
            data = bytes.fromhex(digits)
        except ValueError:
            data = None
        # fromhex also skips blanks between bytes: one spelling only, as printed.
        if data is None or 2 * len(data) != len(digits):
            self.error("a dense literal's bytes are hex digits, two per byte, nothing between", pos)
        return DenseLiteral(data)

    def number_literal(self, kind: str, text: str) -> ScalarLiteral:
        if kind == L.INT:
            try:
                return ScalarLiteral(int(text))
            except ValueError:
                self.too_long(self.pos)
        value = float(text)
        if value in (_INF, -_INF) and text != "-inf":
            self.error(f"float literal {text} is out of range")
        return ScalarLiteral(value)

    def use_list(self, close: str, scope: _FunctionScope | None) -> tuple[Value, ...]:
        items: list[Value] = []
        while not self.at(close):
            items.append(self.use(scope))
            if not self.accept(","):
                break
        self.expect(close)
        return tuple(items)

    # Types -----------------------------------------------------------------------------------


# Templates of operands alone, read without the template walk (a `$0:literal` use reads as any
# other; only the checks after it differ).
_PLAIN_OPERANDS = {"$0": 1, "$0:literal": 1, "$0, $1": 2}
_NUMBERS: dict[str, ScalarLiteral] = {}  # number literals by spelling
# An opcode's declaration and its number of plain operands (0: read through its template).
_OPCODES: dict[str, tuple[OpDef, int]] = {}
_DEF_SPLITS: dict[str, tuple[str, str | None, tuple[int, int] | None]] = {}  # see split_def


def _next_word(pieces: tuple[Piece, ...], idx: int) -> str:
    for p in pieces[idx + 1 :]:
        if p.kind == "word":
            return p.text
    return "\n"
