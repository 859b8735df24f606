"""The reduced-precision peers of bench/precision.py, built on bench/peers.py's: ONNX Runtime
in f32 and with int8 weights (dynamic quantisation), PyTorch's own calls under bf16 autocast,
JAX's with bf16 parameters and inputs, PyTorch's product of bf16 matrices and JAX's chain on a
donated buffer. Each peer names the cases it runs; a peer whose library is missing is left
out."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from peers import Maker, Runner, jax_maker, ort_maker, torch_maker

MLP = ("mlp_b1", "mlp_b256", "train_b128")


class Peer(NamedTuple):
    make: Callable[[str, int], Maker]  # (case, threads: 0 for the library's default)
    module: str  # the library it needs
    cases: tuple[str, ...]


def use_threads(threads: int) -> None:
    """Every peer on `threads` threads (0: each library's default); before any peer is made,
    since XLA reads its flags when JAX starts."""
    if threads == 0:
        return
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen="
                               f"false intra_op_parallelism_threads={threads}").strip()  # fmt: skip
    os.environ["OMP_NUM_THREADS"] = str(threads)
    if importlib.util.find_spec("torch") is not None:
        import torch

        torch.set_num_threads(threads)


def _bf16(inp: dict[str, Any]) -> dict[str, Any]:
    """The case's arrays (and the MLP's parameters) as ml_dtypes.bfloat16."""
    import ml_dtypes

    def cast(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: cast(w) for k, w in v.items()}
        return np.asarray(v).astype(ml_dtypes.bfloat16)

    return {k: cast(v) for k, v in inp.items()}


def _torch_autocast(case: str, threads: int) -> Maker:
    """The f32 peer's calls (peers.torch_maker) under `torch.autocast("cpu", torch.bfloat16)`:
    products in bf16, the rest as autocast decides."""
    import torch

    f32 = torch_maker(case)

    def make(inp: dict[str, Any]) -> Runner | None:
        run = f32(inp)
        if run is None:
            return None

        def autocast(run: Runner = run) -> object:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return run()

        return autocast

    return make


def _torch_bf16(case: str, threads: int) -> Maker:
    """torch.matmul of bf16 tensors into a bf16 output."""
    import torch

    def make(inp: dict[str, Any]) -> Runner | None:
        a, b = (torch.from_numpy(inp[k]).to(torch.bfloat16) for k in ("a", "b"))
        out = torch.empty((a.shape[0], b.shape[1]), dtype=torch.bfloat16)
        return lambda: torch.matmul(a, b, out=out)

    return make


def _jax_bf16(case: str, threads: int) -> Maker:
    """The f32 peer's jitted functions (peers.jax_maker) on bf16 parameters and inputs (the
    train step updates bf16 parameters)."""
    f32 = jax_maker(case)
    return lambda inp: f32(_bf16(inp))


PEERS = {
    "onnxruntime f32": Peer(lambda c, n: ort_maker(c, threads=n), "onnxruntime", MLP[:2]),
    "onnxruntime int8": Peer(lambda c, n: ort_maker(c, True, n), "onnxruntime", MLP[:2]),
    "torch bf16 autocast": Peer(_torch_autocast, "torch", MLP),
    "torch bf16": Peer(_torch_bf16, "torch", ("matmul",)),
    "jax bf16": Peer(_jax_bf16, "jax", MLP),
    "jax (donated)": Peer(lambda c, n: jax_maker(c), "jax", ("chain",)),
}


def available() -> list[str]:
    """The peers whose libraries are installed here."""
    return [p for p, peer in PEERS.items() if importlib.util.find_spec(peer.module) is not None]
