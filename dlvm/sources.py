"""Reading an input file's text, as every front end and tool does (telc, dlopt, dlc): a located
diagnostic, not a traceback, when it cannot be read or is not UTF-8."""

from __future__ import annotations

from dlvm.diagnostics import Diagnostic, DiagnosticError, Location, Source


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
