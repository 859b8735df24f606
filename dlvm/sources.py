"""Reading an input file's text, as every front end and tool does (telc, dlopt, dlc): a located
diagnostic, not a traceback, when it cannot be read, is not a regular file, is larger than
MAX_SOURCE_BYTES or is not UTF-8."""

from __future__ import annotations

import os
import stat

from dlvm.diagnostics import Diagnostic, DiagnosticError, Location, Source

# The largest source file read (docs/telc.md, docs/ir.md): far above any model or module, and
# small enough that parsing it cannot exhaust the memory of an ordinary machine.
MAX_SOURCE_BYTES = 64 * 1024 * 1024

_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


class Unreadable(Exception):
    """Why a file cannot be read as source: `reason` ("no such file", "is a FIFO, not a regular
    file"…), or `diagnostic`, located at the first byte that is not UTF-8."""

    def __init__(self, reason: str, diagnostic: Diagnostic | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.diagnostic = diagnostic


def read_text(path: str) -> str:
    """The file's text; DiagnosticError when it cannot be read (read_source says why)."""
    try:
        return read_source(path)
    except Unreadable as e:
        raise DiagnosticError([e.diagnostic or Diagnostic(f"{path}: {e.reason}")]) from None


def read_source(path: str) -> str:
    """The text of a regular file of at most MAX_SOURCE_BYTES bytes; Unreadable otherwise.
    The file is opened without blocking and checked before it is read, so a FIFO (which would
    wait for a writer) or a device such as /dev/zero (which never ends) is refused at once."""
    data = read_bytes(path, MAX_SOURCE_BYTES, "a source file")
    try:
        return _newlines(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        # Point at the bad byte: the text before it decodes, so its line and column are known.
        before = _newlines(data[: e.start].decode("utf-8", errors="replace"))
        rest = _newlines(data[e.start :].decode("utf-8", errors="replace"))
        source = Source(path, before + rest)
        message = "not UTF-8 text: this byte cannot be decoded"
        raise Unreadable(message, Diagnostic(message, Location(source, len(before)))) from None


def _newlines(text: str) -> str:
    """Line ends as text-mode reading makes them (universal newlines): \r\n and \r become \n."""
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


def _too_large(size: int, limit: int, what: str) -> str:
    mib = 1024 * 1024
    return f"is {size / mib:.0f} MiB; {what} may have at most {limit // mib} MiB"


def read_bytes(path: str, limit: int, what: str) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (`what` names such a file in the
    message when it is larger: "a source file"); Unreadable otherwise, checked as read_source
    does before anything is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise Unreadable("no such file") from None
    except IsADirectoryError:
        raise Unreadable("is a directory") from None
    except OSError as e:
        raise Unreadable(e.strerror or str(e)) from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise Unreadable("is a directory")
        if not stat.S_ISREG(info.st_mode):
            kind = _KINDS.get(stat.S_IFMT(info.st_mode), "a special file")
            raise Unreadable(f"is {kind}, not a regular file")
        if info.st_size > limit:
            raise Unreadable(_too_large(info.st_size, limit, what))
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(limit + 1)  # the file may have grown since
    except OSError as e:
        raise Unreadable(e.strerror or str(e)) from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise Unreadable(_too_large(len(data), limit, what))
    return data
