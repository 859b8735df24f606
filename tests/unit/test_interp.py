"""Reference interpreter: every instruction is implemented; elementwise, tensor and shape
instructions agree with NumPy (broadcasting included); literals; random."""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pytest

from dlvm.interp import IMPLS, Interpreter, run_function
from dlvm.ir import parse_module
from dlvm.ir.ops import OPS

DT = {
    "f16": np.float16,
    "f32": np.float32,
    "f64": np.float64,
    "i8": np.int8,
    "i16": np.int16,
    "i32": np.int32,
    "i64": np.int64,
    "bool": np.bool_,
}


def module(src: str):
    return parse_module('module "t"\nstage raw\n\n' + textwrap.dedent(src), "t.dl")


def ty(shape: tuple[int, ...], dt: str) -> str:
    return "<" + " x ".join(map(str, shape)) + f" x {dt}>" if shape else dt


def run_op(line: str, params: list[str], result: str, args: list, **kw):
    """Runs `%r = <line>` in a function of `params` (%a, %b, %c …) returning `result`."""
    names = "abcd"
    sig = ", ".join(params)
    head = ", ".join(f"%{n}: {p}" for n, p in zip(names, params))
    src = f"""
    func @f: ({sig}) -> {result} {{
    'entry({head}):
        %r = {line}
        return %r: {result}
    }}
    """
    return run_function(module(src), "f", args, **kw)


def check(got: np.ndarray, want, dt: str, rtol: float = 1e-6) -> None:
    want = np.asarray(want)
    assert isinstance(got, np.ndarray)
    assert got.dtype == DT[dt] and got.shape == want.shape
    if got.dtype.kind == "f":
        np.testing.assert_allclose(got, want.astype(got.dtype), rtol=rtol, atol=1e-6)
    else:
        np.testing.assert_array_equal(got, want)


def test_every_instruction_is_implemented():
    assert sorted(set(OPS) - set(IMPLS)) == []
    assert sorted(set(IMPLS) - set(OPS)) == []


# Elementwise -------------------------------------------------------------------------------

RNG = np.random.default_rng(0)
POSITIVE = RNG.uniform(0.2, 3.0, (2, 3)).astype(np.float32)
UNIT = RNG.uniform(-0.9, 0.9, (2, 3)).astype(np.float32)


def _digamma_ref(x):
    h = 1e-4  # central difference of math.lgamma, accurate to ~1e-8
    return np.vectorize(lambda v: (math.lgamma(v + h) - math.lgamma(v - h)) / (2 * h))(x)


UNARY_FLOAT = [
    ("sinh", UNIT, np.sinh),
    ("cosh", UNIT, np.cosh),
    ("tanh", UNIT, np.tanh),
    ("log", POSITIVE, np.log),
    ("exp", UNIT, np.exp),
    ("sqrt", POSITIVE, np.sqrt),
    ("rsqrt", POSITIVE, lambda x: 1 / np.sqrt(x)),
    ("tan", UNIT, np.tan),
    ("cos", UNIT, np.cos),
    ("sin", UNIT, np.sin),
    ("acos", UNIT, np.arccos),
    ("asin", UNIT, np.arcsin),
    ("atan", UNIT, np.arctan),
    ("lgamma", POSITIVE, np.vectorize(math.lgamma)),
    ("digamma", POSITIVE, _digamma_ref),
    ("erf", UNIT, np.vectorize(math.erf)),
    ("erfc", UNIT, np.vectorize(math.erfc)),
    ("softplus", UNIT * 40, lambda x: np.logaddexp(0, x)),
]


def test_every_float_function_has_a_reference():
    """A float function added to dlvm.ir.ops.UNARY_FLOAT needs its inputs and NumPy reference
    above; without this, a new one would only be checked for existing."""
    from dlvm.ir import ops

    assert sorted(u[0] for u in UNARY_FLOAT) == sorted(ops.UNARY_FLOAT)


@pytest.mark.parametrize("op,x,ref", UNARY_FLOAT, ids=[u[0] for u in UNARY_FLOAT])
@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_unary_float(op, x, ref, dt):
    x = x.astype(DT[dt])
    t = ty(x.shape, dt)
    check(run_op(f"{op} %a: {t}", [t], t, [x]), ref(x.astype(np.float64)), dt, rtol=1e-5)


def test_unary_float_scalar_and_f16():
    assert run_op("exp %a: f32", ["f32"], "f32", [0.0]).shape == ()
    got = run_op("tanh %a: <3 x f16>", ["<3 x f16>"], "<3 x f16>", [np.ones(3, np.float16)])
    check(got, np.tanh(np.ones(3)), "f16", rtol=1e-3)


EULER = 0.5772156649015329
SPECIAL_VALUES = [
    (
        "digamma",
        [1.0, 0.5, 0.25, 10.0, -0.5, 1e-3],
        [
            -EULER,
            -EULER - 2 * math.log(2),
            -EULER - math.pi / 2 - 3 * math.log(2),
            sum(1 / k for k in range(1, 10)) - EULER,
            2 - EULER - 2 * math.log(2),
            -1000.5755719318103,
        ],
    ),
    ("digamma", [0.0, -2.0, np.inf], [-np.inf, np.nan, np.inf]),
    (
        "lgamma",
        [0.5, 5.0, -0.5, 0.0, -3.0],
        [0.5 * math.log(math.pi), math.log(24), math.log(2 * math.sqrt(math.pi)), np.inf, np.inf],
    ),
    ("erf", [0.0, 0.5, -2.0, np.inf], [0.0, math.erf(0.5), math.erf(-2.0), 1.0]),
    ("erfc", [0.0, 3.0, -np.inf], [1.0, math.erfc(3.0), 2.0]),
    # Neither tail overflows: x itself far right, e^x (subnormal at -740) far left; NaN stays.
    (
        "softplus",
        [0.0, 100.0, -100.0, 1e30, -1e30, -740.0, np.inf, -np.inf, np.nan],
        [math.log(2), 100.0, math.exp(-100.0), 1e30, 0.0, math.exp(-740.0), np.inf, 0.0, np.nan],
    ),
]


@pytest.mark.parametrize("op,x,want", SPECIAL_VALUES)
def test_special_function_values(op, x, want):
    t = f"<{len(x)} x f64>"
    got = run_op(f"{op} %a: {t}", [t], t, [np.array(x)])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


HALVES = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.4, -0.6], np.float32)
UNARY_NUMERIC = [
    ("negate", HALVES, -HALVES),
    ("sign", HALVES, np.sign(HALVES)),
    ("square", HALVES, HALVES**2),
    ("round", HALVES, [-3, -2, -1, 1, 2, 3, 0, -1]),  # halfway away from zero
    ("rint", HALVES, [-2, -2, -0, 0, 2, 2, 0, -1]),  # halfway to even
    ("ceil", HALVES, np.ceil(HALVES)),
    ("floor", HALVES, np.floor(HALVES)),
]


@pytest.mark.parametrize("op,x,want", UNARY_NUMERIC, ids=[u[0] for u in UNARY_NUMERIC])
def test_unary_numeric_float(op, x, want):
    check(run_op(f"{op} %a: <8 x f32>", ["<8 x f32>"], "<8 x f32>", [x]), want, "f32")


@pytest.mark.parametrize("op", ["negate", "sign", "square", "round", "rint", "ceil", "floor"])
def test_unary_numeric_int(op):
    x = np.array([-3, 0, 2, 7], np.int32)
    want = {"negate": -x, "sign": np.sign(x), "square": x * x}.get(op, x)
    check(run_op(f"{op} %a: <4 x i32>", ["<4 x i32>"], "<4 x i32>", [x]), want, "i32")


A = np.array([[-7.5, 2.0, 3.25], [4.0, -5.0, 0.5]], np.float32)
B = np.array([[2.0, -3.0, 1.5], [-2.5, 2.0, 4.0]], np.float32)
BINARY = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": np.divide,
    "min": np.minimum,
    "max": np.maximum,
    "truncateDivide": lambda a, b: np.trunc(a / b),
    "floorDivide": np.floor_divide,
    "modulo": np.fmod,
    "power": lambda a, b: np.abs(a) ** b,
}
# (shape of a, shape of b): equal shapes, scalar either side, 1s on both sides.
BROADCASTS = [((2, 3), (2, 3)), ((2, 3), ()), ((), (2, 3)), ((2, 1), (1, 3)), ((1, 3), (2, 3))]


def _take(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The leading corner of x with the given shape (a scalar for ())."""
    return np.array(x[tuple(slice(0, n) for n in shape) + (0,) * (x.ndim - len(shape))])


@pytest.mark.parametrize("op", list(BINARY))
@pytest.mark.parametrize("sa,sb", BROADCASTS)
def test_binary_float_broadcasting(op, sa, sb):
    a, b = _take(A, sa), _take(B, sb)
    if op == "power":
        a = np.abs(a)
    ta, tb = ty(sa, "f32"), ty(sb, "f32")
    tr = ty(np.broadcast_shapes(sa, sb), "f32")
    got = run_op(f"{op} %a: {ta}, %b: {tb}", [ta, tb], tr, [a, b])
    check(got, BINARY[op](a, b), "f32", rtol=1e-6)


def test_binary_literal_operand():
    got = run_op("multiply %a: <2 x 3 x f32>, 2: f32", ["<2 x 3 x f32>"], "<2 x 3 x f32>", [A])
    check(got, A * 2, "f32")
    got = run_op("subtract 1.5: f64, %a: <3 x f64>", ["<3 x f64>"], "<3 x f64>", [[1, 2, 3]])
    check(got, [0.5, -0.5, -1.5], "f64")


# -7 and 7 against 2 and -2: C-style truncation, Python-style floor, remainder with the sign of
# the dividend.
DIVISIONS = {
    "divide": [-3, 3, -3, 3],
    "truncateDivide": [-3, 3, -3, 3],
    "floorDivide": [-4, 3, -4, 3],
    "modulo": [-1, 1, 1, -1],
}


@pytest.mark.parametrize("op", list(BINARY))
@pytest.mark.parametrize("dt", ["i8", "i32", "i64"])
def test_binary_int(op, dt):
    if op in DIVISIONS:
        a, b, want = np.array([-7, 7, 7, -7]), np.array([2, 2, -2, -2]), DIVISIONS[op]
    else:
        a, b = np.array([-7, 7, -3, 5]), np.array([2, 2, 3, 0])
        want = np.power(a, b) if op == "power" else BINARY[op](a, b)
    t = f"<4 x {dt}>"
    got = run_op(f"{op} %a: {t}, %b: {t}", [t, t], t, [a.astype(DT[dt]), b.astype(DT[dt])])
    check(got, want, dt)


def test_float_modulo_and_division_conventions():
    a = np.array([-7.5, 7.5, -7.5, 7.5], np.float64)
    b = np.array([2.0, 2.0, -2.0, -2.0], np.float64)
    t = "<4 x f64>"
    check(run_op(f"modulo %a: {t}, %b: {t}", [t, t], t, [a, b]), [-1.5, 1.5, -1.5, 1.5], "f64")
    check(run_op(f"floorDivide %a: {t}, %b: {t}", [t, t], t, [a, b]), [-4, 3, 3, -4], "f64")
    check(run_op(f"truncateDivide %a: {t}, %b: {t}", [t, t], t, [a, b]), [-3, 3, 3, -3], "f64")


COMPARE = {
    "lessThan": np.less,
    "lessThanOrEqual": np.less_equal,
    "greaterThan": np.greater,
    "greaterThanOrEqual": np.greater_equal,
    "equal": np.equal,
    "notEqual": np.not_equal,
}


@pytest.mark.parametrize("op", list(COMPARE))
@pytest.mark.parametrize("sa,sb", BROADCASTS[:4])
@pytest.mark.parametrize("dt", ["f32", "i32"])
def test_compare(op, sa, sb, dt):
    a = _take(np.array([[1, 2, 3], [4, 5, 6]]), sa).astype(DT[dt])
    b = _take(np.array([[3, 2, 1], [4, 4, 7]]), sb).astype(DT[dt])
    ta, tb = ty(sa, dt), ty(sb, dt)
    tr = ty(np.broadcast_shapes(sa, sb), "bool")
    check(run_op(f"{op} %a: {ta}, %b: {tb}", [ta, tb], tr, [a, b]), COMPARE[op](a, b), "bool")


def test_boolean_ops():
    a = np.array([[True, False, True]])
    b = np.array([[True], [False]])
    t1, t2, tr = "<1 x 3 x bool>", "<2 x 1 x bool>", "<2 x 3 x bool>"
    check(run_op(f"and %a: {t1}, %b: {t2}", [t1, t2], tr, [a, b]), a & b, "bool")
    check(run_op(f"or %a: {t1}, %b: {t2}", [t1, t2], tr, [a, b]), a | b, "bool")
    check(run_op(f"not %a: {t1}", [t1], t1, [a]), ~a, "bool")
    check(run_op(f"and %a: {t1}, true: bool", [t1], t1, [a]), a, "bool")


def test_select_broadcasts_all_three():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    flags = np.array([[True], [False]])
    got = run_op(
        "select %a: <2 x 3 x f32>, %b: f32 by %c: <2 x 1 x bool>",
        ["<2 x 3 x f32>", "f32", "<2 x 1 x bool>"],
        "<2 x 3 x f32>",
        [a, -1.0, flags],
    )
    check(got, np.where(flags, a, -1.0), "f32")


@pytest.mark.parametrize(
    "src,dst,x",
    [
        ("i32", "i64", [1, -2]),
        ("f16", "f32", [0.5, -1.25]),
        ("f32", "f64", [0.1, 3.0]),
        ("i8", "i8", [-128, 127]),
        ("bool", "bool", [True, False]),
    ],
)
def test_data_type_cast(src, dst, x):
    a = np.array(x, DT[src])
    got = run_op(f"dataTypeCast %a: <2 x {src}> to {dst}", [f"<2 x {src}>"], f"<2 x {dst}>", [a])
    check(got, a.astype(DT[dst]), dst)


def test_logic_is_bitwise_on_integers():
    a = np.array([12, -1, 5, 0], np.int16)
    b = np.array([10, 3, -6, 7], np.int16)
    for op, want in (("and", a & b), ("or", a | b), ("xor", a ^ b)):
        got = run_op(f"{op} %a: <4 x i16>, %b: <4 x i16>", ["<4 x i16>"] * 2, "<4 x i16>", [a, b])
        check(got, want, "i16")
    check(run_op("not %a: <4 x i16>", ["<4 x i16>"], "<4 x i16>", [a]), ~a, "i16")
    flags = np.array([True, False, True, False])
    got = run_op("xor %a: <4 x bool>, true: bool", ["<4 x bool>"], "<4 x bool>", [flags])
    check(got, ~flags, "bool")


def test_shifts_define_every_amount():
    """Past the width or negative: 0 to the left, the sign to the right (ONNX's BitShift)."""
    a = np.array([3, -3, 64, -128, 1, -1], np.int8)
    b = np.array([1, 1, 2, 9, -1, 8], np.int8)
    left = run_op("shiftLeft %a: <6 x i8>, %b: <6 x i8>", ["<6 x i8>"] * 2, "<6 x i8>", [a, b])
    check(left, [6, -6, 0, 0, 0, 0], "i8")
    right = run_op("shiftRight %a: <6 x i8>, %b: <6 x i8>", ["<6 x i8>"] * 2, "<6 x i8>", [a, b])
    check(right, [1, -2, 16, -1, 0, -1], "i8")


def test_bit_cast():
    a = np.array([1.0, -2.5], np.float32)
    got = run_op("bitCast %a: <2 x f32> to <2 x i32>", ["<2 x f32>"], "<2 x i32>", [a])
    check(got, a.view(np.int32), "i32")
    got = run_op("bitCast %a: <2 x f32> to <8 x i8>", ["<2 x f32>"], "<8 x i8>", [a])
    check(got, a.view(np.int8), "i8")
    # float64 mode reinterprets the declared f32 bits, not the widened f64 ones.
    got = run_op(
        "bitCast %a: <2 x f32> to <2 x i32>", ["<2 x f32>"], "<2 x i32>", [a], float64=True
    )
    check(got, a.view(np.int32), "i32")


# Linear algebra and shapes -----------------------------------------------------------------


@pytest.mark.parametrize(
    "sa,sb,dt",
    [
        ((2, 3), (3, 4), "f32"),
        ((5, 2, 3), (5, 3, 2), "f64"),
        ((3,), (3,), "f32"),
        ((2, 3), (3, 1), "i32"),
        ((1, 784), (784, 10), "f32"),
    ],
)
def test_dot(sa, sb, dt):
    a = RNG.integers(-3, 4, sa).astype(DT[dt])
    b = RNG.integers(-3, 4, sb).astype(DT[dt])
    want = np.matmul(a, b)
    ta, tb, tr = ty(sa, dt), ty(sb, dt), ty(want.shape, dt)
    check(run_op(f"dot %a: {ta}, %b: {tb}", [ta, tb], tr, [a, b]), want, dt, rtol=1e-5)
    check(run_op(f"matrixMultiply %a: {ta}, %b: {tb}", [ta, tb], tr, [a, b]), want, dt, 1e-5)


X = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
TX = "<2 x 3 x 4 x f32>"


@pytest.mark.parametrize(
    "line,result,want",
    [
        (f"transpose %a: {TX}", "<4 x 3 x 2 x f32>", X.transpose()),
        (f"reverse %a: {TX} along 0, 2", TX, X[::-1, :, ::-1]),
        (f"reverse %a: {TX} along 1", TX, X[:, ::-1]),
        (f"slice %a: {TX} from 1 upto 1", "<1 x 3 x 4 x f32>", X[1:2]),
        (f"slice %a: {TX} from 0 upto 1", TX, X),
        (f"padShape %a: {TX} at 0", "<1 x 2 x 3 x 4 x f32>", X[None]),
        (f"padShape %a: {TX} at 3", "<2 x 3 x 4 x 1 x f32>", X[..., None]),
        (f"shapeCast %a: {TX} to 6 x 4", "<6 x 4 x f32>", X.reshape(6, 4)),
        (f"shapeCast %a: {TX} to 24", "<24 x f32>", X.reshape(24)),
        (f"rank of %a: {TX}", "i64", 3),
        (f"shape of %a: {TX}", "<3 x i64>", [2, 3, 4]),
        (f"unitCount of %a: {TX}", "i64", 24),
        (
            f"concatenate %a: {TX}, %a: {TX}, %a: {TX} along 1",
            "<2 x 9 x 4 x f32>",
            np.concatenate([X, X, X], axis=1),
        ),
    ],
)
def test_shape_instructions(line, result, want):
    got = run_op(line, [TX], result, [X])
    check(got, want, "i64" if "i64" in result else "f32")


def test_squeeze_and_scalar_shape_cast():
    x = np.ones((2, 1, 3), np.float32)
    got = run_op(
        "squeezeShape %a: <2 x 1 x 3 x f32> at 1", ["<2 x 1 x 3 x f32>"], "<2 x 3 x f32>", [x]
    )
    check(got, np.ones((2, 3)), "f32")
    got = run_op("shapeCast %a: <1 x 1 x f32> to scalar", ["<1 x 1 x f32>"], "f32", [[[2.5]]])
    check(got, 2.5, "f32")
    check(run_op("rank of %a: f32", ["f32"], "i64", [1.0]), 0, "i64")


# Random and literals -----------------------------------------------------------------------


def test_random_ranges_and_seed():
    m = module("""
    func @f: () -> (<200 x f32>, <200 x i32>, f64) {
    'entry():
        %u = random 200 from -1: f32 upto 2: f32
        %i = random 200 from 3: i32 upto 7: i32
        %s = random scalar from 0.5: f64 upto 0.75: f64
        %r = literal (%u: <200 x f32>, %i: <200 x i32>, %s: f64): (<200 x f32>, <200 x i32>, f64)
        return %r: (<200 x f32>, <200 x i32>, f64)
    }
    """)
    u, i, s = Interpreter(m, seed=1).run("f", [])
    assert u.dtype == np.float32 and u.min() >= -1 and u.max() < 2 and u.std() > 0.5
    assert i.dtype == np.int32 and set(np.unique(i)) == {3, 4, 5, 6}
    assert s.shape == () and 0.5 <= s < 0.75
    again = Interpreter(m, seed=1).run("f", [])
    np.testing.assert_array_equal(again[0], u)
    interp = Interpreter(m, seed=1)
    assert not np.array_equal(interp.run("f", [])[0], interp.run("f", [])[0])


def test_literals():
    m = module("""
    struct $P {
        #a: f32
        #b: <2 x i32>
    }

    func @f: (f32) -> (<2 x 3 x f32>, <2 x i64>, <2 x 2 x f32>, $P, [2 x f32], (f32, bool)) {
    'entry(%x: f32):
        %s = literal 1.5: <2 x 3 x f32>
        %z = literal zero: <2 x i64>
        %t = literal <<1: f32, 2: f32>: <2 x f32>, <%x: f32, %x: f32>: <2 x f32>>: <2 x 2 x f32>
        %p = literal {#a = %x: f32, #b = <3: i32, 4: i32>: <2 x i32>}: $P
        %a = literal [%x: f32, 0.5: f32]: [2 x f32]
        %u = literal undefined: (f32, bool)
        %r = literal (%s: <2 x 3 x f32>, %z: <2 x i64>, %t: <2 x 2 x f32>, %p: $P, %a: [2 x f32], %u: (f32, bool)): (<2 x 3 x f32>, <2 x i64>, <2 x 2 x f32>, $P, [2 x f32], (f32, bool))
        return %r: (<2 x 3 x f32>, <2 x i64>, <2 x 2 x f32>, $P, [2 x f32], (f32, bool))
    }
    """)  # noqa: E501
    s, z, t, p, a, u = run_function(m, "f", [9.0])
    check(s, np.full((2, 3), 1.5), "f32")
    check(z, np.zeros(2), "i64")
    check(t, [[1, 2], [9, 9]], "f32")
    assert set(p) == {"a", "b"}
    check(p["a"], 9.0, "f32")
    check(p["b"], [3, 4], "i32")
    assert isinstance(a, list) and [float(v) for v in a] == [9.0, 0.5]
    assert float(u[0]) == 0.0 and u[1].dtype == np.bool_
    s[0, 0] = 7  # results are fresh arrays the caller may change
    again = run_function(m, "f", [9.0])
    assert again[0][0, 0] == 1.5


def test_not_of_a_scalar_is_a_tensor():
    m = module("""
        func @f: (bool) -> bool {
        'entry(%a: bool):
            %0.0 = not %a: bool
            return %0.0: bool
        }
        """)
    out = run_function(m, "f", [np.array(True)])
    assert isinstance(out, np.ndarray) and out.shape == () and not out


ELEMENTWISE = sorted(name for name, op in OPS.items() if op.elementwise)


def test_the_elementwise_instructions_are_the_elementwise_families():
    from dlvm.ir.ops import BINARY, COMPARE, LOGIC, SHIFTS, UNARY_FLOAT, UNARY_NUMERIC

    families = [*UNARY_FLOAT, *UNARY_NUMERIC, *BINARY, *COMPARE, *LOGIC, "not", *SHIFTS, "select"]
    assert sorted(families) == ELEMENTWISE


def _example_function(name: str, rows: int) -> str:
    """The example of tests/unit/ir_examples.py as a function of %m, %row, %flags and %bits
    whose operands of 2 rows have `rows` rows, returning %r."""
    from ir_examples import EXAMPLES

    line = EXAMPLES[name].replace("<2 x 3 x", f"<{rows} x 3 x")
    params = (
        f"%m: <{rows} x 3 x f32>, %row: <1 x 3 x f32>, %flags: <{rows} x 3 x bool>, "
        f"%bits: <{rows} x 3 x i32>"
    )
    types = ", ".join(p.split(": ")[1] for p in params.split(", "))
    probe = module(f"func @f: ({types}) -> () {{\n'entry({params}):\n  {line}\n  return\n}}")
    result = probe.functions[0].blocks[0].instructions[0].type
    return (
        f"func @f: ({types}) -> {result} {{\n'entry({params}):\n  {line}\n  return %r: {result}\n}}"
    )


@pytest.mark.parametrize("name", ELEMENTWISE)
def test_an_elementwise_instruction_computes_each_row_alone(name):
    """What OpDef.elementwise promises compute generation and the code generator: each
    element of the result comes from the operands' elements at its index, so the instruction
    applied to one row of its operands (a broadcast row stays whole) gives that row."""
    rng = np.random.default_rng(7)
    m = rng.uniform(0.1, 0.9, (2, 3)).astype(np.float32)
    row = rng.uniform(0.1, 0.9, (1, 3)).astype(np.float32)
    flags = rng.uniform(size=(2, 3)) < 0.5
    bits = rng.integers(-40, 40, (2, 3)).astype(np.int32)
    whole = module(_example_function(name, 2))
    got = run_function(whole, "f", [m, row, flags, bits])
    one_row = module(_example_function(name, 1))
    for i in range(2):
        one = run_function(one_row, "f", [m[i : i + 1], row, flags[i : i + 1], bits[i : i + 1]])
        np.testing.assert_array_equal(one, got[i : i + 1])
