"""MatMul (any rank, broadcasting batches, vectors) and Gemm (transA, transB, alpha, beta)
imported and run against ONNX's reference evaluator."""

from __future__ import annotations

import pytest

pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

from onnxlib import check, normal, single  # noqa: E402

SHAPES = [
    ((3, 4), (4, 5)),
    ((4,), (4, 5)),
    ((3, 4), (4,)),
    ((4,), (4,)),
    ((2, 3, 4), (4, 5)),  # a batch times one matrix: one taller product
    ((2, 3, 4), (2, 4, 5)),
    ((2, 1, 3, 4), (5, 4, 2)),  # batches that broadcast
]


@pytest.mark.parametrize("sa, sb", SHAPES)
def test_matmul(sa, sb):
    a, b = normal(*sa, seed=1), normal(*sb, seed=2)
    check(single("MatMul", {"a": a, "b": b}), {"a": a, "b": b})


@pytest.mark.parametrize("trans_a, trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm_transposes_and_scales(trans_a, trans_b):
    a = normal(*((4, 3) if trans_a else (3, 4)), seed=1)
    b = normal(*((5, 4) if trans_b else (4, 5)), seed=2)
    c = normal(5, seed=3)
    m = single(
        "Gemm", {"a": a}, {"b": b, "c": c}, transA=trans_a, transB=trans_b, alpha=0.5, beta=2.0
    )
    imp = check(m, {"a": a})
    assert [p.name for p in imp.params] == ["b", "c"]


def test_gemm_without_bias():
    a, b = normal(3, 4), normal(4, 2, seed=1)
    check(single("Gemm", {"a": a, "b": b}), {"a": a, "b": b})
