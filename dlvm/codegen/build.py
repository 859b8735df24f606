"""From a module at stage optimizable to a shipped library (DESIGN.md section 5): compute
generation and scheduling, LLGen to an object, the generated C glue, the runtime, linked by the
system C compiler into NAME.so next to NAME.h and dlrt.h. Each step is timed for `--verbose`."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dlvm.codegen.glue import glue_source, header_source
from dlvm.codegen.llgen import compile_object
from dlvm.codegen.spec import LibrarySpec
from dlvm.ir.values import Module
from dlvm.runtime import build_runtime, runtime_dir
from dlvm.transforms.compute_generation import ComputeGeneration
from dlvm.transforms.compute_scheduling import ComputeScheduling


class BuildError(Exception):
    """The C compiler or linker failed; the message carries its output."""


@dataclass
class BuildResult:
    library: Path
    header: Path
    timings: list[tuple[str, float]] = field(default_factory=list)
    llvm_ir: str = ""


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

    def step(name: str, work: Callable[[], object]) -> object:
        if progress:
            progress(name)
        t0 = time.perf_counter()
        result = work()
        timings.append((name, time.perf_counter() - t0))
        return result

    if module.stage != "schedule":
        step("compute stages", lambda: schedule(module))
    compiled: tuple[bytes, str] = step("llvm", lambda: compile_object(module, cpu=cpu, opt=opt))  # type: ignore[assignment]
    obj, llvm_ir = compiled
    runtime_objects = step("runtime", lambda: build_runtime(compiler))
    header = output.with_suffix(".h")
    with tempfile.TemporaryDirectory(prefix="dlvm-build-") as tmp:
        work = Path(tmp)
        (work / "model.o").write_bytes(obj)
        (work / "glue.c").write_text(glue_source(spec), encoding="utf-8")
        include = runtime_dir() / "include"
        glue_o = work / "glue.o"
        step("glue", lambda: _run([compiler, "-std=c11", "-O2", "-fPIC", "-fvisibility=hidden",
                                    f"-I{include}", f"-ffile-prefix-map={work}=.",
                                    "-c", "glue.c", "-o", str(glue_o)], work))  # fmt: skip
        tmp_lib = work / output.name
        step("link", lambda: _run([compiler, "-shared", "-o", str(tmp_lib), str(glue_o),
                                    str(work / "model.o"), *map(str, runtime_objects),  # type: ignore[call-overload]
                                    "-lm", "-pthread", "-ldl", f"-Wl,-soname,{output.name}",
                                    "-Wl,--build-id=none"], work))  # fmt: skip
        output.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tmp_lib, output)
    header.write_text(header_source(spec), encoding="utf-8")
    shutil.copyfile(include / "dlrt.h", output.parent / "dlrt.h")
    return BuildResult(output, header, timings, llvm_ir)


def _run(cmd: list[str], cwd: Path) -> None:
    try:
        done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    except FileNotFoundError as e:
        raise BuildError(f"cannot run the C compiler '{cmd[0]}': {e.strerror}") from None
    if done.returncode != 0:
        raise BuildError(f"{' '.join(cmd[:2])} … failed:\n{done.stderr.strip()}")
