"""The stable losses of stdlib/nn.tel where a naive form breaks: logits [0, 120, 0] (whose
softmax underflows to 0 in float32) and ±100, for every label, as class indices and as one-hot
rows, through the interpreter (float32 and float64) and through a built library, values and
gradients against float64 NumPy computed stably; cross_entropy on probabilities that underflowed
stays finite; integer labels train through a `train` entry; wrong labels are located errors."""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import pytest
import tel_reference as ref
from click.testing import CliRunner
from telhelp import compile_snippet, entry, run_train_step

import dlvm
from dlvm.codegen.build import build_library
from dlvm.interp import run_function
from telc.cli import cli
from telc.driver import Compiled

# One row of logits per label: the naive softmax rounds two of its probabilities to 0 in f32.
PEAK = [0.0, 120.0, 0.0]

LOSSES = """module losses
use nn

export def sce(z: {t}[N x K], y: {t}[N x K]) -> {t} = softmax_cross_entropy(z, y)
export def sce_grad(z: {t}[N x K], y: {t}[N x K]) -> {t}[N x K] =
    grad(softmax_cross_entropy, wrt: 0)(z, y)
export def sparse(z: {t}[N x K], l: i64[N]) -> {t} = sparse_softmax_cross_entropy(z, l)
export def sparse_grad(z: {t}[N x K], l: i64[N]) -> {t}[N x K] =
    grad(sparse_softmax_cross_entropy, wrt: 0)(z, l)
export def nll(z: {t}[N x K], l: i64[N]) -> {t} = nll_loss(log_softmax(z), l)
export def naive(z: {t}[N x K], y: {t}[N x K]) -> {t} = cross_entropy(softmax(z), y)
export def naive_grad(z: {t}[N x K], y: {t}[N x K]) -> {t}[N x K] =
    grad(naive, wrt: 0)(z, y)
export def bce(z: {t}[N x K], t: {t}[N x K]) -> {t} = binary_cross_entropy_with_logits(z, t)
export def bce_grad(z: {t}[N x K], t: {t}[N x K]) -> {t}[N x K] =
    grad(binary_cross_entropy_with_logits, wrt: 0)(z, t)
"""


def losses_source(dtype: str, n: int, k: int) -> str:
    return f"dim N = {n}\ndim K = {k}\n" + LOSSES.format(t=dtype)


def expected_gradient(z: np.ndarray, onehot: np.ndarray) -> np.ndarray:
    """∂/∂z of softmax_cross_entropy in float64: (softmax(z) - onehot) / N."""
    return (ref.softmax(z) - onehot) / len(z)


def bce_gradient(z: np.ndarray, t: np.ndarray) -> np.ndarray:
    """∂/∂z of binary_cross_entropy_with_logits in float64: (sigmoid(z) - t) / size."""
    return (ref.sigmoid(z) - np.asarray(t, np.float64)) / z.size


@pytest.fixture(scope="module")
def losses(tmp_path_factory) -> Callable[[str, int, int], Compiled]:
    """The loss exports compiled for N rows of K logits in a float type, once per module."""

    @functools.cache
    def compiled(dtype: str, n: int, k: int) -> Compiled:
        directory = tmp_path_factory.mktemp(f"losses_{dtype}_{n}x{k}")
        return compile_snippet(str(directory), losses_source(dtype, n, k))

    return compiled


@pytest.fixture(params=["f32", "f64"])
def one_row(request, losses) -> tuple[str, Compiled]:
    """The loss exports for one row of three logits, in float32 or float64."""
    return request.param, losses(request.param, 1, 3)


@pytest.mark.parametrize("label", [0, 1, 2])
def test_peaked_logits_in_the_interpreter(one_row, label: int) -> None:
    """For logits [0, 120, 0] and each label, both forms give the exact finite loss (120 or
    about 0) and the gradient softmax(z) - onehot, in float32 and in float64."""
    dtype, compiled = one_row
    np_type = np.float32 if dtype == "f32" else np.float64
    z = np.array([PEAK], np_type)
    onehot = np.eye(3, dtype=np_type)[[label]]
    index = np.array([label], np.int64)

    def run(name: str, *args: np.ndarray) -> np.ndarray:
        return np.asarray(run_function(compiled.module, name, list(args), float64=False))

    want = float(ref.softmax_cross_entropy(z, onehot))
    assert want == pytest.approx(120.0 if label != 1 else 0.0, abs=1e-12)
    for got in (run("sce", z, onehot), run("sparse", z, index), run("nll", z, index)):
        assert got.dtype == np_type
        assert np.isfinite(got)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    grad = expected_gradient(z, onehot)
    for got in (run("sce_grad", z, onehot), run("sparse_grad", z, index)):
        assert np.all(np.isfinite(got))
        np.testing.assert_allclose(got, grad, rtol=1e-6, atol=1e-7)


def test_the_naive_form_is_finite_once_probabilities_underflow(losses) -> None:
    """cross_entropy(softmax(z), y) on [0, 120, 0] in float32, which gave NaN: the clamped
    probability gives -log(1e-30) for label 0 and 0 for label 1, and a finite gradient."""
    compiled = losses("f32", 2, 3)
    z = np.array([PEAK, PEAK], np.float32)
    y = np.eye(3, dtype=np.float32)[[0, 1]]
    got = run_function(compiled.module, "naive", [z, y])
    np.testing.assert_allclose(got, -np.log(1e-30) / 2, rtol=1e-6)
    grad = np.asarray(run_function(compiled.module, "naive_grad", [z, y]))
    assert np.all(np.isfinite(grad))
    # The wrong row, whose probability p = 0 is clamped, gets no gradient: why the logits form
    # is better. The right row's gradient is softmax - onehot, about 0.
    np.testing.assert_array_equal(grad[0], [0.0, 0.0, 0.0])
    np.testing.assert_allclose(grad[1], [0.0, 0.0, 0.0], atol=1e-7)


def extreme_case() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Logits at ±100 and 0 with every label, binary targets 0, 1 and 0.3."""
    z = np.array([[100, -100, 0, 100], [-100, 100, 100, -100], [0, 0, -100, 100]], np.float64)
    labels = np.array([1, 0, 3], np.int64)
    onehot = np.eye(4)[labels]
    t = np.array([[1, 0, 0.3, 0], [1, 1, 0, 0.3], [0.3, 1, 0, 1]], np.float64)
    return z, labels, onehot, t


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_extreme_logits_against_numpy(dtype: str, losses) -> None:
    """nll_loss, both softmax cross-entropies and binary_cross_entropy_with_logits at logits
    ±100, values and gradients, against NumPy in float64."""
    compiled = losses(dtype, 3, 4)
    np_type = np.float32 if dtype == "f32" else np.float64
    z, labels, onehot, t = extreme_case()
    zt, yt, tt = z.astype(np_type), onehot.astype(np_type), t.astype(np_type)
    tol = {"rtol": 1e-6, "atol": 1e-6} if dtype == "f32" else {"rtol": 1e-12, "atol": 1e-14}

    def run(name: str, *args: np.ndarray) -> np.ndarray:
        got = np.asarray(run_function(compiled.module, name, list(args), float64=False))
        assert got.dtype == np_type and np.all(np.isfinite(got)), name
        return got

    loss = ref.softmax_cross_entropy(z, onehot)
    np.testing.assert_allclose(ref.nll_loss(ref.log_softmax(z), labels), loss)
    np.testing.assert_allclose(run("sce", zt, yt), loss, **tol)
    np.testing.assert_allclose(run("sparse", zt, labels), loss, **tol)
    np.testing.assert_allclose(run("nll", zt, labels), loss, **tol)
    np.testing.assert_allclose(run("sce_grad", zt, yt), expected_gradient(z, onehot), **tol)
    np.testing.assert_allclose(run("sparse_grad", zt, labels), expected_gradient(z, onehot), **tol)
    np.testing.assert_allclose(
        run("bce", zt, tt), ref.binary_cross_entropy_with_logits(z, t), **tol
    )
    np.testing.assert_allclose(run("bce_grad", zt, tt), bce_gradient(z, t), **tol)


def test_bce_gradient_at_zero(losses) -> None:
    """At x = 0, where max(x, 0) and |x| have kinks, the gradient is sigmoid(0) - t = 0.5 - t."""
    compiled = losses("f64", 1, 3)
    z = np.zeros((1, 3))
    t = np.array([[0.0, 0.5, 1.0]])
    got = run_function(compiled.module, "bce_grad", [z, t], float64=True)
    np.testing.assert_allclose(got, (0.5 - t) / 3, rtol=1e-15)
    np.testing.assert_allclose(run_function(compiled.module, "bce", [z, t]), np.log(2), rtol=1e-12)


def test_nll_loss_reads_only_the_entries_it_picks(tmp_path) -> None:
    """-inf log-probabilities off the labels do no harm (0 * -inf would be NaN); an index
    outside [0, K) picks nothing, so its row adds 0 and still counts in the mean."""
    compiled = compile_snippet(
        str(tmp_path),
        "module nll\nuse nn\nexport def f(lp: f64[2 x 3], l: i64[2]) -> f64 = nll_loss(lp, l)\n",
    )
    row = [-np.inf, np.log(0.25), -np.inf]
    lp = np.array([row, row])
    got = run_function(compiled.module, "f", [lp, np.array([1, 1])], float64=True)
    np.testing.assert_allclose(got, -np.log(0.25), rtol=1e-15)
    got = run_function(compiled.module, "f", [lp, np.array([1, 7])], float64=True)
    np.testing.assert_allclose(got, -np.log(0.25) / 2, rtol=1e-15)


# --- through a built library ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    directory = tmp_path_factory.mktemp("losses_library")
    compiled = compile_snippet(str(directory), losses_source("f32", 3, 3))
    path = directory / "losses.so"
    build_library(compiled.module, compiled.spec, path)
    with dlvm.load(path) as lib:
        yield lib


def test_peaked_logits_through_the_library(library) -> None:
    """The compiled float32 code (its exp flushes what underflows) gives the float64 NumPy
    values and gradients for [0, 120, 0] with labels 0, 1 and 2 in one batch."""
    z = np.array([PEAK, PEAK, PEAK], np.float32)
    labels = np.array([0, 1, 2], np.int64)
    onehot = np.eye(3, dtype=np.float32)
    want = float(ref.softmax_cross_entropy(z, onehot))
    assert want == pytest.approx(80.0)
    grad = expected_gradient(z, onehot)
    for got in (library.sce(z, onehot), library.sparse(z, labels), library.nll(z, labels)):
        assert np.isfinite(got)
        np.testing.assert_allclose(got, want, rtol=1e-6)
    for got in (library.sce_grad(z, onehot), library.sparse_grad(z, labels)):
        np.testing.assert_allclose(got, grad, rtol=1e-6, atol=1e-7)
    assert np.isfinite(library.naive(z, onehot))
    assert np.all(np.isfinite(library.naive_grad(z, onehot)))


def test_extreme_bce_through_the_library(library) -> None:
    z = np.array([[100, -100, 0], [-100, 100, 3], [0, 0, -100]], np.float32)
    t = np.array([[1, 0, 0.3], [1, 0, 1], [0.3, 1, 0]], np.float32)
    np.testing.assert_allclose(
        library.bce(z, t), ref.binary_cross_entropy_with_logits(z, t), rtol=1e-6
    )
    np.testing.assert_allclose(library.bce_grad(z, t), bce_gradient(z, t), rtol=1e-5, atol=1e-8)


TRAIN = """module sparse_train
use nn
use optim

z: in[3 x 3]
labels: in i64[3]
b: param[1 x 3] = 0.0

loss: out[] = sparse_softmax_cross_entropy(z + b, labels)

train minimizing loss using sgd(rate: 1.0)
"""


def test_integer_labels_train(tmp_path) -> None:
    """A `train` entry taking i64 labels: one sgd step of rate 1 from b = 0 on [0, 120, 0]
    with labels 0, 1, 2 gives loss 80 and b = -mean(softmax - onehot) = [1, -2, 1] / 3, in
    the interpreter and in the library."""
    compiled = compile_snippet(str(tmp_path), TRAIN)
    z = np.array([PEAK, PEAK, PEAK], np.float32)
    labels = np.array([0, 1, 2], np.int64)
    expected_b = np.array([[1.0, -2.0, 1.0]]) / 3
    train = entry(compiled.interface, "train")
    loss, params, _ = run_train_step(
        compiled,
        train,
        {"z": z, "labels": labels},
        {"b": np.zeros((1, 3), np.float32)},
        [],
        1,
        float64=False,
    )
    assert loss == pytest.approx(80.0)
    np.testing.assert_allclose(params["b"], expected_b, rtol=1e-6)
    path = tmp_path / "sparse_train.so"
    build_library(compiled.module, compiled.spec, path)
    with dlvm.load(path) as lib:
        assert float(lib.train_step(z, labels)) == pytest.approx(80.0)
        np.testing.assert_allclose(lib.params["b"], expected_b, rtol=1e-6)


# --- mistakes ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            "sparse_softmax_cross_entropy(z, rows)",
            "argument 'labels' of sparse_softmax_cross_entropy: expected an integer tensor, "
            "found f32[3 x 4]",
        ),
        (
            "sparse_softmax_cross_entropy(z, grid)",
            "argument 'labels' of sparse_softmax_cross_entropy: expected [N], found [3 x 4]",
        ),
        (
            "softmax_cross_entropy(z, cast(narrow, i64))",
            "argument 'labels' of softmax_cross_entropy: element type i64 differs from the f32 "
            "of the arguments before it",
        ),
        ("nll_loss(z, wide[0:2])", "argument 'labels' of nll_loss: expected [N], found [2]"),
    ],
)
def test_wrong_labels_are_located_errors(call: str, message: str, tmp_path) -> None:
    """`telc check` rejects them with status 1 at the argument, and float labels get the cast
    that fixes them (integer labels of any type are taken as they are)."""
    path = tmp_path / "wrong.tel"
    path.write_text(
        "module wrong\nuse nn\n\nz: in[3 x 4]\nrows: in[3 x 4]\nnarrow: in i32[3]\n"
        f"wide: in i64[3]\ngrid: in i8[3 x 4]\n\nloss: out = {call}\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(cli, ["check", str(path)])
    assert result.exit_code == 1, result.output
    column = len("loss: out = ") + call.index(", ") + 3
    assert f"{path}:10:{column}: error: {message}\n" in result.output
    assert ("help: cast(…, i64) converts it" in result.output) == ("integer tensor" in message)
    assert "Traceback" not in result.output
