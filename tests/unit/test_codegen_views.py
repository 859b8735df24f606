"""Kernels that read a chain of transposes and changes of shape (KernelGen.view: in place
through its strides, the base's index axis by axis, or unravelled step by step) against the
interpreter, for random chains over an argument and over a computed value, elementwise and
reduced, on the CPU and in the CUDA emulator (whose kernels index by flat offsets)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from cuda_emulator import EmulatedInterpreter, Emulator
from fuzzing import fuzz_settings
from hypothesis import given
from hypothesis import strategies as st
from irlib import ir_library
from viewchains import Step, chains, shape_after

import dlvm
from dlvm.codegen.build import schedule
from dlvm.interp import run_function
from dlvm.ir import parse_module

Chain = tuple[tuple[int, ...], list[Step]]
DTYPES = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64}


def _t(shape: tuple[int, ...], dt: str) -> str:
    return "<" + " x ".join([*map(str, shape), dt]) + ">" if shape else dt


def _steps(src: str, shape: tuple[int, ...], steps: list[Step], dt: str) -> list[str]:
    """The chain's instructions from %src; the last is %v."""
    lines = []
    for k, s in enumerate(steps):
        dst = "v" if k == len(steps) - 1 else f"v{k}"
        if s == "t":
            lines.append(f"%{dst} = transpose %{src}: {_t(shape, dt)}")
            shape = shape[::-1]
        else:
            lines.append(f"%{dst} = shapeCast %{src}: {_t(shape, dt)} to {' x '.join(map(str, s))}")
            shape = s  # type: ignore[assignment]
        src = dst
    return lines


def _functions(i: int, chain: Chain, dt: str) -> list[str]:
    """Three functions of a chain: over an argument, over a sum (the chain fused after it), and
    a sum along the view's last axis."""
    start, steps = chain
    end = shape_after(start, steps)
    s, r = _t(start, dt), _t(end, dt)
    zero, one = ("0.0", "1.0") if dt[0] == "f" else ("0", "1")
    reduced = _t(end[:-1], dt)
    bodies = {
        f"arg{i}": (r, [*_steps("a", start, steps, dt), f"%r = multiply %v: {r}, %v: {r}"]),
        f"sum{i}": (r, ["%c = add %a: " + s + ", %b: " + s, *_steps("c", start, steps, dt),
                        f"%r = subtract %v: {r}, {one}: {dt}"]),  # fmt: skip
        f"red{i}": (reduced, ["%c = multiply %a: " + s + ", %b: " + s,
                              *_steps("c", start, steps, dt),
                              f"%r = reduce %v: {r} by add init {zero}: {dt} along {len(end) - 1}"]),
    }  # fmt: skip
    out = []
    for name, (result, body) in bodies.items():
        out += [f"func @{name}: ({s}, {s}) -> {result} {{", f"'entry(%a: {s}, %b: {s}):"]
        out += ["    " + line for line in body] + [f"    return %r: {result}", "}", ""]
    return out


def _module(cases: list[tuple[Chain, str]]) -> str:
    lines = ['module "views"', "stage optimizable", ""]
    for i, (chain, dt) in enumerate(cases):
        lines += _functions(i, chain, dt)
    return "\n".join(lines)


def _inputs(chain: Chain, dt: str, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    if dt[0] == "i":
        return [rng.integers(-9, 9, chain[0]).astype(DTYPES[dt]) for _ in range(2)]
    return [rng.uniform(-2, 2, chain[0]).astype(DTYPES[dt]) for _ in range(2)]


def _check(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    if want.dtype.kind == "i":
        np.testing.assert_array_equal(got, want)
    else:  # a sum in another order
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


CASES = st.lists(st.tuples(chains(), st.sampled_from(sorted(DTYPES))), min_size=6, max_size=6)


@fuzz_settings(12, 200)
@given(cases=CASES)
def test_random_chains_compute_as_the_interpreter(tmp_path_factory, cases) -> None:
    text = _module(cases)
    reference = parse_module(text, "views.dl")
    directory: Path = tmp_path_factory.mktemp("views")
    with dlvm.load(ir_library(text, "views", directory)) as lib:
        for i, (chain, dt) in enumerate(cases):
            inputs = _inputs(chain, dt, i)
            for name in (f"arg{i}", f"sum{i}", f"red{i}"):
                want = np.asarray(run_function(reference, name, inputs))
                _check(np.asarray(getattr(lib, name)(*inputs)), want)


@fuzz_settings(4, 80)
@given(cases=CASES)
def test_random_chains_compute_as_the_interpreter_in_cuda_kernels(tmp_path_factory, cases) -> None:
    text = _module(cases)
    reference = parse_module(text, "views.dl")
    module = schedule(parse_module(text, "views.dl"), cuda=True)
    emulator = Emulator(module, tmp_path_factory.mktemp("views-cuda"))
    for i, (chain, dt) in enumerate(cases):
        inputs = _inputs(chain, dt, i)
        for name in (f"arg{i}", f"sum{i}", f"red{i}"):
            want = np.asarray(run_function(reference, name, inputs))
            _check(np.asarray(EmulatedInterpreter(module, emulator).run(name, inputs)), want)
