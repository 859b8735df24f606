"""Gradients of whole programs against finite differences: an MLP trained with softmax
cross-entropy, written the way the TEL standard library composes it."""

from __future__ import annotations

import numpy as np
from gradcheck import gradient_check

MLP = """module "mlp"
stage raw

func @f: (<3 x 5 x f32>, <5 x 4 x f32>, <1 x 4 x f32>, <4 x 3 x f32>, <1 x 3 x f32>,
          <3 x 3 x f32>) -> f32 {
'entry(%x: <3 x 5 x f32>, %w1: <5 x 4 x f32>, %b1: <1 x 4 x f32>, %w2: <4 x 3 x f32>,
       %b2: <1 x 3 x f32>, %y: <3 x 3 x f32>):
    %p1 = dot %x: <3 x 5 x f32>, %w1: <5 x 4 x f32>
    %z1 = add %p1: <3 x 4 x f32>, %b1: <1 x 4 x f32>
    %pos = greaterThan %z1: <3 x 4 x f32>, 0: f32
    %h = select %z1: <3 x 4 x f32>, 0: f32 by %pos: <3 x 4 x bool>
    %p2 = dot %h: <3 x 4 x f32>, %w2: <4 x 3 x f32>
    %z = add %p2: <3 x 3 x f32>, %b2: <1 x 3 x f32>
    %m = reduce %z: <3 x 3 x f32> by max init -1000: f32 along 1
    %mc = shapeCast %m: <3 x f32> to 3 x 1
    %zs = subtract %z: <3 x 3 x f32>, %mc: <3 x 1 x f32>
    %e = exp %zs: <3 x 3 x f32>
    %s = reduce %e: <3 x 3 x f32> by add init 0: f32 along 1
    %sc = shapeCast %s: <3 x f32> to 3 x 1
    %lse = log %sc: <3 x 1 x f32>
    %logp = subtract %zs: <3 x 3 x f32>, %lse: <3 x 1 x f32>
    %yl = multiply %y: <3 x 3 x f32>, %logp: <3 x 3 x f32>
    %tot = reduce %yl: <3 x 3 x f32> by add init 0: f32 along 0, 1
    %neg = negate %tot: f32
    %loss = divide %neg: f32, 3: f32
    return %loss: f32
}
"""


def test_mlp_with_softmax_cross_entropy():
    rng = np.random.default_rng(11)
    labels = np.eye(3)[[0, 2, 1]]
    inputs = [
        rng.standard_normal((3, 5)),
        0.5 * rng.standard_normal((5, 4)),
        0.1 * rng.standard_normal((1, 4)),
        0.5 * rng.standard_normal((4, 3)),
        0.1 * rng.standard_normal((1, 3)),
        labels,
    ]
    gradient_check(MLP, inputs, wrt=(1, 2, 3, 4))


CNN = """module "cnn"
stage raw

func @f: (<2 x 1 x 6 x 6 x f32>, <3 x 1 x 3 x 3 x f32>, <1 x 3 x 1 x 1 x f32>) -> f32 {
'entry(%x: <2 x 1 x 6 x 6 x f32>, %k: <3 x 1 x 3 x 3 x f32>, %b: <1 x 3 x 1 x 1 x f32>):
    %c = convolve %x: <2 x 1 x 6 x 6 x f32> kernel %k: <3 x 1 x 3 x 3 x f32> padding (1, 1),
                 (1, 1)
    %z = add %c: <2 x 3 x 6 x 6 x f32>, %b: <1 x 3 x 1 x 1 x f32>
    %pos = greaterThan %z: <2 x 3 x 6 x 6 x f32>, 0: f32
    %h = select %z: <2 x 3 x 6 x 6 x f32>, 0: f32 by %pos: <2 x 3 x 6 x 6 x bool>
    %p = reduceWindow %h: <2 x 3 x 6 x 6 x f32> by max init -1000: f32 dims 1, 1, 2, 2 strides 1,
                      1, 2, 2 padding none
    %sq = square %p: <2 x 3 x 3 x 3 x f32>
    %r = reduce %sq: <2 x 3 x 3 x 3 x f32> by add init 0: f32 along 0, 1, 2, 3
    return %r: f32
}
"""


def test_cnn_layer_with_relu_and_max_pooling():
    rng = np.random.default_rng(12)
    inputs = [
        rng.standard_normal((2, 1, 6, 6)),
        rng.standard_normal((3, 1, 3, 3)),
        0.1 * rng.standard_normal((1, 3, 1, 1)),
    ]
    gradient_check(CNN, inputs)
