"""The MLP train step of bench/cpu.py (784-512-256-10, batch 128, SGD) built with `--precision
f32` and `--precision bf16`, timed in one process on one thread (run with DLRT_NUM_THREADS=1),
in CPU seconds (time.process_time: the host is shared), interleaved block by block, each build
stepping from the same parameters. Prints the median ms per step of each build, their ratio and
the two losses of the first step."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from cases import MLP, build, inputs  # noqa: E402

PRECISIONS = ("f32", "bf16")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=7)
    parser.add_argument("--calls", type=int, default=20, help="steps per block")
    args = parser.parse_args()
    if os.environ.get("DLRT_NUM_THREADS") != "1":
        print("note: DLRT_NUM_THREADS is not 1", file=sys.stderr)
    inp = inputs("train_b128")
    x, labels = inp["x"], inp["labels"]
    with tempfile.TemporaryDirectory(prefix="dlvm-precision-") as tmp:
        libs = {p: build(MLP, f"train_{p}", Path(tmp), {"B": 128}, precision=p) for p in PRECISIONS}
        losses = {}
        for p, lib in libs.items():
            for k, v in inp["params"].items():
                lib.set_param(k, v)
            losses[p] = float(lib.train_step(x, labels))
        times: dict[str, list[float]] = {p: [] for p in PRECISIONS}
        for _ in range(args.blocks):
            for p, lib in libs.items():
                step = lib.train_step
                t0 = time.process_time()
                for _ in range(args.calls):
                    step(x, labels)
                times[p].append((time.process_time() - t0) / args.calls)
        for lib in libs.values():
            lib.close()
    print(f"MLP train step, batch 128, one thread; median of {args.blocks} blocks (process time)")
    print("| precision | ms per step | first loss |")
    print("|---|---:|---:|")
    med = {p: statistics.median(t) for p, t in times.items()}
    for p, m in med.items():
        print(f"| {p} | {m * 1e3:.3f} | {losses[p]:.5f} |")
    print(f"bf16 / f32 time: {med['bf16'] / med['f32']:.2f}")


if __name__ == "__main__":
    main()
