"""BitCast between float and integer types of one width, through the interpreter and compiled
code, against ONNX's reference evaluator; a target type DLVM IR lacks is refused."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

from onnx import TensorProto  # noqa: E402
from onnxlib import check, check_compiled, normal, single  # noqa: E402

from dlvm.diagnostics import DiagnosticError  # noqa: E402
from dlvm.onnx import import_model  # noqa: E402


@pytest.mark.parametrize(
    "x,to",
    [
        (normal(2, 3), TensorProto.INT32),
        (np.array([1, -7, 1 << 40], np.int64), TensorProto.DOUBLE),
        (normal(4, dtype=np.float16), TensorProto.INT16),
    ],
)
def test_bit_cast(x, to, tmp_path):
    m = single("BitCast", {"x": x}, opset=26, to=to)
    check(m, {"x": x})
    check_compiled(m, {"x": x}, tmp_path)


def test_a_bit_cast_to_an_unsigned_type_is_refused():
    with pytest.raises(DiagnosticError) as e:
        import_model(single("BitCast", {"x": normal(3)}, opset=26, to=TensorProto.UINT32))
    assert "(BitCast, opset 26): not supported: a bit cast to UINT32" in str(e.value)
