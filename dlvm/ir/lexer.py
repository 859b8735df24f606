"""Tokens of the textual IR (docs/ir.md, "Textual format").

Newlines are tokens, except where a line may wrap: after `,` `(` `=` `->` `<` `[` `{` `x` and
before `->` `)` `]` `>` `,`. Blank lines and `//` comments vanish; a newline token's text is
empty. A whole tensor type such as `<1 x 784 x f32>` on one line is a single TENSOR token, which
keeps parsing fast.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import accumulate, repeat

from dlvm.ir.types import DATA_TYPES

# Token kinds.
NL = "nl"
WORD = "word"  # keywords, opcodes, data types, `x`
STRING = "string"
INT = "int"
FLOAT = "float"
TENSOR = "tensor"  # a whole tensor type on one line
USE = "use"  # `%x: <2 x f32>` or `%0.1: f32`: a local and its tensor type, on one line
DEF = "def"  # `%x =` or `%0.1 =`: the result name of an instruction and its `=`, on one line
GLOBAL = "global"  # @name
LOCAL = "local"  # %name
ANON = "anon"  # %B.I
TYPE = "type"  # $Name
BLOCK = "block"  # 'name
KEY = "key"  # #field
CASE = "case"  # ?case
ATTR = "attr"  # !name
ARROW = "arrow"  # ->
PUNCT = "punct"
EOF = "eof"
ERROR = "error"

_IDENT = r"[A-Za-z_][A-Za-z0-9_.]*"
_DTYPES = "|".join(DATA_TYPES)
_NAME = rf"%(?:{_IDENT}|[0-9]+\.[0-9]+)"
_TENSOR_RX = rf"<[ \t]*[0-9]+(?:[ \t]+x[ \t]+[0-9]+)*[ \t]+x[ \t]+(?:{_DTYPES})[ \t]*>"
# What the fast lexer (below) lets follow a token in its match: blanks, or for a token after
# which a line may wrap, blanks and newlines.
_BLANKS = r"[ \t]*"
_JOINS = r"[ \t\r\n]*"
# Alternatives are tried in order, the most frequent first (this order makes the lexer a third
# faster). Only a few orders matter: a tensor type before the '<' punctuation, a float before an
# integer, `x` before other words, and the catch-all error last.
_SPEC = [
    # A local use with a tensor or scalar type, `%x: <2 x f32>`, is one token: uses are most
    # of the text, and one token instead of three makes parsing a fifth faster.
    (USE, rf"{_NAME}:[ \t]*(?:{_TENSOR_RX}|(?:{_DTYPES})(?![A-Za-z0-9_.]))", _BLANKS),
    (PUNCT, r"[>)\]}:*]", _BLANKS),
    (PUNCT, r"[(\[{,=]", _JOINS),
    (DEF, rf"{_NAME}[ \t]*=", _JOINS),  # one token: a tenth fewer tokens
    (LOCAL, rf"%{_IDENT}", _BLANKS),
    (ANON, r"%[0-9]+\.[0-9]+", _BLANKS),
    (TENSOR, _TENSOR_RX, _BLANKS),
    (WORD, r"x(?![A-Za-z0-9_.])", _JOINS),
    (WORD, _IDENT, _BLANKS),
    (NL, r"(?:\r\n|\r|\n)", ""),  # the fast lexer has its own rows for newlines
    (FLOAT, r"-?[0-9]+(?:\.[0-9]+(?:[eE][-+]?[0-9]+)?|[eE][-+]?[0-9]+)", _BLANKS),
    (INT, r"-?[0-9]+", _BLANKS),
    (FLOAT, r"-inf(?![A-Za-z0-9_.])", _BLANKS),  # `inf` and `nan` alone are words
    (ARROW, r"->", _JOINS),
    (PUNCT, r"<", _JOINS),
    (GLOBAL, rf"@{_IDENT}", _BLANKS),
    (BLOCK, rf"'{_IDENT}", _BLANKS),
    # Unrolled (runs of plain characters between escapes): a dense literal's string may be
    # hundreds of megabytes, which a character-at-a-time alternation scans 30 times slower.
    (STRING, r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"', _BLANKS),
    # A string without its closing quote is one error token, as far as the string's own
    # pattern reaches (its trailing blanks left out, as every token's): as `"` alone, every
    # later `"` there would start a string again, each scanning as far (quadratic).
    (ERROR, r'"[^"\\\n]*(?:\\[^\n][^"\\\n]*)*(?<![ \t\r])', _BLANKS),
    (TYPE, rf"\${_IDENT}", _BLANKS),
    (KEY, rf"#{_IDENT}", _BLANKS),
    (CASE, rf"\?{_IDENT}", _BLANKS),
    (ATTR, rf"!{_IDENT}", _BLANKS),
    ("comment", r"//[^\n\r]*", ""),  # the fast lexer never sees comments
    (ERROR, r"[^ \t\n]", _BLANKS),
]
# The exact lexer. Blanks before a token are part of its match; the token is the one capturing
# group that matched, and `_KINDS[m.lastindex]` is its kind.
_MASTER = re.compile(r"[ \t]*(?:" + "|".join(f"({rx})" for _, rx, _ in _SPEC) + ")")
_KINDS = [""] + [name for name, _, _ in _SPEC]
_NL_INDEX = _KINDS.index(NL)
_COMMENT_INDEX = _KINDS.index("comment")

_JOIN_AFTER = frozenset([",", "(", "=", "->", "<", "[", "{", "x"])  # the _JOINS rows above
_JOIN_BEFORE = frozenset(["->", ")", "]", ">", ","])

# The fast lexer: the same tokens from one findall in C, each match a token and what may follow
# it (the third column above). A newline takes the blank lines after it, and vanishes into the
# match before it after a token that joins the next line; a newline before a token that joins
# the previous line is matched with that token (a _WRAP, split afterwards). A text with `//`
# goes through the exact lexer instead.
_NEWLINES = r"(?:\r\n|\r|\n)[ \t\r\n]*"
_NEWLINE_ROWS = [
    (rf"{_NEWLINES}(?:,|->)", _JOINS),  # a wrap before `,` or `->`
    (rf"{_NEWLINES}[)\]>]", _BLANKS),  # a wrap before `)` `]` `>`
    (_NEWLINES, ""),
]


def _fast_rows() -> Iterator[tuple[str, str]]:
    for kind, rx, after in _SPEC:
        if kind == NL:
            yield from _NEWLINE_ROWS
        elif kind != "comment":
            yield rx, after


_FAST = re.compile("|".join(f"(?:{rx}){after}" for rx, after in _fast_rows()))
_STRIP = " \t\r\n"
_WRAP = "wrap"  # a wrapped line's newlines and the token after them

# Kinds of token texts seen before; the text decides the kind (see _classify).
_KIND_OF: dict[str, str] = {"": NL}
_KIND_OF.update((c, PUNCT) for c in ">()[]{},:=*<")


def _classify(tok: str) -> str:
    """The kind of a token from its text alone: the alternatives that could spell the same
    text differently exclude each other (`%x` cannot be a use, a use needs its `:`)."""
    c = tok[0]
    if c == "%" and len(tok) > 1:
        if tok[-1] == "=":
            return DEF
        if ":" in tok:
            return USE
        return ANON if tok[1].isdigit() else LOCAL
    if c in "\r\n":
        return _WRAP
    m = _MASTER.match(tok)
    assert m is not None and m.end() == len(tok), tok
    return _KINDS[m.lastindex]  # type: ignore[index]


def tokenize(text: str) -> tuple[list[str], list[str], list[int]]:
    """Returns parallel lists (kinds, texts, offsets), ending with an EOF token."""
    if "//" in text:
        kinds, texts, offsets = _tokenize_loop(text)
    else:
        kinds, texts, offsets = _tokenize_fast(text)
    if kinds and kinds[-1] != NL:
        kinds.append(NL)
        texts.append("")
        offsets.append(len(text))
    kinds.append(EOF)
    texts.append("")
    offsets.append(len(text))
    return kinds, texts, offsets


def _tokenize_fast(text: str) -> tuple[list[str], list[str], list[int]]:
    """One findall, then offsets, texts and kinds mapped in C; only texts not seen before and
    wrapped lines take a step in Python."""
    start = len(text) - len(text.lstrip(_STRIP))  # newlines before the first token vanish
    raw = _FAST.findall(text, start)
    offsets = list(accumulate(map(len, raw), initial=start))
    offsets.pop()
    texts = list(map(str.rstrip, raw, repeat(_STRIP)))
    del raw
    kinds = list(map(_KIND_OF.get, texts))
    if None in kinds:  # texts not seen before, and wrapped lines
        i = -1
        try:
            while True:
                i = kinds.index(None, i + 1)
                tok = texts[i]
                kind = _KIND_OF.get(tok) or _classify(tok)  # seen earlier in this text?
                if kind == _WRAP:
                    after = tok.lstrip(_STRIP)
                    offsets[i] += len(tok) - len(after)
                    texts[i] = after
                    kind = ARROW if after == "->" else PUNCT
                elif len(_KIND_OF) < 65536 and len(tok) <= 1024:  # not a dense literal's bytes
                    _KIND_OF[tok] = kind
                kinds[i] = kind
        except ValueError:
            pass
    return kinds, texts, offsets  # type: ignore[return-value]


def _tokenize_loop(text: str) -> tuple[list[str], list[str], list[int]]:
    """The same tokens one match at a time, for texts with comments."""
    kinds: list[str] = []
    texts: list[str] = []
    offsets: list[int] = []
    add_kind, add_text, add_offset = kinds.append, texts.append, offsets.append
    # A newline is held back until the next token shows whether the line wraps before it;
    # `held` is its offset (or -1).
    held = -1
    # Trailing blanks are left out: after them no token can match, and each match attempt
    # would take its leading blanks and give them back one by one (quadratic in their number).
    for m in _MASTER.finditer(text, 0, len(text.rstrip(" \t"))):
        idx = m.lastindex
        if idx == _NL_INDEX:
            if held < 0 and texts and texts[-1] not in _JOIN_AFTER and texts[-1][-1] != "=":
                held = m.start(idx)  # type: ignore[arg-type]
            continue
        if idx == _COMMENT_INDEX:
            continue
        tok = m[idx]  # type: ignore[index]
        if held >= 0:
            if tok not in _JOIN_BEFORE:
                add_kind(NL)
                add_text("")
                add_offset(held)
            held = -1
        add_kind(_KINDS[idx])  # type: ignore[index]
        add_text(tok)
        add_offset(m.start(idx))  # type: ignore[arg-type]
    if held >= 0:
        add_kind(NL)
        add_text("")
        add_offset(held)
    return kinds, texts, offsets
