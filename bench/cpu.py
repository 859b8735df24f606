"""The CPU benchmark: libraries built by telc against NumPy (OpenBLAS as installed,
and with OPENBLAS_CORETYPE=SkylakeX, its AVX-512 kernels, in a process of its own), PyTorch,
JAX and ONNX Runtime, measured side by side in one run, interleaved in blocks so that drift hits
every contender alike. Prints medians, minimums and our/peer ratios of the medians (below 1 we
are faster), the build times (`telc build` against jax.jit and torch.compile, cold), and each
goal met or not; writes the table to bench/RESULTS.md (keeping its hand-written analysis) when
every case ran. The convolution cases (`--cases conv`) run against PyTorch eager, torch.compile,
JAX and ONNX Runtime (conv_peers.py), after checking that our forward agrees with PyTorch's.
Reports only: the exit status is 0 whatever the figures, 1 if a check fails."""

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
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from cases import CASES, CONV, MLP, Case, Ours, inputs  # noqa: E402
from conv_peers import CONV_PEERS, Mismatch, check  # noqa: E402
from peers import PEERS, available  # noqa: E402

BLOCK = 5  # consecutive runs of one contender
PAUSE = 0.2  # seconds before each block: OpenBLAS's and others' idle threads spin after a call
SKX = "numpy-skx"  # NumPy with OpenBLAS's AVX-512 (SkylakeX) kernels
CASE_BUDGET_S = 5.0  # a case whose first call is slow gets fewer runs: about this much of ours

# (case, peer, largest our/peer time ratio that meets the goal)
GOALS = [
    ("mlp_b1", "onnxruntime", 0.5),
    ("mlp_b256", "onnxruntime", 1.0),
    ("train_b128", "jax", 0.8),
    ("chain", "jax", 0.5),
    ("matmul", SKX, 1 / 0.9),
    # issue 25: "≤ 0.8× PyTorch eager and ≤ 1.0× the best of torch.compile and JAX" and so on
    ("conv3x3_fwd", "torch", 1 / 0.9),
    ("conv3x3_fwd", "jax", 1.0),
    ("conv3x3_fwd", "onnxruntime", 1.0),
    ("conv3x3_fwdbwd", "torch", 1 / 0.9),
    ("lenet_train", "torch", 0.8),
    ("lenet_train", "torch.compile", 1.0),
    ("lenet_train", "jax", 1.0),
    ("block_train", "torch", 0.8),
    ("block_train", "torch.compile", 1.0),
    ("block_train", "jax", 1.0),
    ("block_b1", "onnxruntime", 0.8),
]
BUILD_GOAL_S = 2.0

Block = Callable[[int], list[float]]


def local_block(run: Callable[[], object], clock: Callable[[], float] = time.perf_counter) -> Block:
    """n calls of run, each timed by `clock` (wall time; bench/precision.py's one-thread runs
    take process time)."""

    def block(n: int) -> list[float]:
        times = []
        for _ in range(n):
            t0 = clock()
            run()
            times.append(clock() - t0)
        return times

    return block


class Worker:
    """blas_worker.py in a subprocess with its own environment."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "blas_worker.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, **env},
        )

    def ask(self, case: str, n: int) -> list[float] | None:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(f"{case} {n}\n")
        self.proc.stdin.flush()
        result: list[float] | None = json.loads(self.proc.stdout.readline())
        return result

    def block(self, case: str) -> Block | None:
        if self.ask(case, 1) is None:  # also the warm-up
            return None
        return lambda n: self.ask(case, n) or []

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait()


def measure(blocks: dict[str, Block], runs: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {k: [] for k in blocks}
    for _ in range(max(1, -(-runs // BLOCK))):
        for name, block in blocks.items():
            time.sleep(PAUSE)
            times[name] += block(BLOCK)
    return times


def build_seconds(runs: int) -> float:
    """Median wall time of `telc build --no-cache` of the MLP to a linked .so."""
    telc = Path(sys.executable).with_name("telc")
    times = []
    with tempfile.TemporaryDirectory(prefix="dlvm-bench-build-") as tmp:
        src = Path(tmp) / "mlp.tel"
        src.write_text(MLP)
        for _ in range(runs):
            t0 = time.perf_counter()
            subprocess.run([str(telc), "build", str(src), "--no-cache", "-q",
                            "-o", str(Path(tmp) / "mlp.so")], check=True)  # fmt: skip
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def peer_compile_seconds(peer: str) -> float | None:
    done = subprocess.run([sys.executable, str(HERE / "compile_peers.py"), peer],
                          capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        print(f"  {peer} compile failed: {done.stderr.strip().splitlines()[-1:]}")
        return None
    return float(done.stdout.split()[-1])


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for mod in ("numpy", "torch", "jax", "onnxruntime", "llvmlite"):
        try:
            out[mod] = __import__(mod).__version__
        except ImportError:
            out[mod] = "not installed"
    return out


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def selected(spec: str) -> list[Case]:
    """The cases `--cases` names: keys, or the groups "dense" and "conv"."""
    names = spec.split(",")
    return [c for c in CASES if c.key in names or c.group in names]


def peer_block(case: Case, peer: str, worker: Worker | None) -> Block | None:
    """The timed block of `peer` on `case`, warmed up, or None where it cannot run the case."""
    if peer == SKX:
        return worker.block(case.key) if worker and case.group == "dense" else None
    table = CONV_PEERS if case.key in CONV else PEERS
    if peer not in table:
        return None
    runner = table[peer](case.key)(inputs(case.key))
    if runner is None:
        return None
    runner()  # warm up (JAX and torch.compile compile here)
    return local_block(runner)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=20, help="timed runs per contender and case")
    ap.add_argument("--cases", default="dense,conv",
                    help="case keys or groups (dense, conv), comma-separated")  # fmt: skip
    compiled = ["torch.compile"] if "torch" in available() else []
    ap.add_argument("--peers", default=",".join([*available(), *compiled, SKX]))
    ap.add_argument("--no-compile", action="store_true", help="skip the build-time comparison")
    ap.add_argument("--results", default=None,
                    help="Markdown file to write the table to ('' for none; default"
                         " bench/RESULTS.md when every case runs)")  # fmt: skip
    args = ap.parse_args(argv)
    cases = selected(args.cases)
    if args.results is None:
        args.results = str(HERE / "RESULTS.md") if len(cases) == len(CASES) else ""
    peers = [p for p in args.peers.split(",") if p in PEERS or p in CONV_PEERS or p == SKX]
    print(f"CPU benchmark on {cpu_name()}, {os.cpu_count()} CPUs; building our libraries…")
    ours = Ours([c.key for c in cases])
    worker = Worker({"OPENBLAS_CORETYPE": "SkylakeX"}) if SKX in peers else None
    rows: list[tuple[Case, str, list[float]]] = []
    fewer: dict[str, int] = {}
    for case in cases:
        inp = inputs(case.key)
        if case.key in CONV and "torch" in available():
            try:
                print(f"  {case.title}: {check(case.key, ours.models[case.key], inp)}")
            except Mismatch as e:
                print(f"error: {e}", file=sys.stderr)
                return 1
        blocks: dict[str, Block] = {}
        run = ours.make(case.key, inp)
        t0 = time.perf_counter()
        run()
        runs = max(BLOCK, min(args.runs, int(CASE_BUDGET_S / (time.perf_counter() - t0))))
        if runs < args.runs:
            fewer[case.key] = -(-runs // BLOCK) * BLOCK
        blocks["ours"] = local_block(run)
        for peer in peers:
            block = peer_block(case, peer, worker)
            if block is not None:
                blocks[peer] = block
        times = measure(blocks, runs)
        for name, ts in times.items():
            rows.append((case, name, ts))
        print(f"  {case.title}: done")
    if worker:
        worker.close()
    ours.close()
    builds: dict[str, float | None] = {}
    if not args.no_compile:
        print("  build times (cold)…")
        builds["telc build (to a linked .so)"] = build_seconds(3)
        for peer, label in (("jax", "jax.jit (lower + compile)"),
                            ("torch", "torch.compile (first calls)")):  # fmt: skip
            if peer in peers:
                builds[label] = peer_compile_seconds(peer)
    text = report(rows, builds, args.runs, fewer)
    print(text)
    if args.results:
        write_results(Path(args.results), text)
    return 0


def rate(case: Case, seconds: float) -> str:
    if not case.unit:
        return ""
    scale = 1e9
    return f"{case.work / seconds / scale:.1f} {case.unit}"


def report(rows: list[tuple[Case, str, list[float]]], builds: dict[str, float | None],
           runs: int, fewer: dict[str, int]) -> str:  # fmt: skip
    """The Markdown tables: every contender per case, the build times, the goals; `fewer`
    the timed runs of the cases that got fewer than `runs` (a slow first call of ours)."""
    v = versions()
    lines = [
        f"Run: {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}, {cpu_name()},"
        f" {os.cpu_count()} CPUs, {runs} timed runs per contender in blocks of {BLOCK}.",
        "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()) + ".",
        "",
        "| case | contender | median ms | min ms | rate (median) | ours / contender |",
        "|---|---|---:|---:|---:|---:|",
    ]
    medians: dict[tuple[str, str], float] = {}
    for case, name, ts in rows:
        medians[(case.key, name)] = statistics.median(ts)
    for case, name, ts in rows:
        med = medians[(case.key, name)]
        ours = medians[(case.key, "ours")]
        ratio = "" if name == "ours" else f"{ours / med:.2f}"
        lines.append(f"| {case.title} | {name} | {med * 1e3:.3f} | {min(ts) * 1e3:.3f} |"
                     f" {rate(case, med)} | {ratio} |")  # fmt: skip
    titles = {c.key: c.title for c in CASES}
    if fewer:
        counts = "; ".join(f"{titles[k]}: {n}" for k, n in fewer.items())
        lines += ["", f"Fewer timed runs per contender (about {CASE_BUDGET_S:.0f} s of ours"
                      f" each): {counts}."]  # fmt: skip
    if builds:
        lines += ["", "| build of the MLP (inference + training step) | seconds |", "|---|---:|"]
        lines += [f"| {k} | {'failed' if s is None else f'{s:.2f}'} |" for k, s in builds.items()]
    lines += ["", "| goal | measured | met |", "|---|---:|---|"]
    for key, peer, limit in GOALS:
        if (key, "ours") not in medians or (key, peer) not in medians:
            continue
        ratio = medians[(key, "ours")] / medians[(key, peer)]
        lines.append(f"| {titles[key]}: ours/{peer} time ≤ {limit:.2f} | {ratio:.2f} |"
                     f" {'yes' if ratio <= limit else 'no'} |")  # fmt: skip
    ours_build = builds.get("telc build (to a linked .so)")
    if ours_build is not None:
        lines.append(f"| telc build of the MLP ≤ {BUILD_GOAL_S:.0f} s | {ours_build:.2f} s |"
                     f" {'yes' if ours_build <= BUILD_GOAL_S else 'no'} |")  # fmt: skip
    return "\n".join(lines)


MARK = "<!-- everything below this line is kept when make bench rewrites the table -->"


def write_results(path: Path, table: str) -> None:
    kept = ""
    if path.exists():
        old = path.read_text(encoding="utf-8")
        if MARK in old:
            kept = old.split(MARK, 1)[1]
    head = ("# CPU benchmark results\n\nWritten by `make bench` (bench/cpu.py); ratios are our"
            " median time over the contender's (below 1 we are faster).\n\n")  # fmt: skip
    path.write_text(head + table + "\n\n" + MARK + kept, encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
