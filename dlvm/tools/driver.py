"""What the command-line tools share: reading and verifying modules, rendering diagnostics,
and exit statuses (0 success, 1 rejected input, 2 bad usage)."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable

from dlvm.diagnostics import Diagnostic, DiagnosticError, Location, Source
from dlvm.ir.parser import parse_module
from dlvm.ir.values import Module
from dlvm.ir.verifier import verify

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


def read_text(path: str) -> str:
    """The file's text; DiagnosticError when it cannot be read or is not UTF-8."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        raise DiagnosticError([Diagnostic(f"{path}: no such file")]) from None
    except IsADirectoryError:
        raise DiagnosticError([Diagnostic(f"{path}: is a directory")]) from None
    except UnicodeDecodeError as e:
        # Point at the bad byte: the text before it decodes, so its line and column are known.
        before = e.object[: e.start].decode("utf-8", errors="replace")
        source = Source(path, before + e.object[e.start :].decode("utf-8", errors="replace"))
        message = "not UTF-8 text: this byte cannot be decoded"
        raise DiagnosticError([Diagnostic(message, Location(source, len(before)))]) from None
    except OSError as e:
        raise DiagnosticError([Diagnostic(f"{path}: {e.strerror}")]) from None


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
