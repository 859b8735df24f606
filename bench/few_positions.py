"""Convolutions with few output positions per image (a ResNet's last stages at a small batch),
one CPU thread, A/B between two builds of the compiler in one process.

    python bench/few_positions.py build DIR [--cpu x86-64-v3]  # this checkout's compiler
    python bench/few_positions.py time DIR_A DIR_B [--blocks 9]

`build` writes DIR/fp.so with one exported function per case (float32, NCHW, OIHW); `time`
loads both libraries and times each case in each, interleaved block by block, in CPU seconds of
this process (time.process_time: the host is shared, and wall-clock time counts other
processes), and prints the median per call of the blocks. Run it with DLRT_NUM_THREADS=1."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ab  # noqa: E402

PAD = "padding (1, 1), (1, 1)"
# (name, input shape, kernel shape, options): ResNet-18 at 32x32's last two stages (s4: 4x4
# positions, s3: 8x8), at 224x224's last (7x7) and 64x64's (2x2), then other sizes.
CASES = [
    ("s4-3x3", (1, 512, 4, 4), (512, 512, 3, 3), PAD),
    ("s4-down", (1, 256, 8, 8), (512, 256, 3, 3), "strides 2, 2 " + PAD),
    ("s4-1x1", (1, 256, 8, 8), (512, 256, 1, 1), "strides 2, 2"),
    ("s3-3x3", (1, 256, 8, 8), (256, 256, 3, 3), PAD),
    ("s3-down", (1, 128, 16, 16), (256, 128, 3, 3), "strides 2, 2 " + PAD),
    ("c64-8x8", (1, 64, 8, 8), (64, 64, 3, 3), PAD),
    ("c128-8x8", (1, 128, 8, 8), (128, 128, 3, 3), PAD),
    ("c512-8x8", (1, 512, 8, 8), (512, 512, 3, 3), PAD),
    ("c512-7x7", (1, 512, 7, 7), (512, 512, 3, 3), PAD),
    ("c256-7x7", (1, 256, 7, 7), (256, 256, 3, 3), PAD),
    ("c64-6x6", (1, 64, 6, 6), (64, 64, 3, 3), PAD),
    ("c64-4x4", (1, 64, 4, 4), (64, 64, 3, 3), PAD),
    ("c512-2x2", (1, 512, 2, 2), (512, 512, 3, 3), PAD),
    ("b2-s4", (2, 512, 4, 4), (512, 512, 3, 3), PAD),
    ("b4-s4", (4, 512, 4, 4), (512, 512, 3, 3), PAD),
    ("b32-1x1", (32, 512, 1, 1), (512, 512, 1, 1), ""),
]


def ty(shape: tuple[int, ...]) -> str:
    return "<" + " x ".join(map(str, shape)) + " x f32>"


def module_text() -> str:
    from dlvm.ir import parse_module

    parts = ['module "fp"\nstage raw\n']
    for i, (_, x, k, options) in enumerate(CASES):
        # The output's type from the IR's own shape rule.
        probe = parse_module(
            f'module "p"\nstage raw\n\nfunc @p: ({ty(x)}, {ty(k)}) -> f32 {{\n'
            f"'entry(%x: {ty(x)}, %k: {ty(k)}):\n"
            f"    %r = convolve %x: {ty(x)} kernel %k: {ty(k)} {options}\n"
            "    return 0: f32\n}\n",
            "p.dl",
        )
        out = ty(probe.functions[0].blocks[0].instructions[0].type.shape)  # type: ignore[attr-defined]
        parts.append(
            f"func @f{i}: ({ty(x)}, {ty(k)}) -> {out} {{\n'entry(%x: {ty(x)}, %k: {ty(k)}):\n"
            f"    %r = convolve %x: {ty(x)} kernel %k: {ty(k)} {options}\n"
            f"    return %r: {out}\n}}\n"
        )
    return "\n".join(parts)


def build(directory: Path, cpu: str) -> None:
    ab.build(directory, "fp", module_text(), cpu)


def timing(dirs: list[Path], blocks: int) -> None:
    cases = []
    for i, (name, x, k, _) in enumerate(CASES):
        rng = np.random.default_rng(i)
        cases.append((name, [rng.standard_normal(s).astype(np.float32) for s in (x, k)]))
    ab.timing(dirs, "fp", cases, blocks, tolerance=1e-3, digits=3)


if __name__ == "__main__":
    ab.main(__doc__, build, timing, blocks=9)
