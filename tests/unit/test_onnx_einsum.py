"""Einsum against ONNX's reference evaluator: transposes, sums, diagonals, batched products,
ellipses, implicit outputs and three operands."""

from __future__ import annotations

import pytest

pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

from onnxlib import check, check_compiled, normal, single  # noqa: E402

CASES = [
    ("ij->ji", [(3, 4)]),
    ("ij->i", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("...ii->...i", [(2, 3, 3)]),
    ("ii", [(4, 4)]),
    ("i,i", [(5,), (5,)]),
    ("ij,jk", [(2, 3), (3, 4)]),
    ("bij, bkj -> bki", [(2, 3, 4), (2, 5, 4)]),
    ("...ij,...jk->...ik", [(2, 2, 3), (2, 3, 4)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
]


@pytest.mark.parametrize("equation,shapes", CASES)
def test_einsum(equation, shapes):
    inputs = {f"x{i}": normal(*s, seed=i) for i, s in enumerate(shapes)}
    check(single("Einsum", inputs, opset=12, equation=equation), inputs, rtol=1e-5)


def test_einsum_compiled(tmp_path):
    inputs = {"a": normal(2, 3, 3), "b": normal(2, 3, 5, seed=1)}
    m = single("Einsum", inputs, opset=12, equation="bii,bjk->bjk")
    check_compiled(m, inputs, tmp_path, rtol=1e-5)
