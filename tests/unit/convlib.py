"""Helpers for the convolution code-generation tests: a case (name, input shape, kernel shape,
options) as an IR function in f32 and f64, one library of cases with their seedable gradients,
and the checks every path shares: compiled against interpreted, and compiled gradients against
central differences of the compiled convolution."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from gradcheck import add_gradient, differentiate
from irlib import ir_library

import dlvm
from dlvm.interp import run_function
from dlvm.ir import module_text, parse_module

Case = tuple[str, tuple[int, ...], tuple[int, ...], str]
DTYPES = {"f32": np.float32, "f64": np.float64}


def ty(shape: tuple[int, ...], dt: str) -> str:
    return "<" + " x ".join(map(str, shape)) + f" x {dt}>"


def out_shape(x: tuple[int, ...], k: tuple[int, ...], options: str) -> tuple[int, ...]:
    text = (f'module "s"\nstage raw\n\nfunc @f: ({ty(x, "f32")}, {ty(k, "f32")}) -> f32 {{\n'
            f"'entry(%x: {ty(x, 'f32')}, %k: {ty(k, 'f32')}):\n"
            f"    %r = convolve %x: {ty(x, 'f32')} kernel %k: {ty(k, 'f32')} {options}\n"
            "    return 0: f32\n}\n")  # fmt: skip
    inst = parse_module(text, "s.dl").functions[0].blocks[0].instructions[0]
    return inst.type.shape  # type: ignore[attr-defined]


def function(name: str, x: tuple[int, ...], k: tuple[int, ...], options: str, dt: str) -> str:
    r = ty(out_shape(x, k, options), dt)
    return (
        f"func @{name}: ({ty(x, dt)}, {ty(k, dt)}) -> {r} {{\n"
        f"'entry(%x: {ty(x, dt)}, %k: {ty(k, dt)}):\n"
        f"    %r = convolve %x: {ty(x, dt)} kernel %k: {ty(k, dt)} {options}\n"
        f"    return %r: {r}\n}}\n"
    )


def symbol(name: str, dt: str) -> str:
    return f"conv_{name.replace('-', '_')}_{dt}"


def inputs(x: tuple[int, ...], k: tuple[int, ...], dt: str, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-2, 2, s).astype(DTYPES[dt]) for s in (x, k)]


def output_seed(case: Case, dt: str, seed: int) -> np.ndarray:
    """A seed of the convolution's output shape, for its gradient <seed, conv(x, k)>."""
    _, x, k, options = case
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, out_shape(x, k, options)).astype(DTYPES[dt])


def assert_close(got: np.ndarray, want: np.ndarray, dt: str) -> None:
    """Sums taken in another order (tiles, slices, fused multiply-adds): a few ulp of the
    largest magnitude."""
    assert got.shape == want.shape and got.dtype == want.dtype
    tol = 1e-12 if dt == "f64" else 1e-5
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)


@contextmanager
def conv_library(
    tag: str,
    cases: Sequence[Case],
    gradients: Sequence[str],
    directory: Path,
    wrt: tuple[int, ...] | None = None,
) -> Iterator[tuple[Any, Any]]:
    """One library of every case in both types and the seedable gradients (@NAME_check, with
    respect to `wrt`, both operands by default) of the cases named in `gradients`; yields it
    with the differentiated module the interpreter runs."""
    parts = [f'module "{tag}"\nstage raw\n']
    for name, x, k, options in cases:
        for dt in DTYPES:
            parts.append(function(symbol(name, dt), x, k, options, dt))
    module = parse_module("\n".join(parts), f"{tag}.dl")
    for name in gradients:
        for dt in DTYPES:
            add_gradient(module, symbol(name, dt), wrt=wrt)
    differentiate(module)
    text = module_text(module)
    with dlvm.load(ir_library(text, tag, directory)) as lib:
        yield lib, parse_module(text, f"{tag}.dl")


def gradients_of(lib: Any, case: Case, dt: str, args: list[np.ndarray], seed: np.ndarray) -> list:
    """The compiled gradients of a case, as a list (a result of one tensor comes back bare)."""
    got = getattr(lib, symbol(case[0], dt) + "_check")(*args, seed)
    return list(got) if isinstance(got, tuple) else [got]


def check_forward(compiled: tuple[Any, Any], case: Case, dt: str, seed: int) -> None:
    """The compiled convolution against the interpreter's."""
    lib, reference = compiled
    name, x, k, _ = case
    args = inputs(x, k, dt, seed)
    want = np.asarray(run_function(reference, symbol(name, dt), args))
    assert_close(np.asarray(getattr(lib, symbol(name, dt))(*args)), want, dt)


def check_gradients(
    compiled: tuple[Any, Any], case: Case, dt: str, seed: int, out_seed: int
) -> list[np.ndarray]:
    """The compiled gradients against the interpreter's; returns the compiled ones."""
    lib, reference = compiled
    _, x, k, _ = case
    args = inputs(x, k, dt, seed)
    grad_seed = output_seed(case, dt, out_seed)
    want = run_function(reference, symbol(case[0], dt) + "_check", [*args, grad_seed])
    got = gradients_of(lib, case, dt, args, grad_seed)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_close(np.asarray(g), np.asarray(w), dt)
    return got


def check_finite_differences(
    compiled: tuple[Any, Any],
    case: Case,
    seed: int,
    out_seed: int,
    wrt: tuple[int, ...] = (0, 1),
    points: int = 12,
) -> None:
    """The compiled f64 gradients of <seed, conv(x, k)> with respect to the operands `wrt`
    against central differences of the compiled convolution, at `points` elements each."""
    lib, _ = compiled
    _, x, k, _ = case
    args = inputs(x, k, "f64", seed)
    grad_seed = output_seed(case, "f64", out_seed)
    f = getattr(lib, symbol(case[0], "f64"))
    grads = gradients_of(lib, case, "f64", args, grad_seed)
    rng = np.random.default_rng(out_seed + 1)
    eps = 1e-6
    for i, grad in zip(wrt, grads):
        for _ in range(points):
            at = tuple(int(rng.integers(0, n)) for n in args[i].shape)
            plus, minus = [a.copy() for a in args], [a.copy() for a in args]
            plus[i][at] += eps
            minus[i][at] -= eps
            numeric = (np.sum(grad_seed * f(*plus)) - np.sum(grad_seed * f(*minus))) / (2 * eps)
            assert abs(grad[at] - numeric) <= 1e-6 * max(1.0, abs(numeric)), (i, at)
