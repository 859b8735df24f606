"""The accuracy dlvm/codegen/approx.py documents, measured through a compiled library: f32 exp
within 1 ulp (results ≥ 2^-126), tanh within 1.5 ulp and log within 1 ulp of float64 NumPy over
their whole ranges, and the special values (±0, ±inf, NaN, overflow, underflow) right."""

from __future__ import annotations

import numpy as np
import pytest
from irlib import ir_library, ulps

import dlvm

N = 1 << 21

TEXT = f"""module "approx"
stage optimizable

func @exp: (<{N} x f32>) -> <{N} x f32> {{
'entry(%x: <{N} x f32>):
    %r = exp %x: <{N} x f32>
    return %r: <{N} x f32>
}}

func @tanh: (<{N} x f32>) -> <{N} x f32> {{
'entry(%x: <{N} x f32>):
    %r = tanh %x: <{N} x f32>
    return %r: <{N} x f32>
}}

func @log: (<{N} x f32>) -> <{N} x f32> {{
'entry(%x: <{N} x f32>):
    %r = log %x: <{N} x f32>
    return %r: <{N} x f32>
}}
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    with dlvm.load(ir_library(TEXT, "approx", tmp_path_factory.mktemp("approx"))) as library:
        yield library


def sweep(lo: float, hi: float) -> np.ndarray:
    return np.linspace(lo, hi, N, dtype=np.float32)


@pytest.mark.parametrize("lo, hi", [(-87.3, 88.7), (-1.0, 1.0), (-1e-6, 1e-6)])
def test_exp_within_one_ulp(lib, lo, hi):
    x = sweep(lo, hi)
    assert ulps(lib.exp(x), np.exp(x.astype(np.float64))).max() <= 1.0


@pytest.mark.parametrize("lo, hi", [(-20.0, 20.0), (-0.7, 0.7), (-1e-4, 1e-4)])
def test_tanh_within_one_and_a_half_ulp(lib, lo, hi):
    x = sweep(lo, hi)
    assert ulps(lib.tanh(x), np.tanh(x.astype(np.float64))).max() <= 1.5


def test_special_values(lib):
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 100.0, -100.0, 88.8, -88.0],
                       np.float32)  # fmt: skip
    x = np.zeros(N, np.float32)
    x[: len(special)] = special
    e, t = lib.exp(x)[: len(special)], lib.tanh(x)[: len(special)]
    np.testing.assert_array_equal(
        e[[0, 1, 2, 3, 5, 6, 7, 8]], [1, 1, np.inf, 0, np.inf, 0, np.inf, 0]
    )
    assert np.isnan(e[4]) and np.isnan(t[4])
    np.testing.assert_array_equal(t[[0, 2, 3, 5, 6]], [0, 1, -1, 1, -1])
    assert np.signbit(t[1])


@pytest.mark.parametrize("lo, hi", [(1e-38, 1e-30), (0.5, 2.0), (0.99, 1.01), (1.0, 3e38)])
def test_log_within_one_ulp(lib, lo, hi):
    x = np.geomspace(lo, hi, N, dtype=np.float32)
    assert ulps(lib.log(x), np.log(x.astype(np.float64))).max() <= 1.0


def test_log_of_subnormals_and_special_values(lib):
    x = np.zeros(N, np.float32)
    special = np.array([1e-45, 1e-40, 0.0, -0.0, np.inf, -1.0, -np.inf, np.nan, 1.0], np.float32)
    x[: len(special)] = special
    got = lib.log(x)[: len(special)]
    exact = np.log(special[:2].astype(np.float64))
    assert ulps(got[:2], exact).max() <= 1.0
    np.testing.assert_array_equal(got[[2, 3, 4, 8]], [-np.inf, -np.inf, np.inf, 0.0])
    assert np.isnan(got[[5, 6, 7]]).all()
