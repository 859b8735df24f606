"""What the command-line tools share: reading and verifying modules, rendering diagnostics,
and the exit-status contract (`command`: 0 success, 1 rejected input, 2 bad usage, 3 an
internal error, 130 interrupted)."""

from __future__ import annotations

import contextlib
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
EXIT_INPUT = 1  # the input was rejected: located diagnostics on stderr
EXIT_USAGE = 2  # a bad command line
EXIT_INTERNAL = 3  # a bug in the tool: one line on stderr, the traceback only when asked for
EXIT_INTERRUPTED = 130

# Set to anything non-empty, it makes an internal error of dlopt or dlc show its traceback.
TRACEBACK_VARIABLE = "DLVM_TRACEBACK"


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


def internal_error_message(tool: str, error: BaseException, variable: str) -> str:
    """The one line an internal error prints (the exception's first line, cut short), and the
    hint to report it."""
    lines = str(error).splitlines()
    detail = lines[0] if lines else ""
    if len(detail) > 200:
        detail = detail[:200] + "…"
    what = f"{type(error).__name__}: {detail}" if detail else type(error).__name__
    return (
        f"{tool}: internal error: {what}\n"
        f"This is a bug in {tool}; please report it with the input file "
        f"({variable}=1 shows where it happened)."
    )


def command(tool: str) -> Callable[[Callable[..., int]], Callable[..., int]]:
    """Gives a tool's `main` the exit-status contract of every command line here: what `main`
    returns, 0 when the reader of its output stopped early (quiet_broken_pipe), 130 when
    interrupted, and for any other exception (a bug, never the user's mistake) EXIT_INTERNAL
    with one line on stderr instead of a traceback, unless TRACEBACK_VARIABLE is set."""

    def wrap(main: Callable[..., int]) -> Callable[..., int]:
        quiet = quiet_broken_pipe(main)

        @functools.wraps(main)
        def run(*args, **kwargs) -> int:
            try:
                return quiet(*args, **kwargs)
            except KeyboardInterrupt:
                sys.stderr.write(f"{tool}: interrupted\n")
                return EXIT_INTERRUPTED
            except Exception as e:
                if os.environ.get(TRACEBACK_VARIABLE):
                    raise
                _flush(sys.stdout)
                sys.stderr.write(internal_error_message(tool, e, TRACEBACK_VARIABLE) + "\n")
                return EXIT_INTERNAL

        return run

    return wrap


def _flush(stream) -> None:
    """Flushes what the tool printed before it failed, so that it comes before the message."""
    with contextlib.suppress(OSError, ValueError):
        stream.flush()


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
