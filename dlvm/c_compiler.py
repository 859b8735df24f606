"""The C compiler command, read one way wherever the C compiler runs (the runtime's objects, a
library's glue and link, the build cache's key): the `cc` option, else $CC, else `cc`, split
into words as a shell would, so that CC="gcc -fsanitize=address" runs gcc with that flag."""

from __future__ import annotations

import os
import shlex


def c_compiler(cc: str | None = None) -> tuple[str, ...]:
    """The words of the C compiler command `cc` (default $CC, else "cc"): the program, then
    its arguments. ValueError when the command does not parse (an unclosed quote) or is empty."""
    text = cc if cc is not None else os.environ.get("CC") or "cc"
    try:
        words = tuple(shlex.split(text))
    except ValueError as e:
        raise ValueError(f"the C compiler command {text!r} does not parse: {e}") from None
    if not words:
        raise ValueError("no C compiler: the compiler command is empty")
    return words
