"""The interpreter's bf16: ml_dtypes.bfloat16 arrays, every operation rounded to nearest even as
ml_dtypes rounds it; sums accumulated in f64 and products in f32, each rounded once."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from dlvm.interp import InterpreterError, run_function
from dlvm.interp.objects import np_dtype
from dlvm.ir import parse_module
from dlvm.ir.types import DataType

BF16 = np.dtype(ml_dtypes.bfloat16)


def run(body: str, params: str, result: str, *args):
    names = ", ".join(f"%{n}: {t}" for n, t in zip("abc", params.split(";")))
    src = (
        f'module "t"\nstage raw\n\nfunc @f: ({params.replace(";", ", ")}) -> {result} {{\n'
        f"'entry({names}):\n{body}\n}}\n"
    )
    return run_function(parse_module(src), "f", list(args))


def test_values_are_ml_dtypes_arrays():
    assert np_dtype(DataType.BF16) == BF16


@pytest.mark.parametrize("op", ["add", "multiply", "divide", "subtract"])
def test_binary_rounds_as_ml_dtypes(op):
    rng = np.random.default_rng(0)
    a = (rng.standard_normal(64) * 10).astype(BF16)
    b = (rng.standard_normal(64) + 3).astype(BF16)
    t = "<64 x bf16>"
    out = run(f"    %r = {op} %a: {t}, %b: {t}\n    return %r: {t}", f"{t};{t}", t, a, b)
    want = getattr(np, op)(a, b)
    assert out.dtype == BF16
    assert np.array_equal(out.view(np.uint16), want.view(np.uint16))


def test_cast_rounds_to_nearest_even_and_keeps_nan():
    # 1 + 2^-8 is halfway between 1 and 1 + 2^-7: even gives 1; 1 + 3·2^-8 rounds up to 1 + 2^-6.
    x = np.array([1 + 2**-8, 1 + 3 * 2**-8, np.nan, np.inf, -0.0, 3.4e38], np.float32)
    t, r = "<6 x f32>", "<6 x bf16>"
    out = run(f"    %r = dataTypeCast %a: {t} to bf16\n    return %r: {r}", t, r, x)
    assert out.dtype == BF16
    assert np.array_equal(out.view(np.uint16), x.astype(BF16).view(np.uint16))
    assert out[0] == 1 and out[1] == 1 + 2**-6 and np.isnan(out[2]) and np.isinf(out[5])


def test_sum_accumulates_in_f64_and_rounds_once():
    # In bf16 steps 256 + 1 is 256, so a sum rounded after every add of 1000 ones stops at 256.
    t = "<1000 x bf16>"
    body = f"    %r = reduce %a: {t} by add init 0: bf16 along 0\n    return %r: bf16"
    assert float(run(body, t, "bf16", np.ones(1000, BF16))) == 1000.0


def test_dot_accumulates_in_f32():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((3, 300)).astype(BF16), rng.standard_normal((300, 2)).astype(BF16)
    ta, tb, tr = "<3 x 300 x bf16>", "<300 x 2 x bf16>", "<3 x 2 x bf16>"
    out = run(f"    %r = dot %a: {ta}, %b: {tb}\n    return %r: {tr}", f"{ta};{tb}", tr, a, b)
    want = (a.astype(np.float32) @ b.astype(np.float32)).astype(BF16)
    assert np.array_equal(out.view(np.uint16), want.view(np.uint16))


def test_convert_to_integer_truncates_and_saturates():
    x = np.array([2.75, -2.75, 1e10, np.nan], BF16)
    t, r = "<4 x bf16>", "<4 x i32>"
    out = run(f"    %r = convert %a: {t} to i32\n    return %r: {r}", t, r, x)
    assert out.tolist() == [2, -2, 2**31 - 1, 0]


def test_argument_of_another_dtype_is_refused():
    t = "<2 x bf16>"
    with pytest.raises(InterpreterError, match="bf16"):
        run(f"    return %a: {t}", t, t, np.zeros(2, np.float16))
