"""Runs generated CUDA kernels on the CPU, so that their indexing, tiling, barriers and bounds
are checked against the interpreter where no GPU is.

The NVPTX module of dlvm.codegen.cuda is compiled for the host instead, its NVVM intrinsics
renamed to the functions of cuda_emulator.c (special registers as thread-locals, a pthread
barrier) and its libdevice calls to the C math library's functions of the same names; each
launch runs a block at a time, one POSIX thread per CUDA thread. `EmulatedInterpreter` is the
interpreter with every [compute] function run this way: host code interpreted, kernels
"on the GPU". What this cannot check is NVPTX code generation itself (ptxas does that) and
libdevice's accuracy (NVIDIA's)."""

from __future__ import annotations

import ctypes
import re
import subprocess
from pathlib import Path

import llvmlite.binding as llvm
import ml_dtypes
import numpy as np

from dlvm.codegen.cuda import Launch, device_module
from dlvm.codegen.cuda_matmul import tiled
from dlvm.codegen.llgen import optimise, target_machine
from dlvm.interp.interpreter import Interpreter
from dlvm.ir.types import TensorType
from dlvm.ir.values import Function, Module

SOURCE = Path(__file__).with_name("cuda_emulator.c")
NP = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32, "f64": np.float64,
      "bool": np.bool_, "i8": np.int8, "i16": np.int16, "i32": np.int32,
      "i64": np.int64}  # fmt: skip


def host_text(device_ir: str) -> str:
    """The kernels' LLVM IR with the GPU-only parts replaced by calls into the emulator."""
    text = device_ir.replace('target triple = "nvptx64-nvidia-cuda"', "")
    text = re.sub(r'@"llvm\.nvvm\.read\.ptx\.sreg\.(\w+)\.([xyz])"', r'@"dlemu_\1_\2"', text)
    text = text.replace('@"llvm.nvvm.barrier0"', '@"dlemu_barrier0"')
    text = re.sub(r'@"llvm\.nvvm\.shfl\.sync\.down\.(f32|i32)"', r'@"dlemu_shfl_down_\1"', text)
    text = re.sub(r'@"__nv_(\w+)"', r'@"\1"', text)
    # The tensor-core product (dlvm.codegen.cuda_mma) is the emulator's, not the intrinsic's.
    for shape, ours in (("m16n8k16", "dlemu_mma_m16n8k16"), ("m16n8k16.bf16", "dlemu_mma_bf16"),
                        ("m16n8k8.tf32", "dlemu_mma_tf32")):  # fmt: skip
        text = re.sub(rf'define internal void @"dl\.mma\.{re.escape(shape)}"\(.*?\n\}}\n',
                      f'declare void @"{ours}"(ptr, i32, i32, i32, i32, i32, i32)\n',
                      text, flags=re.S)  # fmt: skip
        text = text.replace(f'@"dl.mma.{shape}"', f'@"{ours}"')
    text = text.replace('@"llvm.nvvm.f2tf32.rna"', '@"dlemu_f2tf32_rna"')
    return text.replace("ptx_kernel ", "")


class Emulator:
    """The kernels of a module scheduled for CUDA, compiled for the CPU into `workdir`.
    `max_grid` caps the blocks of a grid-stride launch (any grid computes the same result;
    fewer blocks make each thread loop, and keep the thread count small)."""

    def __init__(self, module: Module, workdir: Path, max_grid: int = 3) -> None:
        device, launches = device_module(module)
        self.launches: dict[str, Launch] = {launch.symbol: launch for launch in launches}
        tm = target_machine("native", 1)
        mod = llvm.parse_assembly(host_text(str(device)))
        mod.verify()
        mod.data_layout = str(tm.target_data)
        optimise(mod, tm, 1)
        workdir.mkdir(parents=True, exist_ok=True)
        obj = workdir / "kernels.o"
        obj.write_bytes(tm.emit_object(mod))
        lib = workdir / "kernels.so"
        subprocess.run(["cc", "-shared", "-fPIC", "-O1", str(SOURCE), str(obj), "-o", str(lib),
                        "-lm", "-pthread"], check=True)  # fmt: skip
        self.lib = ctypes.CDLL(str(lib))
        self.max_grid = max_grid
        self.launched: list[tuple[str, tuple[int, int, int]]] = []

    def run(self, fn: Function, args: list) -> np.ndarray:
        """fn's result for args (NumPy arrays or scalars), computed by its kernel."""
        from dlvm.codegen.nvptx import kernel_symbol

        launch = self.launches[kernel_symbol(fn)]
        inputs = [
            np.ascontiguousarray(np.asarray(a, dtype=NP[_tensor(p.type).dtype.text]))
            for a, p in zip(args, fn.arguments)
        ]
        result = _tensor(fn.type.result)  # type: ignore[attr-defined]
        out = np.zeros(result.shape, dtype=NP[result.dtype.text])
        # Nonzero bytes, so that an element the kernel fails to write shows.
        out.reshape(-1).view(np.uint8)[...] = 0xA5
        grid = (min(launch.grid[0], self.max_grid), 1, 1)
        if tiled(fn):  # a block per tile: the grid is the work
            grid = launch.grid
        pointers = (ctypes.c_void_p * launch.pointers)(*[a.ctypes.data for a in [*inputs, out]])
        status = self.lib.dlemu_launch(
            ctypes.cast(getattr(self.lib, launch.symbol), ctypes.c_void_p),
            (ctypes.c_uint * 3)(*grid),
            (ctypes.c_uint * 3)(*launch.block),
            launch.pointers,
            pointers,
        )
        assert status == 0, f"the emulator could not launch {launch.symbol}"
        self.launched.append((launch.symbol, grid))
        return out


def _tensor(t: object) -> TensorType:
    assert isinstance(t, TensorType), t
    return t


class EmulatedInterpreter(Interpreter):
    """The interpreter, with [compute] functions run by the emulator's kernels."""

    def __init__(self, module: Module, emulator: Emulator, **options) -> None:
        super().__init__(module, **options)
        self.emulator = emulator

    def call(self, fn: Function, args: list):
        if fn.compute:
            return self.emulator.run(fn, args)
        return super().call(fn, args)
