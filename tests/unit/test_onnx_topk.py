"""TopK (k known at import) against ONNX's reference evaluator: largest and smallest, ties
broken by the lowest index, infinities among the values, integers, k as an attribute before
opset 10; a k the graph computes is refused with a located diagnostic."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

from onnxlib import check, check_compiled, normal, single  # noqa: E402

from dlvm.diagnostics import DiagnosticError  # noqa: E402
from dlvm.onnx import import_model  # noqa: E402

K2 = {"k": np.array([2], np.int64)}


@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_top_k(largest, axis):
    x = normal(4, 5)
    check(single("TopK", {"x": x}, K2, outputs=2, axis=axis, largest=largest), {"x": x})


def test_ties_take_the_lowest_index_and_infinities_count():
    x = np.array([[1, 3, 3, 0, 3], [-np.inf, -np.inf, 2, -np.inf, 5]], np.float32)
    k = {"k": np.array([4], np.int64)}
    for largest in (0, 1):
        check(single("TopK", {"x": x}, k, outputs=2, largest=largest), {"x": x})


def test_integers_and_the_attribute_k_of_opset_9(tmp_path):
    x = np.array([[5, 1, 5, 2], [0, 0, 7, 7]], np.int32)
    check(single("TopK", {"x": x}, opset=9, outputs=2, k=3), {"x": x})
    check_compiled(single("TopK", {"x": x}, K2, outputs=2, largest=0), {"x": x}, tmp_path)


def test_a_computed_k_is_refused():
    x, k = normal(3, 4), np.array([2], np.int64)
    with pytest.raises(DiagnosticError) as e:
        import_model(single("TopK", {"x": x, "k": k}, outputs=2))
    assert "(TopK, opset 17): not supported: input 1 ('k') must be known" in str(e.value)
