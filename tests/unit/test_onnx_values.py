"""Fixed inputs (docs/onnx.md, "Fixed inputs"): graph inputs whose values the import needs
(a Reshape target, reduction axes) fixed at build time with `import_model(…, values=…)` and
`telc … --value NAME=VALUE`; the diagnostics that ask for them, and those for a value that does
not fit its input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it
from irlib import ir_library  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import dlvm  # noqa: E402
from dlvm.diagnostics import DiagnosticError  # noqa: E402
from dlvm.interp import run_function  # noqa: E402
from dlvm.ir import module_text  # noqa: E402
from dlvm.onnx import ValuesNeeded, import_model  # noqa: E402

TELC = Path(sys.executable).parent / "telc"


def reshape_sum(batch: int | str = 2) -> onnx.ModelProto:
    """x [batch x 6] -> Reshape(x, shape) -> ReduceSum(axes) -> y: the target and the axes
    are graph inputs, which the import needs to know."""
    graph = helper.make_graph(
        [
            helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
            helper.make_node("ReduceSum", ["r", "axes"], ["y"], name="sum", keepdims=0),
        ],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 6]),
            helper.make_tensor_value_info("shape", TensorProto.INT64, [3]),
            helper.make_tensor_value_info("axes", TensorProto.INT64, [1]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, "n"])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


SHAPE = np.array([2, -1, 3], np.int64)
AXES = np.array([1], np.int64)


def expected(x: np.ndarray) -> np.ndarray:
    feeds = {"x": x, "shape": SHAPE, "axes": AXES}
    return ReferenceEvaluator(reshape_sum()).run(None, feeds)[0]


def test_the_import_names_the_inputs_it_needs_and_how_to_fix_them():
    with pytest.raises(ValuesNeeded) as e:
        import_model(reshape_sum())
    assert e.value.names == ["shape", "axes"]
    first = e.value.diagnostics[0].render()
    assert first.splitlines() == [
        "error: <onnx model>: node 'reshape' (Reshape, opset 18): not supported: input 1 "
        "('shape') must be known at import time (a constant or an initializer), not computed by "
        "the graph",
        "  help: 'shape' is a graph input: fix its value at build time with `--value shape=…` "
        "(telc) or `values={'shape': …}` (import_model)",
    ]


def test_fixed_inputs_are_constants_and_no_longer_arguments(tmp_path):
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    imp = import_model(reshape_sum(), values={"shape": SHAPE, "axes": [1]}, name="fixed")
    assert [n for n, _ in imp.inputs] == ["x"]
    assert list(imp.fixed) == ["shape", "axes"]
    assert imp.fixed["axes"].dtype == np.int64  # a list is taken in the input's type
    assert [len(a) for a in [imp.function.blocks[0].arguments]] == [1]
    (y,) = run_function(imp.module, "fixed", [x])
    np.testing.assert_array_equal(y, expected(x))
    lib = dlvm.load(ir_library(module_text(imp.module), "fixed", tmp_path))
    np.testing.assert_array_equal(np.asarray(lib.fixed(x)), expected(x))


def test_a_fixed_float_input_is_a_constant_not_a_parameter():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    graph = helper.make_graph(
        [helper.make_node("Pad", ["x", "pads", "fill"], ["y"])],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("pads", TensorProto.INT64, [4]),
            helper.make_tensor_value_info("fill", TensorProto.FLOAT, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    values = {"pads": np.array([0, 1, 1, 1]), "fill": np.float32(2.5)}
    imp = import_model(m, values=values)
    assert imp.params == [] and [n for n, _ in imp.inputs] == ["x"]
    (y,) = run_function(imp.module, "model", [x])
    want = ReferenceEvaluator(m).run(None, {"x": x, **values})[0]
    np.testing.assert_array_equal(y, want)


def test_a_fixed_scalar_stays_a_scalar():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    graph = helper.make_graph(
        [helper.make_node("Trilu", ["x", "k"], ["y"])],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
            helper.make_tensor_value_info("k", TensorProto.INT64, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    k = np.array(1, np.int64)
    imp = import_model(m, shapes={"x": (3, 4), "k": ()}, values={"k": k})
    assert imp.fixed["k"].shape == ()
    (y,) = run_function(imp.module, "model", [x])
    np.testing.assert_array_equal(y, np.triu(x, 1))


def grow_to(fill_like: bool = False) -> onnx.ModelProto:
    """y = Pad(x) up to the shape `target` (an input): the pads are computed from the target
    and x's shape; with `fill_like`, the fill is CastLike(2.5, x), known from x's type alone."""
    n = helper.make_node
    zeros = helper.make_tensor("zeros", TensorProto.INT64, [2], [0, 0])
    half = helper.make_tensor("half", TensorProto.FLOAT, [], [2.5])
    nodes = [
        n("Constant", [], ["zeros"], value=zeros),
        n("Shape", ["x"], ["xs"]),
        n("Sub", ["target", "xs"], ["more"]),
        n("Concat", ["zeros", "more"], ["pads"], axis=0),
        n("Constant", [], ["half"], value=half),
        n("CastLike", ["half", "x"], ["fill"]),
        n("Pad", ["x", "pads", "fill" if fill_like else ""], ["y"], name="pad"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("target", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_an_input_a_needed_value_is_computed_from_is_named():
    with pytest.raises(ValuesNeeded) as e:
        import_model(grow_to())
    assert e.value.names == ["target"]
    assert e.value.diagnostics[0].notes[0].message == (
        "  help: 'pads' is computed from the graph inputs 'target' alone: fix their values at "
        "build time with `--value target=…` (telc) or `values={'target': …}` (import_model)"
    )
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    target = np.array([3, 5], np.int64)
    for fill_like in (False, True):
        m = grow_to(fill_like)
        imp = import_model(m, values={"target": target})
        (y,) = run_function(imp.module, "model", [x])
        want = ReferenceEvaluator(m).run(None, {"x": x, "target": target})[0]
        np.testing.assert_array_equal(y, want)


def test_a_value_computed_from_a_float_input_is_not_asked_for():
    n = helper.make_node
    graph = helper.make_graph(
        [n("Cast", ["s"], ["axes"], to=TensorProto.INT64), n("ReduceSum", ["x", "axes"], ["y"])],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("s", TensorProto.FLOAT, [1]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1])],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(DiagnosticError) as e:
        import_model(m)
    assert not isinstance(e.value, ValuesNeeded)
    assert e.value.diagnostics[0].notes == ()


def test_a_compress_condition_can_be_fixed():
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    graph = helper.make_graph(
        [helper.make_node("Compress", ["x", "keep"], ["y"], axis=0)],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 2]),
            helper.make_tensor_value_info("keep", TensorProto.BOOL, [3]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["k", 2])],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(ValuesNeeded) as e:
        import_model(m)
    assert e.value.names == ["keep"]
    imp = import_model(m, values={"keep": [True, False, True]})
    (y,) = run_function(imp.module, "model", [x])
    np.testing.assert_array_equal(y, x[[0, 2]])


def messages(e: pytest.ExceptionInfo[DiagnosticError]) -> list[str]:
    return [d.message for d in e.value.diagnostics]


def test_a_value_that_does_not_fit_its_input_is_an_error_naming_it():
    bad = {
        "shap": SHAPE,  # no such input
        "shape": SHAPE.astype(np.int32),  # another element type
        "axes": [1.5],  # not an integer
        "x": np.zeros((3, 6), np.float32),  # another shape than the model's
    }
    with pytest.raises(DiagnosticError) as e:
        import_model(reshape_sum(), values=bad)
    assert messages(e) == [
        "<onnx model>: the model has no input 'shap' to fix (its inputs: 'x', 'shape', 'axes')",
        "<onnx model>: the value fixed for input 'shape': it is int32, the input is int64",
        "<onnx model>: the value fixed for input 'axes': [1.5] is not exactly of the input's "
        "type, int64",
        "<onnx model>: the value fixed for input 'x': its shape [3, 6] is not the input's [2, 6]",
    ]
    with pytest.raises(DiagnosticError) as e:
        import_model(reshape_sum(), shapes={"axes": (2,)}, values={"shape": SHAPE, "axes": AXES})
    assert messages(e) == [
        "<onnx model>: input 'axes' is given the shape [2] and a value of shape [1]"
    ]


def telc(*args: object, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TELC, *map(str, args)], capture_output=True, text=True, check=check)


def test_telc_value_fixes_inputs_of_a_built_and_run_model(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(reshape_sum("batch"), path)
    np.save(tmp_path / "shape.npy", SHAPE)
    fixed = ["--value", f"shape=@{tmp_path / 'shape.npy'}", "--value", "axes=1"]
    tel = telc("build", path, "--emit", "tel", *fixed).stdout
    assert "// Inputs fixed at build time (--value): shape = int64[3] {2, -1, 3}" in tel
    assert "x: in f32[batch x 6]" in tel and "shape:" not in tel.split("use ./m.onnx")[1]
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "y.npz"
    telc("run", path, *fixed, "-D", "batch=2", "--input", f"x={tmp_path / 'x.npy'}", "-o", out,
         "-q", "--no-cache")  # fmt: skip
    np.testing.assert_array_equal(np.load(out)["y"], expected(x))
    # Another value in the same file is another build: the cache's key holds the values.
    np.save(tmp_path / "shape.npy", np.array([2, 3, -1]))
    telc("run", path, *fixed, "-D", "batch=2", "--input", f"x={tmp_path / 'x.npy'}", "-o", out,
         "-q")  # fmt: skip
    np.testing.assert_array_equal(np.load(out)["y"], x.reshape(2, 3, 2).sum(axis=1))
    # The same graph used from a TEL model, its inputs fixed the same way.
    (tmp_path / "use.tel").write_text("use ./m.onnx\nx: in f32[2 x 6]\ny: out = m(x)\n")
    said = telc("check", tmp_path / "use.tel", *fixed)
    assert "ok (module use; entries infer; 0 parameters)" in said.stdout + said.stderr


def test_telc_value_errors_name_the_option(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(reshape_sum(), path)
    cases = {
        ("axis=1",): "error: --value axis: m.onnx has no input of that name; its inputs: x, "
        "shape, axes",
        ("shape=2,-1.5,3",): "error: --value shape=2,-1.5,3: '-1.5' is not an int64",
        ("shape=2,3",): "error: --value shape=2,3: 2 numbers, the input i64[3] holds 3",
        ("shape=@missing.npy",): "error: --value shape=@missing.npy: missing.npy: no such file",
        ("axes",): "is not NAME=VALUE (such as --value axes=0,1 or --value w=@w.npy)",
    }
    for given, message in cases.items():
        result = telc("check", path, "--value", *given, check=False)
        assert result.returncode != 0 and message in result.stderr, (given, result.stderr)
    result = telc("check", path, "--value", "shape=2,-1,3", check=False)
    assert "help: 'axes' is a graph input: fix its value at build time with `--value axes=…`" in (
        result.stderr
    )
    tel = tmp_path / "use.tel"
    tel.write_text("use ./m.onnx\nx: in f32[2 x 6]\ny: out = m(x)\n")
    result = telc("check", tel, "--value", "shape=2,-1,3", "--value", "axes=1", "--value", "w=1",
                  check=False)  # fmt: skip
    assert "error: --value w: no ONNX model the program uses has an input of that name" in (
        result.stderr
    )
