"""Element-wise indexing (GatherElements, GatherND, ReverseSequence, Compress) and the scatters
(ScatterElements, Scatter, ScatterND, TensorScatter) against ONNX's reference evaluator, one
model compiled, and what is refused."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

from irlib import ir_library  # noqa: E402
from onnx import helper  # noqa: E402
from onnxlib import check, model, normal, single  # noqa: E402

import dlvm  # noqa: E402
from dlvm.diagnostics import DiagnosticError  # noqa: E402
from dlvm.interp import run_function  # noqa: E402
from dlvm.ir import module_text  # noqa: E402
from dlvm.onnx import import_model  # noqa: E402

X = normal(3, 4, 2)


def i64(values) -> np.ndarray:
    return np.array(values, dtype=np.int64)


@pytest.mark.parametrize("axis", [0, 1, 2])  # the reference evaluator fails on axis=-1
def test_gather_elements_with_negative_indices(axis):
    n = X.shape[axis]
    shape = list(X.shape)
    shape[axis] = 5  # more or fewer along the axis than the data has
    ids = np.random.default_rng(1).integers(-n, n, shape).astype(np.int64)
    check(single("GatherElements", {"x": X, "i": ids}, axis=axis), {"x": X, "i": ids})


@pytest.mark.parametrize("batch_dims", [0, 1])
def test_gather_nd(batch_dims):
    data = normal(2, 3, 4)
    if batch_dims == 0:
        ids = i64([[[1, -1]], [[0, 2]]])  # [2, 1, 2]: two coordinates, rows of 4
    else:
        ids = i64([[[2], [0]], [[-1], [1]]])  # [2, 2, 1] within each batch
    check(single("GatherND", {"d": data, "i": ids}, batch_dims=batch_dims), {"d": data, "i": ids})
    ints = np.arange(4, dtype=np.int32).reshape(2, 2)
    coords = i64([[0, 0], [1, 1]])
    check(single("GatherND", {"d": ints, "i": coords}), {"d": ints, "i": coords})


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements(reduction):
    data = normal(3, 4)
    ids = i64([[1, -1, 0, 2], [2, 0, 1, 1]])
    updates = normal(2, 4, seed=3)
    if reduction == "none":
        ids[1] = [0, 1, 2, 0]  # ONNX leaves repeated ids undefined without a reduction
    inputs = {"d": data, "i": ids, "u": updates}
    check(single("ScatterElements", inputs, opset=18, axis=0, reduction=reduction), inputs)
    across = i64([[1, -1], [3, 0], [2, 2] if reduction != "none" else [2, 0]])
    along = {"d": data, "i": across, "u": normal(3, 2, seed=4)}
    check(single("ScatterElements", along, opset=18, axis=1, reduction=reduction), along)


def test_scatter_of_opset_10_and_integers():
    # ONNX's reference evaluator has no Scatter (ScatterElements before opset 11): NumPy's.
    data = np.arange(12, dtype=np.int32).reshape(3, 4)
    ids = i64([[2, 0, -1, 1]])
    updates = np.array([[-1, -2, -3, -4]], np.int32)
    node = helper.make_node("Scatter", ["d", "i", "u"], ["y"], axis=0)
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info(k, v, s)
            for k, v, s in [("d", 6, [3, 4]), ("i", 7, [1, 4]), ("u", 6, [1, 4])]
        ],
        [helper.make_tensor_value_info("y", 6, [3, 4])],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 10)])
    imp = import_model(m)
    (got,) = run_function(imp.module, imp.function.name, [data, ids, updates])
    want = data.copy()
    np.put_along_axis(want, ids % 3, updates, axis=0)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd(reduction):
    data = normal(4, 3, 2)
    rows = i64([[1], [-1], [1]] if reduction != "none" else [[1], [-1], [0]])
    inputs = {"d": data, "i": rows, "u": normal(3, 3, 2, seed=4)}
    check(single("ScatterND", inputs, opset=18, reduction=reduction), inputs)
    cells = {"d": data, "i": i64([[0, 2, 1], [3, 0, 0]]), "u": normal(2, seed=5)}
    check(single("ScatterND", cells, opset=18, reduction=reduction), cells)


@pytest.mark.parametrize("mode, starts", [("linear", [0, 2]), ("circular", [3, 1])])
def test_tensor_scatter(mode, starts):
    cache, update = normal(2, 3, 4, 5), normal(2, 3, 2, 5, seed=6)
    inputs = {"c": cache, "u": update, "w": i64(starts)}
    check(single("TensorScatter", inputs, opset=24, mode=mode), inputs)
    three = {"c": normal(2, 4, 3), "u": normal(2, 1, 3, seed=7)}
    check(single("TensorScatter", three, opset=24, axis=1), three)


@pytest.mark.parametrize("batch_axis, time_axis", [(0, 1), (1, 0)])
def test_reverse_sequence(batch_axis, time_axis):
    x = normal(4, 4, 3)
    lens = i64([4, 1, 0, 3])
    inputs = {"x": x, "lens": lens}
    node = single("ReverseSequence", inputs, batch_axis=batch_axis, time_axis=time_axis)
    check(node, inputs)


@pytest.mark.parametrize("axis, keep", [(None, [1, 0, 1]), (0, [1, 0, 1]), (-1, [0, 1])])
def test_compress_of_a_known_condition(axis, keep):
    attrs = {} if axis is None else {"axis": axis}
    keep = np.array(keep, bool)
    check(single("Compress", {"x": X}, {"c": keep}, **attrs), {"x": X})


def test_one_model_of_each_family_compiles(tmp_path):
    data, ids = normal(3, 4), i64([[1, -1, 0, 2], [2, 0, 1, 1]])
    updates = normal(2, 4, seed=3)
    n = helper.make_node
    nodes = [
        n("GatherElements", ["d", "i"], ["g"], axis=0),
        n("ScatterElements", ["d", "i", "u"], ["s"], axis=0, reduction="add"),
        n("ScatterElements", ["d", "i", "u"], ["m"], axis=0, reduction="max"),
        n("ScatterND", ["d", "rows", "u"], ["r"]),
    ]
    inputs = {"d": data, "i": ids, "u": updates}
    m = model(nodes, inputs, ["g", "s", "m", "r"], {"rows": i64([[2], [0]])}, opset=18)
    imp = import_model(m, name="idx")
    lib = dlvm.load(ir_library(module_text(imp.module), "idx", tmp_path))
    args = [data, ids, updates]
    for got, want in zip(lib.idx(*args), run_function(imp.module, "idx", args)):
        np.testing.assert_array_equal(np.asarray(got), want)


def refused(node: helper.NodeProto, inputs: dict[str, tuple[int, list[int]]]) -> str:
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(k, t, s) for k, (t, s) in inputs.items()],
        [helper.make_tensor_value_info(node.output[0], 1, [3])],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(DiagnosticError) as e:
        import_model(m)
    (only,) = [d.render() for d in e.value.diagnostics]
    return only


def test_an_unknown_reduction_and_a_computed_condition_are_located_diagnostics():
    node = helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], name="sc", reduction="mean")
    msg = refused(node, {"d": (1, [3]), "i": (7, [2]), "u": (1, [2])})
    assert msg == (
        "error: <onnx model>: node 'sc' (ScatterElements, opset 18): not supported: "
        "reduction='mean' (one of none, add, mul, max, min is supported)"
    )
    node = helper.make_node("Compress", ["x", "c"], ["y"], name="cmp", axis=0)
    msg = refused(node, {"x": (1, [3]), "c": (9, [3])})
    assert "node 'cmp' (Compress, opset 18): not supported: input 1 ('c') must be known" in msg
    assert "the condition decides the result's shape" in msg
