"""The elementwise chain of bench/cpu.py (tanh(0.5·x + 0.25) · sigmoid(x), 16M f32) built with
and without `--fast-math`, timed in one process on one thread (run with DLRT_NUM_THREADS=1), in
CPU seconds (time.process_time: the host is shared), interleaved block by block. Prints the
median ms per call and GB/s (read x, write the result) of each build and their ratio."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from cases import CHAIN, CHAIN_N, build  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=7)
    parser.add_argument("--calls", type=int, default=5, help="calls per block")
    args = parser.parse_args()
    if os.environ.get("DLRT_NUM_THREADS") != "1":
        print("note: DLRT_NUM_THREADS is not 1", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="dlvm-fast-math-") as tmp:
        libs = {
            mode: build(CHAIN, f"chain_{mode}", Path(tmp), {}, fast_math=mode == "fast")
            for mode in ("accurate", "fast")
        }
        x = np.random.default_rng(0).uniform(-4, 4, CHAIN_N).astype(np.float32)
        out = np.empty_like(x)
        calls = {mode: lib.chain for mode, lib in libs.items()}
        results = {mode: np.array(fn(x, out=out)) for mode, fn in calls.items()}
        gap = np.abs(results["fast"] - results["accurate"]).max()
        times: dict[str, list[float]] = {mode: [] for mode in calls}
        for _ in range(args.blocks):
            for mode, fn in calls.items():
                t0 = time.process_time()
                for _ in range(args.calls):
                    fn(x, out=out)
                times[mode].append((time.process_time() - t0) / args.calls)
    print(f"chain, {CHAIN_N} f32, one thread; median of {args.blocks} blocks (process time)")
    print("| build | ms | GB/s |")
    print("|---|---:|---:|")
    med = {mode: statistics.median(t) for mode, t in times.items()}
    for mode, m in med.items():
        print(f"| {mode} | {m * 1e3:.2f} | {2 * 4 * CHAIN_N / m / 1e9:.2f} |")
    ratio = med["fast"] / med["accurate"]
    print(f"fast / accurate time: {ratio:.2f}; largest difference {gap:.2e}")


if __name__ == "__main__":
    main()
