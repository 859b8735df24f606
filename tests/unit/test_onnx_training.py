"""The optimisers of ai.onnx.preview.training (Adagrad, Adam, Momentum) against ONNX's reference
evaluator: one tensor and two, the first step (T = 0) and a later one."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

from onnx import helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from onnxlib import normal, positive, run  # noqa: E402

from dlvm.diagnostics import DiagnosticError  # noqa: E402
from dlvm.onnx import import_model  # noqa: E402

DOMAIN = "ai.onnx.preview.training"
STATES = {"Adagrad": ["h"], "Adam": ["v", "h"], "Momentum": ["v"]}


def optimiser(op: str, tensors: int, **attrs):  # type: ignore[no-untyped-def]
    """A model of one `op` node updating `tensors` tensors of shape (2, 3), and its inputs."""
    groups = ["x", "g", *STATES[op]]
    names = [f"{k}{i}" for k in groups for i in range(tensors)]
    outs = [f"{k}{i}_new" for k in ["x", *STATES[op]] for i in range(tensors)]
    feeds = {"r": np.array(0.1, np.float32), "t": np.array(0, np.int64)}
    for seed, n in enumerate(names):
        feeds[n] = positive(2, 3, seed=seed) if n[0] == "h" else normal(2, 3, seed=seed)
    node = helper.make_node(op, ["r", "t", *names], outs, domain=DOMAIN, name="step", **attrs)
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for n, v in feeds.items()]  # fmt: skip
    outputs = [helper.make_tensor_value_info(n, 1, (2, 3)) for n in outs]
    m = helper.make_model(
        helper.make_graph([node], "g", ins, outputs),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)],
    )
    return m, feeds


CASES = [
    ("Adagrad", {"decay_factor": 0.1, "epsilon": 1e-5, "norm_coefficient": 0.01}),
    ("Adam", {"alpha": 0.9, "beta": 0.99, "epsilon": 1e-5, "norm_coefficient_post": 0.1}),
    ("Momentum", {"alpha": 0.9, "beta": 0.5, "mode": "standard", "norm_coefficient": 0.01}),
    ("Momentum", {"alpha": 0.9, "beta": 0.5, "mode": "nesterov", "norm_coefficient": 0.0}),
]


@pytest.mark.parametrize("op, attrs", CASES, ids=[f"{c[0]}-{c[1].get('mode', '')}" for c in CASES])
@pytest.mark.parametrize("tensors", [1, 2])
@pytest.mark.parametrize("step", [0, 3])
def test_one_update_matches_the_reference(op, attrs, tensors, step):
    m, feeds = optimiser(op, tensors, **attrs)
    feeds["t"] = np.array(step, np.int64)
    imp = import_model(m, shapes={n: v.shape for n, v in feeds.items()})
    expected = ReferenceEvaluator(m).run(None, feeds)
    for got, want in zip(run(imp, feeds), expected):
        np.testing.assert_allclose(got, np.asarray(want, np.float32), rtol=1e-5, atol=1e-6)


def test_a_momentum_mode_other_than_standard_or_nesterov_is_refused():
    m, _ = optimiser("Momentum", 1, alpha=0.9, beta=0.5, mode="heavy", norm_coefficient=0.0)
    with pytest.raises(DiagnosticError) as e:
        import_model(m)
    assert [d.render() for d in e.value.diagnostics] == [
        f"error: <onnx model>: node 'step' ({DOMAIN}.Momentum, opset 1): not supported: "
        "mode='heavy' is not 'standard' or 'nesterov'"
    ]
