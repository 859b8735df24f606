"""The reduced-precision benchmark (issue 28, "Performance goals"): our builds of the MLP
784-512-256-10 (batch 1 and 256 inference, the batch-128 train step), the 2048³ product and the
elementwise chain in f32 and in reduced precision (and `0.5*x+0.25`, bound by memory, whose
`--fast-math` build stores its output non-temporally), against ONNX Runtime in f32 and with int8
weights (dynamic quantisation), PyTorch under bf16 autocast (bf16 tensors for the product) and
JAX with bf16 parameters (a donated buffer for the chain), measured side by side in one run,
interleaved in blocks (bench/cpu.py's). Prints medians, minimums, each contender's time over
ours in f32, and every goal of the issue, met or not (each call is timed alone, in blocks
after a pause: a cold start that adds about the same time to every contender's call, so ratios
below 1 read closer to 1 than back-to-back steps would give); `--write` puts the tables in
bench/RESULTS.md's "Reduced precision" section. Reports only: the exit status is 0 whatever the
figures.

Each of our variants is one entry of VARIANTS: a label, `telc build` flags and a TEL source
(built once per case it names, with the case's dims)."""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from cases import (  # noqa: E402
    AFFINE,
    BATCHES,
    CASES,
    CHAIN,
    CHAIN_N,
    MATMUL,
    MLP,
    MLP_CASES,
    Case,
    inputs,
    runner,
)
from cpu import BLOCK, Block, cpu_name, local_block, measure, rate, versions  # noqa: E402
from precision_peers import PEERS, available, use_threads  # noqa: E402


class Variant(NamedTuple):
    label: str
    flags: tuple[str, ...]  # of `telc build`
    source: str  # TEL, with the MLP's dim B where it is the MLP
    cases: tuple[str, ...]


F32 = "ours f32"  # the reference of the goals against our own f32
MLP_BF16 = MLP.replace("type float32", "type bfloat16")
MATMUL_BF16 = MATMUL.replace("module matmul\n", "module matmul\ntype bfloat16\n")

INFERENCE = ("mlp_b1", "mlp_b256")

# A build flag's variant is one more line.
VARIANTS = [
    Variant(F32, (), MLP, MLP_CASES),
    Variant("ours bf16", (), MLP_BF16, MLP_CASES),
    Variant("ours --precision bf16", ("--precision", "bf16"), MLP, ("train_b128",)),
    Variant("ours int8", ("--quantize", "int8"), MLP, INFERENCE),
    Variant(F32, (), MATMUL, ("matmul",)),
    Variant("ours bf16", (), MATMUL_BF16, ("matmul",)),
    Variant(F32, (), CHAIN, ("chain",)),
    Variant("ours --fast-math", ("--fast-math",), CHAIN, ("chain",)),
    Variant(F32, (), AFFINE, ("affine",)),
    Variant("ours --fast-math", ("--fast-math",), AFFINE, ("affine",)),
]
ORDER = ["mlp_b1", "mlp_b256", "train_b128", "matmul", "chain", "affine"]
# bench/cpu.py's cases and the memory-bound pass, whose --fast-math build stores non-temporally.
TABLE_CASES = [*CASES, Case("affine", "0.5*x+0.25, 16M f32", "GB/s", 2 * 4 * CHAIN_N)]


class Goal(NamedTuple):
    case: str
    reference: str  # a peer's label, or F32
    limit: float  # the largest time of ours over the reference's that meets the goal
    text: str


# Each applies to every variant of its case but ours in f32.
GOALS = [
    Goal("mlp_b1", "onnxruntime f32", 0.5, "batch-1 latency ≤ 0.5× ONNX Runtime f32"),
    Goal("mlp_b1", "onnxruntime int8", 0.8, "batch-1 latency ≤ 0.8× ONNX Runtime int8"),
    Goal("mlp_b256", F32, 1 / 1.6, "batch-256 throughput ≥ 1.6× ours f32"),
    Goal("train_b128", F32, 0.7, "train step time ≤ 0.7× ours f32"),
    Goal("matmul", F32, 1 / 1.8, "2048³ GFLOP/s ≥ 1.8× ours f32"),
    Goal("chain", "jax (donated)", 0.5, "GB/s ≥ 2× JAX's (donated buffer)"),
]

CASE_BUDGET_S = 4.0  # a case whose slowest first call is long gets fewer runs


def defines(case: str) -> dict[str, int]:
    return {"B": BATCHES[case]} if case in MLP_CASES else {}


def builds(variants: Sequence[Variant], cases: Sequence[str]) -> list[tuple[Variant, str]]:
    """(variant, case) for each of `cases` each variant names, in `cases`' order."""
    return [(v, c) for c in cases for v in variants if c in v.cases]


def build(variant: Variant, case: str, directory: Path, stem: str) -> Path | str:
    """`telc build` of the variant for the case as directory/stem.so: the library's path, or
    the first line of the error."""
    telc = Path(sys.executable).with_name("telc")
    src, lib = directory / f"{stem}.tel", directory / f"{stem}.so"
    src.write_text(variant.source)
    args = [f"-D{k}={v}" for k, v in defines(case).items()]
    done = subprocess.run([str(telc), "build", str(src), "-o", str(lib), "-q", "--no-cache",
                           *args, *variant.flags], capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        return lines[0] if lines else f"telc exited with {done.returncode}"
    return lib


def title(case: str) -> str:
    """The case's title in bench/cpu.py's table, less its element type (ours vary it)."""
    return next(c.title for c in TABLE_CASES if c.key == case).removesuffix(" f32")


def ratios(medians: dict[tuple[str, str], float]) -> list[tuple[str, str, Goal, float]]:
    """(case, variant label, goal, our time over the reference's) for every goal whose case
    has the variant and the reference measured."""
    out = []
    for goal in GOALS:
        ref = medians.get((goal.case, goal.reference))
        if ref is None:
            continue
        for (case, label), t in medians.items():
            if case == goal.case and label.startswith("ours") and label != F32:
                out.append((case, label, goal, t / ref))
    return out


def report(
    rows: list[tuple[Case, str, list[float]]], failed: list[tuple[str, str, str]], runs: int,
    threads: str,
) -> str:  # fmt: skip
    """The Markdown tables: every contender per case with its time over ours in f32, what
    did not build, and the goals."""
    v = versions()
    lines = [
        f"Run: {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}, {cpu_name()},"
        f" {os.cpu_count()} CPUs, {threads}; up to {runs} timed runs per contender in blocks"
        f" of {BLOCK}.",
        "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()) + ".",
        "",
        "| case | contender | median ms | min ms | rate (median) | time / ours f32 |",
        "|---|---|---:|---:|---:|---:|",
    ]
    medians = {(case.key, name): statistics.median(ts) for case, name, ts in rows}
    for case, name, ts in rows:
        med = medians[(case.key, name)]
        ref = medians.get((case.key, F32))
        ratio = "" if ref is None or name == F32 else f"{med / ref:.2f}"
        lines.append(f"| {title(case.key)} | {name} | {med * 1e3:.3f} | {min(ts) * 1e3:.3f} |"
                     f" {rate(case, med)} | {ratio} |")  # fmt: skip
    if failed:
        lines += ["", "| case | contender | not measured |", "|---|---|---|"]
        lines += [f"| {title(k)} | {label} | {why} |" for k, label, why in failed]
    lines += ["", "| goal (issue 28) | contender | time / reference (goal) | met |",
              "|---|---|---:|---|"]  # fmt: skip
    for _, label, goal, ratio in ratios(medians):
        lines.append(f"| {goal.text} | {label} | {ratio:.3f} (≤ {goal.limit:.3f}) |"
                     f" {'yes' if ratio <= goal.limit else 'no'} |")  # fmt: skip
    return "\n".join(lines)


HEADING = "## Reduced precision (issue 28; `make bench`: bench/precision.py)"


def with_section(text: str, heading: str, body: str) -> str:
    """`text` (Markdown) with the section under `heading` replaced by `body`, up to the next
    heading of the same level or the end; appended at the end when there is none."""
    level = heading.split(" ", 1)[0] + " "
    section = f"{heading}\n\n{body.strip()}\n"
    if heading not in text:
        return text.rstrip("\n") + "\n\n" + section
    before, after = text.split(heading, 1)
    rest = after.split("\n" + level, 1)
    tail = "\n" + level + rest[1] if len(rest) == 2 else ""
    return before + section + ("\n" + tail.lstrip("\n") if tail else "")


def thread_counts(threads: int) -> str:
    if threads:
        return f"every contender on {threads} thread(s), process CPU time"
    return f"each library's default threads ({os.cpu_count()} CPUs), wall clock"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20, help="timed runs per contender and case")
    ap.add_argument("--cases", default=",".join(ORDER), help="case keys, comma-separated")
    ap.add_argument("--peers", default=",".join(available()))
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="threads of every contender, timed in process CPU time (the host is"
        " shared); 0: each library's default, timed by the wall clock",
    )
    ap.add_argument("--write", action="store_true", help="update bench/RESULTS.md's section")
    args = ap.parse_args(argv)
    if args.threads:
        os.environ["DLRT_NUM_THREADS"] = str(args.threads)
    use_threads(args.threads)
    clock = time.process_time if args.threads else time.perf_counter
    cases = [c for c in ORDER if c in args.cases.split(",")]
    peers = [p for p in args.peers.split(",") if p in PEERS]
    threads = thread_counts(args.threads)
    print(f"Reduced precision on {cpu_name()}, {os.cpu_count()} CPUs, {threads};"
          " building our libraries…")  # fmt: skip
    by_key = {c.key: c for c in TABLE_CASES}
    rows: list[tuple[Case, str, list[float]]] = []
    failed: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="dlvm-bench-precision-") as tmp:
        wanted = builds(VARIANTS, cases)
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            libs = list(pool.map(lambda i: build(*wanted[i], Path(tmp), f"v{i}"),
                                 range(len(wanted))))  # fmt: skip
        import dlvm

        for case in cases:
            inp = inputs(case)
            blocks: dict[str, Block] = {}
            models: list[Any] = []
            for (variant, c), lib in zip(wanted, libs):
                if c != case:
                    continue
                if isinstance(lib, str):
                    failed.append((case, variant.label, f"build failed: {lib}"))
                    continue
                models.append(dlvm.load(lib, seed=0))
                blocks[variant.label] = local_block(runner(models[-1], case, inp), clock)
            for peer in peers:
                block = peer_block(case, peer, inp, args.threads, clock, failed)
                if block is not None:
                    blocks[peer] = block
            first = max(block(1)[0] for block in blocks.values())  # also the warm-up
            runs = max(BLOCK, min(args.runs, int(CASE_BUDGET_S / max(first, 1e-9))))
            for name, ts in measure(blocks, runs).items():
                rows.append((by_key[case], name, ts))
            for m in models:
                m.close()
            print(f"  {title(case)}: done ({runs} runs)")
    text = report(rows, failed, args.runs, threads)
    print(text)
    if args.write:
        path = HERE / "RESULTS.md"
        path.write_text(with_section(path.read_text(encoding="utf-8"), HEADING, text),
                        encoding="utf-8")  # fmt: skip
    return 0


def peer_block(
    case: str, peer: str, inp: dict[str, Any], threads: int, clock: Callable[[], float],
    failed: list[tuple[str, str, str]],
) -> Block | None:  # fmt: skip
    """The timed block of `peer` on `case`, warmed up, or None where it does not run the case
    (a peer that fails is recorded in `failed`)."""
    spec = PEERS[peer]
    if case not in spec.cases:
        return None
    try:
        run = spec.make(case, threads)(inp)
        if run is None:
            return None
        run()  # JAX compiles here
    except Exception as e:  # a peer's own failure is a row of the report, not the end of it
        failed.append((case, peer, f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"))
        return None
    return local_block(run, clock)


if __name__ == "__main__":
    sys.exit(main())
