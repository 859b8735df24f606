"""Reading source files (dlvm/sources.py), which telc, dlopt and dlc share: only regular files
of at most MAX_SOURCE_BYTES are read; a FIFO, a device or a huge file is refused at once with a
clear message (never a hang, never a MemoryError), in the root file and in a `use`d one alike."""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dlvm import sources
from dlvm.diagnostics import DiagnosticError
from dlvm.sources import read_text
from telc.driver import compile_text

MODEL = "x: in[2]\ny: out = x\n"
TIMEOUT = 30  # seconds; a FIFO read without care would wait for a writer forever
MEMORY = 2 << 30  # bytes of address space for a tool that reads /dev/zero


def _message(path: str) -> str:
    with pytest.raises(DiagnosticError) as e:
        _promptly(read_text, path)
    [d] = e.value.diagnostics
    return d.message


def _promptly(read: Callable[..., object], *args: object) -> object:
    """read(*args) on a thread; a failure if it has not returned within TIMEOUT."""
    outcome: list[object] = []

    def work() -> None:
        try:
            outcome.append(read(*args))
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            outcome.append(e)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(TIMEOUT)
    assert not thread.is_alive(), f"still reading after {TIMEOUT} s"
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "pipe.tel"
    os.mkfifo(path)
    yield path
    # Lets a reader that waits for a writer (the bug) go, so no thread is left blocked.
    with contextlib.suppress(OSError):
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


def test_a_regular_file_is_read_with_universal_newlines(tmp_path: Path) -> None:
    path = tmp_path / "m.tel"
    path.write_bytes(b"x: in[2]\r\ny: out = x\rz: out = x\n")
    assert read_text(str(path)) == "x: in[2]\ny: out = x\nz: out = x\n"


def test_a_fifo_is_refused_without_waiting_for_a_writer(fifo: Path) -> None:
    assert _message(str(fifo)) == f"{fifo}: is a FIFO, not a regular file"


def test_a_directory_is_refused(tmp_path: Path) -> None:
    assert _message(str(tmp_path)) == f"{tmp_path}: is a directory"


def test_a_file_above_the_limit_is_refused(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(sources, "MAX_SOURCE_BYTES", 1024 * 1024)
    path = tmp_path / "big.tel"
    path.write_bytes(b" " * (3 * 1024 * 1024))
    assert _message(str(path)) == f"{path}: is 3 MiB; a source file may have at most 1 MiB"
    path.write_bytes(b" " * (1024 * 1024))  # exactly the limit is fine
    assert read_text(str(path)) == " " * (1024 * 1024)


def test_the_limit_is_documented() -> None:
    assert sources.MAX_SOURCE_BYTES == 64 * 1024 * 1024
    for doc in ("docs/telc.md", "docs/ir.md"):
        assert "64 MiB" in Path(doc).read_text(encoding="utf-8"), doc


def test_a_file_that_is_not_utf8_is_located(tmp_path: Path) -> None:
    path = tmp_path / "bad.tel"
    path.write_bytes(b"x: in[2]\r\ny: out = \xff\n")
    with pytest.raises(sources.Unreadable) as e:
        sources.read_source(str(path))
    assert e.value.diagnostic is not None
    assert str(e.value.diagnostic.loc) == f"{path}:2:10"


@pytest.mark.parametrize("kind", ["fifo", "missing"])
def test_a_used_file_that_is_not_a_regular_file_is_located(
    tmp_path: Path, fifo: Path, kind: str
) -> None:
    link = fifo if kind == "fifo" else tmp_path / "nope.tel"
    root = tmp_path / "root.tel"
    text = f"use ./{link.stem}\n" + MODEL
    with pytest.raises(DiagnosticError) as e:
        _promptly(compile_text, str(root), text)
    [d] = e.value.diagnostics
    assert str(d.loc) == f"{root}:1:5"
    reason = "is a FIFO, not a regular file" if kind == "fifo" else "no such file"
    assert d.message == f"cannot read './{link.stem}': {link}: {reason}"


def test_a_used_file_that_is_not_utf8_is_located_in_it(tmp_path: Path) -> None:
    (tmp_path / "used.tel").write_bytes(b"dim B = 2\ndim C = \xff\n")
    with pytest.raises(DiagnosticError) as e:
        compile_text(str(tmp_path / "root.tel"), "use ./used\n" + MODEL)
    [d] = e.value.diagnostics
    assert str(d.loc) == f"{tmp_path / 'used.tel'}:2:9"


def _limited_memory() -> None:
    # Reading /dev/zero without care ends in a MemoryError only once the machine's memory is
    # gone: a test of it must not take the whole machine down when the bug is back.
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


@pytest.mark.parametrize("tool", ["telc check", "dlopt", "dlc"])
@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_the_tools_refuse_it_at_once(fifo: Path, tool: str, kind: str) -> None:
    path, reason = {
        "fifo": (str(fifo), "is a FIFO, not a regular file"),
        "device": ("/dev/zero", "is a character device, not a regular file"),
    }[kind]
    module = {"telc check": "telc.cli", "dlopt": "dlvm.tools.dlopt", "dlc": "dlvm.tools.dlc"}
    words = tool.split()
    code = (
        f"import sys; from {module[tool]} import main; sys.argv[0] = {words[0]!r}; sys.exit(main())"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, *words[1:], path],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
        preexec_fn=_limited_memory,
    )
    assert result.returncode == 1, result.stderr
    assert f"{path}: {reason}" in result.stderr
    assert "Traceback" not in result.stderr
