"""Pooling: maxpool2d and avgpool2d with padding against NumPy references (checked once against
PyTorch's F.max_pool2d / F.avg_pool2d, forward and gradients), global_avgpool2d, the
convolution-free adjoint of reduceWindows whose windows tile the input (against the general
rule and finite differences, ties included), and the errors of bad pooling options."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from gradcheck import add_gradient, differentiate, gradient_check, module, use
from telhelp import build_snippet, compile_snippet

from dlvm.diagnostics import DiagnosticError
from dlvm.interp import run_function
from dlvm.ir import parse_module
from dlvm.ir.adjoints_window import WindowView
from dlvm.ir.printer import module_text
from telc.cli import cli

# References ------------------------------------------------------------------------------------


def pool2d(x, window, stride, padding, kind):
    """NCHW pooling as PyTorch's: max pads with -inf, avg with zeros that count in the divisor
    (count_include_pad=True)."""
    (wh, ww), (sh, sw), (ph, pw) = window, stride, padding
    fill = -np.inf if kind == "max" else 0.0
    pads = ((0, 0), (0, 0), (ph, ph), (pw, pw))
    xp = np.pad(np.asarray(x, np.float64), pads, constant_values=fill)
    oh, ow = (xp.shape[2] - wh) // sh + 1, (xp.shape[3] - ww) // sw + 1
    taps = [
        xp[:, :, i : i + (oh - 1) * sh + 1 : sh, j : j + (ow - 1) * sw + 1 : sw]
        for i in range(wh)
        for j in range(ww)
    ]
    return np.max(taps, axis=0) if kind == "max" else np.sum(taps, axis=0) / (wh * ww)


def pool2d_grad(x, dy, window, stride, padding, kind):
    """The gradient of sum(pool2d(x) * dy): max shares each window's among its elements equal
    to the maximum; avg spreads it over the window's area."""
    (wh, ww), (sh, sw), (ph, pw) = window, stride, padding
    x = np.asarray(x, np.float64)
    f = pool2d(x, window, stride, padding, kind)
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=fill)
    g = np.zeros(xp.shape)
    for a in range(f.shape[2]):
        for b in range(f.shape[3]):
            rows, cols = slice(a * sh, a * sh + wh), slice(b * sw, b * sw + ww)
            if kind == "max":
                hit = xp[:, :, rows, cols] == f[:, :, a, b][:, :, None, None]
                share = dy[:, :, a, b] / hit.sum(axis=(2, 3))
                g[:, :, rows, cols] += hit * share[:, :, None, None]
            else:
                g[:, :, rows, cols] += dy[:, :, a, b][:, :, None, None] / (wh * ww)
    return g[:, :, ph : ph + x.shape[2], pw : pw + x.shape[3]]


def test_references_agree_with_values_pytorch_gave():
    # F.max_pool2d / F.avg_pool2d(x, 3, 2, 1) of x = arange(25).reshape(1, 1, 5, 5) - 12.
    x = np.arange(25.0).reshape(1, 1, 5, 5) - 12
    np.testing.assert_array_equal(
        pool2d(x, (3, 3), (2, 2), (1, 1), "max")[0, 0], [[-6, -4, -3], [4, 6, 7], [9, 11, 12]]
    )
    np.testing.assert_allclose(
        pool2d(x, (3, 3), (2, 2), (1, 1), "avg")[0, 0] * 9,
        [[-36, -45, -24], [-9, 0, 9], [24, 45, 36]],
    )


# TEL built-ins -----------------------------------------------------------------------------------

# (input shape, window, stride, padding): overlapping, padded, tiling, tiling once padded, odd.
POOLS = [
    ((2, 3, 7, 6), (3, 2), (2, 2), (1, 1)),
    ((1, 2, 5, 5), (3, 3), (2, 2), (1, 1)),
    ((2, 2, 8, 6), (2, 2), (2, 2), (0, 0)),
    ((1, 2, 6, 6), (4, 2), (4, 2), (1, 1)),
    ((2, 1, 7, 5), (2, 2), (2, 2), (0, 0)),
    ((1, 3, 9, 7), (3, 3), (2, 1), (1, 0)),
]


def out_shape(shape, window, stride, padding):
    return tuple((n + 2 * p - w) // s + 1 for n, w, s, p in zip(shape[2:], window, stride, padding))


def dims(shape: tuple[int, ...]) -> str:
    return " x ".join(map(str, shape))


def pooling_program(shape, window, stride, padding) -> tuple[str, tuple[int, ...]]:
    """Exports max and avg pooling and the gradients of sum(pool(x) * dy) for x."""
    n, c = shape[:2]
    out = (n, c, *out_shape(shape, window, stride, padding))
    opts = f"window: {window}, stride: {stride}, padding: {padding}"
    x, y = f"x: [{dims(shape)}]", f"dy: [{dims(out)}]"
    text = f"""module pools
def fmax({x}, {y}) -> [] = sum(maxpool2d(x, {opts}) * dy)
def favg({x}, {y}) -> [] = sum(avgpool2d(x, {opts}) * dy)
export def mp({x}) -> [{dims(out)}] = maxpool2d(x, {opts})
export def ap({x}) -> [{dims(out)}] = avgpool2d(x, {opts})
export def gmp({x}, {y}) = grad(fmax, wrt: x)(x, dy)
export def gap({x}, {y}) = grad(favg, wrt: x)(x, dy)
"""
    return text, out


@pytest.mark.parametrize("shape, window, stride, padding", POOLS)
def test_pooling_and_its_gradients_match_pytorch_semantics(
    tmp_path, shape, window, stride, padding
):
    text, out = pooling_program(shape, window, stride, padding)
    m = compile_snippet(str(tmp_path), text).module
    rng = np.random.default_rng(11)
    x = rng.standard_normal(shape)
    x[0, 0, 0, :2] = x[0, 0, 1, 0] = 3.5  # ties in the first window
    dy = rng.standard_normal(out)
    for kind in ("max", "avg"):
        (got,) = [run_function(m, kind[0] + "p", [x], float64=True)]
        np.testing.assert_allclose(got, pool2d(x, window, stride, padding, kind), atol=1e-12)
        grad = run_function(m, "g" + kind[0] + "p", [x, dy], float64=True)
        grad = grad[0] if isinstance(grad, tuple) else grad
        want = pool2d_grad(x, dy, window, stride, padding, kind)
        np.testing.assert_allclose(grad, want, rtol=1e-12, atol=1e-12)


def test_compiled_pooling_matches_the_references(tmp_path):
    import dlvm

    shape, window, stride, padding = (2, 3, 9, 8), (2, 2), (2, 2), (1, 0)
    text, out = pooling_program(shape, window, stride, padding)
    text = text.replace("x: [", "x: f32[").replace("dy: [", "dy: f32[")
    rng = np.random.default_rng(12)
    x = rng.standard_normal(shape).astype(np.float32)
    x[1, 2, 4:6, 2:4] = 1.25  # a window of four ties
    dy = rng.standard_normal(out).astype(np.float32)
    with dlvm.load(build_snippet(tmp_path, text, "pools")) as lib:
        for kind in ("max", "avg"):
            got = getattr(lib, kind[0] + "p")(x)
            np.testing.assert_allclose(got, pool2d(x, window, stride, padding, kind), rtol=1e-6)
            grad = getattr(lib, "g" + kind[0] + "p")(x, dy)
            want = pool2d_grad(x, dy.astype(np.float64), window, stride, padding, kind)
            np.testing.assert_allclose(grad, want, rtol=1e-5, atol=1e-6)


def test_global_avgpool2d_is_each_channels_mean(tmp_path):
    text = """module gap
use nn
def f(x: [2 x 3 x 4 x 5], dy: [2 x 3]) -> [] = sum(global_avgpool2d(x) * dy)
export def pooled(x: [2 x 3 x 4 x 5]) -> [2 x 3] = global_avgpool2d(x)
export def g(x: [2 x 3 x 4 x 5], dy: [2 x 3]) = grad(f, wrt: x)(x, dy)
"""
    m = compile_snippet(str(tmp_path), text).module
    rng = np.random.default_rng(13)
    x, dy = rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((2, 3))
    got = run_function(m, "pooled", [x], float64=True)
    np.testing.assert_allclose(got, x.mean(axis=(2, 3)), rtol=1e-12)
    grad = run_function(m, "g", [x, dy], float64=True)
    grad = grad[0] if isinstance(grad, tuple) else grad
    np.testing.assert_allclose(grad, np.broadcast_to(dy[:, :, None, None] / 20, x.shape))


# Bad options -------------------------------------------------------------------------------------

BAD = [
    ("padding: (2, 1)", "the padding (2, 1) must be between 0 and half the window (3, 3)"),
    ("padding: (0, -1)", "the padding (0, -1) must be between 0 and half the window (3, 3)"),
    ("window: (0, 3)", "the window (0, 3) must be positive"),
    ("window: (3, 9), padding: 1", "the window (3, 9) does not fit f32[1 x 1 x 6 x 6] padded"),
    ("stride: (1, 0)", "strides must be positive"),
]


@pytest.mark.parametrize("option, message", BAD, ids=[b[0] for b in BAD])
@pytest.mark.parametrize("fn", ["maxpool2d", "avgpool2d"])
def test_bad_pooling_options_are_located_errors(tmp_path, fn, option, message):
    opts = option if "window" in option else f"window: (3, 3), {option}"
    line = f"y: out = {fn}(x, {opts})"
    path = tmp_path / "bad.tel"
    path.write_text(f"x: in[1 x 1 x 6 x 6]\n{line}\n", encoding="utf-8")
    result = CliRunner().invoke(cli, ["check", str(path)])
    assert result.exit_code == 1, result.output
    keyword = option.split(":")[0] if "padded" not in message else "window"
    col = line.index(keyword + ": ") + len(keyword) + 3  # the option's value
    assert f"{path}:2:{col}: error: " in result.output, result.output
    assert message in result.output
    assert "Traceback" not in result.output and "internal error" not in result.output
    if "half the window" in message:
        assert "help: " in result.output


def test_pooling_of_a_vector_is_an_error(tmp_path):
    with pytest.raises(DiagnosticError, match="maxpool2d takes an NCHW tensor"):
        compile_snippet(str(tmp_path), "x: in[6 x 6]\ny: out = maxpool2d(x, padding: 1)\n")


# reduceWindow's adjoint when the windows tile the input -------------------------------------------

# (input shape, window dims): ranks 1 to 4, a remainder past the last window (odd sizes), a
# window over a leading axis.
TILED = [
    ((7,), (2,)),
    ((3, 6, 5), (1, 3, 2)),
    ((2, 3, 4, 6), (1, 1, 2, 3)),
    ((2, 3, 7, 5), (1, 1, 2, 2)),
    ((4, 3, 5), (2, 1, 5)),
]


def tiled_module(shape, window, comb) -> str:
    init = {"add": "0", "max": "-inf", "min": "inf"}[comb]
    out = tuple(n // w for n, w in zip(shape, window))
    w = ", ".join(map(str, window))
    body = (
        f"%r = reduceWindow {use(0, shape)} by {comb} init {init}: f32 "
        f"dims {w} strides {w} padding none"
    )
    return module([shape], body, out)


def adjoint_of(text: str) -> tuple[str, object]:
    m = parse_module(text)
    g, _ = add_gradient(m, "f")
    differentiate(m)
    return module_text(m), (m, g.name)


def run_gradient(text: str, x: np.ndarray, seed: np.ndarray) -> np.ndarray:
    _, (m, name) = adjoint_of(text)
    (grad,) = run_function(m, name, [x, seed], float64=True)
    return np.asarray(grad)


@pytest.mark.parametrize("shape, window", TILED, ids=[f"rank{len(s)}-{s}" for s, _ in TILED])
@pytest.mark.parametrize("comb", ["add", "max", "min"])
def test_tiled_adjoint_matches_finite_differences(shape, window, comb):
    rng = np.random.default_rng(14)
    gradient_check(tiled_module(shape, window, comb), [rng.standard_normal(shape)])


@pytest.mark.parametrize("shape, window", TILED, ids=[f"rank{len(s)}-{s}" for s, _ in TILED])
@pytest.mark.parametrize("comb", ["add", "max", "min"])
def test_tiled_adjoint_matches_the_convolution_rule_with_ties(monkeypatch, shape, window, comb):
    text = tiled_module(shape, window, comb)
    rng = np.random.default_rng(15)
    x = rng.integers(-2, 3, shape).astype(np.float64)  # many ties
    seed = rng.standard_normal(tuple(n // w for n, w in zip(shape, window)))
    fast = run_gradient(text, x, seed)
    monkeypatch.setattr(WindowView, "tiled", property(lambda self: False))
    general = run_gradient(text, x, seed)
    np.testing.assert_allclose(fast, general, rtol=1e-12, atol=1e-12)


def test_tiled_adjoint_shares_ties_equally():
    text = tiled_module((1, 6), (1, 3), "max")
    x, seed = np.array([[2.0, 1.0, 2.0, 4.0, 4.0, 4.0]]), np.array([[1.0, 6.0]])
    np.testing.assert_array_equal(run_gradient(text, x, seed), [[0.5, 0, 0.5, 2, 2, 2]])


def test_tiled_adjoint_of_a_nan_window_is_not_nan_elsewhere():
    text = tiled_module((1, 4), (1, 2), "max")
    x, seed = np.array([[np.nan, np.nan, 1.0, 3.0]]), np.array([[1.0, 2.0]])
    grad = run_gradient(text, x, seed)
    np.testing.assert_array_equal(grad[0, 2:], [0.0, 2.0])


def test_pooling_with_tiling_windows_is_differentiated_without_convolutions():
    printed, _ = adjoint_of(tiled_module((2, 3, 8, 8), (1, 1, 2, 2), "max"))
    assert "reduceWindow" in printed and "convolve" not in printed
    overlapping = (
        tiled_module((2, 3, 8, 8), (1, 1, 2, 2), "max")
        .replace("strides 1, 1, 2, 2", "strides 1, 1, 1, 1")
        .replace("<2 x 3 x 4 x 4 x f32>", "<2 x 3 x 7 x 7 x f32>")
    )
    printed, _ = adjoint_of(overlapping)
    assert "convolve" in printed  # the general rule


def test_overlapping_windows_with_infinities_keep_their_gradient():
    # The general rule gathers windows with one-hot convolutions, where inf · 0 would be NaN.
    body = (
        f"%r = reduceWindow {use(0, (1, 5))} by max init -inf: f32 "
        "dims 1, 2 strides 1, 1 padding none"
    )
    text = module([(1, 5)], body, (1, 4))
    x = np.array([[-np.inf, -np.inf, 1.0, np.inf, 2.0]])
    seed = np.array([[1.0, 2.0, 3.0, 4.0]])
    np.testing.assert_array_equal(run_gradient(text, x, seed), [[0.5, 0.5, 2.0, 7.0, 0.0]])
