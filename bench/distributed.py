"""Data-parallel training measured on this machine (docs/distributed.md, "Measured on this
machine"): the benchmark MLP's train step (784-512-256-10, SGD, f32) on a global batch of 128,
as 2 processes x 1 thread (64 rows each, summed by MPI through dlvm.distributed) against 1
process x 2 threads (128 rows, the plain step), and 1 process x 1 thread for reference; with
the time each step spends in the all-reduce.

    python bench/distributed.py [--steps 300] [--repeats 3] [--write]

Each configuration runs in processes of its own (mpiexec for 2 ranks), `--repeats` times,
interleaved; the figures are medians. `--write` puts the table into docs/distributed.md between
its markers. It needs the mpi extra (mpi4py, MPICH's mpiexec)."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))

from cases import MLP  # noqa: E402

BATCH = 128
MARKS = ("<!-- measured: bench/distributed.py --write -->", "<!-- end of measured -->")
# (name, processes, threads per process, library, whether one process calls a hook that does
# nothing): the configurations compared; the last prices the halves against the plain step.
CONFIGS = [
    ("2 processes x 1 thread", 2, 1, "half", False),
    ("1 process x 2 threads", 1, 2, "whole", False),
    ("1 process x 1 thread", 1, 1, "whole", False),
    ("1 process x 1 thread, the halves (a hook that sums nothing)", 1, 1, "whole", True),
]


def build(directory: Path) -> dict[str, Path]:
    """The MLP built with --distributed for 64 rows (each of 2 ranks) and for 128 (plain)."""
    from dlvm.codegen.build import build_library
    from telc.driver import compile_text, optimize

    out = {}
    for name, rows in (("half", BATCH // 2), ("whole", BATCH)):
        compiled = compile_text(f"mlp_{name}.tel", MLP, {"B": rows}, distributed=True)
        optimize(compiled.module)
        out[name] = directory / f"mlp_{name}.so"
        build_library(compiled.module, compiled.spec, out[name])
    return out


def worker(library: str, steps: int, idle_hook: bool) -> None:
    """One rank: warm-up steps, then `steps` timed ones; rank 0 prints a JSON line."""
    import numpy as np

    import dlvm

    ranks = int(os.environ.get("PMI_SIZE", "1"))
    timed_in_hook = [0.0]
    with dlvm.load(library, seed=1) as model:
        rows = model.entries["train_step"].inputs[0].shape[0]
        rng = np.random.default_rng(0)
        x = rng.standard_normal((BATCH, 784)).astype(np.float32)
        labels = np.eye(10, dtype=np.float32)[rng.integers(0, 10, BATCH)]
        if ranks > 1:
            from dlvm.distributed import DataParallel, MpiCommunicator

            comm = MpiCommunicator(timeout=120.0)

            class Timed:
                """comm, with the seconds spent in allreduce counted."""

                rank, size = comm.rank, comm.size
                broadcast, barrier = comm.broadcast, comm.barrier

                def allreduce(self, buffer: np.ndarray) -> None:
                    t0 = time.perf_counter()
                    comm.allreduce(buffer)
                    timed_in_hook[0] += time.perf_counter() - t0

            dp = DataParallel(model, Timed())
            rank = comm.rank
            x, labels = dp.shard(x), dp.shard(labels)
            step = dp.train_step
            barrier = comm.barrier
        else:
            rank, step, barrier = 0, model.train_step, lambda: None
            if idle_hook:
                model.set_allreduce(lambda block: None, 1)
        assert x.shape[0] == rows
        for _ in range(max(20, steps // 10)):
            step(x, labels)
        barrier()
        timed_in_hook[0] = 0.0
        t0 = time.perf_counter()
        for _ in range(steps):
            step(x, labels)
        barrier()
        seconds = time.perf_counter() - t0
    if rank == 0:
        print(json.dumps({"step_ms": 1e3 * seconds / steps,
                          "allreduce_ms": 1e3 * timed_in_hook[0] / steps}))  # fmt: skip


def run_config(
    processes: int, threads: int, library: Path, steps: int, idle_hook: bool
) -> dict[str, float]:
    env = dict(os.environ, DLRT_NUM_THREADS=str(threads), PYTHONPATH=str(ROOT))
    command = [__file__, "worker", str(library), "--steps", str(steps)]
    command += ["--idle-hook"] if idle_hook else []
    if processes > 1:  # -m mpi4py: a rank that fails ends the job instead of hanging it
        mpiexec = Path(sys.executable).with_name("mpiexec")
        command = [str(mpiexec), "-n", str(processes), sys.executable, "-m", "mpi4py", *command]
    else:
        command = [sys.executable, *command]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"bench/distributed.py: {' '.join(command)} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(steps: int, repeats: int) -> str:
    with tempfile.TemporaryDirectory(prefix="dlvm-dp-bench-") as scratch:
        libraries = build(Path(scratch))
        runs: dict[str, list[dict[str, float]]] = {name: [] for name, *_ in CONFIGS}
        for _ in range(repeats):
            for name, processes, threads, library, idle in CONFIGS:
                runs[name].append(run_config(processes, threads, libraries[library], steps, idle))
    load = os.getloadavg()[0]
    median = {n: statistics.median(r["step_ms"] for r in rs) for n, rs in runs.items()}
    when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    lines = [
        f"Run: {when}, {platform.machine()}, {os.cpu_count()} CPUs (load average {load:.1f} at"
        f" the end); `python bench/distributed.py`, {steps} timed steps, median of {repeats}"
        " runs.",
        "",
        f"The MLP 784-512-256-10 train step (SGD, f32), global batch {BATCH}:",
        "",
        "| configuration | ms per step | examples/s | in the all-reduce, ms per step |",
        "|---|---:|---:|---:|",
    ]
    for name, *_ in CONFIGS:
        hook = statistics.median(r["allreduce_ms"] for r in runs[name])
        shown = f"{hook:.3f}" if name.startswith("2") else "-"
        rate = BATCH / median[name] * 1e3
        lines.append(f"| {name} | {median[name]:.3f} | {rate:,.0f} | {shown} |")
    two, threads = median[CONFIGS[0][0]], median[CONFIGS[1][0]]
    lines += ["", f"Throughput of 2 processes x 1 thread over 1 process x 2 threads: "
              f"**{threads / two:.2f}**."]  # fmt: skip
    return "\n".join(lines)


def write(path: Path, table: str) -> None:
    text = path.read_text(encoding="utf-8")
    head, rest = text.split(MARKS[0], 1)
    text = f"{head}{MARKS[0]}\n\n{table}\n\n{MARKS[1]}{rest.split(MARKS[1], 1)[1]}"
    path.write_text(text, encoding="utf-8")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="command")
    w = sub.add_parser("worker", help="one rank (run by mpiexec)")
    w.add_argument("library")
    w.add_argument("--steps", type=int, default=300)
    w.add_argument("--idle-hook", action="store_true")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    if args.command == "worker":
        worker(args.library, args.steps, args.idle_hook)
        return 0
    table = measure(args.steps, args.repeats)
    print(table)
    if args.write:
        write(ROOT / "docs" / "distributed.md", table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
