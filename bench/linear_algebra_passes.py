"""What the linear-algebra passes buy. matrix-multiplication-reordering (MMR) on the 6-matrix
chain 30×35, 35×15, 15×5, 5×10, 10×20, 20×25 written left to right (and the same chain with
every dimension ×10): multiply-adds before and after, and the time of the chain on the IR
interpreter and in NumPy (the same products in the same order as the IR, before and after).
linear-algebra-fusion (LAF) on the LSTM sample (samples/lstm.tel, differentiated and CSE'd):
the products of a step before and after, the time of @infer on the interpreter, and the four
gate products of one step in NumPy at the sample's size and at batch 64, state 256 (four
products, against the fused form: one product over the concatenated matrices, then the
transposes and slices the pass emits). Best of N timings, on one BLAS thread unless
OPENBLAS_NUM_THREADS says otherwise. Reports only; the exit status is always 0."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from functools import partial

# One BLAS thread unless told otherwise: what is compared is the work each form does, and idle
# BLAS threads spinning between calls make short timings erratic on a busy machine.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from dlvm.interp import run_function  # noqa: E402
from dlvm.ir import module_text, parse_module  # noqa: E402
from dlvm.ir.builder import Builder, new_function  # noqa: E402
from dlvm.ir.types import DataType, FunctionType, TensorType, as_tensor  # noqa: E402
from dlvm.ir.values import Argument, Function, Module, Value  # noqa: E402
from dlvm.transforms.matrix_multiplication_reordering import multiply_adds  # noqa: E402
from dlvm.transforms.pass_manager import PassManager  # noqa: E402
from telc.driver import compile_text  # noqa: E402

CHAIN = (30, 35, 15, 5, 10, 20, 25)
LSTM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "samples", "lstm.tel")
MIN_TIMING = 0.02  # seconds per timing


def best(runs: int, work: Callable[[], object]) -> float:
    """The fastest of `runs` timings of work, per call, in seconds; each timing repeats the
    call until it takes at least MIN_TIMING."""
    number, start = 1, time.perf_counter()
    work()  # warms up and calibrates
    while (time.perf_counter() - start) * number < MIN_TIMING and number < 1 << 20:
        number *= 2
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(number):
            work()
        times.append((time.perf_counter() - start) / number)
    return min(times)


def chain_module(dims: tuple[int, ...]) -> Module:
    """@chain(M1, …, Mn) = ((M1·M2)·M3)·…·Mn over the matrices dims[i] × dims[i+1]."""
    shapes = tuple(TensorType((a, b), DataType.F32) for a, b in zip(dims, dims[1:]))
    result = TensorType((dims[0], dims[-1]), DataType.F32)
    names = [f"M{i + 1}" for i in range(len(shapes))]
    fn = new_function("chain", FunctionType(shapes, result), names)
    b = Builder(fn.entry)
    product: Value = fn.arguments[0]
    for m in fn.arguments[1:]:
        product = b.dot(product, m)
    b.build("return", [product])
    module = Module("chain")
    module.add_function(fn)
    return module


def numpy_program(fn: Function) -> Callable[[list[np.ndarray]], np.ndarray]:
    """fn's straight-line body of dots as NumPy code: the same products in the same order."""
    steps = list(fn.blocks[0].instructions)
    assert all(i.opcode in ("dot", "return") for i in steps), "only dots and a return"

    def run(args: list[np.ndarray]) -> np.ndarray:
        env: dict[Value, np.ndarray] = dict(zip(fn.arguments, args))
        for inst in steps[:-1]:
            env[inst] = env[inst.operands[0]] @ env[inst.operands[1]]
        return env[steps[-1].operands[0]]

    return run


def reorder_report(dims: tuple[int, ...], runs: int) -> None:
    before = chain_module(dims)
    after = parse_module(module_text(before))
    PassManager().run(after, PassManager.resolve(["MMR"]))
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((a, b)).astype(np.float32) for a, b in zip(dims, dims[1:])]
    print(f"\nMMR on the chain {', '.join(map(str, dims))}, written left to right:")
    print(f"{'':14} {'mul-adds':>12} {'interpreter µs':>15} {'NumPy µs':>10}")
    for label, module in (("before", before), ("after", after)):
        fn = module.functions[0]
        interp = best(runs, partial(run_function, module, "chain", args))
        numpy = best(runs, partial(numpy_program(fn), args))
        print(f"{label:14} {multiply_adds(fn):12,} {interp * 1e6:15.1f} {numpy * 1e6:10.1f}")


def lstm_module() -> Module:
    """The LSTM sample lowered, differentiated and CSE'd (one `extract` of the step's input)."""
    with open(LSTM, encoding="utf-8") as f:
        module = compile_text(LSTM, f.read()).module
    PassManager().run(module, PassManager.resolve(["differentiation", "CSE"]))
    return module


def step_dots(module: Module) -> tuple[int, int]:
    """(the products of @infer's step, those of them reading %h_prev)."""
    infer = module.function_named("infer")
    assert infer is not None
    step = infer.block_named("t_step")
    assert step is not None
    dots = [i for i in step.instructions if i.opcode == "dot"]
    return len(dots), sum(any(_named(v, "h_prev") for v in d.operands) for d in dots)


def _shape(value: Value) -> tuple[int, ...]:
    t = as_tensor(value.type)
    assert t is not None
    return t.shape


def _named(value: Value, name: str) -> bool:
    return isinstance(value, Argument) and value.name == name


def fusion_report(runs: int) -> None:
    before = lstm_module()
    after = parse_module(module_text(before))
    PassManager().run(after, PassManager.resolve(["LAF"]))
    infer = before.function_named("infer")
    assert infer is not None
    rng = np.random.default_rng(0)
    args = [rng.uniform(-1, 1, _shape(a)).astype(np.float32) for a in infer.arguments]
    print("\nLAF on the LSTM sample (@infer, 5 steps; the gate products of one step):")
    print(f"{'':14} {'step dots':>10} {'dots of h':>10} {'interpreter ms':>15}")
    for label, module in (("before", before), ("after", after)):
        dots, of_h = step_dots(module)
        interp = best(runs, partial(run_function, module, "infer", args))
        print(f"{label:14} {dots:10} {of_h:10} {interp * 1e3:15.2f}")
    gate_report(runs, rng)


def gate_report(runs: int, rng: np.random.Generator) -> None:
    """The four gate products of a step in NumPy, apart and fused as LAF fuses them."""
    print("\nThe four gate products h·U of a step in NumPy (float32), µs:")
    print(
        f"{'batch x state':14} {'four dots':>10} {'one dot':>10} {'+ split':>10} "
        f"{'+ concatenate':>14}"
    )
    for batch, state in ((4, 8), (64, 256)):
        h = rng.standard_normal((batch, state)).astype(np.float32)
        us = [rng.standard_normal((state, state)).astype(np.float32) for _ in range(4)]
        side_by_side = np.concatenate(us, axis=1)
        four = best(runs, partial(four_products, h, us))
        one = best(runs, partial(np.matmul, h, side_by_side))
        split = best(runs, partial(fused_products, h, side_by_side, len(us)))
        whole = best(runs, partial(concatenated_products, h, us))
        size = f"{batch} x {state}"
        print(
            f"{size:14} {four * 1e6:10.1f} {one * 1e6:10.1f} {split * 1e6:10.1f} "
            f"{whole * 1e6:14.1f}"
        )
    print("one dot: the fused product alone (the concatenation is loop-invariant: LICM hoists")
    print("it); + split: and the transpose, slices and transposes back, each copied; +")
    print("concatenate: and the concatenation, as in the loop body LAF leaves.")


def four_products(h: np.ndarray, us: list[np.ndarray]) -> list[np.ndarray]:
    return [h @ u for u in us]


def fused_products(h: np.ndarray, side_by_side: np.ndarray, parts: int) -> list[np.ndarray]:
    """LAF's code for h·U1…h·Un given [U1 … Un]: one product, transposed once, then per part a
    slice of rows and a transpose back, each materialised as the IR's values are."""
    columns = (h @ side_by_side).T
    width = len(columns) // parts
    return [np.ascontiguousarray(columns[i * width : (i + 1) * width].T) for i in range(parts)]


def concatenated_products(h: np.ndarray, us: list[np.ndarray]) -> list[np.ndarray]:
    """The same with the concatenation, as in the loop body LAF leaves."""
    return fused_products(h, np.concatenate(us, axis=1), len(us))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args(argv)
    threads = os.environ["OPENBLAS_NUM_THREADS"]
    print(f"Linear-algebra passes: best of {args.runs} runs, {threads} BLAS thread(s)")
    reorder_report(CHAIN, args.runs)
    reorder_report(tuple(10 * d for d in CHAIN), args.runs)
    fusion_report(args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
