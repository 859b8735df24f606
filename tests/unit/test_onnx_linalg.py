"""Det of batches of small matrices (singular ones and ones whose first pivot is zero
included) against NumPy, through the interpreter and a compiled build; matrices too large for
the Leibniz formula are refused with a located diagnostic."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

from onnxlib import check, check_compiled, normal, single  # noqa: E402

from dlvm.diagnostics import DiagnosticError  # noqa: E402
from dlvm.onnx import import_model  # noqa: E402


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_det(n):
    x = normal(3, n, n)
    check(single("Det", {"x": x}, opset=11), {"x": x}, rtol=1e-4, atol=1e-5)


def test_det_of_a_zero_pivot_and_a_singular_matrix(tmp_path):
    x = np.array([[[0, 1, 2], [3, 0, 1], [1, 1, 0]], [[1, 2, 3], [2, 4, 6], [0, 1, 1]]], np.float32)
    check(single("Det", {"x": x}, opset=11), {"x": x})
    check_compiled(single("Det", {"x": x}, opset=11), {"x": x}, tmp_path)


def test_a_large_matrix_is_refused():
    with pytest.raises(DiagnosticError) as e:
        import_model(single("Det", {"x": normal(6, 6)}, opset=11))
    assert "(Det, opset 11): the determinant of 6 x 6 matrices" in str(e.value)
