"""Products with a transposed weight, x · Wᵀ (what PyTorch's nn.Linear exports to ONNX), against
the same product with the weight stored transposed (x · W), one CPU thread, A/B between two
builds of the compiler in one process.

    python bench/transposed_weight.py build DIR [--cpu x86-64-v3]  # this checkout's compiler
    python bench/transposed_weight.py time DIR_A DIR_B [--blocks 12]

`build` writes DIR/nt.so with one exported function per case; `time` loads both libraries and
times each case in each, interleaved block by block, in CPU seconds of this process
(time.process_time: the host is shared, and wall-clock time counts other processes), and prints
the median per call of the blocks. Run it with DLRT_NUM_THREADS=1."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

# (name, m, k, n, dtype, transposed weight, epilogue: bias and relu)
CASES = [
    ("mlp1-b1-nt", 1, 784, 256, "f32", True, True),
    ("mlp1-b1-nn", 1, 784, 256, "f32", False, True),
    ("mlp2-b1-nt", 1, 256, 128, "f32", True, True),
    ("gemv-m4-nt", 4, 784, 256, "f32", True, False),
    ("gemv-m4-nn", 4, 784, 256, "f32", False, False),
    ("gemv-m8-nt", 8, 784, 256, "f32", True, False),
    ("gemv-m8-nn", 8, 784, 256, "f32", False, False),
    ("m12-nt", 12, 784, 256, "f32", True, False),
    ("m12-nn", 12, 784, 256, "f32", False, False),
    ("enc-16x64x192-nt", 16, 64, 192, "f32", True, True),
    ("enc-16x64x192-nn", 16, 64, 192, "f32", False, True),
    ("mlp1-b32-nt", 32, 784, 256, "f32", True, True),
    ("mlp1-b32-nn", 32, 784, 256, "f32", False, True),
    ("m32-k64-nt", 32, 64, 256, "f32", True, False),
    ("m32-k64-nn", 32, 64, 256, "f32", False, False),
    ("m64-k784-nt", 64, 784, 256, "f32", True, False),
    ("m64-k784-nn", 64, 784, 256, "f32", False, False),
    ("m64-k256-nt", 64, 256, 256, "f32", True, False),
    ("m64-k256-nn", 64, 256, 256, "f32", False, False),
    ("enc-512x64x256-nt", 512, 64, 256, "f32", True, True),
    ("enc-512x64x256-nn", 512, 64, 256, "f32", False, True),
    ("f64-b1-nt", 1, 300, 100, "f64", True, False),
]


def case_text(index: int, m: int, k: int, n: int, dt: str, nt: bool, epilogue: bool) -> str:
    w = f"<{n} x {k} x {dt}>" if nt else f"<{k} x {n} x {dt}>"
    x, c, o = f"<{m} x {k} x {dt}>", f"<1 x {n} x {dt}>", f"<{m} x {n} x {dt}>"
    lines = [f"func @f{index}: ({x}, {w}, {c}) -> {o} {{", f"'entry(%x: {x}, %w: {w}, %c: {c}):"]
    b = "%w"
    if nt:
        lines.append(f"    %t = transpose %w: {w}")
        b = "%t"
    lines.append(f"    %d = dot %x: <{m} x {k} x {dt}>, {b}: <{k} x {n} x {dt}>")
    r = "%d"
    if epilogue:
        lines.append(f"    %s = add %d: <{m} x {n} x {dt}>, %c: <1 x {n} x {dt}>")
        lines.append(f"    %r = max %s: <{m} x {n} x {dt}>, 0: {dt}")
        r = "%r"
    lines += [f"    return {r}: <{m} x {n} x {dt}>", "}", ""]
    return "\n".join(lines)


def module_text() -> str:
    body = [case_text(i, *c[1:]) for i, c in enumerate(CASES)]
    return 'module "nt"\nstage optimizable\n\n' + "\n".join(body)


def build(directory: Path, cpu: str) -> None:
    from dlvm.codegen.build import build_library
    from dlvm.codegen.spec import module_spec
    from dlvm.ir import parse_module

    directory.mkdir(parents=True, exist_ok=True)
    module = parse_module(module_text(), "nt.dl")
    build_library(module, module_spec(module, "nt"), directory / "nt.so", cpu=cpu)


def inputs(index: int) -> list[np.ndarray]:
    _, m, k, n, dt, nt, _ = CASES[index]
    rng = np.random.default_rng(index)
    dtype = np.float32 if dt == "f32" else np.float64
    w = (n, k) if nt else (k, n)
    return [rng.uniform(-1, 1, s).astype(dtype) for s in [(m, k), w, (1, n)]]


def per_call(fn, args: list[np.ndarray], calls: int) -> float:
    start = time.process_time()
    for _ in range(calls):
        fn(*args)
    return (time.process_time() - start) / calls


def timing(dirs: list[Path], blocks: int) -> None:
    import dlvm

    libs = [dlvm.load(d / "nt.so") for d in dirs]
    print(f"ms per call, median of {blocks} blocks (process time), one thread")
    print("| case | " + " | ".join(str(d) for d in dirs) + " | ratio |")
    print("|---|" + "---:|" * (len(dirs) + 1))
    for i, c in enumerate(CASES):
        args = inputs(i)
        fns = [getattr(lib, f"f{i}").unsafe_direct() for lib in libs]
        results = [fn(*args) for fn in fns]
        for r in results[1:]:
            np.testing.assert_allclose(r, results[0], rtol=1e-4, atol=1e-4)
        calls = 1
        while per_call(fns[0], args, calls) * calls < 0.05 and calls < 1 << 20:
            calls *= 2
        times: list[list[float]] = [[] for _ in fns]
        for _ in range(blocks):
            for t, fn in zip(times, fns):
                t.append(per_call(fn, args, calls))
        med = [statistics.median(t) * 1e3 for t in times]
        ratio = med[-1] / med[0]
        print(f"| {c[0]} | " + " | ".join(f"{x:.4f}" for x in med) + f" | {ratio:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build")
    b.add_argument("directory", type=Path)
    b.add_argument("--cpu", default="native", help="target CPU (x86-64-v3: AVX2)")
    t = sub.add_parser("time")
    t.add_argument("directories", type=Path, nargs="+")
    t.add_argument("--blocks", type=int, default=12)
    args = parser.parse_args()
    if args.command == "build":
        build(args.directory, args.cpu)
    else:
        if os.environ.get("DLRT_NUM_THREADS") != "1":
            print("note: DLRT_NUM_THREADS is not 1", file=sys.stderr)
        timing(args.directories, args.blocks)


if __name__ == "__main__":
    main()
