"""Runs passes in order: checks each may run at the module's stage, invalidates analyses after a
change, verifies after every pass, and prints the IR after the passes asked for."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from dlvm.analysis.manager import invalidate
from dlvm.diagnostics import Diagnostic, DiagnosticError
from dlvm.ir.printer import module_text
from dlvm.ir.values import Module
from dlvm.ir.verifier import verify
from dlvm.transforms import lookup_pass, suggest_pass
from dlvm.transforms.pass_base import Pass


class PassManager:
    def __init__(
        self,
        verify_each: bool = True,
        print_after: Iterable[str] = (),
        emit: Callable[[str], None] = print,
    ) -> None:
        self.verify_each = verify_each
        self.print_after = {lookup_pass(n) for n in print_after} - {None}
        self.print_after_all = "all" in print_after
        self.emit = emit

    @staticmethod
    def resolve(names: Iterable[str]) -> list[type[Pass]]:
        """Pass classes for names or aliases; DiagnosticError lists every unknown one."""
        out, diags = [], []
        for n in names:
            p = lookup_pass(n)
            if p is None:
                diags.append(Diagnostic(f"unknown pass '{n}'{suggest_pass(n)}"))
            else:
                out.append(p)
        if diags:
            raise DiagnosticError(diags)
        return out

    def run(self, module: Module, passes: Iterable[type[Pass]]) -> list[tuple[type[Pass], bool]]:
        """Runs each pass; returns (pass, changed) pairs in order."""
        results = []
        for cls in passes:
            if module.stage not in cls.stages:
                allowed = ", ".join(cls.stages)
                message = f"pass {cls.name} ({cls.alias}) cannot run at stage {module.stage}"
                raise DiagnosticError([Diagnostic(f"{message}; it runs at {allowed}")])
            changed = cls().run(module)
            if changed:
                invalidate()
            if self.verify_each:
                diags = verify(module)
                if diags:
                    raise DiagnosticError(
                        [Diagnostic(f"malformed IR after {cls.name} ({cls.alias})")] + diags
                    )
            results.append((cls, changed))
            if self.print_after_all or cls in self.print_after:
                self.emit(f"// IR after {cls.name}\n{module_text(module)}")
        return results
