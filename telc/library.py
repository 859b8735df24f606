"""`telc build --emit compute|schedule|llvm|so`: the code-generation half of the driver."""

from __future__ import annotations

from pathlib import Path

from dlvm.codegen.build import BuildResult, build_library, schedule
from dlvm.codegen.llgen import compile_object
from dlvm.ir.printer import module_text
from dlvm.ir.values import Module
from dlvm.transforms.compute_generation import ComputeGeneration
from telc.driver import Compiled, Timings, library_spec


def emit_stage(module: Module, stage: str, cpu: str, timings: Timings | None = None) -> str:
    """The text of the compute, schedule or llvm stage of an optimised module."""
    timings = timings if timings is not None else Timings()
    if stage == "compute":
        with timings.stage("compute generation"):
            ComputeGeneration().run(module)
        return module_text(module)
    with timings.stage("compute stages"):
        schedule(module)
    if stage == "schedule":
        return module_text(module)
    with timings.stage("llvm"):
        return compile_object(module, cpu=cpu)[1]


def build_so(
    compiled: Compiled, output: str, cpu: str, timings: Timings | None = None
) -> BuildResult:
    """Builds the shipped library; each code-generation step is named to timings as it begins
    and its time added after the frontend's."""
    timings = timings if timings is not None else Timings()
    spec = library_spec(compiled.interface)
    result = build_library(compiled.module, spec, Path(output), cpu=cpu, progress=timings.started)
    timings.stages.extend(result.timings)
    return result
