"""checkpointing (CP): recomputing cheap forward values in adjoint code lowers the peak of
live memory and leaves every result unchanged."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import add_gradient, differentiate

from dlvm.interp import run_function
from dlvm.ir import parse_module
from dlvm.transforms.checkpointing import BlockCheckpointer, Checkpointing
from dlvm.transforms.dead_code_elimination import DeadCodeElimination

SIGMOID = """module "cp"
stage raw

func @f: (<4 x 8 x f32>, <8 x 8 x f32>) -> f32 {
'entry(%x: <4 x 8 x f32>, %w: <8 x 8 x f32>):
    %z = dot %x: <4 x 8 x f32>, %w: <8 x 8 x f32>
    %e = exp %z: <4 x 8 x f32>
    %d = add %e: <4 x 8 x f32>, 1: f32
    %s = divide 1: f32, %d: <4 x 8 x f32>
    %t = multiply %s: <4 x 8 x f32>, %z: <4 x 8 x f32>
    %u = tanh %t: <4 x 8 x f32>
    %r = reduce %u: <4 x 8 x f32> by add init 0: f32 along 0, 1
    return %r: f32
}
"""


def gradient_module():
    module = parse_module(SIGMOID)
    g, _ = add_gradient(module, "f", wrt=(0, 1))
    differentiate(module)
    DeadCodeElimination().run(module)
    return module, g


def peak_bytes(block) -> int:
    cp = BlockCheckpointer(block, 0)
    _, live = cp.peak()
    from dlvm.transforms.checkpointing import size_of

    return sum(size_of(v) for v in live)


@pytest.mark.parametrize("budget", [0, 700, 10**9])
def test_results_are_unchanged_and_memory_fits_the_budget(budget):
    module, g = gradient_module()
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((4, 8)), 0.3 * rng.standard_normal((8, 8)), np.array(1.0)]
    before = run_function(module, g.name, args, float64=True)
    peak_before = peak_bytes(g.blocks[0])
    changed = Checkpointing(budget).run(module)
    DeadCodeElimination().run(module)
    after = run_function(module, g.name, args, float64=True)
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)
    peak_after = peak_bytes(g.blocks[0])
    if budget >= peak_before:
        assert not changed and peak_after == peak_before
    else:
        assert changed and peak_after < peak_before


def test_checkpoints_stay_and_cheap_values_are_recomputed():
    module, g = gradient_module()
    Checkpointing(0).run(module)
    DeadCodeElimination().run(module)
    ops = [i.opcode for i in g.blocks[0].instructions]
    assert ops.count("dot") == 3  # the forward product (a checkpoint) and two adjoint ones
    assert ops.count("exp") >= 2  # exp is recomputed where the adjoint needs it
