"""RNN, GRU (both reset placements) and LSTM (with peepholes too) in every direction and both
layouts, unrolled by the importer and run against ONNX's reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

from onnx import helper  # noqa: E402
from onnxlib import check, model, normal, run  # noqa: E402

from dlvm.diagnostics import DiagnosticError  # noqa: E402
from dlvm.onnx import import_model  # noqa: E402

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
HIDDEN, FEATURES, STEPS, BATCH = 5, 3, 4, 2


def recurrent_model(op: str, direction: str, layout: int = 0, **attrs):
    dirs = 2 if direction == "bidirectional" else 1
    gates = GATES[op]
    x = normal(*((BATCH, STEPS) if layout else (STEPS, BATCH)), FEATURES)
    state = (BATCH, dirs, HIDDEN) if layout else (dirs, BATCH, HIDDEN)
    inits = {
        "W": normal(dirs, gates * HIDDEN, FEATURES, seed=1) * 0.5,
        "R": normal(dirs, gates * HIDDEN, HIDDEN, seed=2) * 0.5,
        "B": normal(dirs, 2 * gates * HIDDEN, seed=3) * 0.5,
        "h0": normal(*state, seed=4),
    }
    inputs, outputs = ["x", "W", "R", "B", "", "h0"], ["y", "y_h"]
    if op == "LSTM":
        inits["c0"] = normal(*state, seed=5)
        inputs.append("c0")
        outputs.append("y_c")
    layout_attr = {"layout": layout} if layout else {}
    node = helper.make_node(
        op, inputs, outputs, hidden_size=HIDDEN, direction=direction, **layout_attr, **attrs
    )
    return model([node], {"x": x}, outputs, inits, opset=14), x


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize(
    "op, attrs", [("RNN", {}), ("GRU", {}), ("GRU", {"linear_before_reset": 1}), ("LSTM", {})]
)
def test_recurrent_layers(op, attrs, direction):
    m, x = recurrent_model(op, direction, **attrs)
    imp = check(m, {"x": x}, rtol=1e-4, atol=1e-5)
    assert [p.name for p in imp.params][:3] == ["W", "R", "B"]


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_batch_first_layout(op):
    m, x = recurrent_model(op, "bidirectional", layout=1)
    check(m, {"x": x}, rtol=1e-4, atol=1e-5)


def test_clip_bounds_the_gates():
    # onnx 1.23's reference ignores clip: an RNN of tanh whose arguments are clipped to ±0.5
    # has every output within ±tanh(0.5), which the same RNN unclipped exceeds.
    bound = float(np.tanh(0.5))
    clipped, x = recurrent_model("RNN", "forward", clip=0.5)
    free, _ = recurrent_model("RNN", "forward")
    assert np.abs(run(import_model(clipped), {"x": x})[0]).max() <= bound + 1e-6
    assert np.abs(run(import_model(free), {"x": x})[0]).max() > bound


def test_unsupported_activation_is_reported():
    m, _ = recurrent_model(
        "RNN", "forward", activations=["Affine"], activation_alpha=[2.0], activation_beta=[0.5]
    )
    with pytest.raises(DiagnosticError, match=r"\(RNN, opset 14\): not supported: the activation"):
        import_model(m)


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_lstm_peepholes(direction):
    dirs = 2 if direction == "bidirectional" else 1
    x = normal(STEPS, BATCH, FEATURES)
    inits = {
        "W": normal(dirs, 4 * HIDDEN, FEATURES, seed=1) * 0.5,
        "R": normal(dirs, 4 * HIDDEN, HIDDEN, seed=2) * 0.5,
        "B": normal(dirs, 8 * HIDDEN, seed=3) * 0.5,
        "c0": normal(dirs, BATCH, HIDDEN, seed=5),
        "P": normal(dirs, 3 * HIDDEN, seed=6),
    }
    node = helper.make_node(
        "LSTM", ["x", "W", "R", "B", "", "", "c0", "P"], ["y", "y_h", "y_c"],
        hidden_size=HIDDEN, direction=direction,
    )  # fmt: skip
    m = model([node], {"x": x}, ["y", "y_h", "y_c"], inits, opset=14)
    check(m, {"x": x}, rtol=1e-4, atol=1e-5)
