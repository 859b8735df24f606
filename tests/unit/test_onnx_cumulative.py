"""CumSum and CumProd against ONNX's reference evaluator: reverse, exclusive (zeros among the
factors), integers, negative axes, one element, and a compiled build."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

from onnxlib import check, check_compiled, normal, single  # noqa: E402


@pytest.mark.parametrize(
    "attrs", [{}, {"reverse": 1}, {"exclusive": 1}, {"reverse": 1, "exclusive": 1}]
)
@pytest.mark.parametrize("axis", [0, -1])
def test_cumprod(attrs, axis):
    # Zeros among the factors: an exclusive product is the shifted input's, never a quotient.
    x = np.array([[1.5, 0.0, 2.0, -1.0], [2.0, 3.0, 0.5, 0.0]], np.float32)
    given = {"axis": np.array(axis, np.int32)}
    check(single("CumProd", {"x": x}, given, opset=26, **attrs), {"x": x})
    ints = x.astype(np.int64)
    check(single("CumProd", {"x": ints}, given, opset=26, **attrs), {"x": ints})


def test_exclusive_cumsum_of_one_element():
    x = normal(3, 1)
    given = {"axis": np.array(1, np.int64)}
    check(single("CumSum", {"x": x}, given, exclusive=1), {"x": x})


def test_exclusive_reverse_cumprod_compiled(tmp_path):
    x = normal(3, 4)
    given = {"axis": np.array(1, np.int64)}
    m = single("CumProd", {"x": x}, given, opset=26, exclusive=1, reverse=1)
    check_compiled(m, {"x": x}, tmp_path)
