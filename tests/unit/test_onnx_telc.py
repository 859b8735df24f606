"""An ONNX model in telc (docs/onnx.md): `use ./model.onnx` in a TEL model, whose initializers
become the model's parameters (their values its initial ones) and whose graph a def; `telc build
model.onnx` as the TEL model that uses it (`--emit tel`), with a train entry from `--train-loss`.
Checked against the same model written in TEL and against NumPy; misuses as located errors."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from telhelp import build_snippet, compile_snippet  # noqa: E402

import dlvm  # noqa: E402

TELC = Path(sys.executable).parent / "telc"


def mlp(path: Path, batch: int | str = "N", bad_op: bool = False) -> dict[str, np.ndarray]:
    """x [batch x 4] -> Gemm -> Relu -> Gemm -> logits [batch x 3], saved at path; returns its
    initializers by name (ONNX names with dots, as PyTorch's exporter writes them)."""
    rng = np.random.default_rng(0)
    values = {
        "fc1.weight": rng.standard_normal((8, 4)).astype(np.float32),
        "fc1.bias": rng.standard_normal(8).astype(np.float32),
        "fc2.weight": rng.standard_normal((3, 8)).astype(np.float32),
        "fc2.bias": rng.standard_normal(3).astype(np.float32),
    }
    nodes = [
        helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], transB=1, name="fc1"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("Gemm", ["r", "fc2.weight", "fc2.bias"], ["logits"], transB=1, name="fc2"),
    ]
    if bad_op:
        nodes[1] = helper.make_node("Unique", ["h"], ["r"], name="odd1")
        nodes.append(helper.make_node("Det", ["logits"], ["unused"], name="odd2"))
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 3])],
        [numpy_helper.from_array(v, k) for k, v in values.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return values


def forward(x: np.ndarray, p: dict[str, np.ndarray]) -> np.ndarray:
    f = {k: v.astype(np.float64) for k, v in p.items()}
    h = np.maximum(x @ f["fc1_weight"].T + f["fc1_bias"], 0)
    return h @ f["fc2_weight"].T + f["fc2_bias"]


NATIVE = """\
module native
use nn
use optim
dim N = 5
x: in[N x 4]
labels: in[N x 3]
fc1_weight: param[8 x 4] = glorot()
fc1_bias: param[8] = 0.0
fc2_weight: param[3 x 8] = glorot()
fc2_bias: param[3] = 0.0
logits: out = relu(x . fc1_weight^T + fc1_bias) . fc2_weight^T + fc2_bias
loss: out[] = softmax_cross_entropy(logits, labels)
train minimizing loss using sgd(rate: 0.1)
"""

WRAPPED = """\
module wrapped
use nn
use optim
use ./mlp.onnx
dim N = 5
x: in[N x 4]
labels: in[N x 3]
logits: out = mlp(x)
loss: out[] = softmax_cross_entropy(logits, labels)
train minimizing loss using sgd(rate: 0.1)
"""


def batch(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((5, 4)).astype(np.float32)
    labels = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 5)]
    return x, labels


def test_a_used_graph_starts_from_its_initializers_and_trains_as_the_same_model_in_tel(tmp_path):
    values = mlp(tmp_path / "mlp.onnx")
    wrapped = build_snippet(tmp_path, WRAPPED, "wrapped")
    native = build_snippet(tmp_path, NATIVE, "native")
    with dlvm.load(wrapped) as w, dlvm.load(native) as n:
        assert sorted(w.params) == ["fc1_bias", "fc1_weight", "fc2_bias", "fc2_weight"]
        for name, value in values.items():
            np.testing.assert_array_equal(w.get_param(name.replace(".", "_")), value)
            n.set_param(name.replace(".", "_"), value)
        x, labels = batch(1)
        np.testing.assert_allclose(w.infer(x), forward(x, w.params), rtol=1e-5, atol=1e-6)
        for step in range(3):
            x, labels = batch(step)
            np.testing.assert_allclose(w.train_step(x, labels), n.train_step(x, labels),
                                       rtol=1e-6)  # fmt: skip
        for name, value in n.params.items():
            np.testing.assert_allclose(w.get_param(name), value, rtol=1e-5, atol=1e-7)


def test_the_graphs_dynamic_batch_is_bound_by_the_call(tmp_path):
    mlp(tmp_path / "mlp.onnx")
    text = "use ./mlp.onnx\nx: in[2 x 4]\nlogits: out = mlp(x)\ntwice: out = mlp(x + x)\n"
    compiled = compile_snippet(str(tmp_path), text, "two")
    (infer,) = [e for e in compiled.interface.entries if e.kind == "infer"]
    assert [t.shape for _, t in infer.outputs] == [(2, 3), (2, 3)]
    # One binding, one import: both calls apply the same function.
    assert sum(1 for f in compiled.module.functions if f.name.startswith("mlp_graph")) == 1


def test_telc_build_of_an_onnx_file_emits_its_tel_model_and_trains(tmp_path):
    mlp(tmp_path / "mlp.onnx")
    tel = subprocess.run([TELC, "build", tmp_path / "mlp.onnx", "--emit", "tel"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "use ./mlp.onnx\n" in tel and "dim N = 1" in tel
    assert "x: in f32[N x 4]\n" in tel and "logits: out = mlp(x)\n" in tel
    library = tmp_path / "trained.so"
    args = ["--train-loss", "softmax_cross_entropy", "--labels", "labels:5x3", "-D", "N=5"]
    args += ["--optimizer", "sgd(rate: 0.1)", "-o", library, "-q", "--no-cache"]
    subprocess.run([TELC, "build", tmp_path / "mlp.onnx", *args], check=True)
    with dlvm.load(library) as m:
        x, labels = batch(3)
        first = m.train_step(x, labels)
        for _ in range(20):
            last = m.train_step(x, labels)
        assert last < first


def telc_error(*args) -> str:
    result = subprocess.run([TELC, *map(str, args)], capture_output=True, text=True)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    return result.stderr


def test_every_unsupported_node_is_listed_at_the_use(tmp_path):
    mlp(tmp_path / "mlp.onnx", bad_op=True)
    (tmp_path / "m.tel").write_text("use ./mlp.onnx\nx: in[2 x 4]\ny: out = mlp(x)\n")
    err = telc_error("check", tmp_path / "m.tel")
    assert "m.tel:1:5: error: cannot import './mlp.onnx'" in err
    assert "'odd1' (Unique" in err and "'odd2' (Det" in err


def test_misuses_of_an_onnx_model_are_located_errors(tmp_path):
    mlp(tmp_path / "mlp.onnx")
    cases = {
        "use ./missing.onnx\n": "cannot read './missing.onnx'",
        "use ./mlp.onnx\nfc1_weight: param[2] = 0.0\n": "'fc1_weight' is already defined",
        "use ./lib\nx: in[2]\n": "only the model's own file can use an ONNX model",
    }
    (tmp_path / "lib.tel").write_text("use ./mlp.onnx\n")
    for i, (text, message) in enumerate(cases.items()):
        path = tmp_path / f"case{i}.tel"
        path.write_text(text)
        assert message in telc_error("check", path), text
    (tmp_path / "junk.onnx").write_bytes(b"\x08\x07garbage" * 10)
    (tmp_path / "junk.tel").write_text("use ./junk.onnx\n")
    assert "cannot import './junk.onnx'" in telc_error("check", tmp_path / "junk.tel")


def test_the_options_of_an_onnx_build_are_checked(tmp_path):
    mlp(tmp_path / "mlp.onnx")
    model = tmp_path / "mlp.onnx"
    assert "has no input of that name" in telc_error("build", model, "--shape", "y=2x4")
    assert "is not NAME=SHAPE" in telc_error("build", model, "--shape", "x=2by4")
    assert "go together" in telc_error("build", model, "--train-loss", "mse")
    assert "is not NAME:SHAPE" in telc_error("build", model, "--labels", "t:2x:f99")
    (tmp_path / "m.tel").write_text("x: in[2]\ny: out = x\n")
    assert "are for ONNX models" in telc_error("build", tmp_path / "m.tel", "--shape", "x=2")


def test_a_shape_given_fixes_the_input(tmp_path):
    mlp(tmp_path / "mlp.onnx")
    tel = subprocess.run([TELC, "build", tmp_path / "mlp.onnx", "--emit", "tel", "--shape",
                          "x=7x4"], capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "x: in f32[7 x 4]\n" in tel and "dim N" not in tel
    assert textwrap.dedent(tel).count("mlp(") == 1
