"""TEL text to syntax tree: the lark parser for telc/grammar.lark, the newline rules, and
syntax errors as located diagnostics (all of a file's, not just the first)."""

from __future__ import annotations

import contextlib
import functools
import io
import os
import re
import sys
from collections.abc import Iterator
from typing import Any

import lark
from lark import Lark, Token
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from dlvm.artifacts import cache_dir, read_checked, sha256, write_checked
from dlvm.diagnostics import Diagnostic, DiagnosticError, Location, Source
from telc import ast
from telc.limits import help_line, nesting_errors, size_error
from telc.syntax_tree import build

# A newline after one of these continues the line.
_CONTINUES = frozenset(
    "+ - * / % ** . • < <= > >= == != = , -> ( [ { and or not then else as : init".split()  # noqa: SIM905
)
_OPEN, _CLOSE = frozenset("(["), frozenset(")]")
# Words that start a statement or an item: never inside brackets or an expression.
_STARTS = frozenset(
    "let var return for def export train recurrent dim const use module".split()  # noqa: SIM905
)


class Unclosed(Exception):
    """Raised by the post-lexer for a bracket that is still open at the start of an item."""

    def __init__(self, token: Token) -> None:
        super().__init__(token)
        self.token = token


class Newlines:
    """Lark post-lexer applying the newline rules of docs/tel.md (see grammar.lark)."""

    # `}` too: the contextual lexer must produce it where only a newline can come next, so that
    # the newline before it can be inserted.
    always_accept = ("_NL", "RBRACE")

    def process(self, stream: Iterator[Token]) -> Iterator[Token]:
        opened: list[Token] = []  # the unclosed ( and [
        last: Token | None = None  # the last token passed on
        held: Token | None = None  # a newline dropped after an operator
        line_start = True  # no token yet on this line
        for tok in stream:
            if tok.type == "_NL":
                line_start = True
                if opened or last is None or last.type == "_NL":
                    continue
                if last.value == "{":
                    continue
                if last.type != "NAME" and last.value in _CONTINUES:
                    held = held or tok
                    continue
            else:
                starts = line_start and tok.value in _STARTS
                line_start = False
                if (tok.column == 1 and tok.value not in _CLOSE) or starts or tok.value == "}":
                    # An unindented line starts an item: a bracket still open is almost surely
                    # never closed, and an operator ending the previous line lacks its operand.
                    if opened and tok.value != "}":
                        raise Unclosed(opened[-1])
                    if held is not None:
                        yield held
                        last = held
                held = None
                if tok.value in _OPEN:
                    opened.append(tok)
                elif tok.value in _CLOSE:
                    if opened:
                        opened.pop()
                elif tok.value == "}" and last is not None and last.type != "_NL":
                    if last.value != "{":
                        yield Token.new_borrow_pos("_NL", "\n", tok)
                elif tok.value == "{":
                    opened.clear()  # a block starts statements afresh, even after a stray '('
            yield tok
            last = tok
        if last is not None and last.type != "_NL":
            # An empty token at the end of the last one (its end_pos too: a span ending here).
            end = (last.end_pos, last.end_line, last.end_column)
            yield Token("_NL", "\n", end[0], end[1], end[2], end[1], end[2], end[0])


_OPTIONS: dict[str, Any] = {
    "parser": "lalr",
    "lexer": "contextual",
    "propagate_positions": True,
    "maybe_placeholders": True,
}


@functools.cache
def _parser() -> Lark:
    """The parser of grammar.lark. Building its LALR tables takes longer than parsing a model,
    so they are kept in the compiler's cache (dlvm.artifacts) under a key of everything that
    decides them; tables that cannot be read or stored are simply built."""
    path = os.path.join(os.path.dirname(__file__), "grammar.lark")
    with open(path, encoding="utf-8") as f:
        grammar = f.read()
    decides = (grammar, sorted(_OPTIONS.items()), Newlines.always_accept, lark.__version__,
               sys.version_info[:2])  # fmt: skip
    stored = cache_dir() / f"telc-parser-{sha256(repr(decides).encode())[:24]}"
    data = read_checked(stored)
    if data is not None:
        with contextlib.suppress(Exception):  # whatever the reason, the tables are rebuilt
            return Lark.load(io.BytesIO(data))
    parser = Lark(grammar, postlex=Newlines(), **_OPTIONS)
    tables = io.BytesIO()
    parser.save(tables)
    with contextlib.suppress(OSError):  # an unwritable cache only costs the time to build
        write_checked(stored, tables.getvalue())
    return parser


def parse(source: Source) -> ast.Module:
    """The syntax tree of one file; DiagnosticError with every syntax error found."""
    text = source.text
    too_large = size_error(source)
    if too_large is not None:
        raise DiagnosticError([too_large])
    diags: list[Diagnostic] = []
    # After an error, the rest of the faulty item is blanked out (columns and lines kept) and
    # the file parsed again, so later independent errors are reported too: up to 50, and while
    # the parses so far have read less than twice the file and 2 MiB, so that a large file with
    # many errors takes a few parses' time, not 50.
    budget = 2 * len(text) + REPARSE_FLOOR
    for _ in range(50):
        try:
            tree = _parser().parse(text)
        except (UnexpectedInput, Unclosed) as e:
            if isinstance(e, Unclosed):
                offset = e.token.start_pos or 0
                message = f"'{e.token.value}' is never closed"
                diag = Diagnostic(message, Location(source, offset))
            else:
                diag, offset = _describe(e, source, text)
            diags.append(diag)
            budget -= offset
            if budget < 0:
                break
            blanked = _blank_item(text, offset)
            if blanked == text:
                break
            text = blanked
            continue
        if diags:
            break
        # Nothing may recurse over a tree deeper than the limit: it is checked first.
        too_deep = nesting_errors(tree, source)
        if too_deep:
            raise DiagnosticError(too_deep)
        return build(tree, source)
    raise DiagnosticError(sorted(diags, key=lambda d: d.loc.offset if d.loc else 0))


def _blank_item(text: str, offset: int) -> str:
    """text with the top-level item around offset replaced by spaces (newlines kept): from the
    start of the item's first line to the next line that starts a new item at column 1."""
    offset = min(offset, len(text))
    start = text.rfind("\n", 0, offset) + 1
    while start > 0 and not _starts_item(text, start):
        start = text.rfind("\n", 0, start - 1) + 1
    end = text.find("\n", offset)
    while end != -1 and not _starts_item(text, end + 1):
        end = text.find("\n", end + 1)
    end = len(text) if end == -1 else end
    blank = "".join(c if c in "\r\n" else " " for c in text[start:end])
    return text[:start] + blank + text[end:]


def _starts_item(text: str, i: int) -> bool:
    """Whether the line at i starts a top-level item (a non-blank, unindented line that is not
    a comment and does not close a block)."""
    return i < len(text) and text[i] not in " \t\r\n}/)]"


# Characters the parses after a syntax error may read whatever the file's size (see parse).
REPARSE_FLOOR = 2 << 20

# What a user calls the terminals lark expects.
_EXPRESSION_START = {"NAME", "INT", "FLOAT", "LPAR", "LSQB", "NEG", "NOT", "TRUE", "FALSE", "IF"}
_WORDS = {
    "_NL": "a new line",
    "NAME": "a name",
    "INT": "an integer",
    "FLOAT": "a number",
    "PATH": "a path",
    "EQUAL": "'='",
    "COLON": "':'",
    "COMMA": "','",
    "RPAR": "')'",
    "RSQB": "']'",
    "LSQB": "'['",
    "LPAR": "'('",
    "LBRACE": "'{'",
    "RBRACE": "'}'",
    "DOTDOT": "'..'",
    "X": "'x'",
    "ADD_OP": "an operator",
    "MUL_OP": "an operator",
    "POW": "an operator",
    "DOT": "an operator",
    "CMP": "an operator",
    "AND": "an operator",
    "OR": "an operator",
    "TRANSPOSE": "an operator",
}


def _token_text(tok: Token) -> str:
    if tok.type == "_NL":
        return "the end of the line"
    if tok.type == "$END":
        return "the end of the file"
    return f"'{tok.value}'"


def _expected_text(expected: set[str]) -> str:
    if expected & _EXPRESSION_START and len(expected & _EXPRESSION_START) >= 3:
        return "an expression"
    words = sorted({_WORDS.get(t, _terminal_word(t)) for t in expected})
    if len(words) > 4:
        return "one of " + ", ".join(words[:4]) + ", …"
    return " or ".join(words) if words else "something else"


def _terminal_word(name: str) -> str:
    pattern = getattr(_parser().get_terminal(name).pattern, "value", None)
    return f"'{pattern}'" if isinstance(pattern, str) and len(pattern) < 12 else name.lower()


def _describe(e: UnexpectedInput, source: Source, text: str) -> tuple[Diagnostic, int]:
    """A friendly diagnostic for a lark error, and the offset it points at."""
    if isinstance(e, UnexpectedCharacters):
        pos = e.pos_in_stream or 0
        char = text[pos] if pos < len(text) else ""
        return Diagnostic(f"unexpected character '{char}'", Location(source, pos)), pos
    if isinstance(e, UnexpectedToken):
        tok = e.token
        if (tok.column == 1 or tok.value in _STARTS) and tok.type != "$END":
            bracket = _unclosed_before(text, tok.start_pos or 0)
            if bracket is not None:
                message = f"'{text[bracket]}' is never closed"
                return Diagnostic(message, Location(source, bracket)), bracket
        try:  # what the parser accepts here (lark's list also has what the lexer always takes)
            expected = set(e.interactive_parser.accepts())
        except Exception:  # pragma: no cover - lark could not replay the state
            expected = set(e.expected)
        if tok.type != "$END":
            expected.discard("$END")
        offset = tok.start_pos if tok.start_pos is not None else len(text)
        prev = _previous_token(text, offset)
        after = f" after '{prev}'" if prev else ""
        found = _token_text(tok)
        if tok.type == "_NL" and offset < len(text) and text[offset] not in "\r\n":
            found = "the end of the line"
        message = f"expected {_expected_text(expected)}{after}, found {found}"
        length = len(tok.value) if tok.type not in ("_NL", "$END") else 1
        notes = _habit(tok, text, offset)
        if notes:
            message = f"TEL has no '{tok.value}' operator"
        return Diagnostic(message, Location(source, offset, max(1, length)), notes=notes), offset
    if isinstance(e, UnexpectedEOF):
        return Diagnostic("unexpected end of file", Location(source, len(text))), len(text)
    return Diagnostic(str(e), Location(source, 0)), 0  # pragma: no cover - lark has no other


def _habit(tok: Token, text: str, offset: int) -> tuple[Diagnostic, ...]:
    """The `help:` line for a token that is another language's way of saying something TEL
    says otherwise: `x @ W`, NumPy's and PyTorch's matrix product, is `x . W`."""
    if tok.value != "@":
        return ()
    line_start = text.rfind("\n", 0, offset) + 1
    line_end = text.find("\n", offset)
    left = re.search(r"([A-Za-z_][A-Za-z0-9_]*)\s*$", text[line_start:offset])
    right = re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*)", text[offset + 1 : line_end % (len(text) + 1)])
    a, b = (left.group(1), right.group(1)) if left and right else ("a", "b")
    return (help_line(f"TEL's matrix product is `.`: write `{a} . {b}`"),)


def _unclosed_before(text: str, offset: int) -> int | None:
    """The offset of a ( or [ left open in the item that ends before offset, if any."""
    start = text.rfind("\n", 0, max(0, offset - 1)) + 1
    while start > 0 and not _starts_item(text, start):
        start = text.rfind("\n", 0, start - 1) + 1
    stack: list[int] = []
    i = start
    while i < offset:
        c = text[i]
        if text.startswith("//", i):
            i = text.find("\n", i)
            if i == -1:
                break
        elif c in "([":
            stack.append(i)
        elif c in ")]" and stack:
            stack.pop()
        i += 1
    return stack[-1] if stack else None


def _previous_token(text: str, offset: int) -> str:
    """The operator or word just before offset on its line (for "after '+'")."""
    line_start = text.rfind("\n", 0, offset) + 1
    before = text[line_start:offset].rstrip()
    if "//" in before:
        return ""
    for op in ("**", "->", "<=", ">=", "==", "!=", "^T"):
        if before.endswith(op):
            return op
    if before and before[-1] in "+-*/%.•<>=,([:@":
        return before[-1]
    word = before.split()[-1] if before.split() else ""
    return word if word in {"and", "or", "not", "then", "else", "as", "return", "in"} else ""
