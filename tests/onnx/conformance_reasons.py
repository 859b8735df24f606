"""Why a conformance case failed, as one line of known_failures.txt that starts with its category:
`unsupported dtype`, `unsupported type`, `empty shape` (outside the goal's scope, whatever
failed), `unsupported op`, `dynamic shape` (the importer's diagnostic), `import error`,
`crash in the importer`, `crash in codegen` (the build's error), `runtime error` (the library's),
`wrong output count`, `wrong dtype`, `wrong shape`, `numerical mismatch` (with the largest error),
or `crash` (any other exception)."""

from __future__ import annotations

import re

from conformance_backend import CaseFailed
from conformance_cases import Case, out_of_scope

from dlvm.loader import LibraryError

MAX_REASON = 240  # characters: a diagnostic can list a whole graph's nodes

CATEGORIES = (
    "unsupported dtype",
    "unsupported type",
    "empty shape",
    "unsupported op",
    "dynamic shape",
    "import error",
    "crash in the importer",
    "crash in codegen",
    "runtime error",
    "wrong output count",
    "wrong dtype",
    "wrong shape",
    "numerical mismatch",
    "crash",
)


def reason(case: Case, error: BaseException) -> str:
    """The line for `case`, which failed with `error`."""
    return _shorten(out_of_scope(case) or _reason(error))


def category(line: str) -> str:
    """The category a reason starts with."""
    return next((c for c in CATEGORIES if line.startswith(c + ":")), "crash")


def _reason(error: BaseException) -> str:
    if isinstance(error, CaseFailed):
        return _import_reason(str(error))
    if isinstance(error, LibraryError):
        return f"runtime error: {_first_line(str(error))}"
    if isinstance(error, AssertionError):
        return _comparison(str(error))
    return f"crash: {type(error).__name__}: {_first_line(str(error))}"


def _import_reason(message: str) -> str:
    if message.startswith(("crash in codegen:", "crash in the importer:")):
        return message
    first, *rest = message.split("; ")
    first = re.sub(r"^[\w.-]+: ", "", first)  # the case's own name, which the line has
    more = f" (and {len(rest)} more)" if rest else ""
    if "element type" in first:
        kind = "unsupported dtype"
    elif re.search(r"dynamic dim|must be positive|known at import time", first):
        kind = "dynamic shape"
    elif re.search(r"not supported|supported at opsets|newer than the importer", first):
        kind = "unsupported op"
    elif first.startswith("input "):  # the rep's own check of a given input
        kind = "wrong dtype"
    else:
        kind = "import error"
    return f"{kind}: {first}{more}"


def _comparison(message: str) -> str:
    """BackendTest's assertions (numpy.testing's messages) as a reason."""
    if "incorrect shape" in message:
        shapes = re.findall(r"(?:ACTUAL|DESIRED): array\(\[([^\]]*)\]", message)
        if len(shapes) == 2:
            return f"wrong shape: [{shapes[0]}] where [{shapes[1]}] is expected"
        return f"wrong shape: {_first_line(message)}"
    dtypes = re.findall(r"(?:ACTUAL|DESIRED): dtype\('?(\w+)'?\)", message)
    if len(dtypes) == 2:
        return f"wrong dtype: {dtypes[0]} where {dtypes[1]} is expected"
    counts = re.search(r"ACTUAL: (\d+)\s+DESIRED: (\d+)\s*$", message)
    if counts:  # the number of outputs
        return f"wrong output count: {counts[1]} where {counts[2]} are expected"
    if "nan location mismatch" in message or "inf location mismatch" in message:
        return "numerical mismatch: a NaN or infinity where the expected output has none"
    absolute = re.search(r"Max absolute difference[^:]*: (\S+)", message)
    relative = re.search(r"Max relative difference[^:]*: (\S+)", message)
    count = re.search(r"Mismatched elements: (\d+) / (\d+)", message)
    if absolute:
        text = f"numerical mismatch: max abs error {_number(absolute[1])}"
        if relative:
            text += f", max rel error {_number(relative[1])}"
        if count:
            text += f" ({count[1]} of {count[2]} elements)"
        return text
    return f"numerical mismatch: {_first_line(message)}"


def _number(text: str) -> str:
    try:
        return f"{float(text):.3g}"
    except ValueError:
        return text


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else "(no message)"


def _shorten(line: str) -> str:
    line = " ".join(line.split())
    return line if len(line) <= MAX_REASON else line[: MAX_REASON - 1] + "…"
