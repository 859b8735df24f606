"""Tokens of the textual IR (IR.md section 5).

Newlines are tokens, except where a line may wrap: after `,` `(` `=` `->` `<` `[` `{` `x` and
before `->` `)` `]` `>` `,`. Blank lines and `//` comments vanish. A whole tensor type such as
`<1 x 784 x f32>` on one line is a single TENSOR token, which keeps parsing fast.
"""

from __future__ import annotations

import re

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
# Alternatives are tried in order, the most frequent first (this order makes the lexer a third
# faster). Only a few orders matter: a tensor type before the '<' punctuation, a float before an
# integer, and the catch-all error last.
_TENSOR_RX = rf"<[ \t]*[0-9]+(?:[ \t]+x[ \t]+[0-9]+)*[ \t]+x[ \t]+(?:{_DTYPES})[ \t]*>"
_SPEC = [
    # A local use with a tensor or scalar type, `%x: <2 x f32>`, is one token: uses are most
    # of the text, and one token instead of three makes parsing a fifth faster.
    (USE, rf"%(?:{_IDENT}|[0-9]+\.[0-9]+):[ \t]*(?:{_TENSOR_RX}|(?:{_DTYPES})(?![A-Za-z0-9_.]))"),
    (PUNCT, r"[>()\[\]{},:=*]"),
    (DEF, rf"%(?:{_IDENT}|[0-9]+\.[0-9]+)[ \t]*="),  # one token: a tenth fewer tokens
    (LOCAL, rf"%{_IDENT}"),
    (ANON, r"%[0-9]+\.[0-9]+"),
    (TENSOR, _TENSOR_RX),
    (WORD, _IDENT),
    (NL, r"(?:\r\n|\r|\n)"),
    (FLOAT, r"-?[0-9]+(?:\.[0-9]+(?:[eE][-+]?[0-9]+)?|[eE][-+]?[0-9]+)"),
    (INT, r"-?[0-9]+"),
    (FLOAT, r"-inf(?![A-Za-z0-9_.])"),  # `inf` and `nan` alone are words
    (ARROW, r"->"),
    (PUNCT, r"<"),
    (GLOBAL, rf"@{_IDENT}"),
    (BLOCK, rf"'{_IDENT}"),
    (STRING, r'"(?:[^"\\\n]|\\.)*"'),
    (TYPE, rf"\${_IDENT}"),
    (KEY, rf"#{_IDENT}"),
    (CASE, rf"\?{_IDENT}"),
    (ATTR, rf"!{_IDENT}"),
    ("comment", r"//[^\n\r]*"),
    (ERROR, r"[^ \t\n]"),
]
# Blanks before a token are part of its match (half as many matches to loop over); the token is
# the one capturing group that matched, and `_KINDS[m.lastindex]` is its kind.
_MASTER = re.compile(r"[ \t]*(?:" + "|".join(f"({rx})" for _, rx in _SPEC) + ")")
_KINDS = [""] + [name for name, _ in _SPEC]

_JOIN_AFTER = frozenset([",", "(", "=", "->", "<", "[", "{", "x"])
_JOIN_BEFORE = frozenset(["->", ")", "]", ">", ","])


_NL_INDEX = _KINDS.index(NL)
_COMMENT_INDEX = _KINDS.index("comment")


def tokenize(text: str) -> tuple[list[str], list[str], list[int]]:
    """Returns parallel lists (kinds, texts, offsets), ending with an EOF token."""
    kinds: list[str] = []
    texts: list[str] = []
    offsets: list[int] = []
    add_kind, add_text, add_offset = kinds.append, texts.append, offsets.append
    # A newline is held back until the next token shows whether the line wraps before it;
    # `held` is its offset (or -1), `held_text` its spelling.
    held, held_text = -1, ""
    for m in _MASTER.finditer(text):
        idx = m.lastindex
        if idx == _NL_INDEX:
            if held < 0 and texts and texts[-1] not in _JOIN_AFTER and texts[-1][-1] != "=":
                held, held_text = m.start(idx), m[idx]  # type: ignore[arg-type,index]
            continue
        if idx == _COMMENT_INDEX:
            continue
        tok = m[idx]  # type: ignore[index]
        if held >= 0:
            if tok not in _JOIN_BEFORE:
                add_kind(NL)
                add_text(held_text)
                add_offset(held)
            held = -1
        add_kind(_KINDS[idx])  # type: ignore[index]
        add_text(tok)
        add_offset(m.start(idx))  # type: ignore[arg-type]
    if held >= 0:
        add_kind(NL)
        add_text(held_text)
        add_offset(held)
    if kinds and kinds[-1] != NL:
        kinds.append(NL)
        texts.append("\n")
        offsets.append(len(text))
    kinds.append(EOF)
    texts.append("")
    offsets.append(len(text))
    return kinds, texts, offsets
