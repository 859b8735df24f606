"""Reference interpreter: reduce, scan, reduceWindow and convolve against naive loops."""

from __future__ import annotations

import functools
import itertools
import textwrap

import numpy as np
import pytest

from dlvm.interp import run_function
from dlvm.ir import parse_module

COMBINATORS = """
func @mulAdd: (f32, f32) -> f32 {
'entry(%a: f32, %b: f32):
    %m = multiply %a: f32, 2: f32
    %s = add %m: f32, %b: f32
    return %s: f32
}
"""


def ty(shape: tuple[int, ...], dt: str = "f32") -> str:
    return "<" + " x ".join(map(str, shape)) + f" x {dt}>" if shape else dt


def run_op(line: str, x: np.ndarray, result: str, dt: str = "f32", **kw):
    t = ty(x.shape, dt)
    src = f"""
    module "t"
    stage raw

    func @f: ({t}) -> {result} {{
    'entry(%x: {t}):
        %r = {line}
        return %r: {result}
    }}
    {COMBINATORS}
    """
    return run_function(parse_module(textwrap.dedent(src), "t.dl"), "f", [x], **kw)


def fold(fn, init, values):
    """A left fold in row-major order: the meaning of every reduction."""
    return functools.reduce(fn, values, init)


X = np.arange(1, 25, dtype=np.float32).reshape(2, 3, 4) / 8
OPS = {
    "add": np.add,
    "multiply": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
    "subtract": np.subtract,
    "divide": np.divide,
    "mulAdd": lambda a, b: 2 * a + b,
}


def comb_text(name: str) -> str:
    return "@mulAdd: (f32, f32) -> f32" if name == "mulAdd" else name


# reduce ------------------------------------------------------------------------------------


@pytest.mark.parametrize("comb", list(OPS))
@pytest.mark.parametrize("dims", [(0,), (1,), (2,), (0, 2), (2, 0), (0, 1, 2)])
def test_reduce(comb, dims):
    init = 0.5
    kept = [i for i in range(3) if i not in dims]
    want = np.empty([X.shape[i] for i in kept], np.float64)
    moved = np.transpose(X, kept + sorted(dims)).reshape(want.shape + (-1,))
    for idx in np.ndindex(*want.shape):
        want[idx] = fold(OPS[comb], init, moved[idx].astype(np.float64))
    line = f"reduce %x: {ty(X.shape)} by {comb_text(comb)} init {init}: f32 along " + ", ".join(
        map(str, dims)
    )
    got = run_op(line, X, ty(want.shape))
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("comb,want", [("and", [False, True]), ("or", [True, True])])
def test_reduce_boolean(comb, want):
    x = np.array([[True, False], [True, True]])
    got = run_op(
        f"reduce %x: <2 x 2 x bool> by {comb} init true: bool along 1", x, "<2 x bool>", dt="bool"
    )
    np.testing.assert_array_equal(got, want)


def test_reduce_int_and_float64_mode():
    x = np.array([[1, 2, 3], [4, 5, 6]], np.int32)
    got = run_op(
        "reduce %x: <2 x 3 x i32> by multiply init 1: i32 along 1", x, "<2 x i32>", dt="i32"
    )
    assert got.dtype == np.int32 and got.tolist() == [6, 120]
    got = run_op(
        "reduce %x: <2 x 3 x 4 x f32> by add init 0: f32 along 0, 1, 2", X, "f32", float64=True
    )
    assert got.dtype == np.float64 and got == X.astype(np.float64).sum()


# scan --------------------------------------------------------------------------------------


def scan_ref(fn, x: np.ndarray, dims) -> np.ndarray:
    x = x.astype(np.float64)
    for d in dims:
        src = np.moveaxis(x, d, 0)
        out = src.copy()
        for i in range(1, src.shape[0]):
            out[i] = fn(out[i - 1], src[i])
        x = np.moveaxis(out, 0, d)
    return x


@pytest.mark.parametrize("comb", list(OPS))
@pytest.mark.parametrize("dims", [(0,), (1,), (2,), (0, 2), (2, 1)])
def test_scan(comb, dims):
    line = f"scan %x: {ty(X.shape)} by {comb_text(comb)} along " + ", ".join(map(str, dims))
    got = run_op(line, X, ty(X.shape))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, scan_ref(OPS[comb], X, dims), rtol=1e-5)


def test_scan_is_inclusive_cumulative():
    x = np.array([1, 2, 3, 4], np.int64)
    got = run_op("scan %x: <4 x i64> by add along 0", x, "<4 x i64>", dt="i64")
    assert got.tolist() == [1, 3, 6, 10]


# reduceWindow ------------------------------------------------------------------------------


def out_size(n: int, d: int, s: int, mode: str) -> int:
    return {
        "none": max((n - d) // s + 1, 0),
        "half": (n - 1) // s + 1,
        "full": (n + d - 2) // s + 1,
    }[mode]


def reduce_window_ref(fn, init, x, dims, strides, mode):
    """Per output element, fold the window's elements; positions outside x read init."""
    outs = [out_size(n, d, s, mode) for n, d, s in zip(x.shape, dims, strides)]
    lows = []
    for n, d, s, o in zip(x.shape, dims, strides, outs):
        total = {"none": 0, "half": max((o - 1) * s + d - n, 0), "full": 2 * (d - 1)}[mode]
        lows.append(total // 2)
    out = np.empty(outs)
    for idx in np.ndindex(*outs):
        values = []
        for off in itertools.product(*(range(d) for d in dims)):
            pos = [i * s + o - lo for i, s, o, lo in zip(idx, strides, off, lows)]
            inside = all(0 <= p < n for p, n in zip(pos, x.shape))
            values.append(x[tuple(pos)] if inside else init)
        out[idx] = fold(fn, init, values)
    return out


WINDOWS = [
    ((1, 2, 2), (1, 2, 2)),
    ((2, 3, 3), (1, 1, 2)),
    ((1, 3, 2), (1, 3, 1)),
    ((2, 1, 4), (2, 1, 3)),
]


@pytest.mark.parametrize("mode", ["none", "half", "full"])
@pytest.mark.parametrize("comb", ["max", "add", "mulAdd"])
@pytest.mark.parametrize("dims,strides", WINDOWS)
def test_reduce_window(mode, comb, dims, strides):
    init = -1.0 if comb == "max" else 0.25
    want = reduce_window_ref(OPS[comb], init, X.astype(np.float64), dims, strides, mode)
    line = (
        f"reduceWindow %x: {ty(X.shape)} by {comb_text(comb)} init {init}: f32 "
        f"dims {', '.join(map(str, dims))} strides {', '.join(map(str, strides))} padding {mode}"
    )
    got = run_op(line, X, ty(want.shape))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("mode", ["none", "half", "full"])
def test_window_padding_gives_the_type_rules_window_count(mode):
    """One definition of the padding modes (dlvm.ir.windows), which the type rule counts
    windows by and the interpreter, the adjoint and the code generator pad by: the padded axis
    holds exactly the windows the type rule counts."""
    from dlvm.ir.typerules import reduce_window
    from dlvm.ir.types import DataType, TensorType
    from dlvm.ir.windows import window_padding

    for n, d, s in itertools.product(range(1, 10), range(1, 5), range(1, 4)):
        attrs = {"comb": "add", "dims": (d,), "strides": (s,), "padding": mode}
        x = TensorType((n,), DataType.F32)
        out = reduce_window([x, TensorType((), DataType.F32)], attrs).shape[0]
        lo, hi = window_padding(n, d, s, out, mode)
        padded = n + lo + hi
        windows = (padded - d) // s + 1 if padded >= d else 0
        assert min(lo, hi) >= 0 and windows == out, (n, d, s)


def test_reduce_window_max_pool_2x2():
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    got = run_op(
        "reduceWindow %x: <1 x 1 x 4 x 4 x f32> by max init -1000: f32 dims 1, 1, 2, 2 "
        "strides 1, 1, 2, 2 padding none",
        x,
        "<1 x 1 x 2 x 2 x f32>",
    )
    assert got.reshape(-1).tolist() == [5, 7, 13, 15]


# convolve ----------------------------------------------------------------------------------


def conv_ref(x, k, strides, padding, ld, rd, groups):
    """Straight from the definition: out[b, o, p] = Σ_c Σ_t x[b, g·cin_g + c, (p·s + t·rd −
    lo) / ld] · k[o, c, t], over the taps that land on a real (non-dilation, non-padding)
    input element."""
    n = x.ndim - 2
    cout, cin_g = k.shape[:2]
    cout_g = cout // groups
    dilated = [(size - 1) * d + 1 for size, d in zip(x.shape[2:], ld)]
    outs = []
    for i in range(n):
        padded = dilated[i] + padding[i][0] + padding[i][1]
        win = (k.shape[i + 2] - 1) * rd[i] + 1
        outs.append(max((padded - win) // strides[i] + 1, 0))
    out = np.zeros((x.shape[0], cout_g * groups, *outs))
    for b, o in itertools.product(range(x.shape[0]), range(cout_g * groups)):
        g = o // cout_g
        for pos in np.ndindex(*outs):
            acc = 0.0
            for c in range(cin_g):
                for tap in np.ndindex(*k.shape[2:]):
                    src = []
                    for i in range(n):
                        q = pos[i] * strides[i] + tap[i] * rd[i] - padding[i][0]
                        if q < 0 or q >= dilated[i] or q % ld[i]:
                            break
                        src.append(q // ld[i])
                    else:
                        acc += x[(b, g * cin_g + c, *src)] * k[(o, c, *tap)]
            out[(b, o, *pos)] = acc
    return out


CONV_CASES = [
    # x shape, k shape, strides, padding, leftDilation, rightDilation, groups
    ((2, 3, 6, 5), (4, 3, 3, 2), None, None, None, None, None),
    ((1, 2, 7, 6), (3, 2, 3, 3), (2, 3), None, None, None, None),
    ((1, 2, 5, 5), (2, 2, 3, 3), None, ((1, 2), (0, 1)), None, None, None),
    ((1, 1, 4, 3), (2, 1, 2, 2), None, ((1, 1), (1, 1)), (2, 3), None, None),
    ((1, 2, 8, 9), (2, 2, 2, 3), (1, 2), None, None, (3, 2), None),
    ((2, 4, 5, 5), (6, 2, 3, 3), None, ((1, 1), (1, 1)), None, None, 2),
    ((1, 6, 9, 8), (8, 1, 3, 3), (2, 1), ((1, 0), (2, 2)), (1, 2), (2, 1), 6),
    ((2, 3, 11), (4, 3, 4), (3,), ((2, 1),), (2,), (2,), None),
    ((1, 2, 4, 3, 5), (2, 2, 2, 2, 3), (1, 2, 2), ((1, 0), (0, 1), (1, 1)), None, (1, 1, 2), None),
]


def _conv_line(xs, ks, strides, padding, ld, rd, groups, rs):
    text = f"convolve %x: {ty(xs)} kernel %k: {ty(ks)}"
    if strides:
        text += " strides " + ", ".join(map(str, strides))
    if padding:
        text += " padding " + ", ".join(f"({lo}, {hi})" for lo, hi in padding)
    if ld:
        text += " leftDilation " + ", ".join(map(str, ld))
    if rd:
        text += " rightDilation " + ", ".join(map(str, rd))
    if groups:
        text += f" groups {groups}"
    return text


@pytest.mark.parametrize("case", CONV_CASES)
def test_convolve(case):
    xs, ks, strides, padding, ld, rd, groups = case
    n = len(xs) - 2
    rng = np.random.default_rng(len(xs) + sum(ks))
    x = rng.standard_normal(xs).astype(np.float32)
    k = rng.standard_normal(ks).astype(np.float32)
    options = (strides or (1,) * n, padding or ((0, 0),) * n, ld or (1,) * n, rd or (1,) * n)
    want = conv_ref(x.astype(np.float64), k.astype(np.float64), *options, groups or 1)
    line = _conv_line(xs, ks, strides, padding, ld, rd, groups, want.shape)
    src = f"""
    module "t"
    stage raw

    func @f: ({ty(xs)}, {ty(ks)}) -> {ty(want.shape)} {{
    'entry(%x: {ty(xs)}, %k: {ty(ks)}):
        %r = {line}
        return %r: {ty(want.shape)}
    }}
    """
    got = run_function(parse_module(textwrap.dedent(src), "t.dl"), "f", [x, k])
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_convolve_shape_example_from_the_docs():
    # The docs' <1 x 10 x 32 x 48> input does not divide into 6 groups; with 6 channels the
    # typerule accepts it and keeps (8 / 6) * 6 = 6 output channels.
    xs, ks = (1, 6, 32, 48), (8, 1, 3, 3)
    src = f"""
    module "t"
    stage raw

    func @f: ({ty(xs)}, {ty(ks)}) -> <1 x 6 x 15 x 10 x f32> {{
    'entry(%x: {ty(xs)}, %k: {ty(ks)}):
        %r = convolve %x: {ty(xs)} kernel %k: {ty(ks)} strides 2, 4 padding (1, 1), (2, 2) rightDilation 2, 6 groups 6
        return %r: <1 x 6 x 15 x 10 x f32>
    }}
    """  # noqa: E501
    rng = np.random.default_rng(5)
    x = rng.standard_normal(xs).astype(np.float32)
    k = rng.standard_normal(ks).astype(np.float32)
    got = run_function(parse_module(textwrap.dedent(src), "t.dl"), "f", [x, k])
    want = conv_ref(x, k, (2, 4), ((1, 1), (2, 2)), (1, 1), (2, 6), 6)
    assert got.shape == (1, 6, 15, 10)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_convolve_int():
    x = np.arange(9, dtype=np.int32).reshape(1, 1, 3, 3)
    k = np.ones((1, 1, 2, 2), np.int32)
    src = """
    module "t"
    stage raw

    func @f: (<1 x 1 x 3 x 3 x i32>, <1 x 1 x 2 x 2 x i32>) -> <1 x 1 x 2 x 2 x i32> {
    'entry(%x: <1 x 1 x 3 x 3 x i32>, %k: <1 x 1 x 2 x 2 x i32>):
        %r = convolve %x: <1 x 1 x 3 x 3 x i32> kernel %k: <1 x 1 x 2 x 2 x i32>
        return %r: <1 x 1 x 2 x 2 x i32>
    }
    """
    got = run_function(parse_module(textwrap.dedent(src), "t.dl"), "f", [x, k])
    assert got.dtype == np.int32 and got.reshape(-1).tolist() == [8, 12, 20, 24]
