"""Finite-difference gradient checks: differentiate a function with the differentiation pass,
run the gradient on the interpreter in float64, and compare it with central differences of
<seed, f(x)> for a random seed (so broadcasting and every output element are exercised)."""

from __future__ import annotations

from typing import cast

import numpy as np

from dlvm.interp import run_function
from dlvm.ir import parse_module
from dlvm.ir.typerules import gradient_type
from dlvm.ir.types import FunctionType, is_differentiable
from dlvm.ir.values import Function, GradientDecl, Module
from dlvm.ir.verifier import verify
from dlvm.transforms.differentiation import Differentiation


def add_gradient(
    module: Module, fn: str, wrt: tuple[int, ...] | None = None, source: int | None = None
) -> tuple[Function, tuple[int, ...]]:
    """Declares the seedable gradient of @fn (with respect to every float argument by
    default) as @<fn>_check; returns it and the wrt indices."""
    f = module.function_named(fn)
    assert f is not None, fn
    fty = cast(FunctionType, f.type)
    if wrt is None:
        wrt = tuple(i for i, t in enumerate(fty.arguments) if is_differentiable(t))
    g = Function(fn + "_check", gradient_type(fty, source, wrt, (), True))
    g.declaration = GradientDecl(f, source, wrt, (), True)
    module.add_function(g)
    return g, wrt


def differentiate(module: Module) -> Module:
    Differentiation().run(module)
    diags = verify(module)
    assert not diags, "\n".join(d.render() for d in diags)
    return module


def gradient_check(
    text: str,
    inputs: list[np.ndarray],
    fn: str = "f",
    wrt: tuple[int, ...] | None = None,
    source: int | None = None,
    eps: float = 1e-6,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    rng: np.random.Generator | None = None,
) -> list[np.ndarray]:
    """Asserts that the AD gradient of @fn at `inputs` matches finite differences; returns
    the AD gradients."""
    rng = rng or np.random.default_rng(0)
    module = parse_module(text)
    g, wrt = add_gradient(module, fn, wrt, source)
    differentiate(module)
    inputs = [np.asarray(x, dtype=np.float64) if _is_float(x) else x for x in inputs]

    def output(xs: list) -> np.ndarray:
        out = run_function(module, fn, xs, float64=True)
        return np.asarray(out[source] if source is not None else out, dtype=np.float64)

    seed = rng.standard_normal(output(inputs).shape)
    grads = run_function(module, g.name, [*inputs, seed], float64=True)
    for k, i in enumerate(wrt):
        x = inputs[i]
        numeric = np.zeros(np.shape(x))
        for j in np.ndindex(np.shape(x)):
            plus, minus = list(inputs), list(inputs)
            plus[i] = np.array(x, dtype=np.float64, copy=True)
            minus[i] = np.array(x, dtype=np.float64, copy=True)
            plus[i][j] += eps
            minus[i][j] -= eps
            numeric[j] = (np.sum(seed * output(plus)) - np.sum(seed * output(minus))) / (2 * eps)
        got = np.asarray(grads[k], dtype=np.float64)
        assert got.shape == numeric.shape, (got.shape, numeric.shape)
        np.testing.assert_allclose(got, numeric, rtol=rtol, atol=atol, err_msg=f"argument {i}")
    return list(grads)


def _is_float(x: object) -> bool:
    return isinstance(x, (float, np.floating)) or (
        isinstance(x, np.ndarray) and np.issubdtype(x.dtype, np.floating)
    )


# Writing small test modules ------------------------------------------------------------------


def ty(shape: tuple[int, ...]) -> str:
    return "f32" if not shape else "<" + " x ".join(map(str, shape)) + " x f32>"


def module(args: list[tuple[int, ...]], body: str, result: tuple[int, ...] | str) -> str:
    """A module with @f over arguments %a0, %a1… of the given shapes; body defines %r."""
    rty = result if isinstance(result, str) else ty(result)
    params = ", ".join(f"%a{i}: {ty(s)}" for i, s in enumerate(args))
    types = ", ".join(ty(s) for s in args)
    lines = "\n".join("    " + line for line in body.strip().splitlines())
    return (
        f'module "t"\nstage raw\n\nfunc @f: ({types}) -> {rty} {{\n'
        f"'entry({params}):\n{lines}\n    return %r: {rty}\n}}\n"
    )


def use(i: int, shape: tuple[int, ...]) -> str:
    return f"%a{i}: {ty(shape)}"
