"""Lowering TEL to DLVM IR (stage raw). Shapes and element types are checked in the same walk
that emits the IR, so every check sits next to the code it protects; `telc check` runs it and
discards the IR."""

from __future__ import annotations

from dlvm.diagnostics import DiagnosticError
from dlvm.ir.values import Module
from telc.lower import builtins as _builtins  # noqa: F401  (registers the built-ins)
from telc.lower.model import Entry, Interface, Model
from telc.program import Program


def lower(program: Program) -> tuple[Module, Interface]:
    """The IR module and entry-point interface of a loaded program; DiagnosticError with
    every error found."""
    lowering = Model(program)
    interface = lowering.lower_program()
    if lowering.diags:
        order = {id(u.source): i for i, u in enumerate(program.units)}

        def position(d):
            loc = d.loc
            return (order.get(id(loc.source), len(order)), loc.offset) if loc else (-1, 0)

        raise DiagnosticError(sorted(lowering.diags, key=position))
    return lowering.module, interface


__all__ = ["Entry", "Interface", "lower"]
