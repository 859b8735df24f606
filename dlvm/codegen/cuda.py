"""CUDA code generation (docs/architecture.md, "Adding a target"): the `[compute]` functions of a
module scheduled for CUDA as one NVPTX module (`nvptx64-nvidia-cuda`), linked with libdevice where a
kernel calls NVIDIA's math functions, optimised and emitted as PTX text for one GPU architecture.

Each kernel is a PTX entry `dlk_<name>(ptr in…, ptr out)` taking device pointers to its inputs
and its output, launched with its `[schedule cuda …]` line's grid and block
(dlvm.codegen.cuda_kernel). No part of the CUDA toolkit is needed to generate PTX: libdevice
comes from the `nvidia-cuda-nvcc-cu12` wheel (the `cuda` extra), and only kernels that call a
libdevice function need it."""

from __future__ import annotations

import functools
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import llvmlite.binding as llvm
from llvmlite import ir

from dlvm.codegen.cuda_kernel import CudaKernelGen
from dlvm.codegen.errors import CodegenError
from dlvm.codegen.gpus import DEFAULT_GPU, GPUS
from dlvm.codegen.nvptx import kernel_symbol
from dlvm.ir.schedule import Schedule
from dlvm.ir.values import Function, Module

TRIPLE = "nvptx64-nvidia-cuda"


@dataclass(frozen=True)
class Launch:
    """How the runtime launches one kernel: its PTX entry, grid and block (x, y, z), and the
    number of pointers it takes (inputs, then the output)."""

    symbol: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    pointers: int


def launch(fn: Function) -> Launch:
    """The launch of a [compute] function from its cuda schedule."""
    sched = fn.cuda_schedule
    if sched is None:
        raise CodegenError(f"@{fn.name} has no cuda schedule (schedule with cuda=True)")
    return Launch(
        kernel_symbol(fn),
        _xyz(sched, "grid"),
        _xyz(sched, "block"),
        len(fn.arguments) + 1,
    )


def _xyz(sched: Schedule, key: str) -> tuple[int, int, int]:
    value = sched.get_all(key) or (1,)
    if len(value) > 3 or min(value) < 1:
        raise CodegenError(f"bad '{key}' in {sched}: 1 to 3 positive numbers")
    x, y, z = (*value, 1, 1)[:3]
    return (x, y, z)


def device_module(module: Module) -> tuple[ir.Module, list[Launch]]:
    """The LLVM module of every [compute] function of a module scheduled for CUDA, and their
    launches in module order."""
    if module.stage != "schedule":
        raise CodegenError(f"code generation needs stage schedule, found stage {module.stage}")
    m = ir.Module(name=module.name + ".cuda")
    m.triple = TRIPLE
    launches = []
    for fn in module.functions:
        if fn.compute and fn.blocks:
            CudaKernelGen(m, fn).emit()
            launches.append(launch(fn))
    return m, launches


@functools.cache
def _initialise() -> None:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


def target_machine(gpu: str = DEFAULT_GPU, opt: int = 3) -> llvm.TargetMachine:
    if gpu not in GPUS:
        raise CodegenError(f"unknown GPU architecture '{gpu}' (known: {', '.join(GPUS)})")
    _initialise()
    return llvm.Target.from_triple(TRIPLE).create_target_machine(cpu=gpu, opt=opt)


def libdevice_path() -> Path:
    """libdevice.10.bc from the nvidia-cuda-nvcc-cu12 wheel, else from a CUDA toolkit
    ($CUDA_HOME, /usr/local/cuda); CodegenError when there is none."""
    try:
        import nvidia.cuda_nvcc  # type: ignore[import-not-found,import-untyped]

        roots = [Path(p) for p in nvidia.cuda_nvcc.__path__]
    except ImportError:
        roots = []
    roots += [Path(p) for p in (os.environ.get("CUDA_HOME"), "/usr/local/cuda") if p]
    for root in roots:
        path = root / "nvvm" / "libdevice" / "libdevice.10.bc"
        if path.is_file():
            return path
    raise CodegenError(
        "a kernel calls a math function from libdevice, which is not installed: "
        "pip install nvidia-cuda-nvcc-cu12 (or this project's `cuda` extra)"
    )


@functools.cache
def _libdevice_bitcode() -> bytes:
    return libdevice_path().read_bytes()


def ptx(module: Module, gpu: str = DEFAULT_GPU, opt: int = 3) -> tuple[str, list[Launch]]:
    """The PTX text of a module scheduled for CUDA, and its kernels' launches."""
    m, launches = device_module(module)
    tm = target_machine(gpu, opt)
    mod = llvm.parse_assembly(str(m))
    mod.verify()
    mod.data_layout = str(tm.target_data)
    if any(f.is_declaration and f.name.startswith("__nv_") for f in mod.functions):
        lib = llvm.parse_bitcode(_libdevice_bitcode())
        lib.triple = TRIPLE
        lib.data_layout = mod.data_layout
        mod.link_in(lib)
    # Only the kernels are entry points: everything else may be inlined and dropped (libdevice
    # alone is 700 KB of PTX when kept whole).
    entries = {launch.symbol for launch in launches}
    for f in mod.functions:
        if not f.is_declaration and f.name not in entries:
            f.linkage = llvm.Linkage.internal
    for g in mod.global_variables:
        if not g.is_declaration:
            g.linkage = llvm.Linkage.internal
    if opt > 0:
        pto = llvm.create_pipeline_tuning_options(speed_level=opt)
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(mod, pb)
    return str(tm.emit_assembly(mod)), launches


def ptxas_path() -> Path | None:
    """ptxas from the nvidia-cuda-nvcc-cu12 wheel, or None when it is not installed."""
    try:
        import nvidia.cuda_nvcc  # type: ignore[import-not-found,import-untyped]
    except ImportError:
        return None
    for root in nvidia.cuda_nvcc.__path__:
        path = Path(root) / "bin" / "ptxas"
        if path.is_file():
            return path
    return None


def check_ptx(text: str, gpu: str = DEFAULT_GPU) -> str:
    """Assembles PTX with ptxas for `gpu` (nothing is kept) and returns what ptxas reports of
    each kernel (registers, shared memory, spills); CodegenError with ptxas's messages when it
    rejects the PTX or is not installed."""
    exe = ptxas_path()
    if exe is None:
        raise CodegenError("ptxas is not installed: pip install nvidia-cuda-nvcc-cu12")
    with tempfile.TemporaryDirectory(prefix="dlvm-ptxas-") as tmp:
        source = Path(tmp) / "kernels.ptx"
        source.write_text(text, encoding="utf-8")
        done = subprocess.run(
            [str(exe), f"-arch={gpu}", "-v", str(source), "-o", str(Path(tmp) / "kernels.cubin")],
            capture_output=True,
            text=True,
        )
    if done.returncode != 0:
        raise CodegenError(f"ptxas rejected the PTX:\n{done.stderr.strip()}")
    return done.stderr


def ptx_object(text: str, cpu: str = "native") -> bytes:
    """An object file for the host holding the PTX as `dl_cuda_ptx`, a NUL-terminated string
    (hidden: only the library's glue reads it)."""
    from dlvm.codegen.llgen import TRIPLE as HOST_TRIPLE
    from dlvm.codegen.llgen import target_machine as host_machine

    data = text.encode("utf-8") + b"\0"
    m = ir.Module(name="ptx")
    m.triple = HOST_TRIPLE
    ty = ir.ArrayType(ir.IntType(8), len(data))
    g = ir.GlobalVariable(m, ty, "dl_cuda_ptx")
    g.initializer = ir.Constant(ty, bytearray(data))
    g.global_constant = True
    g.visibility = "hidden"
    tm = host_machine(cpu, 0)
    mod = llvm.parse_assembly(str(m))
    mod.data_layout = str(tm.target_data)
    return tm.emit_object(mod)
