"""The one exception the interpreter raises for anything wrong with the program or its inputs."""

from __future__ import annotations

from typing import Any


class InterpreterError(Exception):
    """A failure while interpreting: a trap, a bad argument, an out-of-bounds key, a call to a
    function without a body, or an operation that failed on its operands.

    Operations raise it with a bare message; the interpreter then adds where it happened
    (`file:line:col`, function, instruction) once, at the innermost instruction, and each caller
    on the way out appends a `called from` line.
    """

    def __init__(self, message: str, *, trap: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.trap = trap
        self.function: str | None = None
        self.opcode: str | None = None
        self.loc: Any = None
        self.located = False
        self.call_sites: list[str] = []

    def locate(self, function: str, opcode: str | None, loc: Any) -> None:
        """Records the innermost place the error happened (only the first call counts)."""
        if self.located:
            return
        self.located = True
        self.function, self.opcode, self.loc = function, opcode, loc

    def __str__(self) -> str:
        if not self.located:
            text = self.message
        elif self.trap:
            where = f"{self.loc} " if self.loc is not None else ""
            text = f"trap at {where}in @{self.function}"
        else:
            where = f"{self.loc}: " if self.loc is not None else ""
            what = f", {self.opcode}" if self.opcode else ""
            text = f"{where}in @{self.function}{what}: {self.message}"
        sites = self.call_sites
        if len(sites) > _MAX_SITES:  # deep recursion: the innermost and outermost calls suffice
            hidden = len(sites) - _MAX_SITES + 1
            sites = [*sites[: _MAX_SITES - 2], f"  … {hidden} more calls", sites[-1]]
        return "\n".join([text, *sites])


_MAX_SITES = 12
