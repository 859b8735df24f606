"""From a module at stage optimizable to a shipped library (DESIGN.md section 5): compute
generation and scheduling, LLGen to an object, the generated C glue, the runtime, linked by the
system C compiler into NAME.so next to NAME.h and dlrt.h. Each step is timed, and named to
`progress` as it begins (telc build's progress display)."""

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
from dlvm.codegen.glue import glue_source, header_source
from dlvm.codegen.llgen import compile_object
from dlvm.codegen.spec import LibrarySpec
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
    llvm_ir: str = ""


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


def schedule(module: Module) -> Module:
    """compute-generation then compute-scheduling: the module ends at stage schedule."""
    ComputeGeneration().run(module)
    ComputeScheduling().run(module)
    return module


def build_library(
    module: Module,
    spec: LibrarySpec,
    output: Path,
    cpu: str = "native",
    opt: int = 3,
    cc: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> BuildResult:
    """Writes output (the .so), output with suffix .h, and dlrt.h beside them."""
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
        step("compute stages", lambda: schedule(module))
    obj, llvm_ir = step("llvm", lambda: compile_object(module, cpu=cpu, opt=opt))
    runtime_objects = step("runtime", lambda: build_runtime(compiler))
    include = runtime_dir() / "include"
    header = output.with_suffix(".h")
    with tempfile.TemporaryDirectory(prefix="dlvm-build-") as tmp:
        work = Path(tmp)
        (work / "model.o").write_bytes(obj)
        (work / "glue.c").write_text(glue, encoding="utf-8")
        compile_glue = [compiler, "-std=c11", "-O2", "-fPIC", "-fvisibility=hidden",
                        f"-I{include}", f"-ffile-prefix-map={work}=.", "-c", "glue.c",
                        "-o", "glue.o"]  # fmt: skip
        step("glue", lambda: _run(compile_glue, work))
        link = [compiler, "-shared", "-o", output.name, "glue.o", "model.o",
                *map(str, runtime_objects), "-lm", "-pthread", "-ldl",
                f"-Wl,-soname,{output.name}", "-Wl,--build-id=none"]  # fmt: skip
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
    return BuildResult(output, header, timings, llvm_ir)


def _run(cmd: list[str], cwd: Path) -> None:
    try:
        done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    except FileNotFoundError as e:
        raise BuildError(f"cannot run the C compiler '{cmd[0]}': {e.strerror}") from None
    if done.returncode != 0:
        raise BuildError(f"{' '.join(cmd[:2])} … failed:\n{done.stderr.strip()}")
