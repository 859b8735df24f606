"""What `telc build` shows on stderr: the running stage beside a spinner (on a terminal only, so
logs and pipes never see control codes), then each stage's time, the total, the files written
and the library's size (or that they came from the cache), and with --verbose what the build
did. Stdout is never written here: it carries `--emit` text."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

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

    def __init__(self, quiet: bool, verbose: bool = False) -> None:
        self.console = None if quiet else console()
        self.verbose = verbose and not quiet
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

    def say(self, text: str | Text) -> None:
        """One line on stderr (unless quiet)."""
        if self.console is not None:
            self.console.print(text, soft_wrap=True)  # a long path stays on one line in logs

    def summary(self, library: Path, header: Path, cached: bool = False) -> None:
        """`telc: wrote m.so (size), m.h and dlrt.h in T s`, then one row per stage; a build
        taken from the cache says `(cached)` at the end of the first line."""
        if self.console is None:
            return
        size = _size(library.stat().st_size)
        head = Text("telc: wrote ")
        head.append(str(library), "bold")
        head.append(f" ({size}), {header} and {library.parent / 'dlrt.h'} in ")
        head.append(f"{self.total:.2f} s", "bold")
        if cached:
            head.append(" (cached)", "green")
        self.say(head)
        table = Table(box=None, show_header=False, pad_edge=False, padding=(0, 0, 0, 2))
        table.add_column("stage")
        table.add_column("time", justify="right", style="cyan")
        table.add_column("share", justify="right", style="dim")
        for name, seconds in self.timings.stages:
            share = f"{100 * seconds / self.total:.0f}%" if self.total else ""
            table.add_row(name, _ms(seconds), share)
        table.add_row(Text("total", "bold"), Text(_ms(self.total), "bold"), "100%")
        self.console.print(Padding(table, (0, 0, 0, 2), expand=False))

    def details(self, report: dict[str, Any], flags: list[str], cached: bool = False) -> None:
        """--verbose: the options, sources, cache, each pass (changed or not, time), kernels,
        frame sizes and the library's entry points and parameters."""
        if self.console is None or not self.verbose:
            return
        say = self.say
        say(f"telc: options {' '.join(flags)}")
        if report.get("sources"):
            say(f"telc: sources {', '.join(report['sources'])}")
        if "key" in report:
            state = "hit" if cached else "miss"
            say(f"telc: cache {state}: {report['key']} in {report['cache']}")
        if report.get("passes"):
            say("telc: passes" + (" (when it was built)" if cached else ""))
            rows = []
            for name, changed, seconds in report["passes"]:
                status = Text("changed", "yellow") if changed else Text("unchanged", "dim")
                rows.append([Text(name), status, Text(_ms(seconds), "cyan")])
            self._rows(rows)
        if "kernels" in report:
            say(f"telc: {report['kernels']} kernels")
        if report.get("frames"):
            say("telc: frame sizes")
            self._rows(
                [[Text(f"@{n}"), Text(_bytes(b), "cyan")] for n, b in report["frames"].items()]
            )
        for title in ("entries", "params"):
            if report.get(title):
                say(f"telc: {title}")
                self._rows([[Text(line)] for line in report[title]])

    def _rows(self, rows: list[list[Text]]) -> None:
        """Aligned columns, indented by two, without trailing blanks."""
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            line = Text("  ")
            for i, cell in enumerate(row):
                line.append_text(cell)
                if i < len(row) - 1:
                    line.append(" " * (widths[i] - len(cell) + 2))
            self.say(line)


def console(stderr: bool = True) -> Console:
    """A rich console on stderr (or stdout) that writes colour and control codes only to a
    terminal (and no colour when NO_COLOR is set, as rich does)."""
    stream = sys.stderr if stderr else sys.stdout
    terminal = hasattr(stream, "isatty") and stream.isatty()
    # force_terminal decides for rich too (FORCE_COLOR in a CI log must not bring control codes)
    return Console(
        file=stream,
        force_terminal=terminal,
        highlight=False,
        markup=False,
        emoji=False,
    )


def _table() -> Table:
    return Table(box=None, show_header=False, pad_edge=False, padding=(0, 0, 0, 2))


def _bytes(n: int) -> str:
    return f"{n} B" if n < 1024 else _size(n)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def _size(n: int) -> str:
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / (1024 * 1024):.1f} MiB"
