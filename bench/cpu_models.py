"""The first CPU benchmark: libraries built by telc against NumPy on the same machine, in one run,
interleaved: an MLP 784-512-256-10 (relu, softmax) inference at batch 1 and 256, its training
step (softmax cross-entropy, SGD) at batch 128, and the elementwise chain
`tanh(a*x + b) * sigmoid(x)` over 16M floats. Prints medians and minimums in milliseconds and
our/NumPy ratios of the medians (below 1: we are faster). Reports only; exit status 0."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import dlvm
from dlvm.codegen.build import build_library
from telc.driver import compile_text, library_spec, optimize

MLP = """module mlp
type float32
use nn
use optim
dim B = 256
x: in[B x 784]
labels: in[B x 10]
W1: param[784 x 512] = glorot()
b1: param[1 x 512] = 0.0
W2: param[512 x 256] = glorot()
b2: param[1 x 256] = 0.0
W3: param[256 x 10] = glorot()
b3: param[1 x 10] = 0.0
h1: hidden = relu(x . W1 + b1)
h2: hidden = relu(h1 . W2 + b2)
y: out[B x 10] = softmax(h2 . W3 + b3)
loss: out[] = cross_entropy(y, labels)
train minimizing loss using sgd(rate: 0.01)
"""

CHAIN = """module chain
use nn
dim N = 16777216
export def chain(x: [N]) -> [N] = tanh(0.5 * x + 0.25) * sigmoid(x)
"""


def build(text: str, name: str, directory: Path, defines: dict[str, int]) -> dlvm.Model:
    src = directory / f"{name}.tel"
    src.write_text(text)
    compiled = compile_text(str(src), text, defines)
    optimize(compiled.module)
    path = directory / f"{name}.so"
    build_library(compiled.module, library_spec(compiled.interface), path)
    return dlvm.load(path, seed=0)


def numpy_forward(x, p):
    h1 = np.maximum(x @ p["W1"] + p["b1"], 0)
    h2 = np.maximum(h1 @ p["W2"] + p["b2"], 0)
    z = h2 @ p["W3"] + p["b3"]
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True), (h1, h2)


def numpy_train_step(x, labels, p, rate=0.01):
    y, (h1, h2) = numpy_forward(x, p)
    n = x.shape[0]
    loss = -np.sum(labels * np.log(y)) / n
    dz = (y - labels) / n
    grads = {"W3": h2.T @ dz, "b3": dz.sum(0, keepdims=True)}
    dh2 = (dz @ p["W3"].T) * (h2 > 0)
    grads |= {"W2": h1.T @ dh2, "b2": dh2.sum(0, keepdims=True)}
    dh1 = (dh2 @ p["W2"].T) * (h1 > 0)
    grads |= {"W1": x.T @ dh1, "b1": dh1.sum(0, keepdims=True)}
    for k in p:
        p[k] -= rate * grads[k]
    return loss


def numpy_chain(x, out, tmp):
    np.multiply(x, 0.5, out=out)
    np.add(out, 0.25, out=out)
    np.tanh(out, out=out)
    np.negative(x, out=tmp)
    np.exp(tmp, out=tmp)
    np.add(tmp, 1.0, out=tmp)
    np.divide(out, tmp, out=out)


BLOCK = 5  # consecutive runs of one case
PAUSE = 0.3  # seconds between blocks: OpenBLAS's threads spin ~0.1 s after a call, on our cores


def measure(cases: dict[str, Callable[[], object]], runs: int) -> dict[str, list[float]]:
    """Interleaved blocks: each round runs every case BLOCK times in a row, so drift hits all
    alike, and pauses before each block, so no library's idle threads (OpenBLAS spin-waits
    after each call) take the cores from the next one."""
    times: dict[str, list[float]] = {k: [] for k in cases}
    for fn in cases.values():
        fn()  # warm up
    for _ in range(max(1, -(-runs // BLOCK))):
        for k, fn in cases.items():
            time.sleep(PAUSE)
            for _ in range(BLOCK):
                t0 = time.perf_counter()
                fn()
                times[k].append(time.perf_counter() - t0)
    return times


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        t0 = time.perf_counter()
        mlp1 = build(MLP, "mlp1", d, {"B": 1})
        build_s = time.perf_counter() - t0
        mlp256 = build(MLP, "mlp256", d, {"B": 256})
        mlp128 = build(MLP, "mlp128", d, {"B": 128})
        chain = build(CHAIN, "chain", d, {})
        params = {k: v.astype(np.float32) for k, v in mlp1.params.items()}
        x1 = rng.standard_normal((1, 784)).astype(np.float32)
        x256 = rng.standard_normal((256, 784)).astype(np.float32)
        x128 = rng.standard_normal((128, 784)).astype(np.float32)
        lab128 = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 128)]
        np_params = {k: v.copy() for k, v in params.items()}
        xs = rng.standard_normal(16_777_216).astype(np.float32)
        out, tmp_buf = np.empty_like(xs), np.empty_like(xs)
        pairs = [
            ("MLP infer, batch 1", lambda: mlp1.infer(x1), lambda: numpy_forward(x1, params)),
            (
                "MLP infer, batch 256",
                lambda: mlp256.infer(x256),
                lambda: numpy_forward(x256, params),
            ),  # fmt: skip
            (
                "MLP train step, batch 128",
                lambda: mlp128.train_step(x128, lab128),
                lambda: numpy_train_step(x128, lab128, np_params),
            ),  # fmt: skip
            (
                "tanh(a*x+b)*sigmoid(x), 16M",
                lambda: chain.chain(xs),
                lambda: numpy_chain(xs, out, tmp_buf),
            ),  # fmt: skip
        ]
        for name, ours, theirs in pairs:
            t = measure({"ours": ours, "numpy": theirs}, args.runs)
            rows.append((name, t["ours"], t["numpy"]))
    cpus = os.cpu_count()
    print(f"CPU benchmark: {cpus} CPUs, {args.runs} runs in interleaved blocks, times in ms")
    print(f"{'case':32} {'ours med':>10} {'ours min':>10} {'numpy med':>10} {'numpy min':>10} "
          f"{'ratio':>7}")  # fmt: skip
    for name, ours, theirs in rows:
        mo, mt = statistics.median(ours), statistics.median(theirs)
        print(f"{name:32} {mo * 1e3:10.3f} {min(ours) * 1e3:10.3f} {mt * 1e3:10.3f} "
              f"{min(theirs) * 1e3:10.3f} {mo / mt:7.2f}")  # fmt: skip
    print(f"telc build of the MLP (B=1, from source to .so): {build_s:.2f} s")
    print("ratio = our median / NumPy's median; below 1 we are faster.")
    print("Note: our libraries allocate each output array through dlvm.load; NumPy's chain")
    print("writes into preallocated buffers.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
