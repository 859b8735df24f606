"""The reverse sweep of a function with several blocks (written next)."""

from __future__ import annotations

from typing import Any

from dlvm.diagnostics import Diagnostic, DiagnosticError


class ControlFlowSweep:
    def __init__(self, fd: Any) -> None:
        self.fd = fd

    def run(self) -> None:
        raise DiagnosticError([Diagnostic("differentiating control flow is being written")])
