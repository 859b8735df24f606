"""stdlib/nn.tel and stdlib/optim.tel: every function has a golden test against its NumPy model
in tel_reference (in float64 with tight tolerances, and in float32) and a gradient check (the
gradient `grad` gives in TEL, against central differences of the NumPy model in float64).
Optimisers are also checked through `train … using OPT(hyper…)`, and dropout's training
behaviour (through a `train` entry point, where `training` is true) by its statistics."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import tel_reference as ref
from telhelp import central_gradient, compile_snippet, entry, run_infer, run_train_step

from dlvm.diagnostics import DiagnosticError
from dlvm.interp import run_function

Gen = Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]


def normal(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.standard_normal(shape)


def away_from_zero(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Values with |x| in [0.1, 2): no kink of relu or leaky_relu within a finite difference."""
    return rng.choice([-1.0, 1.0], size=shape) * rng.uniform(0.1, 2.0, size=shape)


def wide(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Large magnitudes (up to 1000), which overflow a naive exp."""
    return rng.uniform(-1000.0, 1000.0, size=shape)


def probabilities(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Rows of a softmax: positive, summing to 1 along the last axis."""
    return ref.softmax(rng.standard_normal(shape))


def one_hot(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    rows = int(np.prod(shape[:-1]))
    return np.eye(shape[-1])[rng.integers(0, shape[-1], size=rows)].reshape(shape)


def positive(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.uniform(0.1, 2.0, size=shape)


def extreme(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Logits of ±100 and a few near 0: beyond where exp under- or overflows in float32."""
    return rng.choice([-100.0, 100.0, 0.5, -0.5], size=shape)


def classes(count: int) -> Gen:
    """Integer class indices (int64) in [0, count), one per row of the shape's first dim."""
    return lambda rng, shape: rng.integers(0, count, size=shape)


def targets(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Binary targets: 0, 1, or a probability in between."""
    return rng.choice([0.0, 1.0, 0.3], size=shape)


@dataclass
class Case:
    """A call of a stdlib function on arguments of given shapes, its result shape and its NumPy
    model. `wrt`: the arguments the gradient check differentiates (default: all)."""

    call: str
    args: list[tuple[str, tuple[int, ...], Gen]]
    result: tuple[int, ...]
    model: Callable[..., np.ndarray]
    wrt: list[str] | None = None

    def float_args(self) -> list[str]:
        """The arguments whose generator draws floats (the others are i64 class indices)."""
        rng = np.random.default_rng(0)
        return [n for n, s, gen in self.args if np.asarray(gen(rng, s)).dtype.kind == "f"]


X34 = [("x", (3, 4), normal)]
X234 = [("x", (2, 3, 4), normal)]

NN_CASES: dict[str, Case] = {
    "sigmoid": Case("sigmoid(x)", X34, (3, 4), ref.sigmoid),
    "sigmoid_rank3": Case("sigmoid(x)", X234, (2, 3, 4), ref.sigmoid),
    "sigmoid_wide": Case("sigmoid(x)", [("x", (3, 4), wide)], (3, 4), ref.sigmoid),
    "relu": Case("relu(x)", [("x", (3, 4), away_from_zero)], (3, 4), ref.relu),
    "relu_rank1": Case("relu(x)", [("x", (7,), away_from_zero)], (7,), ref.relu),
    "leaky_relu": Case("leaky_relu(x)", [("x", (3, 4), away_from_zero)], (3, 4), ref.leaky_relu),
    "leaky_relu_slope": Case(
        "leaky_relu(x, 0.2)",
        [("x", (3, 4), away_from_zero)],
        (3, 4),
        lambda x: ref.leaky_relu(x, 0.2),
    ),
    "leaky_relu_keyword": Case(
        "leaky_relu(x, slope: 0.3)",
        [("x", (2, 3, 4), away_from_zero)],
        (2, 3, 4),
        lambda x: ref.leaky_relu(x, 0.3),
    ),
    "gelu": Case(
        "gelu(x)", [("x", (3, 4), lambda r, s: 3 * r.standard_normal(s))], (3, 4), ref.gelu
    ),
    "softmax": Case("softmax(x)", X34, (3, 4), ref.softmax),
    "softmax_rank3": Case("softmax(x)", X234, (2, 3, 4), ref.softmax),
    "softmax_wide": Case("softmax(x)", [("x", (3, 4), wide)], (3, 4), ref.softmax),
    "log_softmax": Case("log_softmax(x)", X34, (3, 4), ref.log_softmax),
    "log_softmax_rank3": Case("log_softmax(x)", X234, (2, 3, 4), ref.log_softmax),
    "log_softmax_wide": Case("log_softmax(x)", [("x", (3, 4), wide)], (3, 4), ref.log_softmax),
    "cross_entropy": Case(
        "cross_entropy(p, y)",
        [("p", (5, 4), probabilities), ("y", (5, 4), one_hot)],
        (),
        ref.cross_entropy,
    ),
    "cross_entropy_soft": Case(
        "cross_entropy(p, y)",
        [("p", (5, 4), probabilities), ("y", (5, 4), probabilities)],
        (),
        ref.cross_entropy,
    ),
    "cross_entropy_underflow": Case(
        "cross_entropy(p, y)",
        [("p", (5, 4), lambda r, s: ref.softmax(wide(r, s))), ("y", (5, 4), one_hot)],
        (),
        ref.cross_entropy,
        wrt=["y"],  # p: the clamp's kink sits where probabilities underflowed
    ),
    "softmax_cross_entropy": Case(
        "softmax_cross_entropy(z, y)",
        [("z", (5, 4), normal), ("y", (5, 4), one_hot)],
        (),
        ref.softmax_cross_entropy,
    ),
    "softmax_cross_entropy_soft": Case(
        "softmax_cross_entropy(z, y)",
        [("z", (5, 4), normal), ("y", (5, 4), probabilities)],
        (),
        ref.softmax_cross_entropy,
    ),
    "softmax_cross_entropy_wide": Case(
        "softmax_cross_entropy(z, y)",
        [("z", (5, 4), wide), ("y", (5, 4), one_hot)],
        (),
        ref.softmax_cross_entropy,
    ),
    "sparse_softmax_cross_entropy": Case(
        "sparse_softmax_cross_entropy(z, l)",
        [("z", (5, 4), normal), ("l", (5,), classes(4))],
        (),
        ref.sparse_softmax_cross_entropy,
    ),
    "sparse_softmax_cross_entropy_wide": Case(
        "sparse_softmax_cross_entropy(z, l)",
        [("z", (6, 3), wide), ("l", (6,), classes(3))],
        (),
        ref.sparse_softmax_cross_entropy,
    ),
    "nll_loss": Case(
        "nll_loss(lp, l)",
        [("lp", (5, 4), lambda r, s: ref.log_softmax(normal(r, s))), ("l", (5,), classes(4))],
        (),
        ref.nll_loss,
    ),
    "nll_loss_extreme": Case(
        "nll_loss(lp, l)",
        [("lp", (6, 3), lambda r, s: ref.log_softmax(extreme(r, s))), ("l", (6,), classes(3))],
        (),
        ref.nll_loss,
    ),
    "binary_cross_entropy_with_logits": Case(
        "binary_cross_entropy_with_logits(z, t)",
        [("z", (3, 4), normal), ("t", (3, 4), targets)],
        (),
        ref.binary_cross_entropy_with_logits,
    ),
    "binary_cross_entropy_with_logits_extreme": Case(
        "binary_cross_entropy_with_logits(z, t)",
        [("z", (4, 5), extreme), ("t", (4, 5), targets)],
        (),
        ref.binary_cross_entropy_with_logits,
    ),
    "binary_cross_entropy_with_logits_rank1": Case(
        "binary_cross_entropy_with_logits(z, t)",
        [("z", (7,), wide), ("t", (7,), targets)],
        (),
        ref.binary_cross_entropy_with_logits,
    ),
    "mse": Case("mse(a, b)", [("a", (3, 4), normal), ("b", (3, 4), normal)], (), ref.mse),
    "mse_rank3": Case(
        "mse(a, b)", [("a", (2, 3, 4), normal), ("b", (2, 3, 4), normal)], (), ref.mse
    ),
    "mse_rank1": Case("mse(a, b)", [("a", (6,), normal), ("b", (6,), normal)], (), ref.mse),
    "linear": Case(
        "linear(x, w, b)",
        [("x", (3, 5), normal), ("w", (5, 4), normal), ("b", (1, 4), normal)],
        (3, 4),
        ref.linear,
    ),
    "layer_norm": Case(
        "layer_norm(x, g, b)",
        [("x", (3, 6), normal), ("g", (1, 6), normal), ("b", (1, 6), normal)],
        (3, 6),
        ref.layer_norm,
    ),
    "layer_norm_eps": Case(
        "layer_norm(x, g, b, eps: 0.5)",
        [("x", (3, 6), normal), ("g", (1, 6), normal), ("b", (1, 6), normal)],
        (3, 6),
        lambda x, g, b: ref.layer_norm(x, g, b, eps=0.5),
    ),
    "gelu_tanh": Case(
        "gelu_tanh(x)",
        [("x", (3, 4), lambda r, s: 3 * r.standard_normal(s))],
        (3, 4),
        ref.gelu_tanh,
    ),
    "gelu_tanh_wide": Case("gelu_tanh(x)", [("x", (3, 4), wide)], (3, 4), ref.gelu_tanh),
    "silu": Case("silu(x)", X34, (3, 4), ref.silu),
    "silu_rank3_wide": Case("silu(x)", [("x", (2, 3, 4), wide)], (2, 3, 4), ref.silu),
    "layer_norm_rank3": Case(
        "layer_norm(x, g, b)",
        [("x", (2, 3, 6), normal), ("g", (6,), normal), ("b", (6,), normal)],
        (2, 3, 6),
        ref.layer_norm,
    ),
    "layer_norm_rank1": Case(
        "layer_norm(x, g, b)",
        [("x", (6,), normal), ("g", (6,), normal), ("b", (6,), normal)],
        (6,),
        ref.layer_norm,
    ),
    "rms_norm": Case(
        "rms_norm(x, g)", [("x", (3, 6), normal), ("g", (6,), normal)], (3, 6), ref.rms_norm
    ),
    "rms_norm_rank3_eps": Case(
        "rms_norm(x, g, eps: 0.5)",
        [("x", (2, 3, 6), normal), ("g", (1, 6), normal)],
        (2, 3, 6),
        lambda x, g: ref.rms_norm(x, g, eps=0.5),
    ),
    "attention": Case(
        "attention(q, k, v)",
        [("q", (2, 3, 5, 4), normal), ("k", (2, 3, 6, 4), normal), ("v", (2, 3, 6, 7), normal)],
        (2, 3, 5, 7),
        ref.attention,
    ),
    "attention_rank2": Case(
        "attention(q, k, v)",
        [("q", (5, 4), normal), ("k", (6, 4), normal), ("v", (6, 3), normal)],
        (5, 3),
        ref.attention,
    ),
    "attention_broadcast": Case(  # keys and values shared by the batch
        "attention(q, k, v)",
        [("q", (2, 3, 5, 4), normal), ("k", (3, 6, 4), normal), ("v", (3, 6, 2), normal)],
        (2, 3, 5, 2),
        ref.attention,
    ),
    "attention_wide": Case(  # logits far beyond exp's range
        "attention(q, k, v)",
        [("q", (2, 4, 3), wide), ("k", (2, 4, 3), wide), ("v", (2, 4, 3), normal)],
        (2, 4, 3),
        ref.attention,
        wrt=["v"],  # q, k: the weights are exactly one-hot there, their gradients 0 or ulps
    ),
    "causal_attention": Case(
        "causal_attention(q, k, v)",
        [("q", (2, 5, 4), normal), ("k", (2, 5, 4), normal), ("v", (2, 5, 3), normal)],
        (2, 5, 3),
        ref.causal_attention,
    ),
    "causal_attention_rank4": Case(
        "causal_attention(q, k, v)",
        [("q", (2, 2, 4, 3), normal), ("k", (2, 2, 4, 3), normal), ("v", (2, 2, 4, 3), normal)],
        (2, 2, 4, 3),
        ref.causal_attention,
    ),
    "masked_attention": Case(
        "masked_attention(q, k, v, m > 0)",
        [
            ("q", (2, 5, 4), normal),
            ("k", (2, 6, 4), normal),
            ("v", (2, 6, 3), normal),
            ("m", (5, 6), normal),
        ],
        (2, 5, 3),
        lambda q, k, v, m: ref.masked_attention(q, k, v, m > 0),
        wrt=["q", "k", "v"],
    ),
    "masked_attention_row_masked": Case(  # query 0 sees no key: an even average, not NaN
        "masked_attention(q, k, v, m > 0)",
        [
            ("q", (2, 3, 4), normal),
            ("k", (2, 4, 4), normal),
            ("v", (2, 4, 3), normal),
            ("m", (3, 4), lambda r, s: np.where(np.arange(s[0])[:, None] == 0, -1.0, normal(r, s))),
        ],
        (2, 3, 3),
        lambda q, k, v, m: ref.masked_attention(q, k, v, m > 0),
        wrt=["q", "k", "v"],
    ),
    "multi_head_attention": Case(
        "multi_head_attention(x, wq, wk, wv, wo)",
        [
            ("x", (2, 5, 8), normal),
            ("wq", (8, 2, 4), normal),
            ("wk", (8, 2, 4), normal),
            ("wv", (8, 2, 4), normal),
            ("wo", (2, 4, 8), normal),
        ],
        (2, 5, 8),
        ref.multi_head_attention,
    ),
    "multi_head_attention_narrow_heads": Case(  # H * K = 6 < D = 8
        "multi_head_attention(x, wq, wk, wv, wo)",
        [
            ("x", (1, 3, 8), normal),
            ("wq", (8, 3, 2), normal),
            ("wk", (8, 3, 2), normal),
            ("wv", (8, 3, 2), normal),
            ("wo", (3, 2, 8), normal),
        ],
        (1, 3, 8),
        ref.multi_head_attention,
    ),
    "multi_head_attention_causal": Case(
        "multi_head_attention(x, wq, wk, wv, wo, causal: true)",
        [
            ("x", (2, 4, 6), normal),
            ("wq", (6, 3, 2), normal),
            ("wk", (6, 3, 2), normal),
            ("wv", (6, 3, 2), normal),
            ("wo", (3, 2, 6), normal),
        ],
        (2, 4, 6),
        lambda *xw: ref.multi_head_attention(*xw, causal=True),
    ),
    "multi_head_attention_flat": Case(
        "multi_head_attention_flat(x, wq, wk, wv, wo, heads: 2)",
        [("x", (2, 5, 8), normal), *[(w, (8, 8), normal) for w in ("wq", "wk", "wv", "wo")]],
        (2, 5, 8),
        lambda *xw: ref.multi_head_attention_flat(*xw, heads=2),
    ),
    "multi_head_attention_flat_default_heads": Case(  # heads: 4, K = 2
        "multi_head_attention_flat(x, wq, wk, wv, wo)",
        [("x", (1, 3, 8), normal), *[(w, (8, 8), normal) for w in ("wq", "wk", "wv", "wo")]],
        (1, 3, 8),
        ref.multi_head_attention_flat,
    ),
    "multi_head_attention_flat_causal": Case(
        "multi_head_attention_flat(x, wq, wk, wv, wo, heads: 3, causal: true)",
        [("x", (2, 4, 6), normal), *[(w, (6, 6), normal) for w in ("wq", "wk", "wv", "wo")]],
        (2, 4, 6),
        lambda *xw: ref.multi_head_attention_flat(*xw, heads=3, causal=True),
    ),
    "dropout": Case("dropout(x)", X34, (3, 4), ref.dropout),
    "dropout_p": Case("dropout(x, 0.3)", X234, (2, 3, 4), lambda x: ref.dropout(x, 0.3)),
}


def tel_type(dtype: str, shape: tuple[int, ...]) -> str:
    return f"{dtype}[{' x '.join(str(d) for d in shape)}]" if shape else dtype


def parameters(case: Case, dtype: str) -> str:
    """The export's parameter list: the float arguments in DTYPE, class indices in i64."""
    floats = case.float_args()
    types = [(n, tel_type(dtype if n in floats else "i64", s)) for n, s, _ in case.args]
    return ", ".join(f"{n}: {t}" for n, t in types)


def arguments(case: Case, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [gen(rng, shape) for _, shape, gen in case.args]


def golden_program(case: Case, dtype: str) -> str:
    params = parameters(case, dtype)
    return (
        "module golden\nuse nn\nuse optim\n\n"
        f"export def f({params}) -> {tel_type(dtype, case.result)} = {case.call}\n"
    )


@pytest.mark.parametrize("name", sorted(NN_CASES))
def test_nn_golden_float64(name: str, tmp_path) -> None:
    case = NN_CASES[name]
    compiled = compile_snippet(str(tmp_path), golden_program(case, "f64"))
    args = arguments(case, 1)
    got = run_function(compiled.module, "f", args, float64=True)
    expected = case.model(*args)
    assert np.shape(got) == case.result
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", sorted(NN_CASES))
def test_nn_golden_float32(name: str, tmp_path) -> None:
    """The same functions serve float32 models: float32 results, close to the model."""
    case = NN_CASES[name]
    compiled = compile_snippet(str(tmp_path), golden_program(case, "f32"))
    args = [a.astype(np.float32) if a.dtype.kind == "f" else a for a in arguments(case, 2)]
    got = run_function(compiled.module, "f", args)
    assert np.asarray(got).dtype == np.float32
    assert np.shape(got) == case.result
    expected = case.model(*args)
    scale = max(1.0, float(np.max(np.abs(expected))))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6 * scale)


def gradient_program(case: Case, wrt: list[str]) -> str:
    """loss(args…, c) = sum(CALL * c) (CALL * c for a scalar result) and its gradient with
    respect to WRT as the export `g`."""
    params = parameters(case, "f64") + f", c: {tel_type('f64', case.result)}"
    names = ", ".join(n for n, _, _ in case.args) + ", c"
    objective = f"sum({case.call} * c)" if case.result else f"{case.call} * c"
    wrt_types = [tel_type("f64", s) for n, s, _ in case.args if n in wrt]
    result = wrt_types[0] if len(wrt) == 1 else "(" + ", ".join(wrt_types) + ")"
    wrt_text = wrt[0] if len(wrt) == 1 else "(" + ", ".join(wrt) + ")"
    return (
        "module gradient\ntype float64\nuse nn\nuse optim\n\n"
        f"def loss({params}) -> f64 = {objective}\n"
        f"export def g({params}) -> {result} = grad(loss, wrt: {wrt_text})({names})\n"
    )


@pytest.mark.parametrize("name", sorted(NN_CASES))
def test_nn_gradient(name: str, tmp_path) -> None:
    case = NN_CASES[name]
    wrt = case.wrt or case.float_args()
    compiled = compile_snippet(str(tmp_path), gradient_program(case, wrt))
    rng = np.random.default_rng(3)
    args = arguments(case, 3)
    c = rng.standard_normal(case.result)
    got = run_function(compiled.module, "g", [*args, c], float64=True)
    got = [got] if len(wrt) == 1 else list(got)
    assert len(got) == len(wrt)
    names = [n for n, _, _ in case.args]
    for grad_value, arg in zip(got, wrt):
        k = names.index(arg)

        def objective(v: np.ndarray, k: int = k) -> float:
            values = list(args)
            values[k] = v
            return float(np.sum(case.model(*values) * c))

        expected = central_gradient(objective, args[k])
        assert np.shape(grad_value) == np.shape(args[k]), arg
        np.testing.assert_allclose(grad_value, expected, rtol=1e-6, atol=1e-8, err_msg=arg)


def test_layer_mismatches_are_reported_without_a_traceback(tmp_path) -> None:
    """A gamma that does not broadcast against x, and a head split whose shapes disagree, are
    located errors (the first inside nn, where the shapes meet; the second at the call)."""
    text = (
        "module bad\nuse nn\n\nx: in[2 x 5 x 8]\ng: in[7]\nwq: in[8 x 3 x 2]\n"
        "wo: in[2 x 3 x 8]\n"
        "n: out = layer_norm(x, g, g)\n"
        "h: out = multi_head_attention(x, wq, wq, wq, wo)\n"
    )
    with pytest.raises(DiagnosticError) as caught:
        compile_snippet(str(tmp_path), text)
    rendered = str(caught.value)
    assert "cannot broadcast [2 x 5 x 8] and [7] for multiplication" in rendered
    expected = "argument 'Wo' of multi_head_attention: expected [H x K x D], found [2 x 3 x 8]"
    assert expected in rendered


def test_generic_stdlib_function_differentiated_directly(tmp_path) -> None:
    """grad of a (generic) stdlib function itself, without a wrapper: every float argument by
    default, or one position."""
    text = (
        "module direct\ntype float64\nuse nn\n\n"
        "export def g(p: f64[3 x 4], y: f64[3 x 4]) -> (f64[3 x 4], f64[3 x 4]) = "
        "grad(mse)(p, y)\n"
        "export def h(p: f64[3 x 4], y: f64[3 x 4]) -> f64[3 x 4] = "
        "grad(cross_entropy, wrt: 0)(p, y)\n"
    )
    compiled = compile_snippet(str(tmp_path), text)
    rng = np.random.default_rng(4)
    p, y = probabilities(rng, (3, 4)), one_hot(rng, (3, 4))
    dp, dy = run_function(compiled.module, "g", [p, y], float64=True)
    np.testing.assert_allclose(dp, 2 * (p - y) / 12, rtol=1e-10)
    np.testing.assert_allclose(dy, -2 * (p - y) / 12, rtol=1e-10)
    dce = run_function(compiled.module, "h", [p, y], float64=True)
    np.testing.assert_allclose(dce, -y / p / 3, rtol=1e-10)


# --- dropout while training ----------------------------------------------------------------------

DROPOUT_MODEL = """module drop
type float64
use nn
use optim

W: param[100 x 100] = 1.0
loss: out[] = sum(dropout(W{p}))

train minimizing loss using sgd(rate: 1.0)
"""


@pytest.mark.parametrize("p", [0.5, 0.25], ids=["default", "p=0.25"])
def test_dropout_in_training(p: float, tmp_path) -> None:
    """With W = 1, loss = sum(dropout(W, p)) has the gradient mask / (1 - p), so one sgd step of
    rate 1 reveals the mask: W - W' = mask / (1 - p). About 1 - p of the elements are kept,
    each scaled by exactly 1 / (1 - p); the loss is the sum of the same mask; another seed
    draws another mask. In `infer` (training false) dropout is the identity."""
    text = DROPOUT_MODEL.format(p="" if p == 0.5 else f", {p}")
    compiled = compile_snippet(str(tmp_path), text)
    w = np.ones((100, 100))
    inferred = run_infer(compiled, {}, {"W": w})
    assert float(inferred["loss"]) == 10000.0
    train = entry(compiled.interface, "train")
    masks = []
    for seed in (1, 2, 1):
        loss, params, _ = run_train_step(compiled, train, {}, {"W": w}, [], 1, seed=seed)
        delta = w - params["W"]
        kept = delta != 0
        np.testing.assert_allclose(delta[kept], 1 / (1 - p), rtol=1e-10)
        fraction = kept.mean()
        assert abs(fraction - (1 - p)) < 0.025, fraction
        np.testing.assert_allclose(loss, delta.sum(), rtol=1e-10)
        masks.append(kept)
    assert not np.array_equal(masks[0], masks[1])
    np.testing.assert_array_equal(masks[0], masks[2])


# --- optim ---------------------------------------------------------------------------------------

W34 = ("w", (3, 4), normal)
G34 = ("g", (3, 4), normal)


@dataclass
class OptCase:
    """A call of an optimiser: its arguments (the state ones positive where the model takes a
    square root), the number of results and the NumPy model; `step` a scalar argument."""

    call: str
    args: list[tuple[str, tuple[int, ...], Gen]]
    results: int
    model: Callable[..., object]
    step: float | None = None


OPT_CASES: dict[str, OptCase] = {
    "sgd": OptCase("sgd(w, g)", [W34, G34], 1, ref.sgd),
    "sgd_rate": OptCase("sgd(w, g, rate: 0.3)", [W34, G34], 1, lambda w, g: ref.sgd(w, g, 0.3)),
    "sgd_positional": OptCase("sgd(w, g, 0.2)", [W34, G34], 1, lambda w, g: ref.sgd(w, g, 0.2)),
    "momentum": OptCase("momentum(w, g, v)", [W34, G34, ("v", (3, 4), normal)], 2, ref.momentum),
    "momentum_hyper": OptCase(
        "momentum(w, g, v, rate: 0.1, beta: 0.5)",
        [W34, G34, ("v", (3, 4), normal)],
        2,
        lambda w, g, v: ref.momentum(w, g, v, rate=0.1, beta=0.5),
    ),
    "adam": OptCase(
        "adam(w, g, m, v, step)",
        [W34, G34, ("m", (3, 4), normal), ("v", (3, 4), positive)],
        3,
        ref.adam,
        step=1.0,
    ),
    "adam_step7": OptCase(
        "adam(w, g, m, v, step)",
        [W34, G34, ("m", (3, 4), normal), ("v", (3, 4), positive)],
        3,
        ref.adam,
        step=7.0,
    ),
    "adam_hyper": OptCase(
        "adam(w, g, m, v, step, rate: 0.05, beta1: 0.8, beta2: 0.99, eps: 0.001)",
        [W34, G34, ("m", (3, 4), normal), ("v", (3, 4), positive)],
        3,
        lambda w, g, m, v, step: ref.adam(w, g, m, v, step, 0.05, 0.8, 0.99, 0.001),
        step=3.0,
    ),
    "rmsprop": OptCase("rmsprop(w, g, s)", [W34, G34, ("s", (3, 4), positive)], 2, ref.rmsprop),
    "rmsprop_hyper": OptCase(
        "rmsprop(w, g, s, rate: 0.1, rho: 0.5, eps: 0.01)",
        [W34, G34, ("s", (3, 4), positive)],
        2,
        lambda w, g, s: ref.rmsprop(w, g, s, 0.1, 0.5, 0.01),
    ),
}


def opt_signature(case: OptCase) -> tuple[str, str]:
    """The parameter list and the argument list of an export calling the optimiser."""
    params = ", ".join(f"{n}: {tel_type('f64', s)}" for n, s, _ in case.args)
    names = ", ".join(n for n, _, _ in case.args)
    if case.step is not None:
        params += ", step: f64"
        names += ", step"
    return params, names


def opt_arguments(case: OptCase, seed: int) -> list:
    rng = np.random.default_rng(seed)
    args: list = [gen(rng, shape) for _, shape, gen in case.args]
    if case.step is not None:
        args.append(np.float64(case.step))
    return args


def as_list(value: object, count: int) -> list:
    if count == 1:
        return [value]
    assert isinstance(value, (tuple, list)) and len(value) == count
    return list(value)


@pytest.mark.parametrize("name", sorted(OPT_CASES))
def test_optim_golden(name: str, tmp_path) -> None:
    case = OPT_CASES[name]
    params, _ = opt_signature(case)
    result = ", ".join(["f64[3 x 4]"] * case.results)
    if case.results > 1:
        result = f"({result})"
    text = f"module golden\nuse optim\n\nexport def f({params}) -> {result} = {case.call}\n"
    compiled = compile_snippet(str(tmp_path), text)
    args = opt_arguments(case, 5)
    got = as_list(run_function(compiled.module, "f", args, float64=True), case.results)
    expected = as_list(case.model(*args), case.results)
    for i, (g, e) in enumerate(zip(got, expected)):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12, err_msg=f"result {i}")


@pytest.mark.parametrize("name", sorted(OPT_CASES))
def test_optim_gradient(name: str, tmp_path) -> None:
    """loss = sum over the results r_i of sum(r_i * c_i), differentiated with respect to every
    tensor argument (w, g and the state), against central differences."""
    case = OPT_CASES[name]
    params, names = opt_signature(case)
    weights = ", ".join(f"c{i}: f64[3 x 4]" for i in range(case.results))
    results = [f"r{i}" for i in range(case.results)]
    bind = results[0] if case.results == 1 else "(" + ", ".join(results) + ")"
    total = " + ".join(f"sum(r{i} * c{i})" for i in range(case.results))
    wrt = [n for n, _, _ in case.args]
    grads = "(" + ", ".join(["f64[3 x 4]"] * len(wrt)) + ")"
    cs = ", ".join(f"c{i}" for i in range(case.results))
    text = (
        "module gradient\ntype float64\nuse optim\n\n"
        f"def loss({params}, {weights}) -> f64 {{\n"
        f"    let {bind} = {case.call}\n"
        f"    return {total}\n"
        "}\n"
        f"export def g({params}, {weights}) -> {grads} = "
        f"grad(loss, wrt: ({', '.join(wrt)}))({names}, {cs})\n"
    )
    compiled = compile_snippet(str(tmp_path), text)
    args = opt_arguments(case, 6)
    rng = np.random.default_rng(7)
    c = [rng.standard_normal((3, 4)) for _ in range(case.results)]
    got = run_function(compiled.module, "g", [*args, *c], float64=True)
    assert len(got) == len(wrt)
    for k, (grad_value, arg) in enumerate(zip(got, wrt)):

        def objective(v: np.ndarray, k: int = k) -> float:
            values = list(args)
            values[k] = v
            outs = as_list(case.model(*values), case.results)
            return float(sum(np.sum(o * ci) for o, ci in zip(outs, c)))

        expected = central_gradient(objective, args[k])
        np.testing.assert_allclose(grad_value, expected, rtol=1e-6, atol=1e-8, err_msg=arg)


TRAIN_MODEL = """module opt
type float64
use optim

W: param[3 x 4] = 0.0
loss: out[] = 0.5 * sum(W * W)

train minimizing loss using {using}
"""

# `using` clauses, the optimiser's NumPy model and its hyper-parameters as given.
TRAIN_CASES = {
    "sgd": ("sgd()", "sgd", {}),
    "sgd_rate": ("sgd(rate: 0.3)", "sgd", {"rate": 0.3}),
    "momentum": ("momentum(beta: 0.5)", "momentum", {"beta": 0.5}),
    "adam": ("adam()", "adam", {}),
    "adam_hyper": (
        "adam(rate: 0.05, beta1: 0.8, beta2: 0.99, eps: 0.001)",
        "adam",
        {"rate": 0.05, "beta1": 0.8, "beta2": 0.99, "eps": 0.001},
    ),
    "rmsprop": ("rmsprop(rate: 0.1, rho: 0.5)", "rmsprop", {"rate": 0.1, "rho": 0.5}),
}


@pytest.mark.parametrize("name", sorted(TRAIN_CASES))
def test_optimiser_in_train_entry(name: str, tmp_path) -> None:
    """`train … using OPT(hyper…)`: four steps from zero state, step counting from 1, on
    loss = sum(W²) / 2 (gradient W), agree with the NumPy optimiser given those hyper-parameters
    and the defaults for the rest."""
    using, opt, hyper = TRAIN_CASES[name]
    compiled = compile_snippet(str(tmp_path), TRAIN_MODEL.format(using=using))
    train = entry(compiled.interface, "train")
    state_names = [s for _, s, _ in train.states]
    expected_states = {"sgd": [], "momentum": ["v"], "adam": ["m", "v"], "rmsprop": ["s"]}[opt]
    assert state_names == expected_states
    assert (train.step is not None) == (opt == "adam")
    w = np.random.default_rng(8).standard_normal((3, 4))
    states = [np.zeros((3, 4)) for _ in state_names]
    model = getattr(ref, opt)
    for step in range(1, 5):
        loss, params, new_states = run_train_step(compiled, train, {}, {"W": w}, states, step)
        np.testing.assert_allclose(loss, 0.5 * np.sum(w * w), rtol=1e-10)
        step_args = [step] if opt == "adam" else []
        expected = as_list(model(w, w, *states, *step_args, **hyper), 1 + len(states))
        np.testing.assert_allclose(params["W"], expected[0], rtol=1e-10, atol=1e-12)
        for got, want, state in zip(new_states, expected[1:], state_names):
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12, err_msg=state)
        w, states = params["W"], new_states


@pytest.mark.parametrize("int_type", ["i8", "i16", "i32", "i64"])
def test_ids_and_labels_take_any_integer_type(int_type: str, tmp_path) -> None:
    """embedding's ids and the sparse losses' labels are `int[...]`: every integer type is
    taken as it is, with no cast."""
    program = (
        "module ints\nuse nn\n\n"
        f"export def e(E: f64[5 x 3], ids: {int_type}[2 x 2]) -> f64[2 x 2 x 3] = "
        "embedding(E, ids)\n"
        f"export def s(z: f64[5 x 4], l: {int_type}[5]) -> f64 =\n"
        "    sparse_softmax_cross_entropy(z, l)\n"
        f"export def n(z: f64[5 x 4], l: {int_type}[5]) -> f64 = nll_loss(log_softmax(z), l)\n"
    )
    compiled = compile_snippet(str(tmp_path), program)
    rng = np.random.default_rng(5)
    table = rng.standard_normal((5, 3))
    ids = np.array([[4, 0], [2, 4]], dtype=np.dtype(int_type.replace("i", "int")))
    got = run_function(compiled.module, "e", [table, ids], float64=True)
    np.testing.assert_array_equal(got, table[ids])
    z = rng.standard_normal((5, 4))
    labels = np.array([3, 0, 1, 3, 2], dtype=ids.dtype)
    expected = ref.sparse_softmax_cross_entropy(z, labels)
    for name in "sn":
        got = run_function(compiled.module, name, [z, labels], float64=True)
        np.testing.assert_allclose(got, expected, rtol=1e-12)


@pytest.mark.parametrize(
    "program, message",
    [
        (
            "export def f(E: [5 x 3], ids: f32[2]) -> [2 x 3] = embedding(E, ids)",
            "argument 'ids' of embedding: expected an integer tensor, found f32[2]",
        ),
        (
            "def pick(a: int[2], b: int[2]) -> int[2] = a + b\n"
            "export def f(a: i32[2], b: i64[2]) -> i64[2] = pick(a, b)",
            "argument 'b' of pick: integer type i64 differs from the i32 of the arguments",
        ),
        (
            "x: in int[2]\ny: out[2] = cast(x, f32)",
            "element type 'int' (any integer type) is only for the parameters of a def",
        ),
    ],
)
def test_any_integer_type_mistakes_are_located_errors(program: str, message: str, tmp_path):
    with pytest.raises(DiagnosticError) as info:
        compile_snippet(str(tmp_path), "module ints\nuse nn\n\n" + program + "\n")
    assert message in str(info.value)


@pytest.mark.parametrize(
    "heads, message",
    [
        ("3", "error: 8 / 3 does not divide exactly"),
        ("0", "argument 'heads' of multi_head_attention_flat: expected a positive integer known "
              "at compile time (a dimension), found"),
        ("n", "argument 'heads' of multi_head_attention_flat: expected a positive integer known "
              "at compile time (a dimension), found"),
    ],
)  # fmt: skip
def test_a_head_count_that_is_not_a_divisor_known_at_compile_time_is_an_error(
    heads: str, message: str, tmp_path
) -> None:
    text = (
        "module bad\nuse nn\n\nx: in[2 x 5 x 8]\nw: in[8 x 8]\nn: in i64\n"
        f"h: out = multi_head_attention_flat(x, w, w, w, w, heads: {heads})\n"
    )
    with pytest.raises(DiagnosticError) as caught:
        compile_snippet(str(tmp_path), text)
    assert message in str(caught.value)
