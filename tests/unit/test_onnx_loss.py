"""The classification losses (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss) against ONNX's
reference evaluator, compiled, differentiated, and refused where an attribute is unknown."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

from irlib import ir_library  # noqa: E402
from onnx import helper  # noqa: E402
from onnxlib import check, normal, single  # noqa: E402

import dlvm  # noqa: E402
from dlvm.diagnostics import DiagnosticError  # noqa: E402
from dlvm.interp import run_function  # noqa: E402
from dlvm.ir import module_text  # noqa: E402
from dlvm.ir.builder import gradient_declaration  # noqa: E402
from dlvm.onnx import import_model  # noqa: E402
from dlvm.transforms.pass_manager import PassManager  # noqa: E402

X = normal(3, 5, 2)
TARGET = np.array([[0, 4], [1, 1], [3, 2]], np.int64)
WEIGHT = np.abs(normal(5, seed=2)) + 0.1

# (reduction, ignore_index or None, with a weight): ignore_index inside the classes, outside
# them (above and negative, as a padding label is), and absent.
CASES = [
    ("none", None, False),
    ("sum", None, True),
    ("mean", None, False),
    ("mean", None, True),
    ("mean", 1, False),
    ("mean", 1, True),
    ("sum", 4, True),
    ("none", -1, True),
    ("mean", 10, True),
]


def loss_model(op: str, reduction: str, ignore: int | None, weighted: bool, outputs: int = 1):
    attrs: dict = {"reduction": reduction}
    if ignore is not None:
        attrs["ignore_index"] = ignore
    inputs = {"x": X, "t": TARGET}
    if weighted:
        inputs["w"] = WEIGHT
    return single(op, inputs, opset=13, outputs=outputs, **attrs), inputs


@pytest.mark.parametrize("reduction, ignore, weighted", CASES)
def test_negative_log_likelihood(reduction, ignore, weighted):
    m, inputs = loss_model("NegativeLogLikelihoodLoss", reduction, ignore, weighted)
    check(m, inputs)


@pytest.mark.parametrize("reduction, ignore, weighted", CASES)
def test_softmax_cross_entropy_and_its_log_prob(reduction, ignore, weighted):
    m, inputs = loss_model("SoftmaxCrossEntropyLoss", reduction, ignore, weighted, outputs=2)
    check(m, inputs)


def test_targets_of_int32_on_rank_four_and_an_ignored_class():
    x = normal(2, 3, 2, 2)
    t = np.array([[[0, 2], [1, 1]], [[2, 0], [0, 1]]], np.int32)
    node = single("SoftmaxCrossEntropyLoss", {"x": x, "t": t}, opset=13, ignore_index=0)
    check(node, {"x": x, "t": t})
    wide = single("NegativeLogLikelihoodLoss", {"x": x, "t": t}, ignore_index=1 << 40)
    check(wide, {"x": x, "t": t})  # an ignore_index no int32 target can equal
    double = x.astype(np.float64)
    check(single("NegativeLogLikelihoodLoss", {"x": double, "t": t}), {"x": double, "t": t})


def test_compiled_loss_and_its_gradient_match_numpy(tmp_path):
    """d mean-SCE / d scores = (softmax − one-hot) · w[t] / Σ w[t], with the ignored targets
    contributing nothing: the IR's AD of the imported graph, compiled, against that formula."""
    m, inputs = loss_model("SoftmaxCrossEntropyLoss", "mean", 1, True)
    imp = import_model(m, name="sce")
    fn = imp.function
    imp.module.add_function(gradient_declaration("sce_grad", fn, wrt=(0,), source=0))
    PassManager().run(imp.module, PassManager.resolve(["AD"]))
    lib = dlvm.load(ir_library(module_text(imp.module), "sce", tmp_path))
    args = [X, TARGET, WEIGHT]

    p = np.exp(X - X.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    onehot = (TARGET[:, None, :] == np.arange(5)[None, :, None]).astype(np.float32)
    w = np.where(TARGET == 1, 0, WEIGHT[TARGET])
    loss = -(np.log(p) * onehot).sum(axis=1)
    want_loss = (loss * w).sum() / w.sum()
    want_grad = (p - onehot) * w[:, None, :] / w.sum()

    got_loss = np.asarray(lib.sce(*args))
    np.testing.assert_allclose(got_loss, want_loss, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(lib.sce_grad(*args)), want_grad, rtol=1e-4, atol=1e-6)
    (interp_grad,) = run_function(imp.module, "sce_grad", args)
    np.testing.assert_allclose(interp_grad, want_grad, rtol=1e-4, atol=1e-6)


def test_an_unknown_reduction_is_a_located_diagnostic():
    node = helper.make_node(
        "NegativeLogLikelihoodLoss", ["x", "t"], ["y"], name="nll", reduction="max"
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", 1, [3, 5]), helper.make_tensor_value_info("t", 7, [3])],
        [helper.make_tensor_value_info("y", 1, [])],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(DiagnosticError) as e:
        import_model(m)
    (only,) = [d.render() for d in e.value.diagnostics]
    assert only == (
        "error: <onnx model>: node 'nll' (NegativeLogLikelihoodLoss, opset 13): not supported: "
        "reduction='max' (one of none, sum, mean is supported)"
    )
