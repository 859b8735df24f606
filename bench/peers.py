"""The peers of the CPU benchmark: each case (cases.py) written for NumPy, PyTorch, JAX and ONNX
Runtime the way a user of that library would write it for speed. A maker takes the case's inputs
and returns a callable that runs the case once and leaves its result computed (JAX's blocked
on, NumPy's and PyTorch's written into preallocated buffers where the library allows it), or
None when the peer cannot run the case. A peer whose library is not installed is left out."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import numpy as np
from cases import PRODUCTS, product_shape

Runner = Callable[[], object]
Maker = Callable[[dict[str, Any]], Runner | None]

RATE = 0.01  # the SGD step of the training case


# NumPy -------------------------------------------------------------------------------------------


def _np_forward(x: np.ndarray, p: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    h1 = np.maximum(x @ p["W1"] + p["b1"], 0)
    h2 = np.maximum(h1 @ p["W2"] + p["b2"], 0)
    z = h2 @ p["W3"] + p["b3"]
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True), h1, h2


def _np_train_step(x: np.ndarray, labels: np.ndarray, p: dict[str, np.ndarray]) -> float:
    y, h1, h2 = _np_forward(x, p)
    n = x.shape[0]
    loss = -float(np.sum(labels * np.log(y))) / n
    dz = (y - labels) / n
    grads = {"W3": h2.T @ dz, "b3": dz.sum(0, keepdims=True)}
    dh2 = (dz @ p["W3"].T) * (h2 > 0)
    grads |= {"W2": h1.T @ dh2, "b2": dh2.sum(0, keepdims=True)}
    dh1 = (dh2 @ p["W2"].T) * (h1 > 0)
    grads |= {"W1": x.T @ dh1, "b1": dh1.sum(0, keepdims=True)}
    for k in p:
        p[k] -= RATE * grads[k]
    return loss


def numpy_maker(case: str) -> Maker:
    def make(inp: dict[str, Any]) -> Runner | None:
        if case in ("mlp_b1", "mlp_b256"):
            return lambda: _np_forward(inp["x"], inp["params"])
        if case == "train_b128":
            p = {k: v.copy() for k, v in inp["params"].items()}
            return lambda: _np_train_step(inp["x"], inp["labels"], p)
        if case == "chain":
            x, out, tmp = inp["x"], np.empty_like(inp["x"]), np.empty_like(inp["x"])

            def chain() -> None:
                np.multiply(x, 0.5, out=out)
                np.add(out, 0.25, out=out)
                np.tanh(out, out=out)
                np.negative(x, out=tmp)
                np.exp(tmp, out=tmp)
                np.add(tmp, 1.0, out=tmp)
                np.divide(out, tmp, out=out)

            return chain
        if case == "matmul" or case in PRODUCTS:
            a, b = inp["a"], inp["b"]
            out = np.empty(product_shape(a.shape, b.shape), np.float32)
            return lambda: np.matmul(a, b, out=out)
        return None

    return make


# PyTorch -----------------------------------------------------------------------------------------


def torch_maker(case: str) -> Maker:
    import torch

    torch.set_grad_enabled(False)

    def tensors(inp: dict[str, Any]) -> dict[str, Any]:
        return {k: torch.from_numpy(v.copy()) for k, v in inp["params"].items()}

    def forward(x: Any, p: dict[str, Any]) -> Any:
        h1 = torch.relu(torch.addmm(p["b1"], x, p["W1"]))
        h2 = torch.relu(torch.addmm(p["b2"], h1, p["W2"]))
        return torch.softmax(torch.addmm(p["b3"], h2, p["W3"]), dim=1)

    def make(inp: dict[str, Any]) -> Runner | None:
        if case in ("mlp_b1", "mlp_b256"):
            p, x = tensors(inp), torch.from_numpy(inp["x"])
            return lambda: forward(x, p)
        if case == "train_b128":
            p = tensors(inp)
            for t in p.values():
                t.requires_grad_(True)
            x, labels = torch.from_numpy(inp["x"]), torch.from_numpy(inp["labels"])
            opt = torch.optim.SGD(list(p.values()), lr=RATE)

            def step() -> float:
                with torch.enable_grad():
                    opt.zero_grad(set_to_none=True)
                    z = torch.addmm(
                        p["b3"],
                        torch.relu(
                            torch.addmm(
                                p["b2"], torch.relu(torch.addmm(p["b1"], x, p["W1"])), p["W2"]
                            )
                        ),
                        p["W3"],
                    )
                    loss = torch.nn.functional.cross_entropy(z, labels)
                    loss.backward()
                    opt.step()
                return float(loss)  # fmt: skip

            return step
        if case == "chain":
            x = torch.from_numpy(inp["x"])
            out, tmp = torch.empty_like(x), torch.empty_like(x)

            def chain() -> None:
                torch.mul(x, 0.5, out=out)
                out.add_(0.25).tanh_()
                torch.sigmoid(x, out=tmp)
                out.mul_(tmp)

            return chain
        if case == "matmul" or case in PRODUCTS:
            a, b = torch.from_numpy(inp["a"]), torch.from_numpy(inp["b"])
            out = torch.empty(product_shape(a.shape, b.shape))
            return lambda: torch.matmul(a, b, out=out)
        return None

    return make


# JAX ---------------------------------------------------------------------------------------------


def jax_maker(case: str) -> Maker:
    import jax
    import jax.numpy as jnp

    def forward(x: Any, p: dict[str, Any]) -> Any:
        h1 = jax.nn.relu(x @ p["W1"] + p["b1"])
        h2 = jax.nn.relu(h1 @ p["W2"] + p["b2"])
        return jax.nn.softmax(h2 @ p["W3"] + p["b3"], axis=1)

    def loss_fn(p: dict[str, Any], x: Any, labels: Any) -> Any:
        return -jnp.sum(labels * jnp.log(forward(x, p))) / x.shape[0]

    def train(p: dict[str, Any], x: Any, labels: Any) -> tuple[Any, Any]:
        loss, g = jax.value_and_grad(loss_fn)(p, x, labels)
        return jax.tree_util.tree_map(lambda w, d: w - RATE * d, p, g), loss

    def make(inp: dict[str, Any]) -> Runner | None:
        if case in ("mlp_b1", "mlp_b256"):
            f = jax.jit(forward)
            x, p = jnp.asarray(inp["x"]), {k: jnp.asarray(v) for k, v in inp["params"].items()}
            return lambda: f(x, p).block_until_ready()
        if case == "train_b128":
            step = jax.jit(train, donate_argnums=0)
            state = {"p": {k: jnp.asarray(v) for k, v in inp["params"].items()}}
            x, labels = jnp.asarray(inp["x"]), jnp.asarray(inp["labels"])

            def run() -> None:
                state["p"], loss = step(state["p"], x, labels)
                loss.block_until_ready()

            return run
        if case == "chain":
            # The output takes over the donated input's buffer; the next call reads it back.
            f = jax.jit(lambda x: jnp.tanh(0.5 * x + 0.25) * jax.nn.sigmoid(x), donate_argnums=0)
            box = {"x": jnp.asarray(inp["x"])}

            def run() -> None:
                box["x"] = f(box["x"])
                box["x"].block_until_ready()

            return run
        if case == "matmul" or case in PRODUCTS:
            f = jax.jit(jnp.matmul)
            a, b = jnp.asarray(inp["a"]), jnp.asarray(inp["b"])
            return lambda: f(a, b).block_until_ready()
        return None

    return make


# ONNX Runtime ------------------------------------------------------------------------------------


def _onnx_graph(case: str, inp: dict[str, Any]) -> tuple[bytes, list[str]] | None:
    """The case as an ONNX model (opset 17) and its input names; None for training."""
    from onnx import TensorProto, helper, numpy_helper

    def value(name: str, shape: tuple[int, ...]) -> Any:
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))

    if case in ("mlp_b1", "mlp_b256"):
        p = inp["params"]
        inits = [numpy_helper.from_array(v.reshape(-1) if k[0] == "b" else v, k)
                 for k, v in p.items()]  # fmt: skip
        nodes = [
            helper.make_node("Gemm", ["x", "W1", "b1"], ["z1"]),
            helper.make_node("Relu", ["z1"], ["h1"]),
            helper.make_node("Gemm", ["h1", "W2", "b2"], ["z2"]),
            helper.make_node("Relu", ["z2"], ["h2"]),
            helper.make_node("Gemm", ["h2", "W3", "b3"], ["z3"]),
            helper.make_node("Softmax", ["z3"], ["y"], axis=1),
        ]
        ins = [value("x", inp["x"].shape)]
        outs = [value("y", (inp["x"].shape[0], 10))]
    elif case == "chain":
        n = inp["x"].shape
        consts = [numpy_helper.from_array(np.float32(v).reshape(()), k)
                  for k, v in (("a", 0.5), ("b", 0.25))]  # fmt: skip
        inits = consts
        nodes = [
            helper.make_node("Mul", ["x", "a"], ["ax"]),
            helper.make_node("Add", ["ax", "b"], ["axb"]),
            helper.make_node("Tanh", ["axb"], ["t"]),
            helper.make_node("Sigmoid", ["x"], ["s"]),
            helper.make_node("Mul", ["t", "s"], ["y"]),
        ]
        ins, outs = [value("x", n)], [value("y", n)]
    elif case == "matmul" or case in PRODUCTS:
        a, b = inp["a"], inp["b"]
        inits = []
        nodes = [helper.make_node("MatMul", ["a", "b"], ["y"])]
        ins = [value("a", a.shape), value("b", b.shape)]
        outs = [value("y", product_shape(a.shape, b.shape))]
    else:
        return None
    graph = helper.make_graph(nodes, case, ins, outs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString(), [i.name for i in ins]


def ort_maker(case: str, quantize: bool = False, threads: int = 0) -> Maker:
    """ONNX Runtime on the case's graph; with `quantize`, the graph's weights quantised to int8
    by onnxruntime.quantization.quantize_dynamic first (its MatMul-family nodes then quantise
    their activations at run time); `threads` its intra-op threads (0: its default)."""
    import onnxruntime as ort

    def make(inp: dict[str, Any]) -> Runner | None:
        built = _onnx_graph(case, inp)
        if built is None:
            return None  # training needs onnxruntime-training, another package
        blob, names = built
        if quantize:
            blob = _quantized(blob)
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.intra_op_num_threads = threads
        session = ort.InferenceSession(blob, opts, providers=["CPUExecutionProvider"])
        # IO binding: inputs and the output stay in place between runs, as ours do.
        binding = session.io_binding()
        for name in names:
            arr = inp[name]
            binding.bind_cpu_input(name, arr)
        shape = session.get_outputs()[0].shape
        out = np.empty(shape, np.float32)
        binding.bind_output("y", "cpu", 0, np.float32, list(out.shape), out.ctypes.data)
        kept = [inp, out]  # the binding holds raw pointers into these arrays

        def run() -> None:
            session.run_with_iobinding(binding)
            assert kept

        return run

    return make


def _quantized(blob: bytes) -> bytes:
    """The model with int8 weights (QInt8, per tensor: quantize_dynamic's default)."""
    import logging
    import tempfile
    from pathlib import Path

    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # its advice to pre-process the model, on every call
    try:
        with tempfile.TemporaryDirectory(prefix="dlvm-bench-int8-") as tmp:
            src, dst = Path(tmp) / "f32.onnx", Path(tmp) / "int8.onnx"
            src.write_bytes(blob)
            quantize_dynamic(src, dst, weight_type=QuantType.QInt8)
            return dst.read_bytes()
    finally:
        root.setLevel(level)


PEERS: dict[str, Callable[[str], Maker]] = {
    "numpy": numpy_maker,
    "torch": torch_maker,
    "jax": jax_maker,
    "onnxruntime": ort_maker,
}
MODULES = {"numpy": "numpy", "torch": "torch", "jax": "jax", "onnxruntime": "onnxruntime"}


def available() -> list[str]:
    """The peers whose libraries are installed here."""
    return [p for p in PEERS if importlib.util.find_spec(MODULES[p]) is not None]
