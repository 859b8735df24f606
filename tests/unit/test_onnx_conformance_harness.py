"""The ONNX conformance harness of tests/onnx (make conformance) itself: the known-failures file,
the reasons it writes, the batch build's fallback when one case breaks a library, and the strict
expected failure of a listed case that passes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "onnx"))

from conformance_backend import CaseFailed, DlvmRep  # noqa: E402
from conformance_batch import (  # noqa: E402
    Request,
    Stats,
    build_chunk,
    compile_all,
    constant_inputs,
)
from conformance_cases import case_id  # noqa: E402
from conformance_reasons import _comparison as comparison  # noqa: E402
from conformance_reasons import category, reason  # noqa: E402
from known_failures import KnownFailuresError, parse, text  # noqa: E402

from dlvm.codegen.build import BuildError  # noqa: E402


def test_known_failures_read_back_what_is_written():
    written = text({"node/test_b": "unsupported op: x", "light/test_a": "wrong  shape"}, "1.23")
    known = parse(written, groups=["node", "light"])
    assert known.reasons == {"light/test_a": "wrong shape", "node/test_b": "unsupported op: x"}
    assert known.onnx_version == "1.23"
    assert written.index("light/test_a") < written.index("node/test_b")  # sorted


def test_known_failures_report_every_bad_line():
    bad = "# onnx 1.23\nnode/test_a: x\nnode/test_a: y\nnode test_b\nweird/test_c: z\n"
    with pytest.raises(KnownFailuresError) as e:
        parse(bad, "kf.txt", groups=["node"])
    lines = str(e.value).splitlines()
    assert lines == [
        "kf.txt:3: node/test_a is listed twice",
        "kf.txt:4: expected `group/test_name: reason`, got 'node test_b'",
        "kf.txt:5: no group 'weird'",
    ]


def test_case_ids_are_the_cpu_tests_of_the_groups():
    assert case_id("OnnxBackendNodeModelTest", "test_abs_cpu") == "node/test_abs"
    assert case_id("OnnxBackendRealModelTest", "test_vgg19_cpu") == "light/test_vgg19"
    assert case_id("OnnxBackendNodeModelTest", "test_abs_cuda") is None
    assert case_id("SomethingElse", "test_abs_cpu") is None


def _failure(check) -> AssertionError:
    with pytest.raises(AssertionError) as e:
        check()
    return e.value


def test_reasons_name_their_category():
    def close():
        np.testing.assert_allclose([1.0, 2.0, 3.0], [1.0, 2.5, 3.0], rtol=1e-3, atol=1e-7)

    cases = {
        "numerical mismatch: max abs error 0.5, max rel error 0.2 (1 of 3 elements)": close,
        "wrong dtype: float32 where int64 is expected": lambda: np.testing.assert_equal(
            np.dtype("float32"), np.dtype("int64")
        ),
        "wrong output count: 1 where 2 are expected": lambda: np.testing.assert_equal(1, 2),
    }
    for expected, check in cases.items():
        assert comparison(str(_failure(check))) == expected
    assert category("numerical mismatch: x") == "numerical mismatch"
    message = "node #0 (Foo, opset 13): the operator Foo is not supported"
    unsupported = CaseFailed(f"node_test_x: {message}")
    case = _tensor_case("Abs")
    assert reason(case, unsupported) == f"unsupported op: {message}"
    codegen = CaseFailed("crash in codegen: BuildError: cc failed")
    assert reason(case, codegen) == "crash in codegen: BuildError: cc failed"


def _tensor_case(op: str):
    from conformance_cases import Case

    model = _model(op)
    x = np.ones((2, 3), np.float32)
    return Case("node", f"test_{op.lower()}", model, {"x": (2, 3)}, [([x], [x])])


def _model(op: str):
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"])],
        f"g_{op}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_a_case_that_breaks_its_library_fails_alone(tmp_path):
    """A chunk whose build fails is built again in halves: the one function that breaks it
    fails with the build's error, the others get entries of libraries that do build (and are
    found in the cache the next time)."""
    ops = ["Abs", "Neg", "Relu", "Sigmoid"]
    requests = [Request(f"case_{op.lower()}", _model(op), {}) for op in ops]

    def planted(functions, output):
        if any(f.name == "case_relu" for f in functions):
            raise BuildError("planted: this library does not link")
        build_chunk(functions, output)

    stats = Stats()
    results = compile_all(requests, tmp_path, chunk_size=4, build=planted, stats=stats)
    planted_error = "crash in codegen: BuildError: planted: this library does not link"
    assert results["case_relu"].failure == planted_error
    assert results["case_relu"].entry is None
    x = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    expected = {"case_abs": np.abs(x), "case_neg": -x, "case_sigmoid": 1 / (1 + np.exp(-x))}
    for name, want in expected.items():
        entry = results[name].entry
        assert results[name].failure is None and entry is not None
        np.testing.assert_allclose(entry(x), want, rtol=1e-6)
    assert stats.bisections == 2 and stats.built == 2  # [abs, neg] and [sigmoid]

    again = Stats()
    compile_all(requests, tmp_path, chunk_size=4, build=planted, stats=again)
    assert again.cached == 2 and again.built == 0


def test_a_known_failure_that_passes_fails_the_run(tmp_path):
    """known_failures.txt is strict: a listed case that passes fails the run (XPASS(strict)),
    so the file has to be written again and the count only goes up."""
    import onnx

    release = ".".join(onnx.__version__.split(".")[:2])
    planted = tmp_path / "known.txt"
    planted.write_text(text({"node/test_abs": "planted: it passes"}, release), encoding="utf-8")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(ROOT / "tests" / "onnx"),
         "-k", "OnnxBackendNodeModelTest and test_abs_cpu", f"--known-failures={planted}"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 1, run.stdout + run.stderr
    assert "[XPASS(strict)] planted: it passes" in run.stdout
    assert "node               0 passed, 1 failed, 0 skipped, 0 expected to fail" in run.stdout


def _reshape_model():
    """y = Reshape(x, shape): the target a graph input, which the import needs to know."""
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])],
        "g_reshape",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("shape", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_inputs_fixed_from_a_cases_data_are_checked_when_it_runs(tmp_path):
    """An input the import needs is fixed to its value in the case's data, only where every
    data set gives the same one; the rep refuses to run on any other value of it."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    shape = np.array([3, 2], np.int64)
    other = np.array([3, 2], np.int32)
    sets = [([x, shape], []), ([x + 1, shape], [])]
    assert list(constant_inputs(["x", "shape"], sets)) == ["shape"]
    assert constant_inputs(["x", "shape"], [*sets, ([x, shape[::-1].copy()], [])]) == {}
    assert constant_inputs(["x", "shape"], [*sets, ([x, other], [])]) == {}

    model = _reshape_model()
    fixed = Request("case_fixed", model, {}, {"shape": shape})
    unfixed = Request("case_unfixed", model, {})
    results = compile_all([fixed, unfixed], tmp_path)
    assert "input 1 ('shape') must be known at import time" in (
        results["case_unfixed"].failure or ""
    )
    compiled = results["case_fixed"]
    assert compiled.failure is None and compiled.imported is not None
    assert list(compiled.imported.fixed) == ["shape"]
    rep = DlvmRep(compiled, model)
    (y,) = rep.run([x, shape])
    np.testing.assert_array_equal(y, x.reshape(3, 2))
    for wrong in (np.array([2, 3], np.int64), np.array([3, 2], np.int32)):
        with pytest.raises(CaseFailed, match="input 'shape' was fixed at build time to"):
            rep.run([x, wrong])
