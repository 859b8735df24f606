"""What bench/few_positions.py and bench/transposed_weight.py share: an A/B of two builds of
the compiler in one process, one CPU thread. `build DIR` writes DIR/NAME.so, one exported
function per case, with this checkout's compiler; `time DIR_A DIR_B` loads both libraries and
times each case in each, interleaved block by block, in CPU seconds of this process
(time.process_time: the host is shared, and wall-clock time counts other processes), and
prints the median per call of the blocks as a Markdown table."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np


def build(directory: Path, name: str, text: str, cpu: str) -> None:
    """The module `text` as DIR/NAME.so, exporting each of its functions."""
    from dlvm.codegen.build import build_library
    from dlvm.codegen.spec import module_spec
    from dlvm.ir import parse_module

    directory.mkdir(parents=True, exist_ok=True)
    module = parse_module(text, f"{name}.dl")
    build_library(module, module_spec(module, name), directory / f"{name}.so", cpu=cpu)


def per_call(fn: Callable[..., object], args: list[np.ndarray], calls: int) -> float:
    start = time.process_time()
    for _ in range(calls):
        fn(*args)
    return (time.process_time() - start) / calls


def timing(
    dirs: list[Path],
    name: str,
    cases: Sequence[tuple[str, list[np.ndarray]]],
    blocks: int,
    tolerance: float,
    digits: int,
) -> None:
    """Prints, for case i (its name and arguments), the median ms per call of function `f{i}`
    of each build and the last build's over the first's; the builds' results must agree."""
    import dlvm

    libs = [dlvm.load(d / f"{name}.so") for d in dirs]
    print(f"ms per call, median of {blocks} blocks (process time), one thread")
    print("| case | " + " | ".join(str(d) for d in dirs) + " | ratio |")
    print("|---|" + "---:|" * (len(dirs) + 1))
    for i, (case, args) in enumerate(cases):
        fns = [getattr(lib, f"f{i}").unsafe_direct() for lib in libs]
        results = [fn(*args) for fn in fns]
        for r in results[1:]:
            np.testing.assert_allclose(r, results[0], rtol=tolerance, atol=tolerance)
        calls = 1
        while per_call(fns[0], args, calls) * calls < 0.05 and calls < 1 << 20:
            calls *= 2
        times: list[list[float]] = [[] for _ in fns]
        for _ in range(blocks):
            for t, fn in zip(times, fns):
                t.append(per_call(fn, args, calls))
        med = [statistics.median(t) * 1e3 for t in times]
        cells = " | ".join(f"{x:.{digits}f}" for x in med)
        print(f"| {case} | {cells} | {med[-1] / med[0]:.2f} |")


def main(
    doc: str,
    build_into: Callable[[Path, str], None],
    time_dirs: Callable[[list[Path], int], None],
    blocks: int,
) -> None:
    """The command line: `build DIR [--cpu CPU]` or `time DIR… [--blocks N]`."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build")
    b.add_argument("directory", type=Path)
    b.add_argument("--cpu", default="native", help="target CPU (x86-64-v3: AVX2)")
    t = sub.add_parser("time")
    t.add_argument("directories", type=Path, nargs="+")
    t.add_argument("--blocks", type=int, default=blocks)
    args = parser.parse_args()
    if args.command == "build":
        build_into(args.directory, args.cpu)
    else:
        if os.environ.get("DLRT_NUM_THREADS") != "1":
            print("note: DLRT_NUM_THREADS is not 1", file=sys.stderr)
        time_dirs(args.directories, args.blocks)
