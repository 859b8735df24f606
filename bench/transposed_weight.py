"""Products with a transposed weight, x · Wᵀ (what PyTorch's nn.Linear exports to ONNX), against
the same product with the weight stored transposed (x · W), one CPU thread, A/B between two
builds of the compiler in one process.

    python bench/transposed_weight.py build DIR [--cpu x86-64-v3]  # this checkout's compiler
    python bench/transposed_weight.py time DIR_A DIR_B [--blocks 12]

`build` writes DIR/nt.so with one exported function per case; `time` loads both libraries and
times each case in each, interleaved block by block, in CPU seconds of this process
(time.process_time: the host is shared, and wall-clock time counts other processes), and prints
the median per call of the blocks. Run it with DLRT_NUM_THREADS=1."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ab  # noqa: E402

# (name, m, k, n, dtype, transposed weight, epilogue: bias and relu)
CASES = [
    ("mlp1-b1-nt", 1, 784, 256, "f32", True, True),
    ("mlp1-b1-nn", 1, 784, 256, "f32", False, True),
    ("mlp2-b1-nt", 1, 256, 128, "f32", True, True),
    ("gemv-m4-nt", 4, 784, 256, "f32", True, False),
    ("gemv-m4-nn", 4, 784, 256, "f32", False, False),
    ("gemv-m8-nt", 8, 784, 256, "f32", True, False),
    ("gemv-m8-nn", 8, 784, 256, "f32", False, False),
    ("m12-nt", 12, 784, 256, "f32", True, False),
    ("m12-nn", 12, 784, 256, "f32", False, False),
    ("enc-16x64x192-nt", 16, 64, 192, "f32", True, True),
    ("enc-16x64x192-nn", 16, 64, 192, "f32", False, True),
    ("mlp1-b32-nt", 32, 784, 256, "f32", True, True),
    ("mlp1-b32-nn", 32, 784, 256, "f32", False, True),
    ("m32-k64-nt", 32, 64, 256, "f32", True, False),
    ("m32-k64-nn", 32, 64, 256, "f32", False, False),
    ("m64-k784-nt", 64, 784, 256, "f32", True, False),
    ("m64-k784-nn", 64, 784, 256, "f32", False, False),
    ("m64-k256-nt", 64, 256, 256, "f32", True, False),
    ("m64-k256-nn", 64, 256, 256, "f32", False, False),
    ("enc-512x64x256-nt", 512, 64, 256, "f32", True, True),
    ("enc-512x64x256-nn", 512, 64, 256, "f32", False, True),
    ("f64-b1-nt", 1, 300, 100, "f64", True, False),
]


def case_text(index: int, m: int, k: int, n: int, dt: str, nt: bool, epilogue: bool) -> str:
    w = f"<{n} x {k} x {dt}>" if nt else f"<{k} x {n} x {dt}>"
    x, c, o = f"<{m} x {k} x {dt}>", f"<1 x {n} x {dt}>", f"<{m} x {n} x {dt}>"
    lines = [f"func @f{index}: ({x}, {w}, {c}) -> {o} {{", f"'entry(%x: {x}, %w: {w}, %c: {c}):"]
    b = "%w"
    if nt:
        lines.append(f"    %t = transpose %w: {w}")
        b = "%t"
    lines.append(f"    %d = dot %x: <{m} x {k} x {dt}>, {b}: <{k} x {n} x {dt}>")
    r = "%d"
    if epilogue:
        lines.append(f"    %s = add %d: <{m} x {n} x {dt}>, %c: <1 x {n} x {dt}>")
        lines.append(f"    %r = max %s: <{m} x {n} x {dt}>, 0: {dt}")
        r = "%r"
    lines += [f"    return {r}: <{m} x {n} x {dt}>", "}", ""]
    return "\n".join(lines)


def module_text() -> str:
    body = [case_text(i, *c[1:]) for i, c in enumerate(CASES)]
    return 'module "nt"\nstage optimizable\n\n' + "\n".join(body)


def build(directory: Path, cpu: str) -> None:
    ab.build(directory, "nt", module_text(), cpu)


def inputs(index: int) -> list[np.ndarray]:
    _, m, k, n, dt, nt, _ = CASES[index]
    rng = np.random.default_rng(index)
    dtype = np.float32 if dt == "f32" else np.float64
    w = (n, k) if nt else (k, n)
    return [rng.uniform(-1, 1, s).astype(dtype) for s in [(m, k), w, (1, n)]]


def timing(dirs: list[Path], blocks: int) -> None:
    cases = [(c[0], inputs(i)) for i, c in enumerate(CASES)]
    ab.timing(dirs, "nt", cases, blocks, tolerance=1e-4, digits=4)


if __name__ == "__main__":
    ab.main(__doc__, build, timing, blocks=12)
