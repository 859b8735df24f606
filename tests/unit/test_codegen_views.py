"""Kernels that read a chain of transposes and changes of shape (KernelGen.view: in place
through its strides, the base's index axis by axis, or unravelled step by step) against the
interpreter, for random chains over an argument and over a computed value, elementwise and
reduced, on the CPU and in the CUDA emulator (whose kernels index by flat offsets)."""

from __future__ import annotations

import re
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
from dlvm.codegen.llgen import compile_object
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
    last = len(end) - 1
    bodies = {
        f"arg{i}": (r, [*_steps("a", start, steps, dt), f"%r = multiply %v: {r}, %v: {r}"]),
        f"sum{i}": (r, ["%c = add %a: " + s + ", %b: " + s, *_steps("c", start, steps, dt),
                        f"%r = subtract %v: {r}, {one}: {dt}"]),
        f"red{i}": (reduced, ["%c = multiply %a: " + s + ", %b: " + s,
                              *_steps("c", start, steps, dt),
                              f"%r = reduce %v: {r} by add init {zero}: {dt} along {last}"]),
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


# PyTorch's multi-head attention as exported (bench/onnx_zoo.py's encoder, batch 8): the
# projection's bias added, then split into query, key and value, out[s, t, b, d] =
# mm[t, b, 64·s + d] + bias[64·s + d]; and the query split into 4 heads of 16 and scaled,
# out[b, h, t, d] = q[t, b, 16·h + d] / 2.
SPLITS = """module "splits"
stage raw

func @qkv: (<192 x f32>, <128 x 192 x f32>) -> <3 x 16 x 8 x 64 x f32> {
'entry(%bias: <192 x f32>, %mm: <128 x 192 x f32>):
    %v0 = shapeCast %mm: <128 x 192 x f32> to 16 x 8 x 192
    %v1 = shapeCast %bias: <192 x f32> to 1 x 1 x 192
    %v2 = add %v1: <1 x 1 x 192 x f32>, %v0: <16 x 8 x 192 x f32>
    %v3 = shapeCast %v2: <16 x 8 x 192 x f32> to 1 x 16 x 8 x 3 x 64
    %v4 = shapeCast %v3: <1 x 16 x 8 x 3 x 64 x f32> to 384 x 64
    %v5 = transpose %v4: <384 x 64 x f32>
    %v6 = shapeCast %v5: <64 x 384 x f32> to 64 x 1 x 128 x 3
    %v7 = transpose %v6: <64 x 1 x 128 x 3 x f32>
    %v8 = shapeCast %v7: <3 x 128 x 1 x 64 x f32> to 3 x 16 x 8 x 64
    return %v8: <3 x 16 x 8 x 64 x f32>
}

func @heads: (<16 x 8 x 64 x f32>) -> <8 x 4 x 16 x 16 x f32> {
'entry(%q: <16 x 8 x 64 x f32>):
    %v0 = shapeCast %q: <16 x 8 x 64 x f32> to 512 x 16
    %v1 = transpose %v0: <512 x 16 x f32>
    %v2 = shapeCast %v1: <16 x 512 x f32> to 16 x 16 x 32
    %v3 = transpose %v2: <16 x 16 x 32 x f32>
    %v4 = shapeCast %v3: <32 x 16 x 16 x f32> to 8 x 4 x 16 x 16
    %v5 = multiply %v4: <8 x 4 x 16 x 16 x f32>, 0.5: f32
    return %v5: <8 x 4 x 16 x 16 x f32>
}
"""


def test_attention_splits_are_vector_copies_without_division():
    """Each split's kernel reads its operand in place along the contiguous last axis: vector
    loads, no division or remainder of an index, no gather or scatter (which LLVM chose for
    the heads when it unrolled the loop of 16 and vectorised the next one out)."""
    _, text = compile_object(schedule(parse_module(SPLITS, "splits.dl")), cpu="x86-64-v3")
    bodies = re.findall(r'^define [^@]*@"?(k\.[^"(]*\.body)"?\((.*?)^}', text, re.M | re.S)
    assert len(bodies) == 2, [name for name, _ in bodies]
    for name, body in bodies:
        assert re.search(r"load <8 x float>", body), name
        assert not re.search(r"\b(udiv|urem|sdiv|srem)\b|masked\.(gather|scatter)", body), name
