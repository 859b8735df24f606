"""From a module at stage optimizable to a shipped library (docs/c-abi.md), as one build of
explicit stages, each computed once: the spec checked, the module pruned and scheduled (compute
generation and scheduling, on the build's own copy), the CUDA kernels and plans, the generated
C glue and header, LLVM to objects (in parts, side by side, while the C compiler compiles the
glue), the runtime, linked by the system C compiler into NAME.so next to NAME.h and dlrt.h.
Each step is timed, and named to `progress` as it begins (telc build's progress display)."""

from __future__ import annotations

import copy
import functools
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from dlvm.analysis.call_graph import CallGraph
from dlvm.c_compiler import c_compiler
from dlvm.codegen.bf16_products import kernel_takes, products_in_f32
from dlvm.codegen.cuda import ptx, ptx_object
from dlvm.codegen.glue import check_spec, glue_source, header_source
from dlvm.codegen.glue_cuda import CudaGlue, cuda_glue
from dlvm.codegen.gpus import DEFAULT_GPU
from dlvm.codegen.llgen import object_files
from dlvm.codegen.spec import LibrarySpec
from dlvm.codegen.target import has_avx512bf16, has_vnni, vector_bits
from dlvm.diagnostics import BuildFailure
from dlvm.ir.values import Function, Instruction, Module
from dlvm.library_check import write_library
from dlvm.runtime import build_runtime, runtime_dir
from dlvm.transforms.compute_generation import ComputeGeneration
from dlvm.transforms.compute_scheduling import ComputeScheduling, on_tensor_cores

T = TypeVar("T")


class BuildError(BuildFailure):
    """The C compiler or linker failed, or an output cannot be written; the message says why."""


@dataclass
class BuildResult:
    """What a build wrote, its steps' times, and the module it compiled (the build's
    scheduled copy: its kernels and frames are what --verbose reports)."""

    library: Path
    header: Path
    module: Module
    timings: list[tuple[str, float]] = field(default_factory=list)


def unreachable(module: Module, roots: set[str]) -> list[Function]:
    """The functions no root reaches: library functions every caller has inlined, which would
    otherwise become kernels and code nobody calls."""
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
    return [f for f in module.functions if f not in seen]


def keep_reachable(module: Module, roots: set[str]) -> None:
    """Drops the functions no root reaches (unreachable)."""
    for f in unreachable(module, roots):
        module.remove_function(f)


def schedule(
    module: Module,
    cpu: str = "native",
    cuda: bool = False,
    tf32: bool = False,
    fast_math: bool = False,
) -> Module:
    """compute-generation then compute-scheduling for `cpu`'s vector width (and for CUDA as
    well with `cuda`, f32 products in TF32 with `tf32`; the CPU kernels' f32 exp, tanh and log
    in fast math with `fast_math`): the module ends at stage schedule. bf16 products the CPU
    kernels do not take in bf16 are taken in f32 first (dlvm.codegen.bf16_products); those they
    take go in pairs through `vdpbf16ps` where `cpu` has AVX-512 BF16. With `cuda`, only those
    that also run on tensor cores stay bf16 (the GPU's other product kernels sum as they go).
    `--quantize int8`'s products are scheduled `vnni 1` where the CPU has AVX-512 VNNI
    (dlvm.codegen.matmul_int8)."""

    def keep(inst: Instruction) -> bool:
        return kernel_takes(inst) and (not cuda or on_tensor_cores(inst, tf32))

    products_in_f32(module, keep)
    ComputeGeneration().run(module)
    ComputeScheduling(
        vector_bits(cpu), cuda, tf32, fast_math, has_avx512bf16(cpu), has_vnni(cpu)
    ).run(module)
    return module


@dataclass(frozen=True)
class Target:
    """What a library is built for: the CPU (`cpu`, LLVM level `opt`, the C compiler command
    `cc`, default $CC, split into words as a shell would: dlvm.c_compiler), and with `cuda`
    the GPU architecture `gpu` as well (f32 products in TF32 on tensor cores with `tf32`);
    `fast_math`: the CPU kernels' f32 exp, tanh and log by dlvm.codegen.fast_math.
    `quick_link` links with gold where it is installed (a third faster than the default
    linker), for a library this process alone loads (NNKit's first tier): a shipped library
    must not depend on what links it."""

    cpu: str = "native"
    opt: int = 3
    cc: str | None = None
    cuda: bool = False
    gpu: str = DEFAULT_GPU
    tf32: bool = False
    quick_link: bool = False
    fast_math: bool = False


@dataclass(frozen=True)
class Device:
    """The CUDA half of a library: its kernels as PTX, and each entry's device plan."""

    ptx: str
    kernels: CudaGlue


@dataclass(frozen=True)
class Sources:
    """The generated C of a library: its glue and its public header."""

    glue: str
    header: str


class LibraryBuild:
    """One library build. Its stages are properties, each computed once, when first asked for
    (a stage asks for those it needs): `module` (pruned and scheduled), `device` (CUDA),
    `sources` (glue and header); `run()` then compiles and links. The spec is checked first,
    so that a description the C ABI cannot express fails before any work. The caller's module
    is never changed: the build works on a copy, made once, and only when the module needs
    pruning or scheduling."""

    def __init__(
        self,
        module: Module,
        spec: LibrarySpec,
        output: Path,
        target: Target = Target(),
        progress: Callable[[str], None] | None = None,
    ) -> None:
        check_spec(spec)
        self.given = module
        self.spec = spec
        self.output = Path(output)
        self.target = target
        self.progress = progress
        self.timings: list[tuple[str, float]] = []

    def step(self, name: str, work: Callable[[], T]) -> T:
        """`work()`, named to progress as it begins and timed as step `name`."""
        if self.progress:
            self.progress(name)
        t0 = time.perf_counter()
        result = work()
        self.timings.append((name, time.perf_counter() - t0))
        return result

    @functools.cached_property
    def module(self) -> Module:
        """The module with only what the entries reach, at stage schedule: the given one when
        it is already that, else a copy."""
        spec = self.spec
        roots = {e.host for e in spec.every_entry()} | ({spec.init} if spec.init else set())
        roots |= {spec.derive} if spec.derive else set()
        given = self.given
        if given.stage == "schedule" and not unreachable(given, roots):
            return given

        def prepare() -> Module:
            module = copy.deepcopy(given)
            keep_reachable(module, roots)
            if module.stage != "schedule":
                target = self.target
                schedule(module, target.cpu, target.cuda, target.tf32, target.fast_math)
            return module

        return self.step("compute stages", prepare)

    @functools.cached_property
    def device(self) -> Device | None:
        """The kernels as PTX and each entry's device plan (None without CUDA)."""
        target = self.target
        if not target.cuda:
            return None
        module = self.module
        text, launches = self.step("ptx", lambda: ptx(module, target.gpu, target.opt))
        return Device(text, cuda_glue(module, self.spec, launches, target.gpu))

    @functools.cached_property
    def sources(self) -> Sources:
        """The C glue and the header NAME.h."""
        kernels = self.device.kernels if self.device is not None else None
        return Sources(glue_source(self.spec, kernels), header_source(self.spec, kernels))

    def run(self) -> BuildResult:
        """Writes output (the .so) and its digest output.sha256 (dlvm.library_check), output
        with suffix .h, and dlrt.h beside them."""
        target, output, module = self.target, self.output, self.module
        try:
            compiler = c_compiler(target.cc)
        except ValueError as e:
            raise BuildError(str(e)) from None
        extra = [ptx_object(self.device.ptx, target.cpu)] if self.device is not None else []
        sources = self.sources
        include = runtime_dir() / "include"
        header = output.with_suffix(".h")
        with tempfile.TemporaryDirectory(prefix="dlvm-build-") as tmp:
            work = Path(tmp)
            (work / "glue.c").write_text(sources.glue, encoding="utf-8")
            # -O1: the glue is tables and calls; it has no loop worth more. At LLVM level 1 and
            # below, -O0: the C compiler then finishes no later than LLVM.
            glue_opt = "-O1" if target.opt > 1 else "-O0"
            compile_glue = [*compiler, "-std=c11", glue_opt, "-fPIC", "-fvisibility=hidden",
                            f"-I{include}", f"-ffile-prefix-map={work}=.", "-c", "glue.c",
                            "-o", "glue.o"]  # fmt: skip
            with _Background(compile_glue, work) as glue_job:  # the C compiler runs beside LLVM
                objects = self.step("llvm", lambda: object_files(module, target.cpu, target.opt))
                runtime_objects = self.step("runtime", lambda: build_runtime(shlex.join(compiler)))
                self.step("glue", glue_job.wait)
            objects += extra
            models = [f"model{i}.o" for i in range(len(objects))]
            for name, obj in zip(models, objects):
                (work / name).write_bytes(obj)
            link = [*compiler, "-shared", "-o", output.name, "glue.o", *models,
                    *map(str, runtime_objects), "-lm", "-pthread", "-ldl",
                    f"-Wl,-soname,{output.name}", "-Wl,--build-id=none"]  # fmt: skip
            if target.quick_link and shutil.which("ld.gold"):
                link.insert(len(compiler), "-fuse-ld=gold")
            self.step("link", lambda: _run(link, work))

            def write() -> None:
                try:
                    output.parent.mkdir(parents=True, exist_ok=True)
                    write_library(output, (work / output.name).read_bytes())  # and its digest
                    header.write_text(sources.header, encoding="utf-8")
                    shutil.copyfile(include / "dlrt.h", output.parent / "dlrt.h")
                except OSError as e:
                    raise BuildError(f"cannot write {e.filename or output}: {e.strerror}") from None

            self.step("write", write)
        return BuildResult(output, header, module, self.timings)


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
    fast_math: bool = False,
) -> BuildResult:
    """Writes output (the .so), output with suffix .h, and dlrt.h beside them (a LibraryBuild
    for Target(cpu, opt, cc, cuda, gpu, tf32, quick_link, fast_math)); `module` is left as it
    was."""
    target = Target(cpu, opt, cc, cuda, gpu, tf32, quick_link, fast_math)
    return LibraryBuild(module, spec, output, target, progress).run()


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
