"""Writes tests/onnx/known_failures.txt (`make known-failures`): runs every case of the suite's
groups on the CPU through the same BackendTest tests and backend as `make conformance`, and
lists each that fails with its reason (conformance_reasons), then prints the counts per group
and per category.

    python tests/onnx/update_known_failures.py [--output PATH]"""

from __future__ import annotations

import argparse
import os
import sys
import time
import unittest
import warnings
from collections import Counter
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import onnx  # noqa: E402
import onnx.backend.test  # noqa: E402
from conformance_backend import SESSION, DlvmBackend  # noqa: E402
from conformance_cases import GROUPS, case_id, load_cases, out_of_scope  # noqa: E402
from conformance_reasons import category, reason  # noqa: E402
from known_failures import PATH, text  # noqa: E402

from dlvm.artifacts import cache_dir  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--output", type=Path, default=PATH)
    args = ap.parse_args(argv)
    os.environ.setdefault("ONNX_HOME", str(cache_dir() / "onnx-home"))
    t0 = time.perf_counter()
    cases = {c.id: c for c in load_cases()}
    SESSION.select(list(cases.values()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        suite = onnx.backend.test.BackendTest(DlvmBackend, __name__)
    reasons: dict[str, str] = {}
    counts: dict[str, Counter[str]] = {g: Counter() for g in GROUPS}
    for class_name, test_class in suite.test_cases.items():
        for name in sorted(n for n in dir(test_class) if n.startswith("test_")):
            cid = case_id(class_name, name)
            if cid is None:
                continue
            group = cid.split("/")[0]
            try:
                getattr(test_class(name), name)()
            except unittest.SkipTest:
                counts[group]["skipped"] += 1
                continue
            except Exception as e:  # every failure is a line of the file
                reasons[cid] = reason(cases[cid], e)
                counts[group]["failed"] += 1
                continue
            counts[group]["passed"] += 1
    release = ".".join(onnx.__version__.split(".")[:2])
    args.output.write_text(text(reasons, release), encoding="utf-8")
    print(f"wrote {args.output}: {len(reasons)} known failures ({time.perf_counter() - t0:.0f} s)")
    for group, c in counts.items():
        print(f"  {group:18} {c['passed']} passed, {c['failed']} failing, {c['skipped']} skipped")
    inside = [cid for cid, c in cases.items() if c.group == "node" and out_of_scope(c) is None]
    passing = [cid for cid in inside if cid not in reasons]
    fixed = sum(1 for cid in passing if SESSION.fixed_inputs(cases[cid].model))
    print(f"  node cases of float/int/bool tensors with static non-zero shapes: {len(passing)} "
          f"of {len(inside)} pass ({fixed} with inputs fixed at build time)")  # fmt: skip
    for name, n in Counter(category(r) for r in reasons.values()).most_common():
        print(f"  {n:5}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
