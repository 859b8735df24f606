"""The peers of the convolution cases (conv_cases.py): PyTorch eager, torch.compile, JAX (jit)
and ONNX Runtime (inference only, the PyTorch module exported with torch.onnx.export), each
written as a user of that library would, with the case's parameters. A maker takes the case's
inputs and returns a callable that runs the case once and leaves its result computed, or None
when the peer cannot run the case; `torch_forward` and `torch_first_loss` are the references
the forward check compares ours with."""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np
from conv_cases import LAYERS

Runner = Callable[[], object]
Maker = Callable[[dict[str, Any]], Runner | None]

# Inductor compiles in the process rather than in a pool of workers that would go on warming up
# beside the timed calls on a machine of two CPUs.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

RATE = 0.001  # Adam's step in the train cases, as in the TEL sources
EPS = 1e-5  # batch_norm2d's
BUFFERS = ("mean1", "var1", "mean2", "var2")  # the block's running statistics


def _split(case: str) -> tuple[str, str]:
    """("conv3x3", "fwd") for "conv3x3_fwd"; (case, "") for a model case."""
    name, _, kind = case.rpartition("_")
    return (name, kind) if name in LAYERS else (case, "")


# PyTorch -----------------------------------------------------------------------------------------


def torch_module(case: str, inp: dict[str, Any]) -> Any:
    """The case as a torch.nn.Module with `inp`'s parameters: the layer (its forward), LeNet-5
    (its logits) or the block (its output), in training mode."""
    import torch
    from torch import nn

    def tensor(a: np.ndarray) -> Any:
        return torch.from_numpy(np.ascontiguousarray(a)).clone()

    name, _ = _split(case)
    if name in LAYERS:
        layer = LAYERS[name]
        conv = nn.Conv2d(64, 64, layer.kernel, padding=layer.padding, groups=layer.groups,
                         bias=False)  # fmt: skip
        conv.weight.data = tensor(inp["k"])
        return conv
    p = inp["params"]
    lenet, block = _torch_classes()
    if case == "lenet_train":
        model = lenet()
        for i in (1, 2):
            conv = getattr(model, f"conv{i}")
            conv.weight.data, conv.bias.data = tensor(p[f"K{i}"]), tensor(p[f"c{i}"].reshape(-1))
        for i in (1, 2, 3):
            fc = getattr(model, f"fc{i}")
            fc.weight.data, fc.bias.data = tensor(p[f"W{i}"].T), tensor(p[f"b{i}"].reshape(-1))
        return model
    # Its running variance moves with the batch's unbiased variance, ours and JAX's with the
    # biased one: the same work, and the forward check uses the given running statistics.
    model = block()
    for i in (1, 2):
        getattr(model, f"conv{i}").weight.data = tensor(p[f"K{i}"])
        bn = getattr(model, f"bn{i}")
        bn.weight.data, bn.bias.data = (
            tensor(p[f"g{i}"].reshape(-1)),
            tensor(p[f"e{i}"].reshape(-1)),
        )
        bn.running_mean.data = tensor(p[f"mean{i}"].reshape(-1))
        bn.running_var.data = tensor(p[f"var{i}"].reshape(-1))
    return model


@functools.cache
def _torch_classes() -> tuple[type, type]:
    """LeNet-5 and the block as torch.nn.Module classes (made on first use: torch is imported
    only by the peers that need it)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class LeNet(nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.conv1, self.conv2 = nn.Conv2d(1, 6, 5), nn.Conv2d(6, 16, 5)
            self.fc1, self.fc2, self.fc3 = (
                nn.Linear(256, 120),
                nn.Linear(120, 84),
                nn.Linear(84, 10),
            )

        def forward(self, x: Any) -> Any:
            x = F.max_pool2d(F.relu(self.conv1(x)), 2)
            x = F.max_pool2d(F.relu(self.conv2(x)), 2)
            x = F.relu(self.fc1(torch.flatten(x, 1)))
            return self.fc3(F.relu(self.fc2(x)))

    class Block(nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(64, 64, 3, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(64, eps=EPS)
            self.conv2 = nn.Conv2d(64, 64, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(64, eps=EPS)

        def forward(self, x: Any) -> Any:
            h = F.relu(self.bn1(self.conv1(x)))
            return F.relu(self.bn2(self.conv2(h)) + x)

    return LeNet, Block


def _torch_step(case: str, inp: dict[str, Any], compiled: bool) -> Runner:
    """One train step (forward, loss, backward, Adam) of LeNet-5 or the block; with `compiled`,
    the forward and loss go through torch.compile (its backward is compiled with them)."""
    import torch
    import torch.nn.functional as F

    model = torch_module(case, inp)
    opt = torch.optim.Adam(model.parameters(), lr=RATE)
    x = torch.from_numpy(inp["x"])
    if case == "lenet_train":
        labels = torch.from_numpy(inp["labels"])

        def objective() -> Any:
            return F.cross_entropy(model(x), labels)
    else:
        target = torch.from_numpy(inp["target"])

        def objective() -> Any:
            return F.mse_loss(model(x), target)

    loss_of = torch.compile(objective) if compiled else objective

    def step() -> float:
        with torch.enable_grad():
            opt.zero_grad(set_to_none=True)
            loss = loss_of()
            loss.backward()
            opt.step()
        return loss.item()

    return step


def _torch_maker(compiled: bool) -> Callable[[str], Maker]:
    def maker(case: str) -> Maker:
        import torch

        torch.set_grad_enabled(False)

        def make(inp: dict[str, Any]) -> Runner | None:
            kind = _split(case)[1]
            if case in ("lenet_train", "block_train"):
                return _torch_step(case, inp, compiled)
            model = torch_module(case, inp)
            x = torch.from_numpy(inp["x"])
            if kind == "fwdbwd":
                # The gradients of sum(output) with respect to the input and the kernel.
                xg = x.clone().requires_grad_(True)

                def fwdbwd(x: Any) -> Any:
                    return model(x).sum()

                total = torch.compile(fwdbwd) if compiled else fwdbwd

                def run() -> float:
                    with torch.enable_grad():
                        xg.grad = model.weight.grad = None
                        loss = total(xg)
                        loss.backward()
                    return loss.item()

                return run
            model.eval()
            forward = torch.compile(model) if compiled else model
            return lambda: forward(x)

        return make

    return maker


def torch_forward(case: str, inp: dict[str, Any]) -> np.ndarray:
    """PyTorch's forward output of `case`: what our_forward computes (running statistics)."""
    import torch

    model = torch_module(case, inp).eval()
    with torch.no_grad():
        return np.asarray(model(torch.from_numpy(inp["x"])).numpy())


def torch_first_loss(case: str, inp: dict[str, Any]) -> float | None:
    """PyTorch's loss of one train step from `inp`'s parameters (batch statistics)."""
    if case not in ("lenet_train", "block_train"):
        return None
    return float(_torch_step(case, inp, compiled=False)())


TOLERANCE = 1e-4  # relative: float32 sums in another order, not another computation


class Mismatch(Exception):
    """Ours and PyTorch disagree on a case: the benchmark would compare different work."""


def check(case: str, model: Any, inp: dict[str, Any]) -> str:
    """Compares our forward output (and the first train step's loss) with PyTorch's, outside
    the timing; returns what agreed, or raises Mismatch."""
    from conv_cases import our_first_loss, our_forward

    ours, theirs = our_forward(case, model, inp), torch_forward(case, inp)
    error = float(np.max(np.abs(ours - theirs)) / max(float(np.max(np.abs(theirs))), 1e-30))
    said = f"forward within {error:.1e} of PyTorch's"
    if not error <= TOLERANCE:
        raise Mismatch(f"{case}: our forward differs from PyTorch's by {error:.2e} (relative)")
    loss, reference = our_first_loss(case, model, inp), torch_first_loss(case, inp)
    if loss is not None and reference is not None:
        error = abs(loss - reference) / abs(reference)
        if not error <= TOLERANCE:
            raise Mismatch(f"{case}: our first loss {loss} differs from PyTorch's {reference}")
        said += f", first loss within {error:.1e}"
    return said


# JAX ---------------------------------------------------------------------------------------------


def _jax_conv(x: Any, k: Any, padding: int = 0, groups: int = 1) -> Any:
    from jax import lax

    return lax.conv_general_dilated(x, k, (1, 1), [(padding, padding)] * 2,
                                    dimension_numbers=("NCHW", "OIHW", "NCHW"),
                                    feature_group_count=groups)  # fmt: skip


def _jax_lenet(p: dict[str, Any], x: Any) -> Any:
    import jax
    from jax import lax

    def pool(v: Any) -> Any:
        return lax.reduce_window(v, -np.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")

    h = pool(jax.nn.relu(_jax_conv(x, p["K1"]) + p["c1"]))
    h = pool(jax.nn.relu(_jax_conv(h, p["K2"]) + p["c2"]))
    h = jax.nn.relu(h.reshape(x.shape[0], 256) @ p["W1"] + p["b1"])
    h = jax.nn.relu(h @ p["W2"] + p["b2"])
    return h @ p["W3"] + p["b3"]


def _jax_block(p: dict[str, Any], buffers: dict[str, Any], x: Any, training: bool) -> Any:
    """The block's output and, while training, the new running statistics."""
    import jax
    import jax.numpy as jnp

    new: dict[str, Any] = {}

    def bn(v: Any, i: int) -> Any:
        if training:
            mu = jnp.mean(v, axis=(0, 2, 3), keepdims=True)
            var = jnp.mean((v - mu) ** 2, axis=(0, 2, 3), keepdims=True)
            new[f"mean{i}"] = 0.9 * buffers[f"mean{i}"] + 0.1 * mu
            new[f"var{i}"] = 0.9 * buffers[f"var{i}"] + 0.1 * var
        else:
            mu, var = buffers[f"mean{i}"], buffers[f"var{i}"]
        return (v - mu) * jax.lax.rsqrt(var + EPS) * p[f"g{i}"] + p[f"e{i}"]

    h = jax.nn.relu(bn(_jax_conv(x, p["K1"], 1), 1))
    return jax.nn.relu(bn(_jax_conv(h, p["K2"], 1), 2) + x), new


def _jax_adam(p: Any, g: Any, m: Any, v: Any, t: Any) -> tuple[Any, Any, Any]:
    import jax
    import jax.numpy as jnp

    tree = jax.tree_util.tree_map
    m = tree(lambda m, g: 0.9 * m + 0.1 * g, m, g)
    v = tree(lambda v, g: 0.999 * v + 0.001 * g * g, v, g)
    c1, c2 = 1 - 0.9**t, 1 - 0.999**t
    p = tree(lambda w, m, v: w - RATE * (m / c1) / (jnp.sqrt(v / c2) + 1e-8), p, m, v)
    return p, m, v


def jax_maker(case: str) -> Maker:
    import jax
    import jax.numpy as jnp

    def make(inp: dict[str, Any]) -> Runner | None:
        name, kind = _split(case)
        x = jnp.asarray(inp["x"])
        if name in LAYERS:
            layer = LAYERS[name]
            k = jnp.asarray(inp["k"])

            def forward(x: Any, k: Any) -> Any:
                return _jax_conv(x, k, layer.padding, layer.groups)

            if kind == "fwd":
                f = jax.jit(forward)
                return lambda: f(x, k).block_until_ready()
            g = jax.jit(jax.value_and_grad(lambda x, k: jnp.sum(forward(x, k)), argnums=(0, 1)))
            return lambda: jax.block_until_ready(g(x, k))
        params = {n: jnp.asarray(v) for n, v in inp["params"].items() if n not in BUFFERS}
        buffers = {n: jnp.asarray(v) for n, v in inp["params"].items() if n in BUFFERS}
        if case == "block_b1":
            f = jax.jit(lambda p, b, x: _jax_block(p, b, x, training=False)[0])
            return lambda: f(params, buffers, x).block_until_ready()
        if case == "lenet_train":
            labels = jnp.asarray(inp["labels"])

            def loss_fn(p: Any, b: Any) -> Any:
                logp = jax.nn.log_softmax(_jax_lenet(p, x))
                return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1)), b
        else:
            target = jnp.asarray(inp["target"])

            def loss_fn(p: Any, b: Any) -> Any:
                y, new = _jax_block(p, b, x, training=True)
                return jnp.mean((y - target) ** 2), new

        def train(state: Any) -> Any:
            p, m, v, b, t = state
            (loss, b), g = jax.value_and_grad(loss_fn, has_aux=True)(p, b)
            p, m, v = _jax_adam(p, g, m, v, t + 1)
            return (p, m, v, b, t + 1), loss

        step = jax.jit(train, donate_argnums=0)
        m, v = (jax.tree_util.tree_map(jnp.zeros_like, params) for _ in "mv")  # donated: two
        box = {"state": (params, m, v, buffers, jnp.float32(0))}

        def run() -> None:
            box["state"], loss = step(box["state"])
            loss.block_until_ready()

        return run

    return make


# ONNX Runtime ------------------------------------------------------------------------------------


def ort_maker(case: str) -> Maker:
    import onnxruntime as ort
    import torch

    def make(inp: dict[str, Any]) -> Runner | None:
        if not case.endswith(("_fwd", "_b1")):
            return None  # training needs onnxruntime-training, another package
        model = torch_module(case, inp).eval()
        x = inp["x"]
        with tempfile.TemporaryDirectory(prefix="dlvm-bench-onnx-") as tmp:
            path = os.path.join(tmp, f"{case}.onnx")
            torch.onnx.export(model, (torch.from_numpy(x),), path, input_names=["x"],
                              output_names=["y"], opset_version=17, dynamo=False)  # fmt: skip
            opts = ort.SessionOptions()
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        # IO binding: the input and the output stay in place between runs, as ours do.
        binding = session.io_binding()
        binding.bind_cpu_input("x", x)
        out = np.empty(x.shape, np.float32)
        binding.bind_output("y", "cpu", 0, np.float32, list(out.shape), out.ctypes.data)
        kept = [x, out]  # the binding holds raw pointers into these arrays

        def run() -> None:
            session.run_with_iobinding(binding)
            assert kept

        return run

    return make


CONV_PEERS: dict[str, Callable[[str], Maker]] = {
    "torch": _torch_maker(compiled=False),
    "torch.compile": _torch_maker(compiled=True),
    "jax": jax_maker,
    "onnxruntime": ort_maker,
}
