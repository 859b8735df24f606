"""Every adjoint rule against finite differences in float64, over several shapes, including
broadcasting operands."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import gradient_check, module, use

from dlvm.ir.ops import UNARY_FLOAT, UNARY_NUMERIC

# The domain each unary operation is smooth on.
DOMAIN = {
    "log": (0.5, 2.0),
    "sqrt": (0.5, 2.0),
    "rsqrt": (0.5, 2.0),
    "asin": (-0.8, 0.8),
    "acos": (-0.8, 0.8),
    "lgamma": (0.5, 3.0),
    "tan": (-1.0, 1.0),
}
SMOOTH_UNARY = [
    op for op in UNARY_FLOAT + UNARY_NUMERIC if op not in {"digamma", "sign", "round", "ceil"}
]
SMOOTH_UNARY = [op for op in SMOOTH_UNARY if op not in {"floor", "rint"}]
SHAPES = [(), (3,), (2, 3)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("op", SMOOTH_UNARY)
def test_unary(op, shape):
    rng = np.random.default_rng(1)
    lo, hi = DOMAIN.get(op, (-1.5, 1.5))
    x = rng.uniform(lo, hi, size=shape)
    gradient_check(module([shape], f"%r = {op} {use(0, shape)}", shape), [x])


@pytest.mark.parametrize("op", ["sign", "round", "ceil", "floor", "rint"])
def test_piecewise_constant_unary_has_zero_gradient(op):
    x = np.array([0.3, 1.7, -2.2])
    (g,) = gradient_check(module([(3,)], f"%r = {op} {use(0, (3,))}", (3,)), [x])
    assert np.all(g == 0)


BROADCASTS = [((2, 3), (2, 3)), ((2, 3), (1, 3)), ((2, 3), ()), ((), (2, 3)), ((4, 1), (1, 5))]


def _out(a, b):
    return tuple(np.broadcast_shapes(a, b))


@pytest.mark.parametrize("shapes", BROADCASTS, ids=str)
@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "divide", "min", "max", "power"])
def test_binary(op, shapes):
    a, b = shapes
    rng = np.random.default_rng(2)
    x = rng.uniform(0.5, 2.0, size=a)
    y = rng.uniform(0.5, 2.0, size=b) if op != "divide" else rng.uniform(1.0, 2.0, size=b)
    if op in ("min", "max"):  # keep the operands apart so that no tie is near
        y = y + 3 * (rng.integers(0, 2, size=b) - 0.5)
    text = module([a, b], f"%r = {op} {use(0, a)}, {use(1, b)}", _out(a, b))
    gradient_check(text, [x, y])


def test_select_routes_the_gradient_by_the_mask():
    text = module(
        [(2, 3), (2, 3)],
        f"""
        %m = greaterThan {use(0, (2, 3))}, {use(1, (2, 3))}
        %r = select {use(0, (2, 3))}, {use(1, (2, 3))} by %m: <2 x 3 x bool>
        """,
        (2, 3),
    )
    rng = np.random.default_rng(3)
    gradient_check(text, [rng.standard_normal((2, 3)), rng.standard_normal((2, 3))])


def test_relu_as_compare_and_select():
    text = module(
        [(2, 3)],
        f"""
        %m = greaterThan {use(0, (2, 3))}, 0: f32
        %r = select {use(0, (2, 3))}, 0: f32 by %m: <2 x 3 x bool>
        """,
        (2, 3),
    )
    gradient_check(text, [np.array([[1.0, -2.0, 0.5], [-0.3, 2.0, -1.0]])])


@pytest.mark.parametrize(
    "a, b",
    [((2, 3), (3, 4)), ((1, 5), (5, 1)), ((3,), (3,)), ((2, 2, 3), (2, 3, 4))],
    ids=str,
)
def test_dot(a, b):
    out = () if len(a) == 1 else a[:-1] + (b[-1],)
    rng = np.random.default_rng(4)
    text = module([a, b], f"%r = dot {use(0, a)}, {use(1, b)}", out)
    gradient_check(text, [rng.standard_normal(a), rng.standard_normal(b)])


SHAPE_OPS = [
    ("transpose", (2, 3, 4), "%r = transpose {x}", (4, 3, 2)),
    ("reverse", (2, 3), "%r = reverse {x} along 1", (2, 3)),
    ("reverse-both", (2, 3), "%r = reverse {x} along 0, 1", (2, 3)),
    ("slice", (4, 3), "%r = slice {x} from 1 upto 2", (2, 3)),
    ("slice-all", (4, 3), "%r = slice {x} from 0 upto 3", (4, 3)),
    ("slice-head", (4,), "%r = slice {x} from 0 upto 0", (1,)),
    ("padShape", (2, 3), "%r = padShape {x} at 1", (2, 1, 3)),
    ("squeezeShape", (2, 1, 3), "%r = squeezeShape {x} at 1", (2, 3)),
    ("shapeCast", (2, 3), "%r = shapeCast {x} to 3 x 2", (3, 2)),
    ("shapeCast-scalar", (1, 1), "%r = shapeCast {x} to scalar", ()),
    ("reduce-add", (2, 3, 4), "%r = reduce {x} by add init 0: f32 along 0, 2", (3,)),
    ("reduce-add-all", (2, 3), "%r = reduce {x} by add init 0: f32 along 0, 1", ()),
    ("reduce-multiply", (2, 3), "%r = reduce {x} by multiply init 1: f32 along 1", (2,)),
    ("reduce-max", (2, 3), "%r = reduce {x} by max init -100: f32 along 1", (2,)),
    ("reduce-min", (3, 2), "%r = reduce {x} by min init 100: f32 along 0", (2,)),
    ("scan-add", (2, 3), "%r = scan {x} by add along 1", (2, 3)),
    ("scan-add-both", (2, 3), "%r = scan {x} by add along 0, 1", (2, 3)),
    ("scan-multiply", (2, 3), "%r = scan {x} by multiply along 1", (2, 3)),
    ("scan-multiply-both", (2, 3), "%r = scan {x} by multiply along 0, 1", (2, 3)),
    ("dataTypeCast", (2, 3), "%r = dataTypeCast {x} to f64", "<2 x 3 x f64>"),
    ("convert", (2, 3), "%r = convert {x} to f32", "<2 x 3 x f32>"),
]


@pytest.mark.parametrize("name, shape, body, out", SHAPE_OPS, ids=[s[0] for s in SHAPE_OPS])
def test_shape_and_reduction_ops(name, shape, body, out):
    rng = np.random.default_rng(5)
    x = rng.uniform(0.5, 2.0, size=shape)
    gradient_check(module([shape], body.format(x=use(0, shape)), out), [x])


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_concatenate(axis):
    a, b = [2, 3, 4], [2, 3, 4]
    b[axis] = 2
    out = list(a)
    out[axis] += 2
    rng = np.random.default_rng(6)
    text = module(
        [tuple(a), tuple(b)],
        f"%r = concatenate {use(0, tuple(a))}, {use(1, tuple(b))} along {axis}",
        tuple(out),
    )
    gradient_check(text, [rng.standard_normal(a), rng.standard_normal(b)])


def test_aggregate_literal_extract_and_insert():
    text = module(
        [(2,), ()],
        f"""
        %t = literal ({use(0, (2,))}, {use(1, ())}): (<2 x f32>, f32)
        %u = extract 0 from %t: (<2 x f32>, f32)
        %s = extract 1 from %t: (<2 x f32>, f32)
        %v = insert %s: f32 to %u: <2 x f32> at 1
        %w = literal <{use(1, ())}, %s: f32>: <2 x f32>
        %r = multiply %v: <2 x f32>, %w: <2 x f32>
        """,
        (2,),
    )
    gradient_check(text, [np.array([0.5, -1.5]), np.array(2.0)])
