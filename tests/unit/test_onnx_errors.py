"""What the ONNX importer refuses, as DiagnosticErrors and never tracebacks: every unsupported
node at once, dynamic dimensions without a shape, files that are not models, a missing onnx
package."""

from __future__ import annotations

import sys

import numpy as np
import pytest

pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

from onnx import helper  # noqa: E402
from onnxlib import check, model, normal, single  # noqa: E402

from dlvm.diagnostics import DiagnosticError  # noqa: E402
from dlvm.onnx import import_model  # noqa: E402


def messages(e: pytest.ExceptionInfo[DiagnosticError]) -> list[str]:
    return [d.render() for d in e.value.diagnostics]


def test_every_unsupported_node_is_listed_at_once():
    x = normal(1, 2, 5, 5)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("LpNormalization", ["r"], ["p"], name="norm1", p=3),
        helper.make_node("Relu", ["p"], ["q"]),
        helper.make_node("NonZero", ["q"], ["y"], name="nz"),
    ]
    m = model(nodes, {"x": x}, ["y"], opset=13)
    with pytest.raises(DiagnosticError) as e:
        import_model(m)
    assert messages(e) == [
        "error: <onnx model>: node 'norm1' (LpNormalization, opset 13): not supported: p=3 "
        "(only 1 and 2)",
        "error: <onnx model>: node 'nz' (NonZero, opset 13): the operator NonZero is not "
        "supported: the shape of its output depends on the values of its input, and DLVM IR's "
        "shapes are static",
    ]


def test_a_foreign_domain_in_an_opset_6_model():
    # The opset-6 Add is converted to opset 7 (dlvm/onnx/upgrade.py); the custom op is not.
    add = helper.make_node("Add", ["x", "x"], ["g"])
    custom = helper.make_node("FusedGelu", ["g"], ["y"], domain="com.microsoft")
    graph = helper.make_graph(
        [add, custom],
        "g",
        [helper.make_tensor_value_info("x", 1, [2, 3])],
        [helper.make_tensor_value_info("y", 1, [2, 3])],
    )
    m = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 6), helper.make_opsetid("com.microsoft", 1)]
    )
    with pytest.raises(DiagnosticError) as e:
        import_model(m.SerializeToString())
    assert messages(e) == [
        "error: <onnx model>: node #1 (output 'y') (com.microsoft.FusedGelu, opset 1): operators "
        "of the domain 'com.microsoft' are not supported",
    ]


def test_a_slice_bound_the_graph_computes_is_refused():
    x, start = normal(4, 3), np.array([1], np.int64)
    m = single("Slice", {"x": x, "s": start}, {"e": np.array([3], np.int64)}, opset=13)
    with pytest.raises(DiagnosticError) as e:
        import_model(m)
    (only,) = messages(e)
    assert "(Slice, opset 13): not supported: input 1 ('s') must be known at import time" in only


DYNAMIC = {"x": ["batch", 3]}


def dynamic_model():
    return model(
        [helper.make_node("Relu", ["x"], ["y"])], {"x": normal(2, 3)}, ["y"], dynamic=DYNAMIC
    )


def test_a_dynamic_batch_needs_a_shape():
    with pytest.raises(DiagnosticError) as e:
        import_model(dynamic_model())
    assert messages(e) == [
        "error: <onnx model>: input 'x' has dynamic dimensions [batch, 3]: give its shape\n"
        "  help: --shape x=1x3"
    ]


def test_a_dynamic_batch_with_a_shape():
    imp = check(dynamic_model(), {"x": normal(5, 3)})
    assert imp.inputs[0][1].shape == (5, 3)


def test_a_shape_that_contradicts_the_model_or_names_no_input():
    with pytest.raises(DiagnosticError) as e:
        import_model(dynamic_model(), shapes={"x": (5, 4), "z": (1,)})
    assert messages(e) == [
        "error: <onnx model>: the model has no input 'z' (its inputs: 'x')",
        "error: <onnx model>: the shape 5x4 for input 'x': dimension 1 is 3 in the model",
    ]


def test_random_bytes_and_a_truncated_file(tmp_path):
    good = dynamic_model().SerializeToString()
    noise = tmp_path / "noise.onnx"
    noise.write_bytes(np.random.default_rng(0).integers(0, 256, 300, dtype=np.uint8).tobytes())
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(good[: len(good) // 2])
    for path in (noise, cut):
        with pytest.raises(DiagnosticError) as e:
            import_model(path)
        (only,) = messages(e)
        assert only.startswith(f"error: {path}: "), only
    with pytest.raises(DiagnosticError) as e:
        import_model(str(tmp_path / "missing.onnx"))
    assert messages(e) == [f"error: {tmp_path / 'missing.onnx'}: no such file"]


def test_without_the_onnx_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)  # `import onnx` raises ImportError
    with pytest.raises(DiagnosticError) as e:
        import_model(b"")
    assert messages(e) == [
        "error: the ONNX importer needs the onnx package\n  help: pip install 'telc[onnx]'"
    ]
