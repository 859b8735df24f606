"""`telc build --emit compute|schedule|llvm|asm|ptx|obj|so`: the code-generation half of the
driver, and what `--verbose` reports about the generated code (kernels, frame sizes, entry
points)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dlvm.codegen.build import BuildResult, LibraryBuild, Target, schedule
from dlvm.codegen.cuda import ptx
from dlvm.codegen.frame import FramePlan
from dlvm.codegen.gpus import DEFAULT_GPU
from dlvm.codegen.llgen import compile_assembly, compile_object
from dlvm.codegen.spec import LibrarySpec, TensorSpec
from dlvm.ir.printer import module_text
from dlvm.ir.values import Module
from dlvm.transforms.compute_generation import ComputeGeneration
from telc.driver import OPT_LEVELS, BuildOptions, Compiled, Timings


def emit_stage(
    module: Module, stage: str, options: BuildOptions, timings: Timings | None = None
) -> str | bytes:
    """The text of the compute, schedule, llvm, asm or ptx stage of an optimised module, or
    its object code (obj). The CUDA kernels are scheduled for --target cuda and for ptx."""
    timings = timings if timings is not None else Timings()
    cpu, level = options.cpu, options.level
    if stage == "compute":
        with timings.stage("compute generation"):
            ComputeGeneration().run(module)
        return module_text(module)
    with timings.stage("compute stages"):
        cuda = options.target == "cuda" or stage == "ptx"
        schedule(module, cpu, cuda, options.tf32, options.fast_math)
    if stage == "schedule":
        return module_text(module)
    if stage == "ptx":
        with timings.stage("ptx"):
            return ptx(module, options.gpu, OPT_LEVELS[level].llvm)[0]
    with timings.stage("llvm"):
        if stage == "asm":
            return compile_assembly(module, cpu=cpu, opt=OPT_LEVELS[level].llvm)
        obj, text = compile_object(module, cpu=cpu, opt=OPT_LEVELS[level].llvm)
    return obj if stage == "obj" else text


def build_so(
    compiled: Compiled,
    output: Path,
    cpu: str,
    timings: Timings | None = None,
    level: int = 2,
    gpu: str | None = None,
    tf32: bool = False,
    fast_math: bool = False,
) -> BuildResult:
    """Builds the shipped library (with CUDA kernels for `gpu` when given); each
    code-generation step is named to timings as it begins and its time added after the
    frontend's; `fast_math` as --fast-math. compiled.module is left as it was; the result
    holds the scheduled module."""
    timings = timings if timings is not None else Timings()
    llvm_level = OPT_LEVELS[level].llvm
    target = Target(cpu, llvm_level, cuda=gpu is not None, gpu=gpu or DEFAULT_GPU, tf32=tf32,
                    fast_math=fast_math)  # fmt: skip
    build = LibraryBuild(compiled.module, compiled.spec, Path(output), target, timings.started)
    result = build.run()
    timings.stages.extend(result.timings)
    return result


def describe(module: Module, spec: LibrarySpec | None) -> dict[str, Any]:
    """What `--verbose` says about generated code: the number of kernels, each host function's
    frame size in bytes (once scheduled), and the library's entry points and parameters."""
    report: dict[str, Any] = {"kernels": sum(1 for f in module.functions if f.compute)}
    if module.stage == "schedule":
        hosts = [f for f in module.functions if not f.compute and f.blocks and not f.is_declaration]
        report["frames"] = {f.name: FramePlan(f).size for f in hosts}
    if spec is not None:
        report["entries"] = [
            f"{e.name}({_tensors(e.inputs)}) -> {_tensors(e.outputs) or '()'}  [{e.kind}]"
            for e in spec.entries
        ]
        report["params"] = [_tensor(p) for p in spec.params]
    return report


def _tensor(t: TensorSpec) -> str:
    return f"{t.name}: {t.dtype}[{' x '.join(map(str, t.shape))}]"


def _tensors(ts: tuple[TensorSpec, ...]) -> str:
    return ", ".join(_tensor(t) for t in ts)
