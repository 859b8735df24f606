"""Convolutions with fewer images than threads share blocks of each image's output rows
(compute-scheduling's `split`): the schedules, and the compiled results against the
interpreter with 1, 2 and more threads than shares, on the product paths (with an epilogue)
and the depthwise loop."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from convlib import out_shape, ty
from irlib import ir_library, run_elsewhere

from dlvm.interp import run_function
from dlvm.ir import parse_module
from dlvm.transforms.compute_generation import ComputeGeneration
from dlvm.transforms.compute_scheduling import ComputeScheduling, conv_split

# (name, input shape, kernel shape, options, the schedule's split)
CASES = [
    ("b1-3x3", (1, 32, 16, 16), (32, 32, 3, 3), "padding (1, 1), (1, 1)", 8),
    # 15 output rows: blocks of 3 rows, 5 a image; 13 columns leave a partial strip.
    ("b2-odd", (2, 24, 15, 13), (20, 24, 3, 3), "padding (1, 1), (1, 1)", 5),
    ("b1-strided", (1, 16, 29, 31), (24, 16, 3, 3), "strides 2, 2 padding (1, 1), (1, 1)", 15),
    ("b1-depthwise", (1, 64, 40, 40), (64, 1, 3, 3), "padding (1, 1), (1, 1) groups 64", 8),
    ("b1-3-D", (1, 8, 6, 10, 12), (16, 8, 3, 3, 3), "padding (1, 1), (1, 1), (1, 1)", 10),
    # A kernel's gradient's shape (conv_kernel_grad's product, its epilogue applied as C is
    # copied out): 5 output rows of one each, shares that start inside an image.
    ("b1-along-taps", (1, 8, 30, 30), (16, 8, 26, 26), "", 5),
]


def function(name: str, x: tuple, k: tuple, options: str) -> str:
    """relu(convolve(x, k) + b), b broadcast over the batch and positions."""
    shape = out_shape(x, k, options)
    o, b = ty(shape, "f32"), ty((1, shape[1], *(1,) * (len(shape) - 2)), "f32")
    return (
        f"func @{name}: ({ty(x, 'f32')}, {ty(k, 'f32')}, {b}) -> {o} {{\n"
        f"'entry(%x: {ty(x, 'f32')}, %k: {ty(k, 'f32')}, %b: {b}):\n"
        f"    %c = convolve %x: {ty(x, 'f32')} kernel %k: {ty(k, 'f32')} {options}\n"
        f"    %s = add %c: {o}, %b: {b}\n    %r = max %s: {o}, 0: f32\n    return %r: {o}\n}}\n"
    )


def symbol(name: str) -> str:
    return "threads_" + name.replace("-", "_")


TEXT = 'module "threads"\nstage optimizable\n\n' + "\n".join(
    function(symbol(name), x, k, options) for name, x, k, options, _ in CASES
)


def inputs(index: int) -> list[np.ndarray]:
    _, x, k, options, _ = CASES[index]
    rng = np.random.default_rng(index)
    bias = (1, k[0], *(1,) * (len(x) - 2))
    return [rng.uniform(-2, 2, s).astype(np.float32) for s in (x, k, bias)]


def test_the_split_is_the_fewest_blocks_of_rows_that_give_eight_shares():
    assert conv_split(1, 16) == 8 and conv_split(2, 16) == 4 and conv_split(3, 16) == 4
    assert conv_split(2, 15) == 5 and conv_split(1, 7) == 7 and conv_split(8, 16) == 1
    module = parse_module(TEXT, "threads.dl")
    ComputeGeneration().run(module)
    ComputeScheduling().run(module)
    kernels = {f.name: f for f in module.functions if f.compute}
    for name, *_, split in CASES:
        sched = kernels[symbol(name) + "_k"].schedule
        assert sched is not None and sched.get("parallel") == 1, name
        assert sched.get("split") == split, (name, str(sched))


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    return ir_library(TEXT, "threads", tmp_path_factory.mktemp("threads"))


@pytest.mark.parametrize("threads", [1, 2, 13])
def test_shared_rows_compute_what_the_interpreter_does(library, tmp_path, threads):
    """Each thread count in a process of its own (the runtime reads DLRT_NUM_THREADS once)."""
    reference = parse_module(TEXT, "threads.dl")
    calls = {symbol(c[0]): inputs(n) for n, c in enumerate(CASES)}
    env = {**os.environ, "DLRT_NUM_THREADS": str(threads)}
    got = run_elsewhere(library, calls, tmp_path, env)
    names = list(calls)
    for n, name in enumerate(names):
        want = np.asarray(run_function(reference, name, inputs(n)))
        scale = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-5 * scale, err_msg=name)
