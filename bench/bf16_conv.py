"""A bf16 convolution against f32 on this CPU (issue 28): a ResNet-like 3×3 convolution (64 → 64
channels, 56×56, batch 8, padding 1) with a bias and relu, built in float32, in bfloat16 (the
product of dlvm.codegen.conv_bf16) and in bfloat16 the way it was computed before that module
(`rewrite`: operands cast to f32, an f32 convolution, rounded once; dlvm.codegen.bf16_products
made to keep no convolution for that build). Timed in one process on one thread (run with
DLRT_NUM_THREADS=1), in CPU seconds (time.process_time: the host is shared), interleaved block
by block; the median of the blocks. With --kernel-gradient, that convolution's kernel gradient
instead, as the train step's adjoint makes it (dlvm.codegen.conv_kernel_grad: the input [C, N,
H, H] and the output's gradient [O, N, H, H] with batch and channels exchanged, padding 1, into
[C, O, 3, 3]), with no epilogue.

    DLRT_NUM_THREADS=1 python bench/bf16_conv.py [--cpu skylake-avx512] [--blocks 7]
    [--shape N C O H] [--kernel-gradient]"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

BF16 = np.dtype(ml_dtypes.bfloat16)


def ty(shape: tuple[int, ...], dt: str) -> str:
    return "<" + " x ".join(map(str, shape)) + f" x {dt}>"


def module_text(n: int, c: int, o: int, h: int, dt: str) -> str:
    x, k, b = ty((n, c, h, h), dt), ty((o, c, 3, 3), dt), ty((1, o, 1, 1), dt)
    r = ty((n, o, h, h), dt)
    return (f'module "conv"\nstage optimizable\n\nfunc @f: ({x}, {k}, {b}) -> {r} {{\n'
            f"'entry(%x: {x}, %k: {k}, %b: {b}):\n"
            f"    %c = convolve %x: {x} kernel %k: {k} padding (1, 1), (1, 1)\n"
            f"    %s = add %c: {r}, %b: {b}\n    %r = max %s: {r}, 0: {dt}\n"
            f"    return %r: {r}\n}}\n")  # fmt: skip


def kernel_gradient_text(n: int, c: int, o: int, h: int, dt: str) -> str:
    x, d, r = ty((c, n, h, h), dt), ty((o, n, h, h), dt), ty((c, o, 3, 3), dt)
    return (f'module "conv"\nstage optimizable\n\nfunc @f: ({x}, {d}) -> {r} {{\n'
            f"'entry(%x: {x}, %d: {d}):\n"
            f"    %r = convolve %x: {x} kernel %d: {d} padding (1, 1), (1, 1)\n"
            f"    return %r: {r}\n}}\n")  # fmt: skip


def build(path: Path, text: str, cpu: str, rewrite: bool = False) -> Path:
    """The module as a library; with `rewrite`, no bf16 convolution kept (the f32 rewrite)."""
    from dlvm.codegen import build as codegen_build
    from dlvm.codegen.spec import module_spec
    from dlvm.ir import parse_module

    module = parse_module(text, "conv.dl")
    takes = codegen_build.kernel_takes
    if rewrite:
        codegen_build.kernel_takes = lambda inst: inst.opcode != "convolve" and takes(inst)
    try:
        codegen_build.build_library(module, module_spec(module, "conv"), path, cpu=cpu)
    finally:
        codegen_build.kernel_takes = takes
    return path


def measure(
    shape: tuple[int, int, int, int], cpu: str, blocks: int, gradient: bool = False
) -> dict[str, float]:
    """Milliseconds per call of each build (the median of `blocks` interleaved blocks); with
    `gradient`, of the kernel gradient."""
    import dlvm

    n, c, o, h = shape
    rng = np.random.default_rng(0)
    if gradient:
        operands = [rng.standard_normal((c, n, h, h)), rng.standard_normal((o, n, h, h))]
        text = kernel_gradient_text
    else:
        operands = [rng.standard_normal((n, c, h, h)), rng.standard_normal((o, c, 3, 3)) * 0.1,
                    rng.standard_normal((1, o, 1, 1))]  # fmt: skip
        text = module_text
    f32 = [a.astype(np.float32) for a in operands]
    bf16 = [a.astype(BF16) for a in operands]
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        libs = {
            "f32": (build(d / "f32.so", text(*shape, "f32"), cpu), f32),
            "bf16": (build(d / "bf16.so", text(*shape, "bf16"), cpu), bf16),
            "rewrite": (build(d / "rw.so", text(*shape, "bf16"), cpu, True), bf16),
        }
        loaded = {name: (dlvm.load(path), args) for name, (path, args) in libs.items()}
        calls: dict[str, Callable[[], Any]] = {
            name: (lambda lib=lib, args=args: lib.f(*args)) for name, (lib, args) in loaded.items()
        }
        for call in calls.values():
            call()
        times: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(blocks):
            for name, call in calls.items():
                start = time.process_time()
                for _ in range(3):
                    call()
                times[name].append((time.process_time() - start) / 3)
        for lib, _ in loaded.values():
            lib.close()
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cpu", default="native")
    p.add_argument("--blocks", type=int, default=7)
    p.add_argument(
        "--shape", type=int, nargs=4, default=(8, 64, 64, 56), metavar=("N", "C", "O", "H")
    )
    p.add_argument("--kernel-gradient", action="store_true")
    args = p.parse_args()
    shape = tuple(args.shape)
    ms = measure(shape, args.cpu, args.blocks, args.kernel_gradient)  # type: ignore[arg-type]
    n, c, o, h = shape
    flops = 2 * n * o * h * h * c * 9
    what = "its kernel gradient" if args.kernel_gradient else "bias + relu"
    print(f"3x3 conv {c}->{o}, {h}x{h}, batch {n}, {what}; --cpu {args.cpu}; one thread, "
          f"CPU time, median of {args.blocks} blocks")  # fmt: skip
    for name, t in ms.items():
        print(f"  {name:8s} {t:8.2f} ms  {flops / t / 1e6:7.1f} GFLOP/s")
    print(f"  bf16 / f32 time {ms['bf16'] / ms['f32']:.2f}; "
          f"bf16 / rewrite time {ms['bf16'] / ms['rewrite']:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
