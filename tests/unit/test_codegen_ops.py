"""Every instruction's CPU lowering against the interpreter on random inputs: odd sizes (1,
primes, lengths that are not multiples of the vector width), broadcasting, every element type a
kernel meets. One library holds all the cases (one build), each case an exported function."""

from __future__ import annotations

import numpy as np
import pytest

import dlvm
from dlvm.codegen.build import build_library
from dlvm.codegen.spec import module_spec
from dlvm.interp import run_function
from dlvm.ir import parse_module

# name: (signature arguments, result type, body lines using %a, %b, …; the last defines %r)
CASES: dict[str, tuple[list[str], str, list[str]]] = {}


def case(name: str, args: list[str], result: str, *body: str) -> None:
    CASES[name] = (args, result, list(body))


UNARY = "exp log tanh sqrt sin cos negate square rsqrt erf sinh cosh atan floor ceil round sign"
for _op in [*UNARY.split(), "asin", "acos", "tan"]:
    case(f"unary-{_op}", ["<3 x 17 x f32>"], "<3 x 17 x f32>", f"%r = {_op} %a: <3 x 17 x f32>")
case("unary-f64-tanh", ["<1 x 31 x f64>"], "<1 x 31 x f64>", "%r = tanh %a: <1 x 31 x f64>")
for _op in ["add", "subtract", "multiply", "divide", "max", "min", "power", "modulo"]:
    case(
        f"binary-{_op}-broadcast",
        ["<3 x 17 x f32>", "<1 x 17 x f32>"],
        "<3 x 17 x f32>",
        f"%r = {_op} %a: <3 x 17 x f32>, %b: <1 x 17 x f32>",
    )
case(
    "binary-scalar-operand",
    ["<5 x 7 x f64>", "f64"],
    "<5 x 7 x f64>",
    "%r = subtract %b: f64, %a: <5 x 7 x f64>",
)
for _op in ["add", "multiply", "divide", "modulo", "floorDivide", "truncateDivide", "max"]:
    case(
        f"int-{_op}",
        ["<4 x 9 x i32>", "<4 x 9 x i32>"],
        "<4 x 9 x i32>",
        f"%r = {_op} %a: <4 x 9 x i32>, %b: <4 x 9 x i32>",
    )
case(
    "compare-select",
    ["<6 x 11 x f32>", "<6 x 1 x f32>"],
    "<6 x 11 x f32>",
    "%c = greaterThan %a: <6 x 11 x f32>, %b: <6 x 1 x f32>",
    "%r = select %a: <6 x 11 x f32>, 0: f32 by %c: <6 x 11 x bool>",
)
case(
    "bool-logic",
    ["<13 x f32>", "<13 x f32>"],
    "<13 x bool>",
    "%c = lessThan %a: <13 x f32>, %b: <13 x f32>",
    "%d = notEqual %a: <13 x f32>, 0: f32",
    "%e = and %c: <13 x bool>, %d: <13 x bool>",
    "%r = not %e: <13 x bool>",
)
case(
    "casts",
    ["<7 x f32>"],
    "<7 x f64>",
    "%h = dataTypeCast %a: <7 x f32> to f16",
    "%r = dataTypeCast %h: <7 x f16> to f64",
)
case("dot-odd", ["<7 x 13 x f32>", "<13 x 5 x f32>"], "<7 x 5 x f32>",
     "%r = dot %a: <7 x 13 x f32>, %b: <13 x 5 x f32>")  # fmt: skip
case("dot-one", ["<1 x 1 x f64>", "<1 x 1 x f64>"], "<1 x 1 x f64>",
     "%r = dot %a: <1 x 1 x f64>, %b: <1 x 1 x f64>")  # fmt: skip
case("dot-batched", ["<2 x 3 x 4 x f32>", "<2 x 4 x 5 x f32>"], "<2 x 3 x 5 x f32>",
     "%r = dot %a: <2 x 3 x 4 x f32>, %b: <2 x 4 x 5 x f32>")  # fmt: skip
case("dot-vectors", ["<37 x f64>", "<37 x f64>"], "f64", "%r = dot %a: <37 x f64>, %b: <37 x f64>")
case("dot-large-parallel", ["<256 x 300 x f32>", "<300 x 67 x f32>"], "<256 x 67 x f32>",
     "%r = dot %a: <256 x 300 x f32>, %b: <300 x 67 x f32>")  # fmt: skip
# The tiled product: leftover rows and columns, several slices of p, few-row tiles, f64, i32.
case("dot-tiles", ["<13 x 600 x f32>", "<600 x 37 x f32>"], "<13 x 37 x f32>",
     "%r = dot %a: <13 x 600 x f32>, %b: <600 x 37 x f32>")  # fmt: skip
case("dot-two-rows", ["<2 x 9 x f32>", "<9 x 70 x f32>"], "<2 x 70 x f32>",
     "%r = dot %a: <2 x 9 x f32>, %b: <9 x 70 x f32>")  # fmt: skip
case("dot-f64", ["<7 x 300 x f64>", "<300 x 11 x f64>"], "<7 x 11 x f64>",
     "%r = dot %a: <7 x 300 x f64>, %b: <300 x 11 x f64>")  # fmt: skip
case("dot-i32", ["<8 x 5 x i32>", "<5 x 19 x i32>"], "<8 x 19 x i32>",
     "%r = dot %a: <8 x 5 x i32>, %b: <5 x 19 x i32>")  # fmt: skip
case("dot-column", ["<9 x 4 x f32>", "<4 x 1 x f32>"], "<9 x 1 x f32>",
     "%r = dot %a: <9 x 4 x f32>, %b: <4 x 1 x f32>")  # fmt: skip
# Epilogues and prologues fused into the product (tests/filecheck/codegen shows the fusion).
case("dot-epilogue-bias-tanh", ["<13 x 20 x f32>", "<20 x 17 x f32>", "<1 x 17 x f32>"],
     "<13 x 17 x f32>",
     "%d = dot %a: <13 x 20 x f32>, %b: <20 x 17 x f32>",
     "%s = add %d: <13 x 17 x f32>, %c: <1 x 17 x f32>",
     "%r = tanh %s: <13 x 17 x f32>")  # fmt: skip
case("dot-epilogue-relu-derivative", ["<7 x 3 x f32>", "<3 x 9 x f32>", "<7 x 9 x f32>"],
     "<7 x 9 x f32>",
     "%d = dot %a: <7 x 3 x f32>, %b: <3 x 9 x f32>",
     "%p = greaterThan %c: <7 x 9 x f32>, 0: f32",
     "%r = select %d: <7 x 9 x f32>, 0: f32 by %p: <7 x 9 x bool>")  # fmt: skip
case("dot-epilogue-batched", ["<3 x 5 x 4 x f64>", "<3 x 4 x 6 x f64>"], "<3 x 5 x 6 x f64>",
     "%d = dot %a: <3 x 5 x 4 x f64>, %b: <3 x 4 x 6 x f64>",
     "%r = subtract %d: <3 x 5 x 6 x f64>, 1: f64")  # fmt: skip
case("dot-read-twice", ["<5 x 4 x f32>", "<4 x 6 x f32>"], "<5 x 6 x f32>",
     "%d = dot %a: <5 x 4 x f32>, %b: <4 x 6 x f32>",
     "%r = multiply %d: <5 x 6 x f32>, %d: <5 x 6 x f32>")  # fmt: skip
case("dot-prologue-transposes", ["<11 x 7 x f32>", "<19 x 11 x f32>"], "<7 x 19 x f32>",
     "%t = transpose %a: <11 x 7 x f32>",
     "%u = transpose %b: <19 x 11 x f32>",
     "%r = dot %t: <7 x 11 x f32>, %u: <11 x 19 x f32>")  # fmt: skip
case("dot-prologue-scaled", ["<300 x 7 x f32>", "<7 x 23 x f32>"], "<300 x 23 x f32>",
     "%s = multiply %b: <7 x 23 x f32>, 0.5: f32",
     "%r = dot %a: <300 x 7 x f32>, %s: <7 x 23 x f32>")  # fmt: skip
case("transpose-3d", ["<2 x 3 x 5 x f32>"], "<5 x 3 x 2 x f32>",
     "%r = transpose %a: <2 x 3 x 5 x f32>")  # fmt: skip
case("reverse", ["<4 x 3 x 5 x f32>"], "<4 x 3 x 5 x f32>",
     "%r = reverse %a: <4 x 3 x 5 x f32> along 0, 2")  # fmt: skip
case("slice", ["<9 x 4 x f32>"], "<3 x 4 x f32>", "%r = slice %a: <9 x 4 x f32> from 2 upto 4")
case(
    "concatenate-axis-1",
    ["<3 x 2 x f32>", "<3 x 5 x f32>"],
    "<3 x 9 x f32>",
    "%r = concatenate %a: <3 x 2 x f32>, %b: <3 x 5 x f32>, %a: <3 x 2 x f32> along 1",
)
case(
    "shape-ops",
    ["<6 x 4 x f32>"],
    "<3 x 1 x 8 x f32>",
    "%s = shapeCast %a: <6 x 4 x f32> to 3 x 8",
    "%p = padShape %s: <3 x 8 x f32> at 1",
    "%t = tanh %p: <3 x 1 x 8 x f32>",
    "%r = add %t: <3 x 1 x 8 x f32>, 1: f32",
)
case(
    "squeeze",
    ["<5 x 1 x 3 x f32>"],
    "<5 x 3 x f32>",
    "%r = squeezeShape %a: <5 x 1 x 3 x f32> at 1",
)
case(
    "tensor-literal",
    ["<2 x 3 x f32>"],
    "<2 x 3 x f32>",
    "%l = literal <<1.0: f32, 2.0: f32, 3.0: f32>: <3 x f32>, "
    "<4.0: f32, 5.0: f32, 6.0: f32>: <3 x f32>>: <2 x 3 x f32>",
    "%r = multiply %a: <2 x 3 x f32>, %l: <2 x 3 x f32>",
)
for _comb, _init in [("add", "0"), ("max", "-inf"), ("min", "inf"), ("multiply", "1")]:
    case(
        f"reduce-{_comb}",
        ["<3 x 7 x 5 x f32>"],
        "<7 x f32>",
        f"%r = reduce %a: <3 x 7 x 5 x f32> by {_comb} init {_init}: f32 along 0, 2",
    )
case("reduce-all-fused", ["<9 x 11 x f64>"], "f64",
     "%e = exp %a: <9 x 11 x f64>",
     "%r = reduce %e: <9 x 11 x f64> by add init 0: f64 along 0, 1")  # fmt: skip
case("scan", ["<4 x 6 x f32>"], "<4 x 6 x f32>",
     "%r = scan %a: <4 x 6 x f32> by add along 1, 0")  # fmt: skip
case(
    "reduce-window-half",
    ["<2 x 3 x 7 x 5 x f32>"],
    "<2 x 3 x 4 x 3 x f32>",
    "%r = reduceWindow %a: <2 x 3 x 7 x 5 x f32> by max init -inf: f32 dims 1, 1, 3, 2 "
    "strides 1, 1, 2, 2 padding half",
)
case(
    "convolve-strided-padded-grouped",
    ["<2 x 4 x 7 x 6 x f32>", "<6 x 2 x 3 x 2 x f32>"],
    "<2 x 6 x 4 x 3 x f32>",
    "%r = convolve %a: <2 x 4 x 7 x 6 x f32> kernel %b: <6 x 2 x 3 x 2 x f32> strides 2, 2 "
    "padding (1, 1), (0, 1) groups 2",
)
case(
    "convolve-dilated",
    ["<1 x 2 x 6 x 6 x f64>", "<3 x 2 x 2 x 2 x f64>"],
    "<1 x 3 x 11 x 4 x f64>",
    "%r = convolve %a: <1 x 2 x 6 x 6 x f64> kernel %b: <3 x 2 x 2 x 2 x f64> "
    "padding (1, 1), (0, 0) leftDilation 2, 1 rightDilation 2, 2",
)


def module_text() -> str:
    lines = ['module "ops"', "stage optimizable", ""]
    for i, (name, (args, result, body)) in enumerate(CASES.items()):
        names = [chr(ord("a") + k) for k in range(len(args))]
        params = ", ".join(f"%{n}: {t}" for n, t in zip(names, args))
        lines.append(f"func @f{i}: ({', '.join(args)}) -> {result} {{")
        lines.append(f"'entry({params}):")
        lines += ["    " + line for line in body]
        lines += [f"    return %r: {result}", "}", ""]
        del name
    return "\n".join(lines)


NP = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i32": np.int32, "bool": np.bool_}


def random_input(t: str, rng: np.random.Generator, name: str) -> np.ndarray:
    inner = t.strip("<>").split(" x ")
    dtype, shape = inner[-1], tuple(int(d) for d in inner[:-1])
    if dtype == "i32":
        x = rng.integers(-20, 20, shape).astype(np.int32)
        return np.where(x == 0, 3, x) if "int-" in name else x
    x = rng.uniform(-2, 2, shape)
    if any(k in name for k in ("log", "sqrt", "rsqrt", "power", "modulo")):
        x = np.abs(x) + 0.1
    if any(k in name for k in ("asin", "acos")):
        x = x / 2.5
    return x.astype(NP[dtype])


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    text = module_text()
    module = parse_module(text, "ops.dl")
    path = tmp_path_factory.mktemp("ops") / "ops.so"
    build_library(module, module_spec(module, "test"), path)
    with dlvm.load(path) as lib:
        yield lib, parse_module(text, "ops.dl")


@pytest.mark.parametrize("index, name", list(enumerate(CASES)), ids=list(CASES))
def test_instruction_matches_interpreter(library, index, name):
    lib, reference = library
    args, _, _ = CASES[name]
    rng = np.random.default_rng(index)
    inputs = [random_input(t, rng, name) for t in args]
    expected = np.asarray(run_function(reference, f"f{index}", inputs))
    got = np.asarray(getattr(lib, f"f{index}")(*inputs))
    assert got.shape == expected.shape and got.dtype == expected.dtype
    if expected.dtype.kind in "biu":
        np.testing.assert_array_equal(got, expected)
    else:
        tol = 1e-12 if expected.dtype == np.float64 else 2e-6
        np.testing.assert_allclose(got, expected, rtol=tol, atol=tol * 10)
