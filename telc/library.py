"""`telc build --emit compute|schedule|llvm|so`: the code-generation half of the driver."""

from __future__ import annotations

from pathlib import Path

import click

from dlvm.codegen.build import build_library, schedule
from dlvm.codegen.llgen import compile_object
from dlvm.ir.printer import module_text
from dlvm.ir.values import Module
from dlvm.transforms.compute_generation import ComputeGeneration
from telc.driver import Compiled, library_spec


def emit_stage(module: Module, stage: str, cpu: str) -> str:
    """The text of the compute, schedule or llvm stage of an optimised module."""
    if stage == "compute":
        ComputeGeneration().run(module)
        return module_text(module)
    schedule(module)
    if stage == "schedule":
        return module_text(module)
    return compile_object(module, cpu=cpu)[1]


def build_so(compiled: Compiled, output: str, cpu: str, quiet: bool) -> None:
    """Builds the shipped library and reports what it wrote with each step's time."""
    spec = library_spec(compiled.interface)
    result = build_library(compiled.module, spec, Path(output), cpu=cpu)
    if quiet:
        return
    total = sum(t for _, t in result.timings)
    steps = ", ".join(f"{name} {t * 1000:.0f} ms" for name, t in result.timings)
    click.echo(f"telc: wrote {result.library} and {result.header} in {total:.2f} s ({steps})")
