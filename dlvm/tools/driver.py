"""What the command-line tools share: reading and verifying modules, rendering diagnostics,
and exit statuses (0 success, 1 rejected input, 2 bad usage)."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable

from dlvm.diagnostics import Diagnostic, DiagnosticError
from dlvm.ir.parser import parse_module
from dlvm.ir.values import Module
from dlvm.ir.verifier import verify
from dlvm.sources import read_text

EXIT_OK = 0
EXIT_INPUT = 1
EXIT_USAGE = 2


def use_color(stream) -> bool:
    if os.environ.get("NO_COLOR"):
        return False
    return hasattr(stream, "isatty") and stream.isatty()


def report(diags: list[Diagnostic], stream=None) -> None:
    """Writes diagnostics to stderr (coloured on a terminal)."""
    stream = stream or sys.stderr
    color = use_color(stream)
    for d in diags:
        stream.write(d.render(color) + "\n")


def load_module(path: str, verify_module: bool = True) -> Module:
    """Parses and verifies a `.dl` file; DiagnosticError carries every problem found."""
    text = read_text(path)
    module = parse_module(text, path)
    if verify_module:
        diags = verify(module)
        if diags:
            raise DiagnosticError(diags)
    return module


def quiet_broken_pipe(main: Callable[..., int]) -> Callable[..., int]:
    """Makes a tool whose reader stopped early (`dlopt … | head`) exit quietly with status 0
    instead of printing an error: stopping to read is the reader's choice, not a failure."""

    @functools.wraps(main)
    def run(*args, **kwargs) -> int:
        try:
            status = main(*args, **kwargs)
            sys.stdout.flush()
            return status
        except BrokenPipeError:
            # Python would flush stdout again at exit and complain; point it at nothing.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return EXIT_OK

    return run
