"""A `convolve` with an elementwise epilogue fused into its kernel (compute generation: bias,
activation, a residual), against the interpreter in f32 and f64 on the product path
(dlvm.codegen.conv_gemm), the depthwise loop and the element loop (integers), with sizes that leave
partial tiles, strips and panels."""

from __future__ import annotations

import numpy as np
import pytest
from convlib import DTYPES, assert_close, out_shape, ty
from irlib import ir_library

import dlvm
from dlvm.interp import run_function
from dlvm.ir import parse_module
from dlvm.transforms.compute_generation import ComputeGeneration

# (name, input shape, kernel shape, options, epilogue): the epilogue's lines (a sigmoid as
# 1 / (1 + exp(−s))) read the
# convolution as %c, the bias [1 x C x 1 x 1] as %b, a tensor of the output's shape as %y, and
# end in %r.
CASES = [
    ("bias-relu", (2, 5, 9, 7), (6, 5, 3, 3), "padding (1, 1), (1, 1)",
     ["%s = add %c: {o}, %b: {b}", "%r = max %s: {o}, 0: {dt}"]),
    # 13 channels × 25 taps: two slices; 7 × 5 positions: a partial strip.
    ("bias-sigmoid-odd", (2, 13, 7, 5), (3, 13, 5, 5), "padding (2, 2), (2, 2)",
     ["%s = add %c: {o}, %b: {b}", "%n = negate %s: {o}", "%e = exp %n: {o}",
      "%d = add %e: {o}, 1: {dt}", "%r = divide 1: {dt}, %d: {o}"]),
    ("residual-relu", (2, 8, 6, 7), (8, 8, 3, 3), "padding (1, 1), (1, 1)",
     ["%s = add %c: {o}, %y: {o}", "%r = max %s: {o}, 0: {dt}"]),
    ("bias-relu-residual-strided", (1, 4, 11, 10), (7, 4, 3, 3),
     "strides 2, 2 padding (1, 1), (1, 1)",
     ["%s = add %c: {o}, %b: {b}", "%t = max %s: {o}, 0: {dt}", "%r = add %t: {o}, %y: {o}"]),
    # 22 × 21 positions: panels of 12 and 10 output rows.
    ("bias-tanh-panels", (1, 3, 22, 21), (9, 3, 3, 3), "padding (1, 1), (1, 1)",
     ["%s = add %c: {o}, %b: {b}", "%r = tanh %s: {o}"]),
    ("grouped-bias-relu", (2, 6, 7, 7), (8, 3, 3, 3), "padding (1, 1), (1, 1) groups 2",
     ["%s = add %c: {o}, %b: {b}", "%r = max %s: {o}, 0: {dt}"]),
    # 16 positions an image: five images side by side in one product (dlvm.codegen.conv_folded),
    # the epilogue applied as they are copied out.
    ("folded-bias-relu-residual", (5, 6, 4, 4), (8, 6, 3, 3), "padding (1, 1), (1, 1)",
     ["%s = add %c: {o}, %b: {b}", "%t = max %s: {o}, 0: {dt}", "%r = add %t: {o}, %y: {o}"]),
    # The depthwise loop (dlvm.codegen.conv_depthwise).
    ("depthwise-bias-relu", (2, 4, 7, 7), (4, 1, 3, 3), "padding (1, 1), (1, 1) groups 4",
     ["%s = add %c: {o}, %b: {b}", "%r = max %s: {o}, 0: {dt}"]),
]  # fmt: skip


def function(name: str, case: tuple, dt: str) -> str:
    _, x, k, options, lines = case
    shape = out_shape(x, k, options)
    o, b = ty(shape, dt), ty((1, shape[1], *(1,) * (len(shape) - 2)), dt)
    args = f"%x: {ty(x, dt)}, %k: {ty(k, dt)}, %b: {b}, %y: {o}"
    body = "\n".join("    " + line.format(o=o, b=b, dt=dt) for line in lines)
    return (
        f"func @{name}: ({ty(x, dt)}, {ty(k, dt)}, {b}, {o}) -> {o} {{\n'entry({args}):\n"
        f"    %c = convolve %x: {ty(x, dt)} kernel %k: {ty(k, dt)} {options}\n"
        f"{body}\n    return %r: {o}\n}}\n"
    )


def symbol(name: str, dt: str) -> str:
    return f"epi_{name.replace('-', '_')}_{dt}"


def module_text(dtypes=DTYPES) -> str:
    parts = ['module "epi"\nstage optimizable\n']
    for case in CASES:
        for dt in dtypes:
            parts.append(function(symbol(case[0], dt), case, dt))
    return "\n".join(parts)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    text = module_text()
    path = ir_library(text, "epi", tmp_path_factory.mktemp("epi"))
    with dlvm.load(path) as lib:
        yield lib, parse_module(text, "epi.dl")


def inputs(case: tuple, dt: str, seed: int) -> list[np.ndarray]:
    _, x, k, options, _ = case
    shape = out_shape(x, k, options)
    rng = np.random.default_rng(seed)
    shapes = [x, k, (1, shape[1], *(1,) * (len(shape) - 2)), shape]
    return [rng.uniform(-2, 2, s).astype(DTYPES[dt]) for s in shapes]


@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("index", range(len(CASES)), ids=[c[0] for c in CASES])
def test_fused_epilogue_matches_interpreter(compiled, index, dt):
    lib, reference = compiled
    name = symbol(CASES[index][0], dt)
    args = inputs(CASES[index], dt, index)
    want = np.asarray(run_function(reference, name, args))
    assert_close(np.asarray(getattr(lib, name)(*args)), want, dt)


def test_every_epilogue_is_fused_into_its_convolution():
    """Each function is one kernel: the convolution, then its epilogue, returned."""
    module = parse_module(module_text(), "epi.dl")
    ComputeGeneration().run(module)
    for case in CASES:
        for dt in DTYPES:
            host = next(f for f in module.functions if f.name == symbol(case[0], dt))
            ops = [i.opcode for i in host.blocks[0].instructions]
            assert ops == ["apply", "return"], (host.name, ops)
            kernel = host.blocks[0].instructions[0].operands[0]
            body = [i.opcode for i in kernel.blocks[0].instructions]  # type: ignore[union-attr]
            assert body[0] == "convolve" and body[-1] == "return" and len(body) == len(case[4]) + 2
