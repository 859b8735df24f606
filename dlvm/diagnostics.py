"""Located diagnostics: values that render like a compiler's (`file:line:col: error: message`,
the source line, a caret), collected rather than thrown one at a time.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field


class Source:
    """The text of one input, with a line index for turning offsets into positions."""

    __slots__ = ("name", "text", "_line_starts")

    def __init__(self, name: str, text: str) -> None:
        self.name = name
        self.text = text
        self._line_starts: list[int] | None = None

    def position(self, offset: int) -> tuple[int, int]:
        """1-based (line, column) of a character offset."""
        if self._line_starts is None:
            starts = [0]
            find = self.text.find
            i = find("\n")
            while i >= 0:
                starts.append(i + 1)
                i = find("\n", i + 1)
            self._line_starts = starts
        line = bisect.bisect_right(self._line_starts, offset) - 1
        return line + 1, offset - self._line_starts[line] + 1

    def line_text(self, line: int) -> str:
        lines = self.text.split("\n")
        return lines[line - 1].rstrip("\r") if 0 < line <= len(lines) else ""


class Location:
    """A span start in a source: character offset plus length (for the caret run).

    A plain slotted class rather than a dataclass: the parser makes one per instruction, and
    this is several times cheaper to create.
    """

    __slots__ = ("source", "offset", "length")

    def __init__(self, source: Source, offset: int, length: int = 1) -> None:
        self.source = source
        self.offset = offset
        self.length = length

    @property
    def line_col(self) -> tuple[int, int]:
        return self.source.position(self.offset)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Location)
            and self.source is other.source
            and (self.offset, self.length) == (other.offset, other.length)
        )

    def __hash__(self) -> int:
        return hash((id(self.source), self.offset, self.length))

    def __repr__(self) -> str:
        return f"Location({self}, length={self.length})"

    def __str__(self) -> str:
        line, col = self.line_col
        return f"{self.source.name}:{line}:{col}"


@dataclass(frozen=True, slots=True)
class Diagnostic:
    message: str
    loc: Location | None = None
    severity: str = "error"
    notes: tuple[Diagnostic, ...] = ()

    def render(self, color: bool = False) -> str:
        """`file:line:col: error: message`, then the source line and a caret under the span."""
        if self.severity == "detail":  # a line of explanation under its diagnostic, as is
            return self.message
        sev = self.severity
        if color:
            sev = {"error": "\x1b[1;31merror\x1b[0m", "note": "\x1b[1;36mnote\x1b[0m"}.get(sev, sev)
        if self.loc is None:
            head = f"{sev}: {self.message}"
            lines = [head]
        else:
            line, col = self.loc.line_col
            text = self.loc.source.line_text(line)
            expanded, col = _window(text.expandtabs(1), col)
            span = max(1, min(self.loc.length, max(1, len(expanded) - col + 1)))
            caret = " " * (col - 1) + "^" + "~" * (span - 1)
            head = f"{self.loc}: {sev}: {self.message}"
            lines = [head, expanded, caret]
        out = "\n".join(lines)
        for note in self.notes:
            out += "\n" + note.render(color)
        return out

    def __str__(self) -> str:
        return self.render()


@dataclass
class DiagnosticError(Exception):
    """Raised when input is rejected; carries every diagnostic found."""

    diagnostics: list[Diagnostic] = field(default_factory=list)

    def __str__(self) -> str:
        return "\n".join(d.render() for d in self.diagnostics)

    def render(self, color: bool = False) -> str:
        return "\n".join(d.render(color) for d in self.diagnostics)


class BuildFailure(Exception):
    """A correct program that cannot be built into a library: a construct the code generator
    does not compile yet, an entry point the C ABI cannot express, or a C toolchain failure.
    Tools report its message as `cannot build: …` with exit status 1, never a traceback."""


# The most characters of a source line shown on either side of the caret: a line of IR may hold
# a dense literal's megabytes of hex.
_CONTEXT = 100


def _window(text: str, col: int) -> tuple[str, int]:
    """The part of a long line around 1-based column col, `…` where it is cut, and col in it."""
    start = max(0, col - 1 - _CONTEXT)
    end = col - 1 + _CONTEXT
    if start == 0 and end >= len(text):
        return text, col
    head = "…" if start > 0 else ""
    tail = "…" if end < len(text) else ""
    return head + text[start:end] + tail, col - start + len(head)
