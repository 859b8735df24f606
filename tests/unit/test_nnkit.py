"""NNKit for Python (dlvm.nnkit): functions staged into IR and compiled, against NumPy; gradients
as IR gradient declarations, against finite differences; staging errors located at the user's
line; the compile caches; and the seed paper's NNKit examples in our Python form."""

from __future__ import annotations

import numpy as np
import pytest

import dlvm
from dlvm import nnkit as nk
from dlvm.codegen.build import BuildError
from dlvm.nnkit import StagingError, Tensor, f32, tanh

RNG = np.random.default_rng(0)
X = RNG.standard_normal((1, 784)).astype(np.float32)
W = (RNG.standard_normal((784, 10)) * 0.05).astype(np.float32)
B = (RNG.standard_normal((1, 10)) * 0.1).astype(np.float32)


@pytest.fixture(autouse=True)
def own_cache(tmp_path_factory, monkeypatch):
    """Compiled staged functions go to this module's cache, not the user's."""
    monkeypatch.setenv("DLVM_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "nnkit-cache"))
    yield
    nk.wait_optimised()  # no optimised build outlives its test


# The seed paper's examples: `x • w + b`, `tanh` of a call, and a gradient declaration.
@dlvm.stage
def linear(x: Tensor[f32, 1, 784], w: Tensor[f32, 784, 10], b: Tensor[f32, 1, 10]):
    return x @ w + b


@dlvm.stage
def g(x: Tensor[f32, 1, 784], w: Tensor[f32, 784, 10], b: Tensor[f32, 1, 10]):
    return tanh(linear(x, w, b))


def test_a_staged_function_computes_what_numpy_does():
    np.testing.assert_allclose(linear(X, W, B), X @ W + B, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(g(X, W, B), np.tanh(X @ W + B), rtol=1e-5, atol=1e-6)


def test_a_call_of_a_staged_function_is_an_apply_in_the_ir():
    text = g.ir()
    assert (
        "func @linear: (<1 x 784 x f32>, <784 x 10 x f32>, <1 x 10 x f32>) -> <1 x 10 x f32>"
        in text
    )
    assert "apply @linear(%x: <1 x 784 x f32>, %w: <784 x 10 x f32>, %b: <1 x 10 x f32>)" in text
    assert "tanh" in text and "stage raw" in text
    assert "define" in g.llvm()  # the optimised LLVM IR of the compiled module


def test_the_papers_gradient_declaration():
    """gradient(of: g, withRespectTo: (1, 2), seedable: true, keeping: (0)) in Python."""
    dg = dlvm.gradient(g, wrt=(1, 2), seedable=True, keeping=(0,))
    assert "[gradient @g wrt 1, 2 keeping 0 seedable]" in dg.ir(
        X, W, B, np.ones((1, 10), np.float32)
    )
    seed = RNG.standard_normal((1, 10)).astype(np.float32)
    dw, db, y = dg(X, W, B, seed)
    t = np.tanh(X.astype(np.float64) @ W + B)
    local = seed * (1 - t**2)  # d/d(xW + b) of seed · tanh(xW + b)
    np.testing.assert_allclose(y, t, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(db, local, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(dw, X.T.astype(np.float64) @ local, rtol=1e-4, atol=1e-6)


def test_gradients_agree_with_finite_differences():
    @dlvm.stage
    def loss(w: Tensor[f32, 3, 4], x: Tensor[f32, 2, 3]):
        return nk.sum(nk.sigmoid(x @ w) * nk.relu(x @ w - 0.1))

    w = RNG.standard_normal((3, 4)).astype(np.float32)
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    (dw,) = dlvm.gradient(loss, wrt=(0,))(w, x)

    def f(w64: np.ndarray) -> float:
        z = x.astype(np.float64) @ w64
        return float(np.sum(1 / (1 + np.exp(-z)) * np.maximum(z - 0.1, 0)))

    h = 1e-4
    numeric = np.zeros_like(w, dtype=np.float64)
    for i in np.ndindex(w.shape):
        e = np.zeros_like(numeric)
        e[i] = h
        numeric[i] = (f(w + e) - f(w - e)) / (2 * h)
    np.testing.assert_allclose(dw, numeric, rtol=2e-3, atol=2e-4)


def test_shapes_come_from_the_first_call_without_annotations_and_loops_unroll():
    @dlvm.stage
    def mlp(x, w):
        for _ in range(3):  # Python control flow on concrete values is unrolled
            x = nk.relu(x @ w)
        return nk.softmax(x)

    x = RNG.standard_normal((5, 8)).astype(np.float32)
    w = (RNG.standard_normal((8, 8)) * 0.5).astype(np.float32)
    h = x
    for _ in range(3):
        h = np.maximum(h @ w, 0)
    e = np.exp(h - h.max(axis=1, keepdims=True))
    np.testing.assert_allclose(mlp(x, w), e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)
    assert mlp.ir(x, w).count(" = dot ") == 3
    # Another signature is staged and compiled anew.
    assert mlp(x[:2], w).shape == (2, 8)
    assert len(mlp.compiled) == 2


def test_compiled_code_is_cached_in_memory_and_on_disk():
    def body(x: Tensor[f32, 4], y: Tensor[f32, 4]):
        return x * y + 1.0

    first = dlvm.stage(body)
    a = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(first(a, a), a * a + 1)
    compiled = first.compiled[first.specs((a, a))]
    first(a, a)
    assert first.compiled[first.specs((a, a))] is compiled  # one compile per signature
    nk.wait_optimised()  # the optimised library is in the disk cache
    hits = nk.Compiled.hits
    nk.Compiled.loaded.clear()  # as a new process would start
    again = dlvm.stage(body)
    np.testing.assert_array_equal(again(a, a), a * a + 1)
    assert nk.Compiled.hits == hits + 1  # the library came from the disk cache


def test_staging_errors_point_at_the_users_line():
    @dlvm.stage
    def bad(x: Tensor[f32, 2, 3], w: Tensor[f32, 4, 5]):
        return x @ w  # the inner dimensions differ

    with pytest.raises(StagingError) as e:
        bad(np.zeros((2, 3), np.float32), np.zeros((4, 5), np.float32))
    text = str(e.value)
    assert f"{__file__}:" in text and "error: dot: inner dimensions differ" in text
    assert "return x @ w  # the inner dimensions differ" in text  # the source line, with a caret
    with pytest.raises(StagingError, match="argument 'x' must be f32\\[2, 3\\], got f32\\[3, 3\\]"):
        bad(np.zeros((3, 3), np.float32), np.zeros((4, 5), np.float32))

    @dlvm.stage
    def branchy(x: Tensor[f32, 2]):
        if x:  # a tensor's value is not known while staging
            return x
        return -x

    with pytest.raises(StagingError, match="no truth value while staging"):
        branchy(np.zeros(2, np.float32))


def test_a_staged_function_exports_a_library_like_a_tel_model(tmp_path):
    path = g.export(tmp_path / "layer.so")
    header = path.with_suffix(".h").read_text()
    assert "dlrt_status nnkit_g_g(" in header  # model nnkit_g, entry g
    with dlvm.load(path) as lib:
        np.testing.assert_allclose(lib.g(X, W, B), np.tanh(X @ W + B), rtol=1e-5, atol=1e-6)


def test_cond_and_loop_stage_control_flow_in_the_ir():
    @dlvm.stage
    def clip(x: Tensor[f32, 3], limit: Tensor[f32]):
        return dlvm.cond(nk.max(x) > limit, lambda: x * (limit / nk.max(x)), lambda: x)

    x = np.array([1.0, -2.0, 4.0], np.float32)
    np.testing.assert_allclose(clip(x, np.float32(2.0)), x * 0.5)
    np.testing.assert_allclose(clip(x, np.float32(5.0)), x)
    assert "conditional" in clip.ir() and "'join0(" in clip.ir()

    @dlvm.stage
    def halve_until(x: Tensor[f32], limit: Tensor[f32]):
        count = x * 0.0
        return dlvm.loop((x, count), lambda v, n: v > limit, lambda v, n: (v * 0.5, n + 1.0))

    value, steps = halve_until(np.float32(100.0), np.float32(1.0))
    assert (float(value), float(steps)) == (0.78125, 7.0)  # 100 / 2^7 is the first below 1
    assert "'head0(" in halve_until.ir() and "'exit0(" in halve_until.ir()
    # The gradient of the loop's value: d(x / 2^7) / dx = 2^-7 (the IR's `from 0`).
    (dx,) = dlvm.gradient(halve_until, from_=0, wrt=(0,))(np.float32(100.0), np.float32(1.0))
    assert float(dx) == 2.0**-7


def test_tel_functions_are_called_from_staged_code():
    from telc.driver import compile_text

    tel = compile_text(
        "act.tel", "module act\nuse nn\nexport def act(x: [4]) -> [4] = sigmoid(x) * 2.0\n"
    )
    lib = nk.functions(tel.module)

    @dlvm.stage
    def twice(x: Tensor[f32, 4]):
        return lib.act(lib.act(x))

    x = np.array([-1.0, 0.0, 0.5, 3.0], np.float32)
    once = 2 / (1 + np.exp(-x))
    np.testing.assert_allclose(twice(x), 2 / (1 + np.exp(-once)), rtol=1e-6)
    assert twice.ir().count("apply @act(") == 2


def test_dlpack_arrays_are_arguments_too():
    class Exported:
        """Only the DLPack protocol, as another framework's array would offer it."""

        def __init__(self, a: np.ndarray) -> None:
            self.a = a

        def __dlpack__(self, stream=None):
            return self.a.__dlpack__()

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    @dlvm.stage
    def scale(v, s):
        return v * s

    v = np.arange(6, dtype=np.float32).reshape(2, 3)
    two = np.array(2.0, np.float32)
    np.testing.assert_array_equal(scale(Exported(v), Exported(two)), v * 2)


ONES = np.ones(3, np.float32)
MISUSES = [
    # (the call, the exception, what its message says); StagingErrors name this file's line.
    (lambda: dlvm.stage(lambda x, y: x + y)(ONES), TypeError, r"takes 2 arguments, got 1"),
    (lambda: dlvm.stage(lambda x: x * 2.0)("hi"), TypeError,
     r"argument 'x': no DLVM element type for NumPy's <U2"),
    (lambda: dlvm.stage(lambda x: x + "s")(ONES), StagingError,
     r"cannot combine a staged tensor with str"),
    (lambda: dlvm.stage(lambda x: [x])(ONES), StagingError,
     r"must return tensors it computed, not \[<staged tensor <3 x f32>>\]"),
    (lambda: dlvm.stage(lambda x: dlvm.cond(x, lambda: x, lambda: x))(ONES), StagingError,
     r"dlvm.cond needs a scalar bool tensor"),
    (lambda: dlvm.cond(None, lambda: 1, lambda: 2), StagingError,
     r"dlvm.cond is for staged functions"),
    (lambda: dlvm.stage(lambda x: dlvm.loop(x, lambda v: nk.sum(v) > 1.0, nk.sum))(ONES),
     StagingError, r"dlvm.loop's body must keep the state's types: <3 x f32> became f32"),
    (lambda: dlvm.gradient(lambda x: x), TypeError, r"gradient\(\) needs a staged function"),
    (lambda: dlvm.gradient(dlvm.stage(lambda x: nk.sum(x)), wrt=(3,))(ONES), StagingError,
     r"'wrt 3' is out of range: the function takes 1 argument"),
    (lambda: dlvm.gradient(dlvm.stage(lambda x: nk.sum(x)), seedable=True)(ONES), TypeError,
     r"takes 2 arguments \(the last a seed\)"),
    (lambda: dlvm.stage(lambda x: nk.tanh(2.0))(ONES), StagingError,
     r"tanh: expected a staged tensor, got float"),
    (lambda: dlvm.stage(lambda x: nk.sum(x, 5))(ONES), StagingError,
     r"dimension 5 is out of range for rank 1"),
    (lambda: Tensor[float, 3], TypeError, r"annotate tensors as Tensor\[dtype, dim, …\]"),
    (lambda: dlvm.stage(lambda x: x * 2.0).export("/proc/no/lib.so", ONES), BuildError,
     r"cannot write"),
]  # fmt: skip


@pytest.mark.parametrize("call,error,message", MISUSES)
def test_every_misuse_is_a_clear_error(call, error, message):
    with pytest.raises(error, match=message) as e:
        call()
    if error is StagingError:
        assert "test_nnkit.py:" in str(e.value) and ": error: " in str(e.value)


def test_bf16_functions_and_their_gradients():
    """`Tensor[bf16, …]` and ml_dtypes.bfloat16 arrays: staged in bf16 (products summed in f32
    and rounded once), gradients too; within a few bf16 steps of float64."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    b16 = np.dtype(ml_dtypes.bfloat16)

    @dlvm.stage
    def layer(x: Tensor[nk.bf16, 2, 3], w: Tensor[nk.bf16, 3, 4]) -> Tensor[nk.bf16, 2, 4]:
        return nk.tanh(x @ w + 1.0)

    @dlvm.stage
    def loss(w, x):
        return nk.sum(nk.tanh(x @ w))

    x = np.linspace(-1, 1, 6).reshape(2, 3).astype(b16)
    w = np.linspace(-0.5, 0.5, 12).reshape(3, 4).astype(b16)
    xf, wf = x.astype(np.float64), w.astype(np.float64)
    y = layer(x, w)
    assert y.dtype == b16
    np.testing.assert_allclose(y.astype(np.float64), np.tanh(xf @ wf + 1), rtol=2**-7, atol=2**-8)
    dw, dx = nk.gradient(loss)(w, x)
    assert dw.dtype == b16 and dx.dtype == b16
    t = np.tanh(xf @ wf)
    np.testing.assert_allclose(dw.astype(np.float64), xf.T @ (1 - t * t), atol=4 * 2**-8)
    np.testing.assert_allclose(dx.astype(np.float64), (1 - t * t) @ wf.T, atol=4 * 2**-8)
