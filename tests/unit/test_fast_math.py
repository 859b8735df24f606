"""`--fast-math` (dlvm/codegen/fast_math.py): the f32 exp, tanh, sigmoid (nn's, through tanh)
and log of a library built with it, against the interpreter in float64 over dense sweeps, within
the bounds docs/ir.md documents ("Fast math"), and the special values right; built for this CPU
and for x86-64-v3 (no AVX-512), whose kernels LLVM vectorises differently."""

from __future__ import annotations

import numpy as np
import pytest
from telhelp import compile_snippet

import dlvm
from dlvm.codegen.build import build_library
from dlvm.interp import run_function

N = 1 << 20
# The documented bounds: relative error for exp (normal results), tanh and log; sigmoid's is
# absolute (0.5·tanh(x/2) + 0.5 loses its relative digits for x ≪ 0 in either mode).
EXP_REL, TANH_REL, LOG_REL, SIGMOID_ABS = 2e-6, 2e-6, 2e-6, 5e-7

SOURCE = f"""module fast
use nn
dim N = {N}
export def exp_(x: [N]) -> [N] = exp(x)
export def tanh_(x: [N]) -> [N] = tanh(x)
export def sigmoid_(x: [N]) -> [N] = sigmoid(x)
export def log_(x: [N]) -> [N] = log(x)
"""


@pytest.fixture(scope="module", params=["native", "x86-64-v3"])
def fast(request, tmp_path_factory):
    """The compiled snippet (for the interpreter) and its library built with fast math for the
    CPU `request.param`."""
    directory = tmp_path_factory.mktemp("fast")
    compiled = compile_snippet(str(directory), SOURCE, "fast")
    path = directory / "fast.so"
    build_library(compiled.module, compiled.spec, path, cpu=request.param, fast_math=True)
    with dlvm.load(path) as library:
        yield compiled, library


def measured(fast, name: str, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The library's result on x and the interpreter's in float64."""
    compiled, library = fast
    want = np.asarray(run_function(compiled.module, name, [x.astype(np.float64)], float64=True))
    return np.asarray(getattr(library, name)(x)).astype(np.float64), want


def relative(got: np.ndarray, want: np.ndarray) -> float:
    return float((np.abs(got - want) / np.abs(want)).max())


@pytest.mark.parametrize("lo, hi", [(-87.3, 88.7), (-1.0, 1.0), (-1e-6, 1e-6)])
def test_exp_within_its_bound(fast, lo, hi):
    x = np.linspace(lo, hi, N, dtype=np.float32)
    assert relative(*measured(fast, "exp_", x)) <= EXP_REL


@pytest.mark.parametrize("lo, hi", [(-20.0, 20.0), (-1.0, 1.0), (1e-30, 1e-3)])
def test_tanh_within_its_bound(fast, lo, hi):
    x = np.linspace(lo, hi, N, dtype=np.float32)
    got, want = measured(fast, "tanh_", x)
    nonzero = want != 0
    assert relative(got[nonzero], want[nonzero]) <= TANH_REL


def test_tanh_saturates_to_one_exactly_and_never_passes_it(fast):
    # Past x = 7.9935 x² is clamped and x·P/Q rises above 1; the result is clamped to ±1.
    x = np.concatenate([np.linspace(7.9, 8.1, N // 2), -np.geomspace(1.0, 3e38, N // 2)])
    got, want = measured(fast, "tanh_", x.astype(np.float32))
    assert np.abs(got).max() == 1.0 and relative(got, want) <= TANH_REL
    past = np.abs(x) >= 8.0
    np.testing.assert_array_equal(got[past], np.sign(x[past]))


def test_sigmoid_within_its_bound(fast):
    x = np.linspace(-30.0, 30.0, N, dtype=np.float32)
    got, want = measured(fast, "sigmoid_", x)
    assert np.abs(got - want).max() <= SIGMOID_ABS


@pytest.mark.parametrize("lo, hi", [(1e-38, 1e-30), (0.5, 2.0), (0.99, 1.01), (1.0, 3e38)])
def test_log_within_its_bound(fast, lo, hi):
    x = np.geomspace(lo, hi, N, dtype=np.float32)
    got, want = measured(fast, "log_", x)
    nonzero = want != 0
    assert relative(got[nonzero], want[nonzero]) <= LOG_REL


def test_special_values(fast):
    _, library = fast
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 100.0, -100.0, -110.0, 88.72, -1.0, 1e-40]
    x = np.zeros(N, np.float32)
    x[: len(special)] = special
    e, t, s, lg = (np.asarray(getattr(library, f)(x))[: len(special)]
                   for f in ("exp_", "tanh_", "sigmoid_", "log_"))  # fmt: skip
    np.testing.assert_array_equal(e[[0, 1, 2, 3, 5, 7]], [1, 1, np.inf, 0, np.inf, 0])
    assert 0 < e[6] < 1e-43 and np.isfinite(e[8]) and e[8] > 3.3e38  # subnormal; not overflowed
    np.testing.assert_array_equal(t[[0, 2, 3, 5, 6]], [0, 1, -1, 1, -1])
    assert np.signbit(t[1]) and not np.signbit(t[0])
    np.testing.assert_array_equal(s[[2, 3, 5, 6]], [1, 0, 1, 0])
    assert np.isnan(e[4]) and np.isnan(t[4]) and np.isnan(s[4]) and np.isnan(lg[4])
    np.testing.assert_array_equal(
        lg[[0, 1, 2, 5]], [-np.inf, -np.inf, np.inf, np.log(np.float32(100))]
    )
    assert np.isnan(lg[3]) and np.isnan(lg[9])
    assert abs(lg[10] / np.log(1e-40) - 1) <= LOG_REL  # a subnormal input


def test_the_flag_is_documented_and_part_of_the_cache_key():
    from click.testing import CliRunner

    from telc.cli import cli
    from telc.driver import BuildOptions

    for command in ("build", "run"):
        text = CliRunner().invoke(cli, [command, "--help"]).stdout
        assert "--fast-math" in text and "2e-6" in text, command
    assert "--fast-math" in BuildOptions(fast_math=True).flags()
    assert "--fast-math" not in BuildOptions().flags()


def test_without_the_flag_no_kernel_is_scheduled_fastmath(tmp_path):
    from dlvm.codegen.build import schedule

    compiled = compile_snippet(str(tmp_path), SOURCE, "fast")
    plain = schedule(compiled.module)
    assert all(f.schedule is None or f.schedule.get("fastmath") == 0 for f in plain.functions)
