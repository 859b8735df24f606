"""From a module at stage optimizable to a shipped library (DESIGN.md section 5): compute
generation and scheduling, LLGen to objects (in parts, side by side), the generated C glue
(compiled meanwhile), the runtime, linked by the system C compiler into NAME.so next to NAME.h
and dlrt.h. Each step is timed, and named to `progress` as it begins (telc build's progress
display)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from dlvm.analysis.call_graph import CallGraph
from dlvm.codegen.cuda import ptx, ptx_object
from dlvm.codegen.glue import glue_source, header_source
from dlvm.codegen.glue_cuda import cuda_glue
from dlvm.codegen.gpus import DEFAULT_GPU
from dlvm.codegen.llgen import object_files
from dlvm.codegen.spec import LibrarySpec
from dlvm.codegen.target import vector_bits
from dlvm.diagnostics import BuildFailure
from dlvm.ir.values import Function, Module
from dlvm.runtime import build_runtime, runtime_dir
from dlvm.transforms.compute_generation import ComputeGeneration
from dlvm.transforms.compute_scheduling import ComputeScheduling

T = TypeVar("T")


class BuildError(BuildFailure):
    """The C compiler or linker failed, or an output cannot be written; the message says why."""


@dataclass
class BuildResult:
    library: Path
    header: Path
    timings: list[tuple[str, float]] = field(default_factory=list)


def keep_reachable(module: Module, roots: set[str]) -> None:
    """Drops the functions no root reaches: library functions every caller has inlined, which
    would otherwise become kernels and code nobody calls."""
    graph = CallGraph(module)
    seen: set[Function] = set()
    work = [f for f in module.functions if f.name in roots]
    while work:
        f = work.pop()
        if f in seen:
            continue
        seen.add(f)
        work += graph.callees[f]
        if f.gradient is not None:
            work.append(f.gradient.of)  # named by the gradient declaration line
    for f in [f for f in module.functions if f not in seen]:
        module.remove_function(f)


def schedule(module: Module, cpu: str = "native", cuda: bool = False, tf32: bool = False) -> Module:
    """compute-generation then compute-scheduling for `cpu`'s vector width (and for CUDA as
    well with `cuda`, f32 products in TF32 with `tf32`): the module ends at stage schedule."""
    ComputeGeneration().run(module)
    ComputeScheduling(vector_bits(cpu), cuda, tf32).run(module)
    return module


def build_library(
    module: Module,
    spec: LibrarySpec,
    output: Path,
    cpu: str = "native",
    opt: int = 3,
    cc: str | None = None,
    progress: Callable[[str], None] | None = None,
    cuda: bool = False,
    gpu: str = DEFAULT_GPU,
    tf32: bool = False,
    quick_link: bool = False,
) -> BuildResult:
    """Writes output (the .so), output with suffix .h, and dlrt.h beside them. With `cuda`, the
    library also holds the kernels as PTX for `gpu` and runs models created on "cuda:N" (f32
    products in TF32 on tensor cores with `tf32`). `quick_link` links with gold where it is
    installed (a third faster than the default linker), for a library this process alone
    loads (NNKit's first tier): a shipped library must not depend on what links it."""
    output = Path(output)
    compiler = cc or os.environ.get("CC", "cc")
    timings: list[tuple[str, float]] = []

    def step(name: str, work: Callable[[], T]) -> T:
        if progress:
            progress(name)
        t0 = time.perf_counter()
        result = work()
        timings.append((name, time.perf_counter() - t0))
        return result

    glue, header_text = glue_source(spec), header_source(spec)  # a bad spec fails first
    roots = {e.host for e in spec.entries} | ({spec.init} if spec.init else set())
    keep_reachable(module, roots)
    if module.stage != "schedule":
        step("compute stages", lambda: schedule(module, cpu, cuda, tf32))
    extra: list[bytes] = []
    if cuda:
        text, launches = step("ptx", lambda: ptx(module, gpu, opt))
        kernels = cuda_glue(module, spec, launches, gpu)
        glue, header_text = glue_source(spec, kernels), header_source(spec, kernels)
        extra.append(ptx_object(text, cpu))
    include = runtime_dir() / "include"
    header = output.with_suffix(".h")
    with tempfile.TemporaryDirectory(prefix="dlvm-build-") as tmp:
        work = Path(tmp)
        (work / "glue.c").write_text(glue, encoding="utf-8")
        # -O1: the glue checks arguments and calls the model; it has no loop worth more. At
        # LLVM level 1 and below, -O0: the C compiler then finishes no later than LLVM.
        glue_opt = "-O1" if opt > 1 else "-O0"
        compile_glue = [compiler, "-std=c11", glue_opt, "-fPIC", "-fvisibility=hidden",
                        f"-I{include}", f"-ffile-prefix-map={work}=.", "-c", "glue.c",
                        "-o", "glue.o"]  # fmt: skip
        with _Background(compile_glue, work) as glue_job:  # the C compiler runs beside LLVM
            objects = step("llvm", lambda: object_files(module, cpu=cpu, opt=opt))
            runtime_objects = step("runtime", lambda: build_runtime(compiler))
            step("glue", glue_job.wait)
        objects += extra
        models = [f"model{i}.o" for i in range(len(objects))]
        for name, obj in zip(models, objects):
            (work / name).write_bytes(obj)
        link = [compiler, "-shared", "-o", output.name, "glue.o", *models,
                *map(str, runtime_objects), "-lm", "-pthread", "-ldl",
                f"-Wl,-soname,{output.name}", "-Wl,--build-id=none"]  # fmt: skip
        if quick_link and shutil.which("ld.gold"):
            link.insert(1, "-fuse-ld=gold")
        step("link", lambda: _run(link, work))

        def write() -> None:
            try:
                output.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(work / output.name, output)
                header.write_text(header_text, encoding="utf-8")
                shutil.copyfile(include / "dlrt.h", output.parent / "dlrt.h")
            except OSError as e:
                raise BuildError(f"cannot write {e.filename or output}: {e.strerror}") from None

        step("write", write)
    return BuildResult(output, header, timings)


def _run(cmd: list[str], cwd: Path) -> None:
    with _Background(cmd, cwd) as job:
        job.wait()


class _Background:
    """A C compiler command running while Python goes on; `wait` raises BuildError if it
    failed. Leaving the block without waiting stops it."""

    def __init__(self, cmd: list[str], cwd: Path) -> None:
        self.cmd = cmd
        try:
            self.process = subprocess.Popen(
                cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        except OSError as e:
            raise BuildError(f"cannot run the C compiler '{cmd[0]}': {e.strerror}") from None
        self.stderr: str | None = None

    def wait(self) -> None:
        if self.stderr is None:
            self.stderr = self.process.communicate()[1]
        if self.process.returncode != 0:
            raise BuildError(f"{' '.join(self.cmd[:2])} … failed:\n{self.stderr.strip()}")

    def __enter__(self) -> _Background:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.stderr is None:  # left early: a step before it failed
            self.process.kill()
            self.stderr = self.process.communicate()[1]
