"""The adjoints of `convolve` and `reduceWindow` against finite differences in float64, over
every option, and the combinations that have no derivative."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import add_gradient, differentiate, gradient_check, module, use

from dlvm.diagnostics import DiagnosticError
from dlvm.interp import run_function
from dlvm.ir import parse_module

# convolve ------------------------------------------------------------------------------------

# (name, input shape, kernel shape, options, output shape)
CONVOLUTIONS = [
    ("plain", (1, 1, 5, 5), (1, 1, 3, 3), "", (1, 1, 3, 3)),
    ("channels", (2, 3, 4, 4), (2, 3, 2, 2), "", (2, 2, 3, 3)),
    ("strides", (1, 2, 6, 5), (3, 2, 2, 3), "strides 2, 3", (1, 3, 3, 1)),
    ("strides-tail", (1, 1, 6), (1, 1, 2), "strides 3", (1, 1, 2)),
    ("padding", (1, 2, 4, 4), (2, 2, 3, 3), "padding (1, 1), (1, 1)", (1, 2, 4, 4)),
    ("padding-asymmetric", (1, 1, 4, 5), (2, 1, 3, 2), "padding (2, 0), (0, 1)", (1, 2, 4, 5)),
    ("padding-zero", (1, 1, 4, 4), (1, 1, 2, 2), "padding (0, 0), (0, 0)", (1, 1, 3, 3)),
    ("padding-wide", (1, 1, 3), (1, 1, 2), "strides 2 padding (3, 2)", (1, 1, 4)),
    ("leftDilation", (1, 2, 3, 4), (2, 2, 2, 2), "leftDilation 2, 3", (1, 2, 4, 9)),
    ("rightDilation", (1, 2, 6, 5), (1, 2, 2, 2), "rightDilation 2, 3", (1, 1, 4, 2)),
    ("groups", (2, 4, 4, 4), (4, 2, 2, 2), "groups 2", (2, 4, 3, 3)),
    ("depthwise", (1, 3, 4, 4), (3, 1, 2, 2), "groups 3", (1, 3, 3, 3)),
    ("depthwise-multiplier", (1, 2, 4, 3), (4, 1, 2, 2), "groups 2", (1, 4, 3, 2)),
    ("groups-unused", (1, 5, 3, 3), (5, 2, 2, 2), "groups 2", (1, 4, 2, 2)),
    ("1-D", (2, 2, 7), (3, 2, 3), "strides 2 padding (1, 2)", (2, 3, 4)),
    ("3-D", (1, 2, 3, 4, 3), (2, 2, 2, 2, 2), "padding (0, 1), (1, 0), (0, 0)", (1, 2, 3, 4, 2)),
    (
        "everything",
        (1, 2, 5, 5),
        (4, 1, 3, 3),
        "strides 2, 1 padding (1, 1), (0, 2) leftDilation 1, 2 rightDilation 2, 1 groups 2",
        (1, 4, 2, 9),
    ),
    (
        "everything-3-D",
        (2, 4, 3, 2, 3),
        (2, 2, 2, 1, 2),
        "strides 1, 2, 2 padding (2, 0), (1, 1), (0, 1) leftDilation 2, 1, 1 "
        "rightDilation 1, 1, 2 groups 2",
        (2, 2, 6, 2, 1),
    ),
]


@pytest.mark.parametrize("name, x, k, options, out", CONVOLUTIONS, ids=[c[0] for c in CONVOLUTIONS])
def test_convolve(name, x, k, options, out):
    rng = np.random.default_rng(7)
    text = module([x, k], f"%r = convolve {use(0, x)} kernel {use(1, k)} {options}", out)
    gradient_check(text, [rng.standard_normal(x), rng.standard_normal(k)])


def test_convolve_with_respect_to_one_operand():
    x, k = (1, 2, 4, 4), (2, 2, 3, 3)
    text = module([x, k], f"%r = convolve {use(0, x)} kernel {use(1, k)}", (1, 2, 2, 2))
    rng = np.random.default_rng(8)
    inputs = [rng.standard_normal(x), rng.standard_normal(k)]
    gradient_check(text, inputs, wrt=(0,))
    gradient_check(text, inputs, wrt=(1,))


def test_convolve_that_reads_only_padding_has_zero_input_gradient():
    x, k = (1, 1, 1), (1, 1, 1)
    body = f"%r = convolve {use(0, x)} kernel {use(1, k)} strides 2 padding (1, 1)"
    grads = gradient_check(module([x, k], body, (1, 1, 2)), [np.ones(x), np.ones(k)])
    assert np.all(grads[0] == 0) and np.all(grads[1] == 0)


# reduceWindow --------------------------------------------------------------------------------

INIT = {"add": "0", "max": "-1000", "min": "1000"}
# (input shape, window dims): a matrix and NCHW pooling.
WINDOWS = [((4, 5), (2, 3)), ((2, 2, 4, 5), (1, 1, 3, 2))]


def ints(values: tuple[int, ...]) -> str:
    return ", ".join(map(str, values))


def reduce_window(shape, comb, init, dims, strides, padding) -> tuple[str, tuple[int, ...]]:
    """The line defining %r as a reduceWindow of %a0, and the result's shape."""
    if padding == "none":
        out = tuple(max((n - d) // s + 1, 0) for n, d, s in zip(shape, dims, strides))
    elif padding == "half":
        out = tuple((n - 1) // s + 1 for n, s in zip(shape, strides))
    else:
        out = tuple((n + d - 2) // s + 1 for n, d, s in zip(shape, dims, strides))
    body = (
        f"%r = reduceWindow {use(0, shape)} by {comb} init {init} "
        f"dims {ints(dims)} strides {ints(strides)} padding {padding}"
    )
    return body, out


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("padding", ["none", "half", "full"])
@pytest.mark.parametrize("shape, dims", WINDOWS, ids=["2-D", "NCHW"])
@pytest.mark.parametrize("comb", ["add", "max", "min"])
def test_reduce_window(comb, shape, dims, padding, stride):
    strides = tuple(stride if d > 1 else 1 for d in dims)
    body, out = reduce_window(shape, comb, f"{INIT[comb]}: f32", dims, strides, padding)
    rng = np.random.default_rng(9)
    gradient_check(module([shape], body, out), [rng.standard_normal(shape)])


@pytest.mark.parametrize("comb", ["add", "max"])
def test_reduce_window_pooling_without_overlap(comb):
    shape = (1, 2, 4, 4)
    body, out = reduce_window(shape, comb, "0: f32", (1, 1, 2, 2), (1, 1, 2, 2), "none")
    rng = np.random.default_rng(10)
    gradient_check(module([shape], body, out), [rng.standard_normal(shape)])


def test_reduce_window_max_shares_ties_equally():
    body, out = reduce_window((1, 4), "max", "-1000: f32", (1, 2), (1, 2), "none")
    m = parse_module(module([(1, 4)], body, out))
    g, _ = add_gradient(m, "f")
    differentiate(m)
    x, seed = np.array([[1.0, 1.0, 2.0, 0.5]]), np.array([[1.0, 3.0]])
    (grad,) = run_function(m, g.name, [x, seed], float64=True)
    np.testing.assert_array_equal(grad, [[0.5, 0.5, 3.0, 0.0]])


def test_reduce_window_max_whose_result_is_the_init_has_zero_gradient():
    body, out = reduce_window((3,), "max", "5: f32", (2,), (1,), "full")
    grads = gradient_check(module([(3,)], body, out), [np.array([0.5, 7.0, 1.0])])
    assert grads[0][0] == 0 and grads[0][2] == 0


def differentiation_error(text: str, wrt: tuple[int, ...] | None = None) -> str:
    m = parse_module(text)
    add_gradient(m, "f", wrt)
    with pytest.raises(DiagnosticError) as info:
        differentiate(m)
    return str(info.value)


def test_reduce_window_by_multiply_has_no_adjoint():
    body, out = reduce_window((4,), "multiply", "1: f32", (2,), (1,), "none")
    message = differentiation_error(module([(4,)], body, out))
    assert "reduceWindow by 'multiply'" in message


def test_reduce_window_by_a_function_has_no_adjoint():
    body, out = reduce_window((4,), "@g: (f32, f32) -> f32", "0: f32", (2,), (1,), "none")
    text = module([(4,)], body, out) + (
        "\nfunc @g: (f32, f32) -> f32 {\n'entry(%x: f32, %y: f32):\n"
        "    %s = add %x: f32, %y: f32\n    return %s: f32\n}\n"
    )
    assert "reduceWindow by a function" in differentiation_error(text, wrt=(0,))


def test_reduce_window_init_has_no_adjoint():
    body, out = reduce_window((4,), "max", use(1, ()), (2,), (1,), "none")
    message = differentiation_error(module([(4,), ()], body, out))
    assert "reduceWindow's initial value" in message
