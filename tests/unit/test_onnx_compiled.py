"""Imported models through the compiled path: the IR the importer makes (with its gradient, as
training will take it) built into a library whose results match the interpreter's."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

from irlib import ir_library  # noqa: E402
from onnx import helper  # noqa: E402
from onnxlib import model, normal, positive  # noqa: E402

import dlvm  # noqa: E402
from dlvm.interp import run_function  # noqa: E402
from dlvm.ir import module_text  # noqa: E402
from dlvm.ir.builder import gradient_declaration  # noqa: E402
from dlvm.onnx import import_model  # noqa: E402
from dlvm.transforms.pass_manager import PassManager  # noqa: E402


def cnn() -> tuple[object, np.ndarray]:
    """Conv, BatchNormalization, a residual Add, MaxPool, GlobalAveragePool, Gemm, LogSoftmax,
    and a scalar loss to differentiate."""
    x = normal(2, 3, 8, 8)
    p = {
        "w1": normal(4, 3, 3, 3, seed=1) * 0.3,
        "b1": normal(4, seed=2),
        "scale": positive(4, seed=3),
        "shift": normal(4, seed=4),
        "mean": normal(4, seed=5) * 0.1,
        "var": positive(4, seed=6),
        "w2": normal(4, 4, 3, 3, seed=7) * 0.3,
        "fc.w": normal(5, 4, seed=8),
        "fc.b": normal(5, seed=9),
    }
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        n("BatchNormalization", ["c1", "scale", "shift", "mean", "var"], ["n1"]),
        n("Relu", ["n1"], ["r1"]),
        n("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        n("Add", ["c2", "r1"], ["res"]),
        n("MaxPool", ["res"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        n("GlobalAveragePool", ["p"], ["g"]),
        n("Flatten", ["g"], ["f"]),
        n("Gemm", ["f", "fc.w", "fc.b"], ["logits"], transB=1),
        n("LogSoftmax", ["logits"], ["logp"], axis=1),
        n("ReduceMean", ["logp"], ["loss"], keepdims=0),
    ]
    return model(nodes, {"x": x}, ["loss", "logp"], p, opset=15), x


def test_imported_cnn_and_its_gradient_compile(tmp_path):
    m, x = cnn()
    imp = import_model(m, name="cnn")
    fn = imp.function
    wrt = tuple(range(1, len(fn.arguments)))
    imp.module.add_function(gradient_declaration("cnn_grad", fn, wrt=wrt, source=0))
    PassManager().run(imp.module, PassManager.resolve(["AD"]))
    lib = dlvm.load(ir_library(module_text(imp.module), "cnn", tmp_path))
    args = [x] + [p.value for p in imp.params]
    for entry in ("cnn", "cnn_grad"):
        got = getattr(lib, entry)(*args)
        want = run_function(imp.module, entry, args)
        got = got if isinstance(got, tuple) else (got,)
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g), w, rtol=1e-4, atol=1e-5)


def test_imported_lstm_compiles(tmp_path):
    steps, batch, features, hidden = 5, 2, 3, 4
    x = normal(steps, batch, features)
    p = {
        "W": normal(1, 4 * hidden, features, seed=1) * 0.5,
        "R": normal(1, 4 * hidden, hidden, seed=2) * 0.5,
        "B": normal(1, 8 * hidden, seed=3) * 0.5,
    }
    node = helper.make_node("LSTM", ["x", "W", "R", "B"], ["y", "h"], hidden_size=hidden)
    imp = import_model(model([node], {"x": x}, ["y", "h"], p, opset=14), name="lstm")
    lib = dlvm.load(ir_library(module_text(imp.module), "lstm", tmp_path))
    args = [x] + [q.value for q in imp.params]
    for g, w in zip(lib.lstm(*args), run_function(imp.module, "lstm", args)):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-4, atol=1e-5)


def test_imported_conversions_bit_operations_and_quantisation_compile(tmp_path):
    """Cast across bases, BitShift, BitwiseXor, Mod with the divisor's sign, OneHot of run-time
    indices, Range of run-time bounds, QuantizeLinear and Asinh, built once."""
    x = normal(3, 4) * 4
    start = np.array(1.5, np.float32)
    n = helper.make_node
    nodes = [
        n("Cast", ["x"], ["i"], to=6),  # f32 to i32, truncating
        n("BitShift", ["i", "two"], ["shifted"], direction="LEFT"),
        n("BitwiseXor", ["shifted", "i"], ["bits"]),
        n("Mod", ["x", "minus3"], ["m"], fmod=0),
        n("OneHot", ["i", "depth", "onoff"], ["hot"], axis=1),
        n("Range", ["start", "limit", "delta"], ["steps"]),
        n("QuantizeLinear", ["x", "scale", "zero"], ["q"]),
        n("Asinh", ["x"], ["a"]),
    ]
    consts = {
        "two": np.array(2, np.int32),
        "minus3": np.array(-3.0, np.float32),
        "depth": np.array(5, np.int64),
        "onoff": np.array([0.0, 1.0], np.float32),
        "limit": np.array(6.0, np.float32),
        "delta": np.array(1.25, np.float32),
        "scale": np.array(0.05, np.float32),
        "zero": np.array(4, np.int8),
    }
    inputs = {"x": x, "start": start}
    outputs = ["bits", "m", "hot", "steps", "q", "a"]
    m = model(nodes, inputs, outputs, consts, opset=21)
    imp = import_model(m, name="bits")
    lib = dlvm.load(ir_library(module_text(imp.module), "bits", tmp_path))
    args = [x, start] + [p.value for p in imp.params]
    for g, w in zip(lib.bits(*args), run_function(imp.module, "bits", args)):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-5, atol=1e-6)
