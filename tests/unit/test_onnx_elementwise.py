"""The importer's elementwise operators against ONNX's reference evaluator (tests/unit/onnxlib.py):
arithmetic with broadcasting, float functions, activations, comparisons, Where, Clip, Cast."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

from onnxlib import check, normal, positive, single  # noqa: E402

X = normal(2, 3, 4)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Mean"])
def test_binary_broadcasts_across_ranks(op):
    # [2 x 3 x 4] with [3 x 1]: NumPy's rank promotion, which the IR makes explicit.
    other = positive(3, 1, seed=1)
    check(single(op, {"a": X, "b": other}), {"a": X, "b": other})


def test_binary_with_a_constant_scalar_operand():
    m = single("Mul", {"a": X}, {"c": np.array([2.5], np.float32)})
    imp = check(m, {"a": X})
    assert imp.params[0].name == "c"  # a float initializer stays a parameter


def test_pow_by_two_and_by_a_tensor():
    base = positive(2, 3)
    square = single("Pow", {"a": base}, {"two": np.array(2, np.int64)})
    imp = check(square, {"a": base})
    assert imp.function.blocks[0].instructions[0].opcode == "multiply"
    exp = normal(2, 3, seed=3)
    check(single("Pow", {"a": base, "b": exp}), {"a": base, "b": exp})


UNARY = ["Neg", "Abs", "Exp", "Tanh", "Sigmoid", "Relu", "Softplus", "Erf", "Identity",
         "Sin", "Cos", "Atan", "Sinh", "Floor", "Ceil", "Sign", "Softsign"]  # fmt: skip


@pytest.mark.parametrize("op", UNARY)
def test_unary(op):
    check(single(op, {"x": X}), {"x": X})


@pytest.mark.parametrize("op", ["Log", "Sqrt", "Reciprocal"])
def test_unary_of_positive_numbers(op):
    x = positive(3, 4)
    check(single(op, {"x": x}), {"x": x})


@pytest.mark.parametrize(
    "op, attrs",
    [
        ("LeakyRelu", {"alpha": 0.1}),
        ("Elu", {"alpha": 0.7}),
        ("Selu", {}),
        ("Celu", {"alpha": 2.0}),
        ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
        ("HardSwish", {}),
        ("Gelu", {}),
        ("Gelu", {"approximate": "tanh"}),
        ("Mish", {}),
    ],
)
def test_activations(op, attrs):
    check(single(op, {"x": X}, opset=20, **attrs), {"x": X})


def test_prelu_slope_per_channel():
    x = normal(2, 3, 4, 4)
    slope = positive(3, 1, 1, seed=2)
    check(single("PRelu", {"x": x}, {"slope": slope}), {"x": x})


def test_f64_is_exact():
    x = normal(3, 4, dtype=np.float64)
    check(single("Tanh", {"x": x}), {"x": x}, rtol=1e-12)


@pytest.mark.parametrize("op", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
def test_comparisons_give_bools(op):
    a, b = np.round(X), np.round(normal(4, seed=5))
    check(single(op, {"a": a, "b": b}), {"a": a, "b": b})


def test_where_broadcasts_all_three():
    cond = normal(3, 1, seed=4) > 0
    b = normal(4, seed=6)
    check(single("Where", {"c": cond, "a": X, "b": b}), {"c": cond, "a": X, "b": b})


def test_clip_with_inputs_and_with_attributes():
    bounds = {"lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32)}
    check(single("Clip", {"x": X}, bounds, opset=13), {"x": X})
    check(single("Clip", {"x": X}, opset=10, min=-0.2, max=0.3), {"x": X})
    only_max = single("Clip", {"x": X}, opset=13)
    check(only_max, {"x": X})


def test_cast_between_float_types_and_from_bool():
    check(single("Cast", {"x": X}, to=onnx.TensorProto.DOUBLE), {"x": X})
    check(single("Cast", {"x": X}, to=onnx.TensorProto.FLOAT16), {"x": X}, rtol=1e-3)
    flags = X > 0
    check(single("Cast", {"x": flags}, to=onnx.TensorProto.FLOAT), {"x": flags})


def test_cast_across_bases_truncates_saturates_and_tests_nonzero():
    # In range only: past it NumPy's (the reference's) result is undefined; test_convert.py
    # checks the IR's saturation.
    x = np.array([[2.5, -2.7, 0.0, -0.0, 100.7, 1.5]], np.float32)
    for to in (onnx.TensorProto.INT32, onnx.TensorProto.INT8, onnx.TensorProto.BOOL):
        check(single("Cast", {"x": x}, to=to), {"x": x})
    i = np.array([[16777217, -3, 300, 0]], np.int64)
    for to in (onnx.TensorProto.FLOAT, onnx.TensorProto.INT32, onnx.TensorProto.BOOL):
        check(single("Cast", {"x": i}, to=to), {"x": i})


@pytest.mark.parametrize("base, exponent", [(np.float32, np.int64), (np.int32, np.float32)])
def test_pow_with_an_integer_and_a_float_operand(base, exponent):
    a = np.array([[1, 2, 3, -4]], base)
    b = np.array([[2, 3, 0, 3]], exponent)
    check(single("Pow", {"a": a, "b": b}, opset=15), {"a": a, "b": b})


def test_cast_like_takes_the_type_of_its_second_input():
    like = np.zeros((1,), np.float64)
    check(single("CastLike", {"x": X, "like": like}, opset=15), {"x": X, "like": like})


def test_special_values_and_thresholds():
    x = np.array([1.0, np.inf, -np.inf, np.nan, -2.0], np.float32)
    check(single("IsNaN", {"x": x}, opset=13), {"x": x})
    check(single("IsInf", {"x": x}, opset=13), {"x": x})
    check(single("IsInf", {"x": x}, opset=13, detect_positive=0), {"x": x})
    check(single("ThresholdedRelu", {"x": X}, alpha=0.4), {"x": X})


@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_takes_the_sign_of_the_divisor_or_of_the_dividend(fmod):
    a = np.array([[7, -7, 7, -7, 6]], np.int32)
    b = np.array([[3, 3, -3, -3, 3]], np.int32)
    check(single("Mod", {"a": a, "b": b}, opset=13, fmod=fmod), {"a": a, "b": b})
    if fmod:
        x, y = normal(2, 3), positive(2, 3, seed=1)
        check(single("Mod", {"a": x, "b": y}, opset=13, fmod=1), {"a": x, "b": y})


def test_mod_of_floats_with_the_divisors_sign_is_refused():
    from dlvm.diagnostics import DiagnosticError
    from dlvm.onnx import import_model

    x, y = normal(2, 3), positive(2, 3, seed=1)
    with pytest.raises(DiagnosticError, match="not supported: fmod=0 on floats"):
        import_model(single("Mod", {"a": x, "b": y}, opset=13))
