"""Lowering TEL to DLVM IR (stage raw). Shapes and element types are checked in the same walk
that emits the IR, so every check sits next to the code it protects; `telc check` runs it and
discards the IR."""

from __future__ import annotations

from dlvm.diagnostics import Diagnostic, DiagnosticError
from dlvm.ir.values import Module
from telc.limits import deep_stack
from telc.lower.entries import Entry, Interface
from telc.lower.model import Model
from telc.program import Program


@deep_stack
def lower(program: Program, distributed: bool = False) -> tuple[Module, Interface]:
    """The IR module and entry-point interface of a loaded program (with each train entry's
    halves for `--distributed`); DiagnosticError with every error found. It recurses as
    deeply as the program nests (up to MAX_DEPTH levels), so it runs on a deep stack
    (telc.limits)."""
    model = Model(program, distributed)
    interface = model.lower_program()
    diags = model.cx.diags
    if diags:
        order = {id(u.source): i for i, u in enumerate(program.units)}

        def position(d: Diagnostic) -> tuple[int, int]:
            loc = d.loc
            return (order.get(id(loc.source), len(order)), loc.offset) if loc else (-1, 0)

        raise DiagnosticError(sorted(diags, key=position))
    return model.cx.module, interface


__all__ = ["Entry", "Interface", "lower"]
