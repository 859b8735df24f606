"""`convert` across every pair of bases and widths: the interpreter against NumPy (where NumPy
defines the result) and against values written out by hand (rounding, halves, saturation, NaN),
and one compiled library against the interpreter on the same inputs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from irlib import ir_library

import dlvm
from dlvm.interp import run_function
from dlvm.ir import parse_module

NP = {"bool": np.bool_, "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
      "f16": np.float16, "f32": np.float32, "f64": np.float64}  # fmt: skip
TYPES = list(NP)
PAIRS = [(s, d) for s, d in itertools.product(TYPES, TYPES) if s != d]

# Each source type's inputs: signs, halves, values past every narrower range, NaN and infinities.
_FLOATS = [0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.7, 2.7, 127.9, 128.5, -129.0, 300.0,
           -300.0, 65504.0, 3e9, -3e9, 1e19, -1e19, np.nan, np.inf, -np.inf]  # fmt: skip
_INTS = [0, 1, -1, 127, -128, 255, 300, -300, 32767, -32769, 65505, 2**24 + 1, 2**24 + 3,
         -(2**24 + 1), 2**31 - 1, -(2**31), 2**53 + 1, 2**63 - 1, -(2**63)]  # fmt: skip


def inputs(src: str) -> np.ndarray:
    if src == "bool":
        return np.array([True, False, True], np.bool_)
    if src[0] == "f":
        with np.errstate(over="ignore"):
            return np.array(_FLOATS, np.float64).astype(NP[src])
    return np.array(_INTS, np.int64).astype(NP[src])  # wraps into the narrower types


def numpy_reference(x: np.ndarray, dst: str) -> np.ndarray:
    """The defined result, by NumPy: astype, except float to integer, which NumPy leaves
    undefined past the range: truncated toward zero, saturated, NaN to 0."""
    to = np.dtype(NP[dst])
    if to.kind == "b":
        return x != 0
    if x.dtype.kind == "f" and to.kind == "i":
        info = np.iinfo(to)
        t = np.trunc(x.astype(np.float64))
        t = np.where(np.isnan(t), 0, t)
        return np.array([info.max if v >= info.max else info.min if v <= info.min else int(v)
                         for v in t], to)  # fmt: skip
    with np.errstate(over="ignore"):
        return x.astype(to)


def module_text() -> str:
    out = ['module "convert"', "stage raw", ""]
    for i, (src, dst) in enumerate(PAIRS):
        n = len(inputs(src))
        out += [
            f"func @f{i}: (<{n} x {src}>) -> <{n} x {dst}> {{",
            f"'entry(%a: <{n} x {src}>):",
            f"    %r = convert %a: <{n} x {src}> to {dst}",
            f"    return %r: <{n} x {dst}>",
            "}",
            "",
        ]
    return "\n".join(out)


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    text = module_text()
    with dlvm.load(ir_library(text, "convert", tmp_path_factory.mktemp("convert"))) as lib:
        yield lib, parse_module(text, "convert.dl")


def same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)  # NaN equals NaN here


@pytest.mark.parametrize("index, pair", list(enumerate(PAIRS)), ids=[f"{s}-{d}" for s, d in PAIRS])
def test_interpreter_and_compiled_agree_with_numpy(library, index, pair):
    lib, module = library
    src, dst = pair
    x = inputs(src)
    want = numpy_reference(x, dst)
    same(np.asarray(run_function(module, f"f{index}", [x])), want)
    same(np.asarray(getattr(lib, f"f{index}")(x)), want)


def convert(x: list, src: str, dst: str) -> np.ndarray:
    """`convert x to dst` through the interpreter."""
    n = len(x)
    text = f"""module "one"
stage raw

func @f: (<{n} x {src}>) -> <{n} x {dst}> {{
'entry(%a: <{n} x {src}>):
    %r = convert %a: <{n} x {src}> to {dst}
    return %r: <{n} x {dst}>
}}
"""
    return np.asarray(run_function(parse_module(text), "f", [np.array(x, NP[src])]))


def test_floats_to_integers_truncate_saturate_and_send_nan_to_zero():
    got = convert([2.5, -2.7, 0.99, np.nan, 3e9, -3e9, np.inf, -np.inf], "f32", "i32")
    assert got.tolist() == [2, -2, 0, 0, 2**31 - 1, -(2**31), 2**31 - 1, -(2**31)]
    assert convert([300.0, -300.0, 127.9], "f16", "i8").tolist() == [127, -128, 127]
    assert convert([1e19, -1e19], "f64", "i64").tolist() == [2**63 - 1, -(2**63)]


def test_integers_to_floats_round_to_nearest_even():
    assert convert([2**24 + 1, 2**24 + 3], "i64", "f32").tolist() == [2**24, 2**24 + 4]
    assert convert([2049, 2051, 65520], "i32", "f16").tolist() == [2048, 2052, np.inf]


def test_bools_and_narrowing():
    assert convert([True, False], "bool", "f16").tolist() == [1.0, 0.0]
    assert convert([-0.0, np.nan, 0.5], "f32", "bool").tolist() == [False, True, True]
    assert convert([0, -3], "i8", "bool").tolist() == [False, True]
    assert convert([300, -129], "i32", "i8").tolist() == [44, 127]  # wraps


NARROW = [("f32", "i8"), ("f16", "i16"), ("f64", "i8")]


def test_floats_to_narrow_integers_a_vector_at_a_time(tmp_path):
    """Float to i8 and i16 on a vector of the special inputs (many times over, so the loop's
    vector body computes most of them) gives the same values, and f32 to i8 is converted a
    vector at a time (vcvttps2dq), not a lane at a time as `llvm.fptosi.sat` of an i8 is."""
    from dlvm.codegen.build import schedule
    from dlvm.codegen.llgen import compile_assembly

    n = 64 * len(_FLOATS)
    lines = ['module "narrow"', "stage raw", ""]
    for i, (src, dst) in enumerate(NARROW):
        lines += [f"func @g{i}: (<{n} x {src}>) -> <{n} x {dst}> {{",
                  f"'entry(%a: <{n} x {src}>):",
                  f"    %r = convert %a: <{n} x {src}> to {dst}",
                  f"    return %r: <{n} x {dst}>", "}", ""]  # fmt: skip
    text = "\n".join(lines)
    with dlvm.load(ir_library(text, "narrow", tmp_path)) as lib:
        for i, (src, dst) in enumerate(NARROW):
            x = np.tile(inputs(src), 64)
            same(np.asarray(getattr(lib, f"g{i}")(x)), numpy_reference(x, dst))
    cpu = "skylake-avx512"
    assert "vcvttps2dq" in compile_assembly(schedule(parse_module(text), cpu), cpu=cpu)
