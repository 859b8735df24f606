"""Convolutions with few output positions per image (a ResNet's last stages at a small batch),
one CPU thread, A/B between two builds of the compiler in one process.

    python bench/few_positions.py build DIR [--cpu x86-64-v3]  # this checkout's compiler
    python bench/few_positions.py time DIR_A DIR_B [--blocks 9]

`build` writes DIR/fp.so with one exported function per case (float32, NCHW, OIHW); `time`
loads both libraries and times each case in each, interleaved block by block, in CPU seconds of
this process (time.process_time: the host is shared, and wall-clock time counts other
processes), and prints the median per call of the blocks. Run it with DLRT_NUM_THREADS=1."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

PAD = "padding (1, 1), (1, 1)"
# (name, input shape, kernel shape, options): ResNet-18 at 32x32's last two stages (s4: 4x4
# positions, s3: 8x8), at 224x224's last (7x7) and 64x64's (2x2), then other sizes.
CASES = [
    ("s4-3x3", (1, 512, 4, 4), (512, 512, 3, 3), PAD),
    ("s4-down", (1, 256, 8, 8), (512, 256, 3, 3), "strides 2, 2 " + PAD),
    ("s4-1x1", (1, 256, 8, 8), (512, 256, 1, 1), "strides 2, 2"),
    ("s3-3x3", (1, 256, 8, 8), (256, 256, 3, 3), PAD),
    ("s3-down", (1, 128, 16, 16), (256, 128, 3, 3), "strides 2, 2 " + PAD),
    ("c64-8x8", (1, 64, 8, 8), (64, 64, 3, 3), PAD),
    ("c128-8x8", (1, 128, 8, 8), (128, 128, 3, 3), PAD),
    ("c512-8x8", (1, 512, 8, 8), (512, 512, 3, 3), PAD),
    ("c512-7x7", (1, 512, 7, 7), (512, 512, 3, 3), PAD),
    ("c256-7x7", (1, 256, 7, 7), (256, 256, 3, 3), PAD),
    ("c64-6x6", (1, 64, 6, 6), (64, 64, 3, 3), PAD),
    ("c64-4x4", (1, 64, 4, 4), (64, 64, 3, 3), PAD),
    ("c512-2x2", (1, 512, 2, 2), (512, 512, 3, 3), PAD),
    ("b2-s4", (2, 512, 4, 4), (512, 512, 3, 3), PAD),
    ("b4-s4", (4, 512, 4, 4), (512, 512, 3, 3), PAD),
    ("b32-1x1", (32, 512, 1, 1), (512, 512, 1, 1), ""),
]


def ty(shape: tuple[int, ...]) -> str:
    return "<" + " x ".join(map(str, shape)) + " x f32>"


def module_text() -> str:
    from dlvm.ir import parse_module

    parts = ['module "fp"\nstage raw\n']
    for i, (_, x, k, options) in enumerate(CASES):
        # The output's type from the IR's own shape rule.
        probe = parse_module(
            f'module "p"\nstage raw\n\nfunc @p: ({ty(x)}, {ty(k)}) -> f32 {{\n'
            f"'entry(%x: {ty(x)}, %k: {ty(k)}):\n"
            f"    %r = convolve %x: {ty(x)} kernel %k: {ty(k)} {options}\n"
            "    return 0: f32\n}\n",
            "p.dl",
        )
        out = ty(probe.functions[0].blocks[0].instructions[0].type.shape)  # type: ignore[attr-defined]
        parts.append(
            f"func @f{i}: ({ty(x)}, {ty(k)}) -> {out} {{\n'entry(%x: {ty(x)}, %k: {ty(k)}):\n"
            f"    %r = convolve %x: {ty(x)} kernel %k: {ty(k)} {options}\n"
            f"    return %r: {out}\n}}\n"
        )
    return "\n".join(parts)


def build(directory: Path, cpu: str) -> None:
    from dlvm.codegen.build import build_library
    from dlvm.codegen.spec import module_spec
    from dlvm.ir import parse_module

    directory.mkdir(parents=True, exist_ok=True)
    module = parse_module(module_text(), "fp.dl")
    build_library(module, module_spec(module, "fp"), directory / "fp.so", cpu=cpu)


def per_call(fn, args: list[np.ndarray], calls: int) -> float:
    start = time.process_time()
    for _ in range(calls):
        fn(*args)
    return (time.process_time() - start) / calls


def timing(dirs: list[Path], blocks: int) -> None:
    import dlvm

    libs = [dlvm.load(d / "fp.so") for d in dirs]
    print(f"ms per call, median of {blocks} blocks (process time), one thread")
    print("| case | " + " | ".join(str(d) for d in dirs) + " | ratio |")
    print("|---|" + "---:|" * (len(dirs) + 1))
    for i, (name, x, k, _) in enumerate(CASES):
        rng = np.random.default_rng(i)
        args = [rng.standard_normal(s).astype(np.float32) for s in (x, k)]
        fns = [getattr(lib, f"f{i}").unsafe_direct() for lib in libs]
        results = [fn(*args) for fn in fns]
        for r in results[1:]:
            np.testing.assert_allclose(r, results[0], rtol=1e-3, atol=1e-3)
        calls = 1
        while per_call(fns[0], args, calls) * calls < 0.05 and calls < 1 << 20:
            calls *= 2
        times: list[list[float]] = [[] for _ in fns]
        for _ in range(blocks):
            for t, fn in zip(times, fns):
                t.append(per_call(fn, args, calls))
        med = [statistics.median(t) * 1e3 for t in times]
        print(f"| {name} | " + " | ".join(f"{v:.3f}" for v in med) + f" | {med[-1] / med[0]:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build")
    b.add_argument("directory", type=Path)
    b.add_argument("--cpu", default="native", help="target CPU (x86-64-v3: AVX2)")
    t = sub.add_parser("time")
    t.add_argument("directories", type=Path, nargs="+")
    t.add_argument("--blocks", type=int, default=9)
    args = parser.parse_args()
    if args.command == "build":
        build(args.directory, args.cpu)
    else:
        if os.environ.get("DLRT_NUM_THREADS") != "1":
            print("note: DLRT_NUM_THREADS is not 1", file=sys.stderr)
        timing(args.directories, args.blocks)


if __name__ == "__main__":
    main()
