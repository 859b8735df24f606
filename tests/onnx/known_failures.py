"""known_failures.txt: the conformance cases expected to fail, one `group/test_name: reason` a
line, `#` comments. The suite runs them as strict expected failures, so a case that starts to
pass fails the run until its line is removed (update_known_failures.py writes the file anew)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

PATH = Path(__file__).with_name("known_failures.txt")

_LINE = re.compile(r"(?P<id>[a-z-]+/test_\S+?):\s+(?P<reason>\S.*)")
# The header line that says which onnx release the file was made with: its cases are that
# release's.
_ONNX = re.compile(r"#\s*onnx\s+(?P<version>\d+\.\d+)\S*")


class KnownFailuresError(ValueError):
    """The file does not read: the message names the file, each bad line and why."""


@dataclass(frozen=True)
class KnownFailures:
    """The cases expected to fail, each with its reason, and the onnx release (major.minor)
    the file was written for (None where the header does not say)."""

    reasons: Mapping[str, str]
    onnx_version: str | None = None


def parse(text: str, where: str = str(PATH), groups: Iterable[str] | None = None) -> KnownFailures:
    """The file's entries; KnownFailuresError naming every malformed or repeated line, and
    every line of a group not in `groups` (when given)."""
    reasons: dict[str, str] = {}
    version = None
    problems = []
    known_groups = set(groups) if groups is not None else None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            if (m := _ONNX.fullmatch(stripped)) and version is None:
                version = m["version"]
            continue
        m = _LINE.fullmatch(stripped)
        if m is None:
            problems.append(f"{where}:{number}: expected `group/test_name: reason`, got {line!r}")
            continue
        case, reason = m["id"], m["reason"].strip()
        if known_groups is not None and case.split("/")[0] not in known_groups:
            problems.append(f"{where}:{number}: no group {case.split('/')[0]!r}")
        elif case in reasons:
            problems.append(f"{where}:{number}: {case} is listed twice")
        else:
            reasons[case] = reason
    if problems:
        raise KnownFailuresError("\n".join(problems))
    return KnownFailures(reasons, version)


def read(path: Path = PATH, groups: Iterable[str] | None = None) -> KnownFailures:
    """parse() of the file at `path`; no entries where there is no file."""
    if not path.exists():
        return KnownFailures({})
    return parse(path.read_text(encoding="utf-8"), str(path), groups)


def text(reasons: Mapping[str, str], onnx_version: str) -> str:
    """The file for `reasons`, sorted by case, with its header."""
    head = [
        "# ONNX conformance cases expected to fail (tests/onnx), one `group/test_name: reason` a",
        "# line. Written by `make known-failures` (tests/onnx/update_known_failures.py): a case",
        "# that starts to pass fails `make conformance` until this file is written again.",
        f"# onnx {onnx_version}",
    ]
    body = [f"{case}: {' '.join(reasons[case].split())}" for case in sorted(reasons)]
    return "\n".join(head + body) + "\n"
