"""The conformance suite's selection and report: BackendTest's CUDA tests are deselected (the
backend is the CPU), each case of known_failures.txt becomes a strict expected failure with its
reason, the selected cases are compiled together on first use (conformance_backend.SESSION),
and the summary gives each group's counts."""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path

import onnx
import pytest

sys.path.insert(0, os.path.dirname(__file__))

from conformance_backend import SESSION  # noqa: E402
from conformance_cases import GROUP_OF_CLASS, GROUPS, Case, case_id, load_cases, out_of_scope  # noqa: E402
from known_failures import PATH, read  # noqa: E402

from dlvm.artifacts import cache_dir  # noqa: E402

# BackendTest writes the light models' made-up inputs under $ONNX_HOME/models/light.
os.environ.setdefault("ONNX_HOME", str(cache_dir() / "onnx-home"))

_CASES = pytest.StashKey[dict[str, Case]]()
_IDS = pytest.StashKey[dict[str, str]]()  # node id -> case id


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--known-failures",
        default=str(PATH),
        help="the file of cases expected to fail (default: tests/onnx/known_failures.txt)",
    )


def onnx_release() -> str:
    return ".".join(onnx.__version__.split(".")[:2])


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected what they do
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    conformance = {i.nodeid for i in items if _class_name(i) in GROUP_OF_CLASS}
    if not conformance:
        return
    cases = {c.id: c for c in load_cases()}
    known = read(Path(config.getoption("--known-failures")), GROUPS)
    if known.reasons and known.onnx_version != onnx_release():
        raise pytest.UsageError(
            f"known failures were written for onnx {known.onnx_version}, this is onnx "
            f"{onnx.__version__}: run `make known-failures` to write them for it"
        )
    stale = sorted(set(known.reasons) - set(cases))
    if stale:
        raise pytest.UsageError(
            "known failures name cases the suite does not have: "
            + ", ".join(stale[:10])
            + (" …" if len(stale) > 10 else "")
            + "; run `make known-failures`"
        )
    ids: dict[str, str] = {}
    kept, dropped = [], []
    for item in items:
        if item.nodeid not in conformance:
            kept.append(item)
            continue
        cid = case_id(_class_name(item) or "", item.name)
        if cid is None:  # another device than the CPU
            dropped.append(item)
            continue
        ids[item.nodeid] = cid
        if cid in known.reasons:
            item.add_marker(pytest.mark.xfail(reason=known.reasons[cid], strict=True))
        kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    config.stash[_CASES] = cases
    config.stash[_IDS] = ids
    SESSION.select([cases[cid] for cid in ids.values()])


def _class_name(item: pytest.Item) -> str | None:
    cls = getattr(item, "cls", None)  # a unittest or class-based test's class
    return cls.__name__ if cls is not None else None


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    ids = config.stash.get(_IDS, None)
    if not ids:
        return
    cases = config.stash[_CASES]
    counts: dict[str, Counter[str]] = {g: Counter() for g in GROUPS}
    passed = set()
    for outcome in ("passed", "failed", "skipped", "xfailed", "xpassed", "error"):
        for report in terminalreporter.stats.get(outcome, []):
            cid = ids.get(getattr(report, "nodeid", ""))
            if cid is None or (report.when != "call" and outcome == "passed"):
                continue
            counts[cid.split("/")[0]][outcome] += 1
            if outcome == "passed":
                passed.add(cid)
    write = terminalreporter.write_line
    write("")
    write(f"ONNX conformance (onnx {onnx.__version__}, compiled libraries on the CPU):")
    for group, c in counts.items():
        if sum(c.values()):
            write(
                f"  {group:18} {c['passed']} passed, {c['failed'] + c['error']} failed, "
                f"{c['skipped']} skipped, {c['xfailed']} expected to fail"
            )
    scope = [cid for cid in ids.values() if cid.startswith("node/")]
    inside = [cid for cid in scope if out_of_scope(cases[cid]) is None]
    if inside:
        passing = passed & set(inside)
        fixed = sum(1 for cid in passing if SESSION.fixed_inputs(cases[cid].model))
        write(
            f"  node cases of float/int/bool tensors with static non-zero shapes: "
            f"{len(passing)} of {len(inside)} pass ({fixed} with inputs fixed at build time)"
        )
    s = SESSION.stats
    if SESSION.compile_s:
        write(
            f"  compiled in {SESSION.compile_s:.1f} s (import {s.import_s:.1f} s, build "
            f"{s.build_s:.1f} s; libraries: {s.built} built, {s.cached} cached, "
            f"{s.bisections} bisections)"
        )
