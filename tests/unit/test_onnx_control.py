"""Scan (opsets 8 and 9+, directions and axes), Loop with a known trip count, and If (a known
condition, and one known only at run time), against ONNX's reference evaluator; a Loop whose
trip count the graph computes is refused with a located diagnostic."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnxlib import check, check_compiled, compiled_outputs, model, normal, run  # noqa: E402

from dlvm.diagnostics import DiagnosticError  # noqa: E402
from dlvm.onnx import import_model  # noqa: E402

F = TensorProto.FLOAT


def _body_sum_and_product() -> object:
    """(sum, x_t) -> (sum + x_t, sum + x_t scaled by 2): a state and a scan output."""
    nodes = [
        helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
        helper.make_node("Mul", ["s_out", "two"], ["y_t"]),
    ]
    return helper.make_graph(
        nodes,
        "body",
        [
            helper.make_tensor_value_info("s_in", F, [2]),
            helper.make_tensor_value_info("x_t", F, [2]),
        ],
        [
            helper.make_tensor_value_info("s_out", F, [2]),
            helper.make_tensor_value_info("y_t", F, [2]),
        ],
    )


def _scan_model(inputs: dict[str, np.ndarray], node: object, outs: dict[str, tuple], opset: int):
    """A model of the Scan node (typed by hand: the reference evaluator runs only Scans of the
    default axes and directions)."""
    two = helper.make_node("Constant", [], ["two"], value=helper.make_tensor("t", F, [], [2.0]))
    graph = helper.make_graph(
        [two, node],
        "g",
        [helper.make_tensor_value_info(n, F, v.shape) for n, v in inputs.items()],
        [helper.make_tensor_value_info(n, F, shape) for n, shape in outs.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _expected(init, x, axis, direction, out_axis):
    """The body's running sum over x's slices along axis, and the scan output, in NumPy."""
    steps = np.moveaxis(x, axis, 0)
    steps = steps[::-1] if direction else steps
    s, ys = init, []
    for x_t in steps:
        s = s + x_t
        ys.append(2 * s)
    y = np.stack(ys)
    return s, np.moveaxis(y[::-1] if direction else y, 0, out_axis)


@pytest.mark.parametrize("axis,direction,out_axis", [(0, 0, 0), (1, 1, 0), (0, 0, 1), (0, 1, -1)])
def test_scan(axis, direction, out_axis, tmp_path):
    x = normal(3, 2) if axis == 0 else normal(2, 3)
    init = normal(2, seed=1)
    node = helper.make_node(
        "Scan", ["init", "x"], ["s", "y"], num_scan_inputs=1, body=_body_sum_and_product(),
        scan_input_axes=[axis], scan_input_directions=[direction], scan_output_axes=[out_axis],
        scan_output_directions=[direction],
    )  # fmt: skip
    inputs = {"init": init, "x": x}
    want = _expected(init, x, axis, direction, out_axis)
    m = _scan_model(inputs, node, {"s": (2,), "y": want[1].shape}, opset=11)
    got = run(import_model(m), inputs)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    if axis == 0 and out_axis == 0 and not direction:
        check(m, inputs)  # the reference evaluator agrees where it runs


def test_scan_opset_8_has_a_batch_axis(tmp_path):
    x, init = normal(2, 3, 2), normal(2, 2, seed=1)
    node = helper.make_node(
        "Scan", ["", "init", "x"], ["s", "y"], num_scan_inputs=1, body=_body_sum_and_product()
    )
    inputs = {"init": init, "x": x}
    m = _scan_model(inputs, node, {"s": (2, 2), "y": (2, 3, 2)}, opset=8)
    got = run(import_model(m), inputs)
    for b in range(2):
        for g, w in zip(got, _expected(init[b], x[b], 0, 0, 0)):
            np.testing.assert_allclose(g[b], w, rtol=1e-6)
    lib_got = compiled_outputs(m, inputs, tmp_path)
    for g, w in zip(lib_got, got):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def _loop_body() -> object:
    """(i, cond, y) -> (cond, y + x[i], y + x[i]): a state and a scan output, reading an outer
    tensor at the step's index."""
    nodes = [
        helper.make_node("Identity", ["c_in"], ["c_out"]),
        helper.make_node("Unsqueeze", ["i", "zero"], ["start"]),
        helper.make_node("Add", ["start", "one"], ["end"]),
        helper.make_node("Slice", ["table", "start", "end"], ["row"]),
        helper.make_node("Add", ["y_in", "row"], ["y_out"]),
        helper.make_node("Identity", ["y_out"], ["scan_out"]),
    ]
    return helper.make_graph(
        nodes,
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("y_in", F, [1]),
        ],
        [
            helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("y_out", F, [1]),
            helper.make_tensor_value_info("scan_out", F, [1]),
        ],
    )


def _loop_model(trip_known: bool) -> tuple[object, dict[str, np.ndarray]]:
    consts = {
        "zero": np.array([0], np.int64),
        "one": np.array([1], np.int64),
        "cond": np.array(True),
    }
    if trip_known:
        consts["trip"] = np.array(4, np.int64)
    nodes = [
        helper.make_node("Constant", [], [n], value=numpy_helper.from_array(v, n))
        for n, v in consts.items()
    ]
    nodes.append(
        helper.make_node("Loop", ["trip", "cond", "y"], ["y_last", "ys"], body=_loop_body())
    )
    inputs = {"y": normal(1), "table": normal(5, seed=1)}
    if not trip_known:
        inputs["trip"] = np.array(4, np.int64)
    return model(nodes, inputs, ["y_last", "ys"], opset=13), inputs


def test_loop_with_a_known_trip_count(tmp_path):
    m, inputs = _loop_model(trip_known=True)
    check(m, inputs)
    check_compiled(m, inputs, tmp_path)


def test_loop_whose_trip_count_is_computed_is_refused():
    m, inputs = _loop_model(trip_known=False)
    with pytest.raises(DiagnosticError) as e:
        import_model(m, shapes={n: v.shape for n, v in inputs.items()})
    text = str(e.value)
    assert "(Loop, opset 13): not supported: input 0 ('trip') must be known at import" in text


def _branch(name: str, op: str) -> object:
    node = helper.make_node(op, ["a", "b"], [f"{name}_out"])
    return helper.make_graph(
        [node], name, [], [helper.make_tensor_value_info(f"{name}_out", F, [3])]
    )


@pytest.mark.parametrize("known", [True, False])
def test_if(known, tmp_path):
    node = helper.make_node(
        "If", ["c"], ["y"], then_branch=_branch("then", "Add"), else_branch=_branch("other", "Sub")
    )
    inputs = {"a": normal(3), "b": normal(3, seed=1)}
    if known:
        const = helper.make_tensor("c", TensorProto.BOOL, [], [False])
        nodes = [helper.make_node("Constant", [], ["c"], value=const), node]
        check(model(nodes, inputs, ["y"], opset=13), inputs)
        return
    for flag in (True, False):
        given = {**inputs, "c": np.array(flag)}
        m = model([node], given, ["y"], opset=13)
        check(m, given)
    check_compiled(m, given, tmp_path)


def test_a_body_op_without_a_handler_is_listed_before_lowering():
    body = helper.make_graph(
        [
            helper.make_node("Unique", ["x_t"], ["u"]),
            helper.make_node("Identity", ["s_in"], ["s_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("s_in", F, [2]),
            helper.make_tensor_value_info("x_t", F, [2]),
        ],
        [
            helper.make_tensor_value_info("s_out", F, [2]),
            helper.make_tensor_value_info("u", F, [2]),
        ],
    )
    node = helper.make_node("Scan", ["init", "x"], ["s", "y"], num_scan_inputs=1, body=body)
    info = helper.make_tensor_value_info
    graph = helper.make_graph(
        [node],
        "g",
        [info("init", F, [2]), info("x", F, [3, 2])],
        [info("s", F, [2]), info("y", F, [3, 2])],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(DiagnosticError) as e:
        import_model(m)
    assert "(Scan, opset 13): not supported: its body's" in str(e.value)
    assert "(Unique, opset 13): Unique is not supported" in str(e.value)
