"""How long the fuzzers run: briefly and reproducibly in `make test` (a fixed seed, a few
dozen examples each), at length under `make fuzz` (DLVM_FUZZ=long: many more examples, a random
seed, so every run explores new inputs). Each fuzzer's contract is the same: no traceback, no
exit status 3, no crash, no hang, every error located."""

from __future__ import annotations

import os
import re

from hypothesis import HealthCheck, settings

LONG = os.environ.get("DLVM_FUZZ") == "long"


def fuzz_settings(short: int, long: int | None = None) -> settings:
    """Hypothesis settings for a fuzzer: `short` examples with a fixed seed in `make test`,
    `long` (default 50 × short) with a random seed under `make fuzz`."""
    return settings(
        max_examples=(long if long is not None else 50 * short) if LONG else short,
        derandomize=not LONG,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=LONG,
    )


# A diagnostic shows the source line it points at, then a caret line under it; a line of the
# input that happens to read like a message ("… internal error …", "x:1:2: error: …") is such
# an echo, so only lines not followed by a caret line are the tool's own.
_CARET = re.compile(r"^\s*\^[\^~]*\s*$")


def own_lines(stderr: str) -> list[str]:
    """The lines a command wrote itself: every line of stderr but the echoed source lines."""
    lines = stderr.splitlines()
    return [
        line
        for i, line in enumerate(lines)
        if not (i + 1 < len(lines) and _CARET.match(lines[i + 1]))
    ]


def check_command_output(
    tool: str, status: int, stderr: str, allowed: tuple[int, ...]
) -> list[str]:
    """The contract of a command line on hostile input: a status in `allowed` (never 3), no
    traceback, no internal error; returns the place each error names (`file:line:col`)."""
    assert status in allowed, (status, stderr[-2000:])
    own = own_lines(stderr)
    assert not any(line.startswith("Traceback (most recent call last)") for line in own), stderr
    assert not any(line.startswith(f"{tool}: internal error") for line in own), stderr
    return [line.partition(": error: ")[0] for line in own if ": error: " in line]
