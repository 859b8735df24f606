"""`dlopt --verify-diagnostics`: checks that a file produces exactly the diagnostics its
comments expect, MLIR style, so error messages and locations are tested as text.

    %x = add %a: f32, %b: i32   // expected-error {{operand data types differ}}
    // expected-error@+1:5 {{unknown instruction}}
    frobnicate %a: f32

`@+N`/`@-N` shift the expected line, `:C` also pins the column; `{{…}}` is a substring of the
message. With `--split-input-file`, `// -----` lines separate independent modules.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dlvm.diagnostics import Diagnostic, DiagnosticError
from dlvm.ir.parser import parse_module
from dlvm.ir.verifier import verify

_EXPECT = re.compile(r"//\s*expected-(error|note)(?:@([+-]\d+))?(?::(\d+))?\s*\{\{(.*?)\}\}")
SPLIT_MARKER = re.compile(r"^//\s*-----\s*$", re.M)


@dataclass
class Expectation:
    line: int
    col: int | None
    text: str
    comment_line: int
    matched: bool = False


def expectations(text: str) -> list[Expectation]:
    out = []
    for lineno, line in enumerate(text.split("\n"), start=1):
        for m in _EXPECT.finditer(line):
            shift = int(m.group(2)) if m.group(2) else 0
            col = int(m.group(3)) if m.group(3) else None
            out.append(Expectation(lineno + shift, col, m.group(4), lineno))
    return out


def split_chunks(text: str) -> list[str]:
    """Independent modules of a split file, each padded so line numbers stay those of the file."""
    chunks, start, line = [], 0, 0
    for m in SPLIT_MARKER.finditer(text):
        chunk = text[start : m.start()]
        chunks.append("\n" * line + chunk)
        line += chunk.count("\n") + 1
        start = m.end()
    chunks.append("\n" * line + text[start:])
    return chunks


def diagnostics_of(text: str, path: str) -> list[Diagnostic]:
    try:
        module = parse_module(text, path)
    except DiagnosticError as e:
        return e.diagnostics
    return verify(module)


def verify_diagnostics(text: str, path: str, split: bool) -> list[Diagnostic]:
    """Problems with the expectations: unmatched expectations and unexpected diagnostics."""
    problems: list[Diagnostic] = []
    chunks = split_chunks(text) if split else [text]
    for chunk in chunks:
        expected = expectations(chunk)
        for d in diagnostics_of(chunk, path):
            line, col = d.loc.line_col if d.loc is not None else (0, 0)
            for e in expected:
                if (
                    not e.matched
                    and e.line == line
                    and (e.col is None or e.col == col)
                    and e.text in d.message
                ):
                    e.matched = True
                    break
            else:
                where = f"{path}:{line}:{col}" if d.loc is not None else path
                problems.append(Diagnostic(f"unexpected error at {where}: {d.message}"))
        for e in expected:
            if not e.matched:
                at = f"line {e.line}" + (f", column {e.col}" if e.col else "")
                problems.append(
                    Diagnostic(
                        f"{path}:{e.comment_line}: expected error at {at} was not produced: "
                        f"{{{{{e.text}}}}}"
                    )
                )
    return problems
