"""TEL's `.` is NumPy's `matmul`: products of any rank, batch dimensions that broadcast, vectors
promoted and dropped again. Values and gradients (TEL `grad` with a seed) on the interpreter and
in a built library, a training step through a library, against NumPy in float64; PTX for the CUDA
target. tests/filecheck/tel/products.tel shows the IR each kind of product lowers to."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from telhelp import compile_snippet, entry, run_infer

import dlvm
from dlvm.codegen.build import build_library
from telc.cli import cli

# (left shape, right shape): one of each way the operands can meet.
CASES = [
    ((3, 4), (4, 5)),  # matrices
    ((2, 3, 4), (4, 5)),  # a batch times one matrix: one stacked product
    ((2, 1, 3, 4), (1, 4, 2)),  # the right operand's batch is all ones: stacked too
    ((3, 4), (2, 4, 5)),  # one matrix times a batch
    ((2, 1, 3, 4), (5, 4, 3)),  # batches that broadcast both ways
    ((2, 3, 3, 4), (2, 3, 4, 2)),  # equal batches: the IR's batched dot
    ((4,), (4, 5)),  # a vector on the left
    ((2, 3, 4), (4,)),  # a vector on the right
    ((4,), (2, 4, 3)),  # a vector times a batch
    ((4,), (4,)),  # two vectors: a scalar
]


def shape_text(shape: tuple[int, ...]) -> str:
    return "[" + " x ".join(map(str, shape)) + "]"


def case_source(i: int, sa: tuple[int, ...], sb: tuple[int, ...]) -> str:
    out = np.matmul(np.zeros(sa), np.zeros(sb)).shape
    return (
        f"a{i}: in{shape_text(sa)}\nb{i}: in{shape_text(sb)}\ns{i}: in{shape_text(out)}\n"
        f"def f{i}(u: {shape_text(sa)}, v: {shape_text(sb)}) -> {shape_text(out)} = u . v\n"
        f"y{i}: out = a{i} . b{i}\n"
        f"da{i}: out = grad(f{i}, seed: s{i})(a{i}, b{i})[0]\n"
        f"db{i}: out = grad(f{i}, seed: s{i})(a{i}, b{i})[1]\n"
    )


SOURCE = "module products\ntype float64\n\n" + "\n".join(
    case_source(i, sa, sb) for i, (sa, sb) in enumerate(CASES)
)


def summed_to(g: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """g summed over the dimensions broadcasting added or stretched to reach its shape."""
    g = g.sum(axis=tuple(range(g.ndim - len(shape)))) if g.ndim > len(shape) else g
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    return g.sum(axis=stretched, keepdims=True) if stretched else g


def reference(a: np.ndarray, b: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, ...]:
    """a @ b and the gradients of sum(s * (a @ b)) with respect to a and b, in NumPy."""
    ma = a[None, :] if a.ndim == 1 else a
    mb = b[:, None] if b.ndim == 1 else b
    ms = np.reshape(s, np.matmul(ma, mb).shape)
    da = summed_to(np.matmul(ms, np.swapaxes(mb, -1, -2)), ma.shape).reshape(a.shape)
    db = summed_to(np.matmul(np.swapaxes(ma, -1, -2), ms), mb.shape).reshape(b.shape)
    return np.matmul(a, b), da, db


def case_inputs(rng: np.random.Generator) -> dict[str, np.ndarray]:
    inputs = {}
    for i, (sa, sb) in enumerate(CASES):
        inputs[f"a{i}"] = rng.standard_normal(sa)
        inputs[f"b{i}"] = rng.standard_normal(sb)
        inputs[f"s{i}"] = rng.standard_normal(np.matmul(np.zeros(sa), np.zeros(sb)).shape)
    return inputs


def check_against_numpy(outputs: dict[str, np.ndarray], inputs: dict[str, np.ndarray]) -> None:
    for i in range(len(CASES)):
        want = reference(inputs[f"a{i}"], inputs[f"b{i}"], inputs[f"s{i}"])
        for name, w in zip(("y", "da", "db"), want):
            got = np.asarray(outputs[f"{name}{i}"])
            assert got.shape == w.shape, (name, i, CASES[i])
            np.testing.assert_allclose(got, w, rtol=1e-12, atol=1e-12, err_msg=f"{name}{i}")


def test_products_and_gradients_on_the_interpreter(tmp_path):
    compiled = compile_snippet(str(tmp_path), SOURCE)
    inputs = case_inputs(np.random.default_rng(0))
    check_against_numpy(run_infer(compiled, inputs, {}), inputs)


def test_products_and_gradients_in_a_library(tmp_path):
    compiled = compile_snippet(str(tmp_path), SOURCE)
    path = tmp_path / "products.so"
    build_library(compiled.module, compiled.spec, path)
    infer = entry(compiled.interface, "infer")
    inputs = case_inputs(np.random.default_rng(1))
    with dlvm.load(path) as model:
        values = model.infer(*(inputs[n] for n, _ in infer.inputs))
    check_against_numpy(dict(zip((n for n, _ in infer.outputs), values)), inputs)


TRAINING = """
module attention_like
type float64
use optim

x: in[4 x 3 x 5]
q: in[2 x 1 x 3 x 5]
t: in[4 x 3 x 6]
u: in[2 x 4 x 3 x 3]
W: param[5 x 6] = 0.0
K: param[4 x 5 x 3] = 0.0

loss: out[] = sum((x . W - t) * (x . W - t)) + sum((q . K - u) * (q . K - u))

train minimizing loss using sgd(rate: 0.01)
"""


def test_training_through_a_library_matches_numpy(tmp_path):
    compiled = compile_snippet(str(tmp_path), TRAINING)
    path = tmp_path / "attention_like.so"
    build_library(compiled.module, compiled.spec, path)
    rng = np.random.default_rng(2)
    x, q = rng.standard_normal((4, 3, 5)), rng.standard_normal((2, 1, 3, 5))
    t, u = rng.standard_normal((4, 3, 6)), rng.standard_normal((2, 4, 3, 3))
    w, k = rng.standard_normal((5, 6)), rng.standard_normal((4, 5, 3))
    with dlvm.load(path) as model:
        model.set_param("W", w)
        model.set_param("K", k)
        loss = model.train_step(x, q, t, u)
        new_w, new_k = model.get_param("W"), model.get_param("K")
    ew, ek = x @ w - t, q @ k - u
    assert np.isclose(float(loss), np.sum(ew * ew) + np.sum(ek * ek), rtol=1e-12)
    dw = np.einsum("btd,bte->de", x, 2 * ew)  # summed over the batch the product stacked
    dk = np.einsum("xtd,xhte->hde", q[:, 0], 2 * ek)  # summed over q's batch, which K shares
    np.testing.assert_allclose(new_w, w - 0.01 * dw, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(new_k, k - 0.01 * dk, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("sa, sb", CASES[1:6], ids=str)
def test_products_and_their_gradients_generate_ptx(tmp_path, sa, sb):
    src = tmp_path / "p.tel"
    src.write_text(
        f"module p\nuse optim\na: in{shape_text(sa)}\nW: param{shape_text(sb)} = 0.5\n"
        "loss: out[] = sum((a . W) * (a . W))\ntrain minimizing loss using sgd()\n"
    )
    out = tmp_path / "p.ptx"
    args = ["build", str(src), "--target", "cuda", "--emit", "ptx", "-o", str(out), "-q"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert ".visible .entry dlk_" in out.read_text()


def test_mismatched_products_are_located_errors_naming_both_shapes(tmp_path):
    src = tmp_path / "bad.tel"
    src.write_text(
        "module bad\ndim B = 2\ndim T = 3\nx: in[B x T x 4]\nW: in[4 x 5]\nk: in[7 x 4 x 2]\n"
        "b: in[6]\nv: in[5]\n"
        "y: out = x . W + b\n"  # the product's shape keeps the names it was written with
        "z: out = x . k\n"
        "u: out = v . x\n"
    )
    result = CliRunner().invoke(cli, ["check", str(src)])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and "internal error" not in result.output
    lines = result.output.splitlines()
    assert f"{src}:9:10: error: cannot broadcast [B x T x 5] and [6] for addition" in lines
    assert "  left  x . W : [B x T x 5]     (B = 2, T = 3)" in lines
    batch = "the batch dimensions differ: [B] and [7] do not broadcast"
    assert f"{src}:10:10: error: matrix product: {batch}" in lines
    assert "  left  x : [B x T x 4]     (B = 2, T = 3)" in lines
    assert "  right k : [7 x 4 x 2]" in lines
    assert f"{src}:11:10: error: matrix product: inner dimensions differ" in lines
    assert "  left  v : [5]" in lines
