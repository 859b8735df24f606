"""The stages `telc` can stop at, as functions: parse (ast), lower (ir), optimise (optimized).
Every failure is a DiagnosticError carrying located diagnostics."""

from __future__ import annotations

from dataclasses import dataclass

from dlvm.diagnostics import Diagnostic, DiagnosticError
from dlvm.ir.values import Module
from dlvm.ir.verifier import verify
from dlvm.transforms.pass_manager import PassManager
from telc.lower import Interface, lower
from telc.program import Program, load

STAGES = ("ast", "ir", "optimized", "so")
OPTIMIZATIONS = ["differentiation", "algebra-simplification", "common-subexpression-elimination"]
OPTIMIZATIONS += ["dead-code-elimination"]


@dataclass
class Compiled:
    program: Program
    module: Module
    interface: Interface


def parse_defines(items: list[str]) -> dict[str, int | float]:
    """`-D NAME=VALUE` options as numbers; DiagnosticError for a malformed one."""
    out: dict[str, int | float] = {}
    diags = []
    for item in items:
        name, sep, text = item.partition("=")
        value: int | float | None = None
        if sep and name.isidentifier():
            try:
                value = int(text)
            except ValueError:
                try:
                    value = float(text)
                except ValueError:
                    value = None
        if value is None:
            diags.append(Diagnostic(f"-D {item}: expected NAME=NUMBER, such as -D B=64"))
        else:
            out[name] = value
    if diags:
        raise DiagnosticError(diags)
    return out


def compile_text(path: str, text: str, defines: dict[str, int | float] | None = None) -> Compiled:
    """TEL source to verified raw IR and its interface."""
    program = load(path, text, defines)
    module, interface = lower(program)
    diags = verify(module)
    if diags:
        head = Diagnostic(f"internal error: telc produced IR that does not verify for {path}")
        raise DiagnosticError([head, *diags])
    return Compiled(program, module, interface)


def optimize(module: Module) -> Module:
    """Differentiation, then the optimisations; the module ends at stage optimizable."""
    manager = PassManager()
    manager.run(module, PassManager.resolve(OPTIMIZATIONS))
    return module
