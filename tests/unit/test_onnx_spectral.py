"""DFT (forward, inverse, one-sided, real and complex inputs, a dft_length that pads or cuts,
the axis as an attribute and as an input), STFT, and the Hann, Hamming and Blackman windows,
against ONNX's reference evaluator; a window size the graph computes is refused."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

from onnx import helper  # noqa: E402
from onnxlib import check, check_compiled, model, normal, single  # noqa: E402

from dlvm.diagnostics import DiagnosticError  # noqa: E402
from dlvm.onnx import import_model  # noqa: E402

REAL, COMPLEX = normal(2, 8, 3, 1), normal(2, 8, 3, 2)


# (input, inverse, onesided): an inverse one-sided DFT takes a complex (one-sided) spectrum.
KINDS = [(REAL, 0, 0), (REAL, 1, 0), (REAL, 0, 1), (COMPLEX, 0, 0), (COMPLEX, 1, 0),
         (COMPLEX, 0, 1), (COMPLEX, 1, 1)]  # fmt: skip


@pytest.mark.parametrize("x,inverse,onesided", KINDS)
@pytest.mark.parametrize("axis", [1, 2])
def test_dft_opset_17(x, inverse, onesided, axis):
    m = single("DFT", {"x": x}, opset=17, axis=axis, inverse=inverse, onesided=onesided)
    check(m, {"x": x}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("length", [5, 12])
def test_dft_opset_20_with_a_length_and_an_axis(length, tmp_path):
    given = {"n": np.array(length, np.int64), "axis": np.array(-3, np.int64)}
    node_inputs = {"x": COMPLEX}
    node = helper.make_node("DFT", ["x", "n", "axis"], ["y"])
    m = model([node], node_inputs, ["y"], given, opset=20)
    check(m, node_inputs, rtol=1e-4, atol=1e-5)
    if length == 5:
        check_compiled(m, node_inputs, tmp_path, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("window", [False, True])
def test_stft(window):
    signal = normal(2, 32, 1)
    consts = {"step": np.array(4, np.int64)}
    if window:
        consts["window"] = np.hanning(8).astype(np.float32)
    else:
        consts["window"] = np.ones(8, np.float32)
    check(
        single("STFT", {"signal": signal}, consts, opset=17),
        {"signal": signal},
        rtol=1e-4,
        atol=1e-5,
    )


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
def test_windows(op, periodic):
    x = normal(1)
    size = helper.make_node("Constant", [], ["n"], value=helper.make_tensor("n", 7, [], [10]))
    win = helper.make_node(op, ["n"], ["w"], periodic=periodic)
    add = helper.make_node("Add", ["w", "x"], ["y"])
    m = model([size, win, add], {"x": x}, ["y"], opset=17)
    check(m, {"x": x}, rtol=1e-6, atol=1e-7)


def test_a_computed_window_size_is_refused():
    n = np.array(10, np.int64)
    with pytest.raises(DiagnosticError) as e:
        import_model(single("HannWindow", {"n": n}, opset=17))
    assert "(HannWindow, opset 17): not supported: input 0 ('n') must be known" in str(e.value)


def test_mel_weight_matrix_of_known_inputs():
    # Float initializers are not folded (they are parameters), so the handler computes it.
    x = normal(9, 8)
    given = {
        "bins": np.array(8, np.int32),
        "length": np.array(16, np.int32),
        "rate": np.array(8192, np.int32),
        "low": np.array(0.0, np.float32),
        "high": np.array(4096.0, np.float32),
    }
    nodes = [
        helper.make_node("MelWeightMatrix", list(given), ["m"]),
        helper.make_node("Add", ["m", "x"], ["y"]),
    ]
    check(model(nodes, {"x": x}, ["y"], given, opset=17), {"x": x})
