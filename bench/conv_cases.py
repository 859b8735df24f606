"""The convolution cases of the CPU benchmark (issue 25): each written in TEL as a user would
(stdlib nn), their inputs and parameters (seeded, in TEL's layouts: NCHW images, OIHW kernels,
[in x out] dense weights) and our side of each, a library built by telc and loaded with
dlvm.load whose entry (an exported function, infer or train_step) is the timed call."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# The convolution layers: batch 32, 64 -> 64 channels, 32x32 images, stride 1, sizes kept.
LAYER_N, LAYER_C, LAYER_S = 32, 64, 32


@dataclass(frozen=True)
class Layer:
    """One convolution layer: its kernel size, padding and groups."""

    kernel: int
    padding: int
    groups: int

    @property
    def kernel_shape(self) -> tuple[int, int, int, int]:
        k = self.kernel
        return (LAYER_C, LAYER_C // self.groups, k, k)

    @property
    def flops(self) -> float:
        """2·N·Cout·OH·OW·Cin_g·KH·KW: one forward."""
        _, cin_g, kh, kw = self.kernel_shape
        return 2.0 * LAYER_N * LAYER_C * LAYER_S * LAYER_S * cin_g * kh * kw


LAYERS = {
    "conv3x3": Layer(3, 1, 1),
    "conv1x1": Layer(1, 0, 1),
    "depthwise3x3": Layer(3, 1, LAYER_C),
}


def layer_source(name: str) -> str:
    """The layer as a module: `forward` its output, `backward` the gradients of the sum of its
    output with respect to the input and the kernel, and that sum (so the forward is computed on
    every side, as PyTorch's loss.backward() does)."""
    layer = LAYERS[name]
    kernel = " x ".join(map(str, layer.kernel_shape))
    image = f"[{LAYER_N} x {LAYER_C} x {LAYER_S} x {LAYER_S}]"
    return f"""module {name}
type float32
use nn

def layer(x: {image}, k: [{kernel}]) -> {image} =
    conv2d(x, k, padding: {layer.padding}, groups: {layer.groups})
def total(x: {image}, k: [{kernel}]) -> [] = sum(layer(x, k))

export def forward(x: {image}, k: [{kernel}]) -> {image} = layer(x, k)
export def backward(x: {image}, k: [{kernel}]) = grad(total, keeping: true)(x, k)
"""


LENET_B = 16
LENET = """module lenet
type float32
use nn
use optim

dim B = 16
x: in[B x 1 x 28 x 28]
labels: in i64[B]

K1: param[6 x 1 x 5 x 5] = he()
c1: param[1 x 6 x 1 x 1] = 0.0
K2: param[16 x 6 x 5 x 5] = he()
c2: param[1 x 16 x 1 x 1] = 0.0
W1: param[256 x 120] = glorot()
b1: param[1 x 120] = 0.0
W2: param[120 x 84] = glorot()
b2: param[1 x 84] = 0.0
W3: param[84 x 10] = glorot()
b3: param[1 x 10] = 0.0

h1: hidden = maxpool2d(relu(conv2d(x, K1) + c1))      // [B x 6 x 12 x 12]
h2: hidden = maxpool2d(relu(conv2d(h1, K2) + c2))     // [B x 16 x 4 x 4]
h3: hidden = relu(linear(h2 as [B x 256], W1, b1))
h4: hidden = relu(linear(h3, W2, b2))
logits: out[B x 10] = linear(h4, W3, b3)
loss: out[] = sparse_softmax_cross_entropy(logits, labels)

train minimizing loss using adam(rate: 0.001)
"""

BLOCK_C, BLOCK_S = 64, 16
BLOCK = """module resblock
type float32
use nn
use optim

dim B = 16
dim C = 64
dim S = 16
x: in[B x C x S x S]
target: in[B x C x S x S]

K1: param[C x C x 3 x 3] = he()
g1: param[1 x C x 1 x 1] = 1.0
e1: param[1 x C x 1 x 1] = 0.0
K2: param[C x C x 3 x 3] = he()
g2: param[1 x C x 1 x 1] = 1.0
e2: param[1 x C x 1 x 1] = 0.0
mean1: buffer[1 x C x 1 x 1] = 0.0
var1: buffer[1 x C x 1 x 1] = 1.0
mean2: buffer[1 x C x 1 x 1] = 0.0
var2: buffer[1 x C x 1 x 1] = 1.0

conv1: hidden = conv2d(x, K1, padding: 1)
h: hidden = relu(batch_norm2d(conv1, g1, e1, mean1, var1))
conv2: hidden = conv2d(h, K2, padding: 1)
y: out[B x C x S x S] = relu(batch_norm2d(conv2, g2, e2, mean2, var2) + x)
loss: out[] = mse(y, target)

mean1 <- running(mean1, batch_mean2d(conv1))
var1 <- running(var1, batch_var2d(conv1, unbiased: true))
mean2 <- running(mean2, batch_mean2d(conv2))
var2 <- running(var2, batch_var2d(conv2, unbiased: true))

train minimizing loss using adam(rate: 0.001)
"""

# case key -> (TEL source, dims it overrides): the layers' two keys share one library each.
SOURCES: dict[str, tuple[str, str, dict[str, int]]] = {
    **{f"{n}_fwd": (n, layer_source(n), {}) for n in LAYERS},
    **{f"{n}_fwdbwd": (n, layer_source(n), {}) for n in LAYERS},
    "lenet_train": ("lenet", LENET, {}),
    "block_train": ("resblock", BLOCK, {}),
    "block_b1": ("resblock_b1", BLOCK, {"B": 1}),
}


def _layer_of(case: str) -> Layer | None:
    name = case.rsplit("_", 1)[0]
    return LAYERS.get(name) if case.endswith(("_fwd", "_fwdbwd")) else None


def lenet_flops() -> float:
    """Multiply-adds of the forward, ×2 for flops, ×3 for the train step (two gradients each)."""
    conv = 6 * 24 * 24 * 25 + 16 * 8 * 8 * 6 * 25
    dense = 256 * 120 + 120 * 84 + 84 * 10
    return 3 * 2.0 * LENET_B * (conv + dense)


def block_flops(batch: int) -> float:
    """The two 3x3 convolutions' flops, one forward at `batch`."""
    return 2 * 2.0 * batch * BLOCK_C * BLOCK_S * BLOCK_S * BLOCK_C * 9


def case_rows() -> list[tuple[str, str, str, float]]:
    """(key, title, unit, flops per call) of every convolution case: a forward+backward counts
    three forwards' flops (the input and the kernel gradients are each one's worth)."""
    rows = []
    titles = {"conv3x3": "conv 3x3", "conv1x1": "conv 1x1", "depthwise3x3": "depthwise 3x3"}
    for name, layer in LAYERS.items():
        shape = f"{LAYER_N}x{LAYER_C}x{LAYER_S}x{LAYER_S}, {LAYER_C}->{LAYER_C}"
        groups = f", groups {layer.groups}" if layer.groups > 1 else ""
        title = f"{titles[name]} ({shape}{groups})"
        rows.append((f"{name}_fwd", f"{title} forward", "GFLOP/s", layer.flops))
        rows.append((f"{name}_fwdbwd", f"{title} fwd+bwd", "GFLOP/s", 3 * layer.flops))
    rows.append(("lenet_train", "LeNet-5 train step (Adam), batch 16", "GFLOP/s", lenet_flops()))
    rows.append(
        ("block_train", "ResNet block train step (Adam), batch 16", "GFLOP/s", 3 * block_flops(16))
    )
    rows.append(("block_b1", "ResNet block inference, batch 1", "GFLOP/s", block_flops(1)))
    return rows


def _he(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    fan_in = int(np.prod(shape[1:]))
    return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


def _glorot(rng: np.random.Generator, fan_in: int, fan_out: int) -> np.ndarray:
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, (fan_in, fan_out)).astype(np.float32)


def _column(rng: np.random.Generator, n: int, low: float, high: float) -> np.ndarray:
    return rng.uniform(low, high, (1, n, 1, 1)).astype(np.float32)


def inputs(case: str) -> dict[str, Any]:
    """The inputs and parameters of `case`, the same in every process. Biases, batch-norm
    scales and running statistics are random too, so the forward check sees them."""
    rng = np.random.default_rng(25)
    layer = _layer_of(case)
    if layer is not None:
        x = rng.standard_normal((LAYER_N, LAYER_C, LAYER_S, LAYER_S)).astype(np.float32)
        return {"x": x, "k": _he(rng, layer.kernel_shape)}
    if case == "lenet_train":
        params = {"K1": _he(rng, (6, 1, 5, 5)), "c1": _column(rng, 6, -0.1, 0.1),
                  "K2": _he(rng, (16, 6, 5, 5)), "c2": _column(rng, 16, -0.1, 0.1)}  # fmt: skip
        for i, (fan_in, fan_out) in enumerate([(256, 120), (120, 84), (84, 10)], 1):
            params[f"W{i}"] = _glorot(rng, fan_in, fan_out)
            params[f"b{i}"] = rng.uniform(-0.1, 0.1, (1, fan_out)).astype(np.float32)
        x = rng.standard_normal((LENET_B, 1, 28, 28)).astype(np.float32)
        return {"params": params, "x": x, "labels": rng.integers(0, 10, LENET_B, dtype=np.int64)}
    if case in ("block_train", "block_b1"):
        batch = 16 if case == "block_train" else 1
        params = {}
        for i in (1, 2):
            params[f"K{i}"] = _he(rng, (BLOCK_C, BLOCK_C, 3, 3))
            params[f"g{i}"] = _column(rng, BLOCK_C, 0.5, 1.5)
            params[f"e{i}"] = _column(rng, BLOCK_C, -0.1, 0.1)
        for i in (1, 2):
            params[f"mean{i}"] = _column(rng, BLOCK_C, -0.2, 0.2)
            params[f"var{i}"] = _column(rng, BLOCK_C, 0.5, 2.0)
        shape = (batch, BLOCK_C, BLOCK_S, BLOCK_S)
        x = rng.standard_normal(shape).astype(np.float32)
        target = rng.standard_normal(shape).astype(np.float32)
        return {"params": params, "x": x, "target": target}
    raise KeyError(case)


def build_all(cases: list[str], directory: Path, build: Any) -> dict[str, Any]:
    """Our library of each case in `cases`, built once per source with `build(text, name,
    directory, defines)` (cases.build); the layers' forward and fwd+bwd cases share one."""
    models: dict[str, Any] = {}
    for case in cases:
        name, text, defines = SOURCES[case]
        shared = [m for c, m in models.items() if SOURCES[c][0] == name]
        models[case] = shared[0] if shared else build(text, name, directory, defines)
    return models


def ours(case: str, model: Any, inp: dict[str, Any]) -> Any:
    """The timed call of our library for `case`, its parameters set from `inp`."""
    for name, value in inp.get("params", {}).items():
        model.set_param(name, value)
    if _layer_of(case) is not None:
        x, k = inp["x"], inp["k"]
        if case.endswith("_fwd"):
            out = np.empty_like(x)
            return lambda: model.forward(x, k, out=out)
        return lambda: model.backward(x, k)
    if case == "lenet_train":
        x, labels = inp["x"], inp["labels"]
        return lambda: model.train_step(x, labels)
    if case == "block_train":
        x, target = inp["x"], inp["target"]
        return lambda: model.train_step(x, target)
    x = inp["x"]
    out = np.empty_like(x)
    return lambda: model.infer(x, out=out)


def our_forward(case: str, model: Any, inp: dict[str, Any]) -> np.ndarray:
    """The forward output of our library for `case` (the layer's output, LeNet's logits, the
    block's output with its running statistics), parameters as `inp` has them."""
    for name, value in inp.get("params", {}).items():
        model.set_param(name, value)
    if _layer_of(case) is not None:
        return np.asarray(model.forward(inp["x"], inp["k"]))
    return np.asarray(model.infer(inp["x"]))


def our_first_loss(case: str, model: Any, inp: dict[str, Any]) -> float | None:
    """The loss of one train step from `inp`'s parameters (which it then moves), or None for a
    case without a train step."""
    if case not in ("lenet_train", "block_train"):
        return None
    for name, value in inp["params"].items():
        model.set_param(name, value)
    second = inp["labels"] if case == "lenet_train" else inp["target"]
    return float(model.train_step(inp["x"], second))
