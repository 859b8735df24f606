"""Runs passes in order: checks each may run at the module's stage, invalidates analyses after a
change, verifies after every pass, prints the IR after the passes asked for, and logs each run
with its time. Runs a pipeline (an -O level) to its fixpoint."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from dlvm.diagnostics import Diagnostic, DiagnosticError
from dlvm.ir.analysis_cache import invalidate
from dlvm.ir.printer import module_text
from dlvm.ir.values import Module
from dlvm.ir.verifier import verify
from dlvm.transforms import lookup_pass, suggest_pass
from dlvm.transforms.pass_base import Pass
from dlvm.transforms.pipelines import Pipeline


class PassBroke(Exception):
    """A pass left the module malformed. Its input verified, so this is a bug in the compiler,
    never in the input: the tools report it as an internal error (exit status 3)."""

    def __init__(self, cls: type[Pass], diags: list[Diagnostic]) -> None:
        self.diags = diags
        lines = [f"malformed IR after {cls.name} ({cls.alias})"] + [d.render() for d in diags]
        super().__init__("\n".join(lines))


@dataclass(frozen=True)
class PassRun:
    """One run of a pass: whether it changed the module, and its time in seconds."""

    name: str
    alias: str
    changed: bool
    seconds: float


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
        self.runs: list[PassRun] = []

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
            t0 = time.perf_counter()
            changed = cls().run(module)
            seconds = time.perf_counter() - t0
            if changed:
                invalidate()
            if self.verify_each:
                diags = verify(module)
                if diags:
                    raise PassBroke(cls, diags)
            results.append((cls, changed))
            self.runs.append(PassRun(cls.name, cls.alias, changed, seconds))
            if self.print_after_all or cls in self.print_after:
                self.emit(f"// IR after {cls.name}\n{module_text(module)}")
        return results

    def run_pipeline(self, module: Module, pipeline: Pipeline) -> list[tuple[type[Pass], bool]]:
        """Runs the pipeline's passes in order, again while a round changed something, at most
        `pipeline.rounds` times; returns every run's (pass, changed) pair."""
        passes = self.resolve(pipeline.passes)
        results: list[tuple[type[Pass], bool]] = []
        for _ in range(pipeline.rounds):
            round_results = self.run(module, passes)
            results += round_results
            if not any(changed for _, changed in round_results):
                break
        return results
