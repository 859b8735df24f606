"""What `telc build` shows on stderr: the running stage beside a spinner (on a terminal only, so
logs and pipes never see control codes), then each stage's time, the total, the files written
and the library's size. Stdout is never written here: it carries `--emit` text."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from types import TracebackType

from rich.console import Console
from rich.live import Live
from rich.padding import Padding
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from telc.driver import Timings


class Progress:
    """Times the stages run inside `with` into `timings` and names the running one; quiet shows
    nothing at all."""

    def __init__(self, quiet: bool) -> None:
        self.console = None if quiet else _console()
        self.timings = Timings(started=self._started)
        self.total = 0.0
        self._spinner = Spinner("dots", style="cyan")
        self._live: Live | None = None
        self._t0 = 0.0

    def __enter__(self) -> Progress:
        self._t0 = time.perf_counter()
        c = self.console
        if c is not None and c.is_terminal and not c.is_dumb_terminal:
            self._live = Live(self._spinner, console=c, transient=True,
                              redirect_stdout=False, redirect_stderr=False)  # fmt: skip
            self._live.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.total = time.perf_counter() - self._t0
        if self._live is not None:
            self._live.stop()  # transient: the spinner's line is erased before any error shows
            self._live = None

    def _started(self, stage: str) -> None:
        self._spinner.update(text=Text(f"{stage}…"))

    def summary(self, library: Path, header: Path) -> None:
        """`telc: wrote m.so (size), m.h and dlrt.h in T s`, then one row per stage."""
        if self.console is None:
            return
        size = _size(library.stat().st_size)
        head = Text("telc: wrote ")
        head.append(str(library), "bold")
        head.append(f" ({size}), {header} and {library.parent / 'dlrt.h'} in ")
        head.append(f"{self.total:.2f} s", "bold")
        self.console.print(head, soft_wrap=True)  # a long path stays on one line in logs
        table = Table(box=None, show_header=False, pad_edge=False, padding=(0, 0, 0, 2))
        table.add_column("stage")
        table.add_column("time", justify="right", style="cyan")
        table.add_column("share", justify="right", style="dim")
        for name, seconds in self.timings.stages:
            share = f"{100 * seconds / self.total:.0f}%" if self.total else ""
            table.add_row(name, _ms(seconds), share)
        table.add_row(Text("total", "bold"), Text(_ms(self.total), "bold"), "100%")
        self.console.print(Padding(table, (0, 0, 0, 2), expand=False))


def _console() -> Console:
    terminal = hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
    # force_terminal decides for rich too (FORCE_COLOR in a CI log must not bring control codes)
    return Console(stderr=True, force_terminal=terminal, highlight=False, markup=False, emoji=False)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def _size(n: int) -> str:
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / (1024 * 1024):.1f} MiB"
