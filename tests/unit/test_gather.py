"""gather and scatterAdd, TEL's take and nn's embedding: the interpreter against NumPy, the
adjoints against finite differences, TEL's checks, a built library against NumPy (the forward
pass, integer inputs, ids out of range, the gradient of an embedding model against a float64
NumPy reference, and training one with Adam), and the CUDA kernels as PTX."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from gradcheck import gradient_check

import dlvm
from dlvm.artifacts import ROOT
from dlvm.codegen.build import build_library, schedule
from dlvm.codegen.cuda import check_ptx, ptx
from dlvm.diagnostics import DiagnosticError
from dlvm.interp import InterpreterError, run_function
from dlvm.ir import parse_module
from dlvm.runtime import Status
from telc.driver import compile_text, optimize

RNG = np.random.default_rng(24)


def ir_function(params: list[str], line: str, result: str) -> str:
    names = "abc"
    head = ", ".join(f"%{n}: {p}" for n, p in zip(names, params))
    return f"""module "m"
stage raw

func @f: ({", ".join(params)}) -> {result} {{
'entry({head}):
    %r = {line}
    return %r: {result}
}}
"""


def tensor_text(shape: tuple[int, ...], dt: str) -> str:
    return f"<{' x '.join(map(str, shape))} x {dt}>" if shape else dt


# The interpreter ---------------------------------------------------------------------------

TAKES = [((5, 3), (2, 4), 0), ((5, 3), (), 0), ((2, 5, 3), (6,), 1), ((2, 3, 4), (2, 2), 2)]


@pytest.mark.parametrize("table_shape, ids_shape, axis", TAKES, ids=str)
@pytest.mark.parametrize("id_type", ["i8", "i32", "i64"])
def test_gather_is_numpy_take(table_shape, ids_shape, axis, id_type):
    table = RNG.standard_normal(table_shape).astype(np.float32)
    ids = RNG.integers(0, table_shape[axis], ids_shape).astype(
        np.dtype(id_type.replace("i", "int"))
    )
    want = np.take(table, ids, axis=axis)
    tt, it = tensor_text(table_shape, "f32"), tensor_text(ids_shape, id_type)
    text = ir_function([tt, it], f"gather %a: {tt} at %b: {it} along {axis}",
                       tensor_text(want.shape, "f32"))  # fmt: skip
    np.testing.assert_array_equal(run_function(parse_module(text), "f", [table, ids]), want)


@pytest.mark.parametrize("table_shape, ids_shape, axis", TAKES, ids=str)
def test_scatter_add_is_numpy_add_at(table_shape, ids_shape, axis):
    base = RNG.standard_normal(table_shape)
    ids = RNG.integers(0, 2, ids_shape)  # repeated ids
    updates = RNG.standard_normal(np.take(base, ids, axis=axis).shape)
    want = base.copy()
    np.add.at(want, (slice(None),) * axis + (ids,), updates)
    ut, it, bt = (tensor_text(np.shape(x), t) for x, t in
                  ((updates, "f64"), (ids, "i64"), (base, "f64")))  # fmt: skip
    text = ir_function([ut, it, bt], f"scatterAdd %a: {ut} at %b: {it} into %c: {bt} along {axis}",
                       bt)  # fmt: skip
    got = run_function(parse_module(text), "f", [updates, ids, base])
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("bad", [5, -1])
def test_an_id_outside_the_axis_is_a_located_error(bad):
    text = ir_function(["<5 x 3 x f32>", "<2 x i32>"],
                       "gather %a: <5 x 3 x f32> at %b: <2 x i32> along 0",
                       "<2 x 3 x f32>")  # fmt: skip
    ids = np.array([1, bad], np.int32)
    with pytest.raises(InterpreterError) as e:
        run_function(parse_module(text, "m.dl"), "f", [np.zeros((5, 3), np.float32), ids])
    assert str(e.value) == (f"m.dl:6:5: in @f, gather: id {bad} out of range [0, 5) along axis 0")


def test_an_id_outside_the_axis_names_the_take_in_the_tel_source():
    """The interpreter's error names the `take` call of the TEL source, as the library's does."""
    c = compile_text("ids.tel", "module ids\n\nexport def f(E: [5 x 3], i: i32[2]) = take(E, i)\n")
    with pytest.raises(InterpreterError) as e:
        run_function(c.module, "f", [np.zeros((5, 3), np.float32), np.array([0, 9], np.int32)])
    assert str(e.value) == "ids.tel:3:39: in @f, gather: id 9 out of range [0, 5) along axis 0"


@pytest.mark.parametrize(
    "params, line, message",
    [
        (["<5 x f32>", "<2 x f32>"], "gather %a: <5 x f32> at %b: <2 x f32> along 0",
         "indices must be integers, found f32"),
        (["<5 x f32>", "<2 x i32>"], "gather %a: <5 x f32> at %b: <2 x i32> along 1",
         "axis 1 is out of range for rank 1"),
        (["<3 x f32>", "<2 x i32>", "<5 x f32>"],
         "scatterAdd %a: <3 x f32> at %b: <2 x i32> into %c: <5 x f32> along 0",
         "updates must have type <2 x f32> to scatter into <5 x f32>, found <3 x f32>"),
    ],
)  # fmt: skip
def test_type_rules(params, line, message):
    with pytest.raises(DiagnosticError, match=message.replace("[", r"\[")):
        parse_module(ir_function(params, line, "<2 x f32>"))


# Adjoints ----------------------------------------------------------------------------------


@pytest.mark.parametrize("table_shape, ids_shape, axis", TAKES, ids=str)
def test_gather_gradient_adds_into_the_rows_taken(table_shape, ids_shape, axis):
    ids = np.random.default_rng(1).integers(0, 2, ids_shape)  # repeated ids
    out = np.take(np.zeros(table_shape), ids, axis=axis).shape
    tt, it = tensor_text(table_shape, "f32"), tensor_text(ids_shape, "i64")
    text = ir_function([tt, it], f"gather %a: {tt} at %b: {it} along {axis}",
                       tensor_text(out, "f32"))  # fmt: skip
    table = np.random.default_rng(2).standard_normal(table_shape)
    gradient_check(text, [table, ids], wrt=(0,))


def test_scatter_add_gradient_reaches_updates_and_base():
    ut, it, bt = "<2 x 3 x 4 x f32>", "<2 x 3 x i32>", "<5 x 4 x f32>"
    text = ir_function([ut, it, bt], f"scatterAdd %a: {ut} at %b: {it} into %c: {bt} along 0", bt)
    ids = np.array([[0, 4, 0], [2, 2, 1]], np.int32)
    rng = np.random.default_rng(3)
    gradient_check(text, [rng.standard_normal((2, 3, 4)), ids, rng.standard_normal((5, 4))],
                   wrt=(0, 2))  # fmt: skip


# TEL ---------------------------------------------------------------------------------------

MODEL = """module emb
use nn
use optim

words: in i32[6 x 3]
cols: in i64[2 x 2]
labels: in[6 x 2]
E: param[7 x 4] = glorot()
W: param[4 x 2] = glorot()
b: param[1 x 2] = 0.0

y: out[6 x 2] = softmax(mean(embedding(E, words), axis: 1) . W + b)
picked: out[7 x 2 x 2] = take(E, cols, axis: -1)
loss: out[] = cross_entropy(y, labels)

train minimizing loss using OPTIMISER
"""


EMBEDDING_LINE = next(
    i + 1
    for i, line in enumerate((ROOT / "stdlib" / "nn.tel").read_text().splitlines())
    if line.startswith("def embedding(")
)


def compiled(optimiser: str):
    c = compile_text("emb.tel", MODEL.replace("OPTIMISER", optimiser))
    optimize(c.module)
    return c


@pytest.mark.parametrize(
    "call, message",
    [
        ("take(E, 1.5)", "take takes integer ids, found"),
        ("take(E, cols, axis: 2)", r"axis 2 is out of range for f32\[7 x 4\]"),
        ("take(1.5, cols)", "take needs a table of rank ≥ 1"),
    ],
)
def test_take_diagnostics(call, message):
    text = MODEL.replace("take(E, cols, axis: -1)", call).replace("OPTIMISER", "sgd(rate: 1.0)")
    with pytest.raises(DiagnosticError, match=message) as e:
        compile_text("emb.tel", text)
    assert all(d.loc is not None for d in e.value.diagnostics)


def reference(E, W, b, words, labels):
    """The model's outputs, loss and gradients in float64 NumPy."""
    E, W, b = (np.asarray(x, np.float64) for x in (E, W, b))
    h = E[words].mean(axis=1)
    z = h @ W + b
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    loss = -np.mean(np.sum(labels * np.log(p), -1))
    dz = (p - labels) / len(words)
    dh = dz @ W.T
    dE = np.zeros_like(E)
    np.add.at(dE, words, np.repeat(dh[:, None, :] / words.shape[1], words.shape[1], axis=1))
    return p, loss, {"E": dE, "W": h.T @ dz, "b": dz.sum(0, keepdims=True)}


@pytest.fixture(scope="module")
def sgd_library(tmp_path_factory):
    c = compiled("sgd(rate: 1.0)")
    path = tmp_path_factory.mktemp("emb") / "emb.so"
    build_library(c.module, c.spec, path)
    with dlvm.load(path) as lib:
        yield lib


WORDS = np.array([[0, 1, 1], [6, 6, 6], [2, 0, 5], [3, 4, 3], [1, 2, 3], [5, 5, 0]], np.int32)
LABELS = np.eye(2, dtype=np.float32)[[0, 1, 0, 1, 0, 1]]
COLS = np.array([[3, 0], [1, 1]], np.int64)


def test_library_forward_matches_numpy(sgd_library):
    lib = sgd_library
    E, W, b = (lib.get_param(n) for n in ("E", "W", "b"))
    y, picked = lib.infer(WORDS, COLS)
    p, _, _ = reference(E, W, b, WORDS, LABELS)
    np.testing.assert_allclose(y, p, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(picked, np.take(E, COLS, axis=-1))


def test_library_gradient_matches_a_float64_reference(sgd_library):
    lib = sgd_library
    before = {n: lib.get_param(n).copy() for n in ("E", "W", "b")}
    loss = lib.train_step(WORDS, LABELS)
    _, want_loss, grads = reference(before["E"], before["W"], before["b"], WORDS, LABELS)
    assert abs(float(loss) - want_loss) < 1e-5
    for name, g in grads.items():  # sgd at rate 1: the step is the gradient
        step = before[name].astype(np.float64) - lib.get_param(name)
        np.testing.assert_allclose(step, g, rtol=1e-4, atol=1e-6, err_msg=name)
    assert np.all(grads["E"][[2, 3, 4]] != 0)  # rows taken, some of them twice


@pytest.mark.parametrize("bad", [7, -1, 2**31 - 1])
def test_an_id_out_of_range_is_an_error_status(sgd_library, bad):
    lib = sgd_library
    E = lib.get_param("E").copy()
    words = WORDS.copy()
    words[4, 1] = bad
    with pytest.raises(dlvm.LibraryError) as e:
        lib.infer(words, COLS)
    assert e.value.status is Status.INVALID_ARGUMENT
    # The take inside nn's embedding, by the file name alone (the library's bytes never name
    # the directory it was built from).
    assert f": nn.tel:{EMBEDDING_LINE}:" in str(e.value)
    assert f"gather: id {bad} out of range [0, 7) along axis 0" in str(e.value)
    with pytest.raises(dlvm.LibraryError, match=r"out of range \[0, 7\)"):
        lib.train_step(words, LABELS)
    cols = COLS.copy()
    cols[1, 0] = 4
    with pytest.raises(dlvm.LibraryError) as e:
        lib.infer(WORDS, cols)
    # The message names the TEL call: `take(E, cols, axis: -1)` at line 13, column 26.
    message = "emb.tel:13:26: in @infer, gather: id 4 out of range [0, 4) along axis 1"
    assert message in str(e.value)
    np.testing.assert_array_equal(lib.get_param("E"), E)  # the failed step changed nothing
    lib.infer(WORDS, COLS)  # and the model still works


def test_an_embedding_classifier_learns_with_adam(tmp_path):
    """The label is whether a sentence holds word 6 or 5: only the embedding can tell."""
    c = compiled("adam(rate: 0.05)")
    path = tmp_path / "emb.so"
    build_library(c.module, c.spec, path)
    rng = np.random.default_rng(0)
    with dlvm.load(path) as lib:
        losses = []
        for _ in range(150):
            words = rng.integers(0, 7, (6, 3)).astype(np.int32)
            labels = np.eye(2, dtype=np.float32)[np.any(words >= 5, axis=1).astype(int)]
            losses.append(float(lib.train_step(words, labels)))
        assert np.mean(losses[-20:]) < 0.5 * np.mean(losses[:20])
        words = rng.integers(0, 7, (6, 3)).astype(np.int32)
        y, _ = lib.infer(words, COLS)
        assert np.array_equal(np.argmax(y, 1), np.any(words >= 5, axis=1).astype(int))


def test_cuda_kernels_assemble_and_the_entries_run_on_the_cpu():
    module = schedule(copy.deepcopy(compiled("sgd(rate: 1.0)").module), cuda=True)
    kernels = [f for f in module.functions if f.compute]
    indexed = [f for f in kernels if any(i.opcode in ("gather", "scatterAdd")
                                          for i in f.blocks[0].instructions)]  # fmt: skip
    assert {i.opcode for f in indexed for i in f.blocks[0].instructions} >= {"gather", "scatterAdd"}
    text, launches = ptx(module)
    assert text.count(".entry ") == len(kernels) == len(launches)
    assert "spill stores" in check_ptx(text)
