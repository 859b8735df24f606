"""The cases of the CPU benchmark, their inputs (seeded, so every process, the
OpenBLAS worker included, times the same numbers) and our side of each: a library built by
telc's pipeline and loaded with dlvm.load. The convolution cases (group "conv") live in
conv_cases.py."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import conv_cases
import numpy as np

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

MATMUL = """module matmul
dim N = 2048
export def matmul(a: [N x N], b: [N x N]) -> [N x N] = a . b
"""

# A pass bound by memory, not arithmetic (bench/precision.py's; not one of CASES): with
# --fast-math its output is stored non-temporally (dlvm/transforms/stream_schedule.py).
AFFINE = """module affine
dim N = 16777216
export def affine(x: [N]) -> [N] = 0.5 * x + 0.25
"""

CHAIN_N = 16_777_216
MATMUL_N = 2048

# Products of any rank (TEL's `.` is NumPy's matmul), each an exported `product`: a batch times
# one matrix, the same work as one flat product, and a batch of products (attention's scores).
PRODUCTS = {
    "stacked": ((32, 128, 256), (256, 256)),
    "stacked_flat": ((4096, 256), (256, 256)),
    "batched": ((8, 4, 128, 64), (8, 4, 64, 128)),
}


def product_shape(sa: tuple[int, ...], sb: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of matmul(a, b) for operands of rank 2 or more."""
    return (*np.broadcast_shapes(sa[:-2], sb[:-2]), sa[-2], sb[-1])


def product_source(case: str) -> str:
    sa, sb = PRODUCTS[case]
    out = product_shape(sa, sb)

    def shape(dims: tuple[int, ...]) -> str:
        return "[" + " x ".join(map(str, dims)) + "]"

    signature = f"product(a: {shape(sa)}, b: {shape(sb)}) -> {shape(out)}"
    return f"module {case}\nexport def {signature} = a . b\n"


def product_flops(case: str) -> float:
    sa, sb = PRODUCTS[case]
    return 2 * float(np.prod(np.broadcast_shapes(sa[:-2], sb[:-2]))) * sa[-2] * sa[-1] * sb[-1]


@dataclass(frozen=True)
class Case:
    key: str
    title: str
    unit: str  # what `work / seconds` measures, printed beside the times
    work: float  # bytes or flops per run
    group: str = "dense"  # `--cases conv` selects a group; its peers are conv_peers.py's


CASES = [
    Case("mlp_b1", "MLP 784-512-256-10 inference, batch 1", "", 0.0),
    Case(
        "mlp_b256",
        "MLP inference, batch 256",
        "GFLOP/s",
        2 * 256 * (784 * 512 + 512 * 256 + 256 * 10),
    ),  # fmt: skip
    Case(
        "train_b128",
        "MLP train step (SGD), batch 128",
        "GFLOP/s",
        6 * 128 * (784 * 512 + 512 * 256 + 256 * 10),
    ),  # fmt: skip
    Case("chain", "tanh(a*x+b)*sigmoid(x), 16M f32", "GB/s", 2 * 4 * CHAIN_N),
    Case("matmul", "matmul 2048^3 f32", "GFLOP/s", 2 * MATMUL_N**3),
    Case("stacked", "[32x128x256] . [256x256] f32", "GFLOP/s", product_flops("stacked")),
    Case("stacked_flat", "[4096x256] . [256x256] f32", "GFLOP/s", product_flops("stacked_flat")),
    Case("batched", "[8x4x128x64] . [8x4x64x128] f32", "GFLOP/s", product_flops("batched")),
    *(Case(*row, group="conv") for row in conv_cases.case_rows()),
]
CONV = {c.key for c in CASES if c.group == "conv"}


MLP_CASES = ("mlp_b1", "mlp_b256", "train_b128")
BATCHES = {"mlp_b1": 1, "mlp_b256": 256, "train_b128": 128}  # the MLP's dim B in each case


def mlp_params(rng: np.random.Generator) -> dict[str, np.ndarray]:
    sizes = [(784, 512), (512, 256), (256, 10)]
    params = {}
    for i, (fan_in, fan_out) in enumerate(sizes, 1):
        limit = np.sqrt(6.0 / (fan_in + fan_out))
        params[f"W{i}"] = rng.uniform(-limit, limit, (fan_in, fan_out)).astype(np.float32)
        params[f"b{i}"] = rng.uniform(-0.1, 0.1, (1, fan_out)).astype(np.float32)
    return params


def inputs(case: str) -> dict[str, Any]:
    """The inputs of `case`, the same in every process."""
    if case in CONV:
        return conv_cases.inputs(case)
    rng = np.random.default_rng(8)
    if case in MLP_CASES:
        batch = BATCHES[case]
        params = mlp_params(rng)
        x = rng.standard_normal((batch, 784)).astype(np.float32)
        labels = np.eye(10, dtype=np.float32)[rng.integers(0, 10, batch)]
        return {"params": params, "x": x, "labels": labels}
    if case in ("chain", "affine"):
        return {"x": rng.standard_normal(CHAIN_N).astype(np.float32)}
    if case == "matmul":
        return {
            "a": rng.standard_normal((MATMUL_N, MATMUL_N)).astype(np.float32),
            "b": rng.standard_normal((MATMUL_N, MATMUL_N)).astype(np.float32),
        }
    if case in PRODUCTS:
        sa, sb = PRODUCTS[case]
        return {
            "a": rng.standard_normal(sa).astype(np.float32),
            "b": rng.standard_normal(sb).astype(np.float32),
        }
    raise KeyError(case)


def build(
    text: str,
    name: str,
    directory: Path,
    defines: dict[str, int],
    fast_math: bool = False,
    precision: str = "f32",
    quantize: str | None = None,
) -> Any:
    """Compiles TEL `text` as `telc build -O2` does (with `--fast-math`: `fast_math`; with
    `--precision`: `precision`; with `--quantize`: `quantize`) and loads the library."""
    import dlvm
    from dlvm.codegen.build import build_library
    from telc.driver import compile_text, optimize
    from telc.driver import quantize as quantize_products

    src = directory / f"{name}.tel"
    src.write_text(text)
    compiled = compile_text(str(src), text, defines, precision=precision)
    optimize(compiled.module)
    if quantize is not None:
        quantize_products(compiled, quantize)
    path = directory / f"{name}.so"
    build_library(compiled.module, compiled.spec, path, fast_math=fast_math)
    return dlvm.load(path, seed=0)


class Ours:
    """Our libraries for the `wanted` cases, built once into a temporary directory."""

    def __init__(self, wanted: list[str]) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="dlvm-bench-")
        d = Path(self._tmp.name)
        sources = {
            **{case: (MLP, {"B": BATCHES[case]}) for case in MLP_CASES},
            "chain": (CHAIN, {}),
            "matmul": (MATMUL, {}),
            **{case: (product_source(case), {}) for case in PRODUCTS},
        }
        self.models = {case: build(text, case, d, defines)
                       for case, (text, defines) in sources.items() if case in wanted}  # fmt: skip
        self.models |= conv_cases.build_all([c for c in wanted if c in CONV], d, build)

    def make(self, case: str, inp: dict[str, Any]) -> Any:
        model = self.models[case]
        if case in CONV:
            return conv_cases.ours(case, model, inp)
        return runner(model, case, inp)

    def close(self) -> None:
        for m in {id(m): m for m in self.models.values()}.values():  # cases may share one
            m.close()
        self._tmp.cleanup()


# The entry each case calls and the inputs it passes, in order.
ENTRIES = {
    "mlp_b1": ("infer", ("x",)),
    "mlp_b256": ("infer", ("x",)),
    "train_b128": ("train_step", ("x", "labels")),
    "chain": ("chain", ("x",)),
    "affine": ("affine", ("x",)),
    "matmul": ("matmul", ("a", "b")),
    **{case: ("product", ("a", "b")) for case in PRODUCTS},
}


def runner(model: Any, case: str, inp: dict[str, Any]) -> Callable[[], object]:
    """One call of a dense `case` on a loaded `model` (the MLP's parameters set from inp): the
    inputs converted once to the element types of the model's entry (bf16 for a model written
    in bfloat16), the result written into a buffer of the entry's type; a train step returns
    its loss."""
    if case in MLP_CASES:
        for k, v in inp["params"].items():
            model.set_param(k, v)
    name, names = ENTRIES[case]
    entry = model.entries[name]
    args = [spec.convert(inp[n], "input") for spec, n in zip(entry.inputs, names)]
    fn = getattr(model, name)
    if case == "train_b128":
        return lambda: fn(*args)
    (result,) = entry.outputs
    out = np.empty(result.shape, result.dtype)
    return lambda: fn(*args, out=out)
