"""bf16 products against f32 on this CPU (issue 28's goals): the 2048³ product (bench/cases.py's
`matmul`) and the MLP's inference at batch 256 (`mlp_b256`), each built in float32 and in
bfloat16 (the same TEL with `type bfloat16`), and bf16 once more for a CPU without AVX-512
BF16 (`--cpu skylake-avx512`: operands widened to f32 as they are packed). Timed in one
process on one thread (run with DLRT_NUM_THREADS=1), in CPU seconds (time.process_time: the
host is shared), interleaved block by block; the median of the blocks. measure() returns the
GFLOP/s of each build and the bf16/f32 ratios; run as a script, it prints them."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from cases import MATMUL, MATMUL_N, MLP, inputs  # noqa: E402

BF16 = np.dtype(ml_dtypes.bfloat16)
MLP_FLOPS = 2 * 256 * (784 * 512 + 512 * 256 + 256 * 10)
MATMUL_FLOPS = 2 * MATMUL_N**3
# (build name, element type, target CPU)
BUILDS = [("f32", "float32", "native"), ("bf16", "bfloat16", "native"),
          ("bf16_no_dpbf16", "bfloat16", "skylake-avx512")]  # fmt: skip


def _typed(text: str, dtype: str) -> str:
    if "type float32" in text:
        return text.replace("type float32", f"type {dtype}")
    head, rest = text.split("\n", 1)
    return f"{head}\ntype {dtype}\n{rest}"


def _build(text: str, name: str, directory: Path, defines: dict[str, int], cpu: str) -> Any:
    import dlvm
    from dlvm.codegen.build import build_library
    from telc.driver import compile_text, optimize

    src = directory / f"{name}.tel"
    src.write_text(text)
    compiled = compile_text(str(src), text, defines)
    optimize(compiled.module)
    path = directory / f"{name}.so"
    build_library(compiled.module, compiled.spec, path, cpu=cpu)
    return dlvm.load(path, seed=0)


def _calls(directory: Path) -> dict[tuple[str, str], Callable[[], object]]:
    """(case, build) -> one call of it on its inputs, for the cases matmul and mlp_b256."""
    calls: dict[tuple[str, str], Callable[[], object]] = {}
    mm, mlp = inputs("matmul"), inputs("mlp_b256")
    for build, dtype, cpu in BUILDS:
        np_type = np.float32 if dtype == "float32" else BF16
        lib = _build(_typed(MATMUL, dtype), f"matmul_{build}", directory, {}, cpu)
        a, b = (mm[k].astype(np_type) for k in "ab")
        out = np.empty((MATMUL_N, MATMUL_N), np_type)
        calls["matmul", build] = lambda lib=lib, a=a, b=b, out=out: lib.matmul(a, b, out=out)
        model = _build(_typed(MLP, dtype), f"mlp_{build}", directory, {"B": 256}, cpu)
        for k, v in mlp["params"].items():
            model.set_param(k, v.astype(np_type))
        x, y = mlp["x"].astype(np_type), np.empty((256, 10), np_type)
        calls["mlp_b256", build] = lambda m=model, x=x, y=y: m.infer(x, out=y)
    return calls


def measure(blocks: int = 5, seconds: float = 0.5) -> dict[str, float]:
    """GFLOP/s of each case and build ("matmul.f32", "mlp_b256.bf16", …) and the ratios
    "matmul.bf16/f32", "mlp_b256.bf16/f32" (and the same for bf16_no_dpbf16)."""
    if os.environ.get("DLRT_NUM_THREADS") != "1":
        print("note: DLRT_NUM_THREADS is not 1", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="dlvm-bf16-") as tmp:
        calls = _calls(Path(tmp))
        repeats = {}
        for key, fn in calls.items():  # warm, and calls per block of about `seconds`
            fn()
            t0 = time.process_time()
            fn()
            repeats[key] = max(1, round(seconds / max(time.process_time() - t0, 1e-6)))
        times: dict[tuple[str, str], list[float]] = {key: [] for key in calls}
        for _ in range(blocks):
            for key, fn in calls.items():
                t0 = time.process_time()
                for _ in range(repeats[key]):
                    fn()
                times[key].append((time.process_time() - t0) / repeats[key])
    flops = {"matmul": MATMUL_FLOPS, "mlp_b256": MLP_FLOPS}
    result = {f"{case}.{build}": flops[case] / statistics.median(t) / 1e9
              for (case, build), t in times.items()}  # fmt: skip
    for case in flops:
        for build, _, _ in BUILDS[1:]:
            result[f"{case}.{build}/f32"] = result[f"{case}.{build}"] / result[f"{case}.f32"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.5, help="CPU seconds per block")
    args = parser.parse_args()
    result = measure(args.blocks, args.seconds)
    print(f"one thread, median of {args.blocks} blocks (process time), GFLOP/s")
    print("| case | f32 | bf16 | bf16/f32 | bf16, no AVX-512 BF16 | its /f32 |")
    print("|---|---:|---:|---:|---:|---:|")
    for case in ("matmul", "mlp_b256"):
        r = [result[f"{case}.{b}"] for b in ("f32", "bf16")]
        ratio, slow = result[f"{case}.bf16/f32"], result[f"{case}.bf16_no_dpbf16"]
        print(f"| {case} | {r[0]:.1f} | {r[1]:.1f} | {ratio:.2f} | {slow:.1f} | "
              f"{result[f'{case}.bf16_no_dpbf16/f32']:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
