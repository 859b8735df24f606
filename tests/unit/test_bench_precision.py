"""bench/precision.py's own parts, without the peers' libraries: each variant's TEL source
compiles for the cases it names, the goals judge every reduced-precision variant (never ours
in f32) against a measured reference, the report prints ratios and verdicts, and `--write`
replaces its section of bench/RESULTS.md and nothing else."""

from __future__ import annotations

import sys

import benchlib
import pytest

from telc.driver import compile_text

bp = benchlib.load("precision")
BUILDS = [(v.label, v.flags, v.source, case) for v, case in bp.builds(bp.VARIANTS, bp.ORDER)]


@pytest.mark.parametrize("label,flags,source,case", BUILDS)
def test_each_variant_compiles_for_its_cases(
    label: str, flags: tuple[str, ...], source: str, case: str
) -> None:
    """The entry the benchmark calls takes the case's inputs, by name and shape."""
    compiled = compile_text(f"{case}.tel", source, bp.defines(case))
    entries = {e.name: e for e in compiled.spec.entries}
    name, names = sys.modules["cases"].ENTRIES[case]
    inp = bp.inputs(case)
    assert [(i.name, tuple(i.shape)) for i in entries[name].inputs] == [
        (n, inp[n].shape) for n in names
    ]


def test_every_case_has_ours_in_f32_and_a_reduced_variant() -> None:
    for case in bp.ORDER:
        labels = [v.label for v, c in bp.builds(bp.VARIANTS, [case])]
        assert labels[0] == bp.F32 and len(labels) >= 2, case


def test_goals_name_measured_contenders() -> None:
    for goal in bp.GOALS:
        assert goal.case in bp.ORDER
        assert goal.reference == bp.F32 or goal.reference in bp.PEERS
        assert goal.case in bp.PEERS[goal.reference].cases if goal.reference in bp.PEERS else True


def test_ratios_judge_reduced_variants_against_the_reference() -> None:
    medians = {
        ("mlp_b256", "ours f32"): 2.0,
        ("mlp_b256", "ours bf16"): 1.0,
        ("mlp_b256", "ours int8"): 1.5,
        ("mlp_b256", "onnxruntime f32"): 4.0,
        ("mlp_b1", "ours bf16"): 1.0,  # neither ORT measured: no batch-1 goal
    }
    found = {(label, goal.text): r for _, label, goal, r in bp.ratios(medians)}
    text = "batch-256 throughput ≥ 1.6× ours f32"
    assert found == {("ours bf16", text): 0.5, ("ours int8", text): 0.75}


def test_report_prints_ratios_failures_and_verdicts() -> None:
    by_key = {c.key: c for c in bp.CASES}
    rows = [
        (by_key["matmul"], "ours f32", [0.100, 0.110, 0.090]),
        (by_key["matmul"], "ours bf16", [0.050, 0.052, 0.051]),
        (by_key["matmul"], "torch bf16", [0.040]),
        (by_key["chain"], "ours --fast-math", [0.004]),
        (by_key["chain"], "jax (donated)", [0.010]),
    ]
    failed = [("mlp_b1", "ours int8", "build failed: no such option: --quantize")]
    text = bp.report(rows, failed, 10, "every contender on 1 thread(s), process CPU time")
    assert "| matmul 2048^3 | ours bf16 | 51.000 | 50.000 | 336.9 GFLOP/s | 0.51 |" in text
    assert "| matmul 2048^3 | torch bf16 | 40.000 | 40.000 | 429.5 GFLOP/s | 0.40 |" in text
    assert "| ours int8 | build failed: no such option: --quantize |" in text
    assert "| 2048³ GFLOP/s ≥ 1.8× ours f32 | ours bf16 | 0.510 (≤ 0.556) | yes |" in text
    assert "| GB/s ≥ 2× JAX's (donated buffer) | ours --fast-math | 0.400 (≤ 0.500) | yes |" in text
    assert "on 1 thread(s), process CPU time" in text


def test_with_section_replaces_only_its_own_section() -> None:
    old = "# R\n\nhead\n\n## A\n\na\n\n## Reduced\n\nold table\n\n## B\n\nb\n"
    new = bp.with_section(old, "## Reduced", "new table")
    assert new == "# R\n\nhead\n\n## A\n\na\n\n## Reduced\n\nnew table\n\n## B\n\nb\n"
    assert bp.with_section(new, "## Reduced", "new table") == new
    appended = bp.with_section("# R\n\n## A\n\na\n", "## Reduced", "t")
    assert appended == "# R\n\n## A\n\na\n\n## Reduced\n\nt\n"
    last = bp.with_section(appended, "## Reduced", "u")
    assert last == "# R\n\n## A\n\na\n\n## Reduced\n\nu\n"
