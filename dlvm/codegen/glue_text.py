"""C source text for the generated glue and header: string literals, safe comments and calls
wrapped at 100 columns, byte-stable."""

from __future__ import annotations

import re
from collections.abc import Iterator

LITERAL_WIDTH = 76


def c_string(text: str) -> str:
    """`text` as one C string literal (UTF-8; quotes, backslashes, `?` (trigraphs) and bytes
    outside printable ASCII escaped)."""
    return '"' + "".join(_c_chars(text)) + '"'


def c_string_lines(text: str, width: int = LITERAL_WIDTH) -> list[str]:
    """`text` as adjacent C string literals of about `width` characters each (whose
    concatenation is `text`), split after ", " where possible and never inside an escape."""
    pieces: list[str] = []
    for word in re.split(r"(?<=, )", text):
        chars = list(_c_chars(word))
        if len("".join(chars)) <= width:
            pieces.append("".join(chars))
        else:
            pieces += chars
    lines: list[str] = []
    line = ""
    for piece in pieces:
        if line and len(line) + len(piece) > width:
            lines.append('"' + line + '"')
            line = ""
        line += piece
    lines.append('"' + line + '"')
    return lines


def _c_chars(text: str) -> Iterator[str]:
    for byte in text.encode("utf-8"):
        ch = chr(byte)
        if ch in '"\\?':
            yield "\\" + ch
        elif 0x20 <= byte < 0x7F:
            yield ch
        else:
            yield f"\\{byte:03o}"  # octal: at most 3 digits, so the next character is safe


def c_comment(text: str) -> str:
    """`text` made safe inside a /* */ comment (no comment delimiters, no trigraphs)."""
    return text.replace("*/", "* /").replace("/*", "/ *").replace("??", "? ?")


def element(array: str, offset: int) -> str:
    """The C expression of element `offset` of `array`'s first element: `array + offset`."""
    return f"{array} + {offset}" if offset else array


def dims(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def wrap_call(head: str, args: list[str], tail: str, width: int = 100) -> list[str]:
    """A call (or prototype, or initializer) wrapped at `width` columns; continuation lines are
    aligned after the parenthesis, or indented by 4 when the head is long."""
    lines: list[str] = []
    line = head
    indent = " " * (len(head) if len(head) <= 48 else 4)
    for i, a in enumerate(args):
        piece = a + (", " if i + 1 < len(args) else tail)
        if line != head and line.strip() and len(line) + len(piece.rstrip()) > width:
            lines.append(line.rstrip())
            line = indent
        line += piece
    if not args:
        line += tail
    lines.append(line)
    return lines


class Pool:
    """Integer lists laid end to end in one C array, each distinct list once: `at(values)` is
    the C expression of its first element (NULL for an empty list)."""

    def __init__(self, array: str, c_type: str) -> None:
        self.array = array
        self.c_type = c_type
        self.values: list[int] = []
        self.offsets: dict[tuple[int, ...], int] = {}

    def at(self, values: list[int] | tuple[int, ...]) -> str:
        key = tuple(values)
        if not key:
            return "NULL"
        if key not in self.offsets:
            self.offsets[key] = len(self.values)
            self.values += key
        return element(self.array, self.offsets[key])

    def declaration(self) -> list[str]:
        """The array's definition (nothing when no list was asked for)."""
        if not self.values:
            return []
        head = f"static const {self.c_type} {self.array}[] = {{"
        return wrap_call(head, [str(v) for v in self.values], "};")
