"""How fast the IR core is: parse, verify, print, DCE and CSE over a generated 20,000-instruction
module (deterministic), best of N runs, against the goal of 50,000 instructions per second for
parse + verify + print together. Reports only; the exit status is always 0."""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "unit"))

from irgen import IRGen  # noqa: E402

from dlvm.ir import module_text, parse_module  # noqa: E402
from dlvm.ir.analysis_cache import invalidate  # noqa: E402
from dlvm.ir.values import Module  # noqa: E402
from dlvm.ir.verifier import verify  # noqa: E402
from dlvm.transforms.common_subexpression_elimination import (  # noqa: E402
    CommonSubexpressionElimination,
)
from dlvm.transforms.dead_code_elimination import DeadCodeElimination  # noqa: E402

GOAL = 50_000  # instructions per second for parse + verify + print
SEED = 20_000


def instruction_count(module: Module) -> int:
    return sum(len(b.instructions) for f in module.functions for b in f.blocks)


def generate(target: int, per_function: int = 300) -> Module:
    """Functions of about `per_function` instructions over model-sized tensors, with diamonds
    and loops passing values through block arguments, until the module has `target`."""
    gen = IRGen(SEED, dims=(1, 8, 16, 32, 64, 128, 256), max_rank=3, branch_rate=0.01)
    module = gen.module("bench", functions=0, helpers=4, size=per_function // 4)
    i = 0
    while instruction_count(module) < target:
        module.add_function(gen.function(f"layer{i}", per_function, control_flow=True))
        i += 1
    return module


def json_peer(text: str) -> str:
    """The module as JSON: one record per function, block and instruction (`[result, opcode,
    [operand, …]]`), about the size of the IR text."""
    functions: list[dict] = []
    for line in text.splitlines():
        if line.startswith("func "):
            functions.append({"func": line[5:], "blocks": []})
        elif line.startswith("'"):
            functions[-1]["blocks"].append({"label": line, "instructions": []})
        elif line.startswith("    ") and functions:
            result, sep, body = line.strip().partition(" = ")
            if not sep:
                result, body = "", result
            opcode, _, rest = body.partition(" ")
            functions[-1]["blocks"][-1]["instructions"].append([result, opcode, rest.split(", ")])
    return json.dumps({"functions": functions})


def best(runs: int, setup: Callable[[], object], work: Callable[[object], object]) -> float:
    """The fastest of `runs` timings of work(setup()); setup is not timed."""
    times = []
    for _ in range(runs):
        arg = setup()
        invalidate()  # cold analysis caches, as in a fresh process
        # Collect the previous runs' modules now: a fresh process has no such garbage, and the
        # collector would otherwise walk it at a random point inside a later timed run.
        gc.collect()
        start = time.perf_counter()
        work(arg)
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--instructions", type=int, default=20_000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args(argv)

    module = generate(args.instructions)
    text = module_text(module)
    n = instruction_count(module)
    assert verify(module) == [], "the generated module must be valid"
    blocks = sum(len(f.blocks) for f in module.functions)
    print(
        f"IR speed: {n:,} instructions in {len(module.functions)} functions, {blocks} blocks, "
        f"{len(text) / 1e6:.1f} MB of text; best of {args.runs} runs"
    )

    def fresh() -> Module:
        return parse_module(text)

    rows = [
        ("parse", best(args.runs, lambda: text, parse_module)),
        ("verify", best(args.runs, fresh, verify)),
        ("print", best(args.runs, fresh, module_text)),
        ("dead-code-elimination (DCE)", best(args.runs, fresh, DeadCodeElimination().run)),
        (
            "common-subexpression-elimination (CSE)",
            best(args.runs, fresh, CommonSubexpressionElimination().run),
        ),
    ]

    def pipeline(source: str) -> None:
        m = parse_module(source)
        diags = verify(m)
        assert not diags
        module_text(m)

    combined = best(args.runs, lambda: text, pipeline)
    rows.append(("parse + verify + print", combined))

    print()
    print(f"{'stage':40} {'seconds':>9} {'instr/s':>12}")
    for name, seconds in rows:
        print(f"{name:40} {seconds:9.4f} {n / seconds:12,.0f}")
    rate = n / combined
    verdict = "goal met" if rate >= GOAL else "goal NOT met"
    print(f"\nparse + verify + print: {rate:,.0f} instr/s against a goal of {GOAL:,}: {verdict}")

    doc = json_peer(text)
    loads = best(args.runs, lambda: doc, json.loads)
    print(
        f"\nPeer reference (rough): json.loads of a {len(doc) / 1e6:.1f} MB JSON document with one "
        f"record per instruction takes {loads:.4f} s;"
    )
    print(f"parse + verify + print takes {combined / loads:.1f}x as long.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
