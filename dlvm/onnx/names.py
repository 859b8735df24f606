"""ONNX names as IR names: any string (`onnx::Conv_12`, `conv1.weight`, `input:0`) mapped to an
identifier of the IR's text format (`[A-Za-z_][A-Za-z0-9_.]*`, dlvm/ir/lexer.py), the same
string always to the same identifier, distinct strings to distinct ones within a function."""

from __future__ import annotations

import re

from dlvm.ir.values import fresh_name

_INVALID = re.compile(r"[^A-Za-z0-9_.]")


def identifier(name: str) -> str:
    """`name` with every character the IR does not allow replaced by `_`, and an `_` in front
    when it would not start with a letter or `_` (as `12` or `.x`); `_` for the empty name."""
    text = _INVALID.sub("_", name)
    if not text or not (text[0].isalpha() or text[0] == "_"):
        text = "_" + text
    return text


class Names:
    """The IR names given out in one function: each ONNX name once, a clash (`a:b` and `a_b`)
    resolved by the fresh-name rule of docs/ir.md (`a_b_0`)."""

    def __init__(self) -> None:
        self._taken: set[str] = set()
        self._given: dict[str, str] = {}

    def __call__(self, name: str) -> str:
        if name not in self._given:
            self._given[name] = fresh_name(identifier(name), self._taken)
        return self._given[name]
