"""Token-level reading shared by the IR parser: the token cursor, located errors, numbers,
types, and name hints."""

from __future__ import annotations

from typing import Any, NoReturn

from dlvm.diagnostics import Diagnostic, Location, Source
from dlvm.ir import lexer as L
from dlvm.ir.literals import (
    NULL,
    UNDEFINED,
    ZERO,
)
from dlvm.ir.ops import OPS
from dlvm.ir.typerules import tensor_type
from dlvm.ir.types import (
    DATA_TYPES,
    MAX_TENSOR_BYTES,
    STACK,
    VOID,
    ArrayType,
    BoxType,
    FunctionType,
    NominalType,
    PointerType,
    TensorType,
    TupleType,
    Type,
    size_problem,
)
from dlvm.ir.values import (
    Module,
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


_TENSOR_CACHE: dict[str, TensorType] = {}  # by the spelling of a TENSOR token


class TypeTokenError(Exception):
    """A tensor type spelt as one token that is no type: a dimension 0 or of too many digits
    for int(), or a tensor past the address space."""


def _tensor_token(text: str) -> TensorType:
    ty = _TENSOR_CACHE.get(text)
    if ty is None:
        parts = text[1:-1].split()
        try:
            shape = tuple(int(p) for p in parts[:-1:2])
        except ValueError:  # int() refuses more than sys.get_int_max_str_digits() digits
            raise TypeTokenError(f"'{text[:12]}…' has a number with too many digits") from None
        ty = tensor_type(shape, DATA_TYPES[parts[-1]])
        problem = _tensor_problem(ty, text)
        if problem is not None:
            raise TypeTokenError(problem)
        if len(_TENSOR_CACHE) < 65536:
            _TENSOR_CACHE[text] = ty
    return ty


def _tensor_problem(ty: TensorType, text: str) -> str | None:
    if 0 in ty.shape:
        return f"dimension 0 must be positive in {text}"
    return size_problem(ty)


_SCALAR_TYPES = {text: tensor_type((), dt) for text, dt in DATA_TYPES.items()}

# A USE token's parts: its name (`%x` or `%B.I`), the key its definition is found by (`x` among
# named values, `%B.I` among anonymous ones), whether it is anonymous, the offset of its type
# within the token, and the type.
UseSplit = tuple[str, str, bool, int, TensorType]
_USE_SPLITS: dict[str, UseSplit] = {}


def _split_use(text: str) -> UseSplit:
    split = _USE_SPLITS.get(text)  # a value is usually used several times, spelt the same
    if split is None:
        split = _split_use_text(text)
        if len(_USE_SPLITS) < 65536:
            _USE_SPLITS[text] = split
    return split


def _split_use_text(text: str) -> UseSplit:
    colon = text.index(":")
    start = colon + 1
    while text[start] in " \t":
        start += 1
    tytext = text[start:]
    ty = _tensor_token(tytext) if tytext[0] == "<" else _SCALAR_TYPES[tytext]
    name = text[:colon]
    anonymous = text[1].isdigit()
    return name, name if anonymous else name[1:], anonymous, start, ty


class TokenReader:
    """A cursor over the tokens of one source, collecting located diagnostics."""

    def __init__(self, text: str, filename: str = "<input>") -> None:
        self.source = Source(filename, text)
        self.kinds, self.texts, self.offsets = L.tokenize(text)
        self.pos = 0
        self.diags: list[Diagnostic] = []
        self.module = Module("")
        self.types: dict[str, NominalType] = {}
        self.globals: dict[str, Value] = {}
        self.scope: Any = None  # the _FunctionScope of the body being read
        self.pending_callee: list[tuple[str, int]] = []
        self.depth = 0  # nesting of the type or literal being parsed
        self._line_starts: list[int] | None = None
        self._declaration_lines: list[int] | None = None

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

    def tensor_token(self, pos: int) -> TensorType:
        """The type a TENSOR token spells, or a located error."""
        try:
            return _tensor_token(self.texts[pos])
        except TypeTokenError as e:
            self.error(str(e), pos)

    def use_token(self, pos: int) -> UseSplit:
        """The parts of a USE token (`%x: <2 x f32>`), or a located error at its type."""
        text = self.texts[pos]
        try:
            return _USE_SPLITS.get(text) or _split_use(text)
        except TypeTokenError as e:
            start = len(text) - len(text[text.index(":") + 1 :].lstrip(" \t"))
            raise _Error(str(e), self.offsets[pos] + start, len(text) - start) from None

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
        if kind == L.ERROR and self.texts[p][0] == '"':
            return "a string without its closing quote"
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
        if not -(1 << 63) <= v < 1 << 63:  # what rules compute from it must print (4,300 digits)
            text = self.texts[self.pos]
            shown = text if len(text) <= 24 else text[:12] + "…"
            self.error(f"'{shown}' is out of range: integers here must fit in 64 bits")
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

    def type_(self) -> Type:
        pos = self.pos
        kind = self.kinds[pos]
        text = self.texts[pos]
        if kind == L.TENSOR:
            ty = self.tensor_token(pos)
            self.pos += 1
            return ty
        if kind == L.WORD:
            scalar = _SCALAR_TYPES.get(text)
            if scalar is not None:
                self.pos += 1
                return scalar
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
            named = self.types.get(text[1:])
            if named is None:
                self.error(f"unknown type {text}{_suggest(text[1:], self.types, '$')}")
            self.pos += 1
            return named
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
            ty = tensor_type(tuple(dims), dt)
            problem = size_problem(ty)
            if problem is not None:
                self.error(problem, pos)
            return ty
        if text == "[" and kind == L.PUNCT:
            self.pos += 1
            n = self.int_("an array size")
            if not 0 < n <= MAX_TENSOR_BYTES:
                limit = "positive" if n <= 0 else "at most 2^62 - 1"
                self.error(f"array size {n} must be {limit}", self.pos - 1)
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
