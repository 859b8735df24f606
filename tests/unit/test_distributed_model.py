"""bench/distributed_model.py, the cost model of docs/distributed.md: its formulas on cases
worked by hand, the shape of its predictions (efficiency at most 1, falling with the GPUs), and
`--write`, which must give the same page every time and the page committed."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import benchlib
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "distributed_model.py"


dm = benchlib.load("distributed_model")
S, B, ALPHA = 8e6, 1e9, 5e-6  # 8 MB over 1 GB/s links, 5 us a message


def test_ring_on_two_ranks() -> None:
    # 2(p-1)/p = 1: each rank sends half, then receives the other half's sum: S/B + 2 alpha.
    assert dm.ring_allreduce(2, S, B, ALPHA) == pytest.approx(8e-3 + 10e-6)


def test_ring_on_eight_ranks() -> None:
    # 2 * 7/8 * 8 ms + 14 * 5 us = 14 ms + 70 us
    assert dm.ring_allreduce(8, S, B, ALPHA) == pytest.approx(14.07e-3)


def test_latency_terms() -> None:
    assert dm.ring_allreduce(8, 0.0, B, ALPHA) == pytest.approx(14 * ALPHA)  # 2(p-1)
    assert dm.tree_allreduce(8, 0.0, B, ALPHA) == pytest.approx(6 * ALPHA)  # 2 log2 p
    assert dm.tree_allreduce(256, 0.0, B, ALPHA) == pytest.approx(16 * ALPHA)
    assert dm.tree_allreduce(1, S, B, ALPHA) == 0.0
    assert dm.tree_allreduce(8, S, B, ALPHA) == pytest.approx(16e-3 + 30e-6)


def test_small_messages_take_the_tree_and_large_ones_the_ring() -> None:
    assert dm.between_machines(32, 1e3, B)[1] == "tree"
    assert dm.between_machines(4, 1e9, B)[1] == "ring"


def test_one_machine_is_nvlink_only() -> None:
    inside = 7 / 8 * S / dm.NVLINK_BYTES_PER_S + 7 * dm.ALPHA_NVLINK
    for gbps in dm.NETWORKS_GBPS:
        t = dm.hierarchical_allreduce(8, S, dm.link_bytes(gbps))
        assert t == pytest.approx(2 * inside)
    # Two machines: 8 all-reduces of S/8 at once, a ring of two (cheaper than the tree here).
    two = dm.hierarchical_allreduce(16, S, B)
    assert two == pytest.approx(2 * inside + dm.ring_allreduce(2, S / 8, B, dm.ALPHA_NET))


def test_mlp_parameters() -> None:
    assert dm.MLP_PARAMS == 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10 == 535_818
    assert dm.MLP_OURS.grad_bytes == 4 * 535_818
    backward, forward = 784 * 512 + 2 * 512 * 256 + 2 * 256 * 10, 535_040  # multiply-adds
    share = dm.MLP_BACKWARD_SHARE
    assert backward == 668_672 and share == pytest.approx(backward / (backward + forward))


def test_one_bucket_is_no_overlap() -> None:
    def allreduce(nbytes: float) -> float:
        return 1e-3 + nbytes / 1e9

    one = [dm.Bucket(S, 0.02)]
    assert dm.overlapped_backward(one, allreduce) == pytest.approx(0.02 + allreduce(S))


@pytest.mark.parametrize("k", [2, 4, 16, 64])
def test_even_buckets_follow_the_closed_form(k: int) -> None:
    # d_k = max(T_b + T_ar(S/k), T_b/k + k T_ar(S/k)), either side of the break-even.
    def allreduce(nbytes: float) -> float:
        return 1e-4 + nbytes / 1e10

    backward = 4e-3
    c = allreduce(S / k)
    expected = max(backward + c, backward / k + k * c)
    got = dm.overlapped_backward(dm.even_buckets(S, backward, k), allreduce)
    assert got == pytest.approx(expected)


def test_buckets_pay_exactly_below_the_break_even() -> None:
    latency = 1e-4
    model = dm.resnet50("r", "r", 1000.0)

    def allreduce(nbytes: float) -> float:
        return latency + nbytes / 1e10

    plain = model.backward + allreduce(model.grad_bytes)
    k_max = model.backward / latency  # L < T_backward / k
    assert dm.smallest_paying_bucket(model, allreduce) == pytest.approx(model.grad_bytes / k_max)
    for k, pays in ((math.floor(k_max) - 1, True), (math.ceil(k_max) + 1, False)):
        buckets = dm.even_buckets(model.grad_bytes, model.backward, k)
        assert (dm.overlapped_backward(buckets, allreduce) < plain) is pays


@pytest.mark.parametrize("model", [dm.MLP_OURS, dm.MLP_JAX, dm.RESNET_F32, dm.RESNET_MIXED],
                         ids=lambda m: m.name)  # fmt: skip
@pytest.mark.parametrize("gbps", dm.NETWORKS_GBPS)
def test_efficiency_is_at_most_one_and_falls_with_the_gpus(model: Any, gbps: int) -> None:
    plain, over = [], []
    for p in dm.GPUS:
        allreduce = dm.hierarchical(p, gbps)
        plain.append(dm.efficiency(model, dm.step_time(model, allreduce)))
        over.append(dm.efficiency(model, dm.best_overlapped_step(model, allreduce)[0]))
    for e in (plain, over):
        assert all(0 < x <= 1 for x in e)
        assert all(a > b for a, b in zip(e, e[1:])), e
    assert all(o >= p for o, p in zip(over, plain))  # one bucket is among the bucketings


def test_write_is_deterministic_and_the_page_is_current(tmp_path: Path) -> None:
    page = tmp_path / "distributed.md"
    shutil.copy(dm.DOC, page)
    written = []
    for _ in range(2):
        subprocess.run([sys.executable, str(SCRIPT), "--write", "--doc", str(page)],
                       check=True, capture_output=True)  # fmt: skip
        written.append(page.read_bytes())
    assert written[0] == written[1]
    assert written[0] == dm.DOC.read_bytes(), "run: python bench/distributed_model.py --write"


def test_write_needs_the_markers(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# no markers\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="markers"):
        dm.write(page, "table\n")
    assert page.read_text(encoding="utf-8") == "# no markers\n"
