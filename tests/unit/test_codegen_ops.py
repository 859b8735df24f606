"""Every instruction's CPU lowering against the interpreter on random inputs: odd sizes (1,
primes, lengths that are not multiples of the vector width), broadcasting, every element type a
kernel meets. One library holds all the cases (one build), each case an exported function."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from irlib import ir_library

import dlvm
from dlvm.interp import InterpreterError, run_function
from dlvm.ir import parse_module
from dlvm.ir.ops import COMPARE
from dlvm.runtime import Status

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
# Bitwise logic and shifts on integers: amounts past the width and negative ones (i8 inputs
# are in [-20, 20)) are defined, 0 to the left and the sign to the right.
case(
    "bitwise-i8",
    ["<5 x 9 x i8>", "<5 x 9 x i8>"],
    "<5 x 9 x i8>",
    "%l = shiftLeft %a: <5 x 9 x i8>, %b: <5 x 9 x i8>",
    "%s = shiftRight %a: <5 x 9 x i8>, %b: <5 x 9 x i8>",
    "%x = xor %l: <5 x 9 x i8>, %s: <5 x 9 x i8>",
    "%o = or %x: <5 x 9 x i8>, %b: <5 x 9 x i8>",
    "%n = not %o: <5 x 9 x i8>",
    "%r = and %n: <5 x 9 x i8>, %a: <5 x 9 x i8>",
)
case(
    "bitwise-i64-bool-xor",
    ["<4 x 7 x i64>", "<4 x 7 x i64>"],
    "<4 x 7 x bool>",
    "%l = shiftLeft %a: <4 x 7 x i64>, 60: i64",
    "%s = shiftRight %b: <4 x 7 x i64>, 1: i64",
    "%p = lessThan %l: <4 x 7 x i64>, %s: <4 x 7 x i64>",
    "%q = greaterThan %a: <4 x 7 x i64>, 0: i64",
    "%r = xor %p: <4 x 7 x bool>, %q: <4 x 7 x bool>",
)
case(
    "casts",
    ["<7 x f32>"],
    "<7 x f64>",
    "%h = dataTypeCast %a: <7 x f32> to f16",
    "%r = dataTypeCast %h: <7 x f16> to f64",
)
# Across bases (halves, negatives): float to int truncates, int to float, both to and from bool.
case(
    "convert",
    ["<3 x 7 x f32>"],
    "<3 x 7 x f16>",
    "%s = multiply %a: <3 x 7 x f32>, 2.5: f32",
    "%i = convert %s: <3 x 7 x f32> to i8",
    "%b = convert %i: <3 x 7 x i8> to bool",
    "%n = convert %b: <3 x 7 x bool> to i32",
    "%f = convert %i: <3 x 7 x i8> to f16",
    "%g = convert %n: <3 x 7 x i32> to f16",
    "%r = add %f: <3 x 7 x f16>, %g: <3 x 7 x f16>",
)
# Past f16's range a literal is infinity (65519 rounds down to 65504, 65520 up to inf).
case("f16-literals", ["<5 x f16>"], "<5 x f16>", "%m = min %a: <5 x f16>, 65519: f16",
     "%r = add %m: <5 x f16>, 70000: f16")  # fmt: skip
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
# Packed products (dlvm.codegen.panels): several slices of p, leftover rows and columns, panels
# of a computed a and b, an epilogue, f64, a batch.
case("dot-packed-slices", ["<100 x 800 x f32>", "<800 x 70 x f32>"], "<100 x 70 x f32>",
     "%r = dot %a: <100 x 800 x f32>, %b: <800 x 70 x f32>")  # fmt: skip
case("dot-packed-prologues", ["<397 x 120 x f32>", "<131 x 397 x f32>", "<1 x 131 x f32>"],
     "<120 x 131 x f32>",
     "%t = transpose %a: <397 x 120 x f32>",
     "%u = transpose %b: <131 x 397 x f32>",
     "%d = dot %t: <120 x 397 x f32>, %u: <397 x 131 x f32>",
     "%s = add %d: <120 x 131 x f32>, %c: <1 x 131 x f32>",
     "%r = max %s: <120 x 131 x f32>, 0: f32")  # fmt: skip
case("dot-packed-f64", ["<61 x 50 x f64>", "<50 x 33 x f64>"], "<61 x 33 x f64>",
     "%r = dot %a: <61 x 50 x f64>, %b: <50 x 33 x f64>")  # fmt: skip
case("dot-packed-batched", ["<2 x 60 x 20 x f32>", "<2 x 20 x 40 x f32>"], "<2 x 60 x 40 x f32>",
     "%r = dot %a: <2 x 60 x 20 x f32>, %b: <2 x 20 x 40 x f32>")  # fmt: skip
# Few rows (compute-scheduling's `columns`): threads take groups of columns; a narrow last strip.
case("dot-few-rows-columns", ["<2 x 700 x f32>", "<700 x 300 x f32>", "<1 x 300 x f32>"],
     "<2 x 300 x f32>",
     "%d = dot %a: <2 x 700 x f32>, %b: <700 x 300 x f32>",
     "%r = add %d: <2 x 300 x f32>, %c: <1 x 300 x f32>")  # fmt: skip
case("dot-one-row-columns", ["<1 x 400 x f64>", "<400 x 200 x f64>"], "<1 x 200 x f64>",
     "%r = dot %a: <1 x 400 x f64>, %b: <400 x 200 x f64>")  # fmt: skip
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
# An integer Wᵀ, packed by square blocks along W's rows (dlvm.codegen.transposing): steps and
# columns left over.
case("dot-transposed-i32", ["<9 x 20 x i32>", "<37 x 20 x i32>"], "<9 x 37 x i32>",
     "%t = transpose %b: <37 x 20 x i32>",
     "%r = dot %a: <9 x 20 x i32>, %t: <20 x 37 x i32>")  # fmt: skip
# Products big enough for CUDA's shared-memory tiles (64 x 64 outputs; test_cuda_kernels):
# no size a multiple of the tile, a batch, an epilogue, f64.
case("dot-tiled-batched-epilogue", ["<2 x 70 x 65 x f32>", "<2 x 65 x 67 x f32>",
     "<2 x 1 x 67 x f32>"], "<2 x 70 x 67 x f32>",
     "%d = dot %a: <2 x 70 x 65 x f32>, %b: <2 x 65 x 67 x f32>",
     "%s = add %d: <2 x 70 x 67 x f32>, %c: <2 x 1 x 67 x f32>",
     "%r = tanh %s: <2 x 70 x 67 x f32>")  # fmt: skip
case("dot-tiled-f64", ["<65 x 33 x f64>", "<33 x 129 x f64>"], "<65 x 129 x f64>",
     "%r = dot %a: <65 x 33 x f64>, %b: <33 x 129 x f64>")  # fmt: skip
# f16 products (CUDA: tensor cores, mma.m16n8k16 with f32 accumulators, from 64 x 64 outputs).
case("dot-f16", ["<70 x 40 x f16>", "<40 x 130 x f16>"], "<70 x 130 x f16>",
     "%r = dot %a: <70 x 40 x f16>, %b: <40 x 130 x f16>")  # fmt: skip
case("dot-f16-batched-epilogue", ["<2 x 64 x 33 x f16>", "<2 x 33 x 65 x f16>",
     "<2 x 1 x 65 x f16>"], "<2 x 64 x 65 x f16>",
     "%d = dot %a: <2 x 64 x 33 x f16>, %b: <2 x 33 x 65 x f16>",
     "%r = add %d: <2 x 64 x 65 x f16>, %c: <2 x 1 x 65 x f16>")  # fmt: skip
# bf16: stored in 16 bits, computed in f32 and rounded once to nearest even (elementwise,
# exact as ml_dtypes' for + - × ÷; to a bf16 ulp for the transcendental functions), casts and
# conversions through f32, literals past the range infinite; sums in f64 along a row and across
# rows, products in f32 (a product with an epilogue; a convolution), each rounded once.
case("bf16-elementwise", ["<3 x 37 x bf16>", "<3 x 37 x bf16>"], "<3 x 37 x bf16>",
     "%m = multiply %a: <3 x 37 x bf16>, %b: <3 x 37 x bf16>",
     "%e = exp %m: <3 x 37 x bf16>",
     "%t = tanh %a: <3 x 37 x bf16>",
     "%s = subtract %e: <3 x 37 x bf16>, %t: <3 x 37 x bf16>",
     "%q = divide %s: <3 x 37 x bf16>, 3: bf16",
     "%r = max %q: <3 x 37 x bf16>, -0.5: bf16")  # fmt: skip
case("bf16-casts", ["<3 x 7 x f32>"], "<3 x 7 x bf16>",
     "%s = multiply %a: <3 x 7 x f32>, 2.5: f32",
     "%h = dataTypeCast %s: <3 x 7 x f32> to bf16",
     "%f = dataTypeCast %h: <3 x 7 x bf16> to f16",
     "%g = dataTypeCast %f: <3 x 7 x f16> to bf16",
     "%d = dataTypeCast %g: <3 x 7 x bf16> to f64",
     "%n = dataTypeCast %d: <3 x 7 x f64> to bf16",
     "%i = convert %n: <3 x 7 x bf16> to i32",
     "%b = convert %i: <3 x 7 x i32> to bool",
     "%c = convert %b: <3 x 7 x bool> to bf16",
     "%j = convert %i: <3 x 7 x i32> to bf16",
     "%r = add %j: <3 x 7 x bf16>, %c: <3 x 7 x bf16>")  # fmt: skip
case("bf16-literals", ["<5 x bf16>"], "<5 x bf16>", "%m = multiply %a: <5 x bf16>, 3e38: bf16",
     "%r = add %m: <5 x bf16>, 1e39: bf16")  # fmt: skip
case("bf16-compare-select", ["<4 x 9 x bf16>", "<1 x 9 x bf16>"], "<4 x 9 x bf16>",
     "%p = lessThan %a: <4 x 9 x bf16>, %b: <1 x 9 x bf16>",
     "%r = select %a: <4 x 9 x bf16>, %b: <1 x 9 x bf16> by %p: <4 x 9 x bool>")  # fmt: skip
case("reduce-bf16-along-rows", ["<300 x 9 x bf16>"], "<9 x bf16>",
     "%r = reduce %a: <300 x 9 x bf16> by add init 0: bf16 along 0")  # fmt: skip
case("reduce-bf16", ["<4 x 300 x bf16>"], "<4 x bf16>",
     "%r = reduce %a: <4 x 300 x bf16> by add init 1: bf16 along 1")  # fmt: skip
case("reduce-bf16-max", ["<4 x 30 x bf16>"], "<30 x bf16>",
     "%r = reduce %a: <4 x 30 x bf16> by max init -inf: bf16 along 0")  # fmt: skip
case("dot-bf16", ["<70 x 40 x bf16>", "<40 x 130 x bf16>"], "<70 x 130 x bf16>",
     "%r = dot %a: <70 x 40 x bf16>, %b: <40 x 130 x bf16>")  # fmt: skip
case("dot-bf16-batched-epilogue", ["<2 x 64 x 33 x bf16>", "<2 x 33 x 65 x bf16>",
     "<2 x 1 x 65 x bf16>"], "<2 x 64 x 65 x bf16>",
     "%d = dot %a: <2 x 64 x 33 x bf16>, %b: <2 x 33 x 65 x bf16>",
     "%r = add %d: <2 x 64 x 65 x bf16>, %c: <2 x 1 x 65 x bf16>")  # fmt: skip
# Packed in pairs for vdpbf16ps (AVX-512 BF16 hosts), odd steps; x · Wᵀ with a bias and tanh
# (more: test_bf16_kernel.py).
case("dot-bf16-packed-odd-steps", ["<113 x 75 x bf16>", "<75 x 70 x bf16>"], "<113 x 70 x bf16>",
     "%r = dot %a: <113 x 75 x bf16>, %b: <75 x 70 x bf16>")  # fmt: skip
case("dot-bf16-linear-tanh", ["<80 x 51 x bf16>", "<66 x 51 x bf16>", "<1 x 66 x bf16>"],
     "<80 x 66 x bf16>",
     "%t = transpose %b: <66 x 51 x bf16>",
     "%d = dot %a: <80 x 51 x bf16>, %t: <51 x 66 x bf16>",
     "%s = add %d: <80 x 66 x bf16>, %c: <1 x 66 x bf16>",
     "%r = tanh %s: <80 x 66 x bf16>")  # fmt: skip
case("convolve-bf16", ["<2 x 4 x 7 x 6 x bf16>", "<6 x 2 x 3 x 2 x bf16>"],
     "<2 x 6 x 4 x 3 x bf16>",
     "%r = convolve %a: <2 x 4 x 7 x 6 x bf16> kernel %b: <6 x 2 x 3 x 2 x bf16> strides 2, 2 "
     "padding (1, 1), (0, 1) groups 2")  # fmt: skip
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
case("reduce-subtract", ["<3 x 7 x 5 x f32>"], "<7 x f32>",
     "%r = reduce %a: <3 x 7 x 5 x f32> by subtract init 1: f32 along 0, 2")  # fmt: skip
# Reductions that keep the last dimension accumulate whole rows (kernel.py, reduce_rows).
for _comb, _init in [("add", "0"), ("max", "-inf"), ("multiply", "1")]:
    case(f"reduce-rows-{_comb}", ["<6 x 5 x 19 x f32>"], "<19 x f32>",
         f"%r = reduce %a: <6 x 5 x 19 x f32> by {_comb} init {_init}: f32 along 0, 1")  # fmt: skip
case("reduce-rows-middle-subtract", ["<3 x 7 x 5 x f32>"], "<3 x 5 x f32>",
     "%r = reduce %a: <3 x 7 x 5 x f32> by subtract init 1: f32 along 1")  # fmt: skip
case("reduce-rows-int-max", ["<9 x 13 x i32>"], "<13 x i32>",
     "%r = reduce %a: <9 x 13 x i32> by max init -2147483648: i32 along 0")  # fmt: skip
case("reduce-rows-fused", ["<9 x 11 x f64>"], "<11 x f64>",
     "%e = exp %a: <9 x 11 x f64>",
     "%r = reduce %e: <9 x 11 x f64> by add init 0: f64 along 0")  # fmt: skip
case("reduce-rows-parallel", ["<300 x 260 x f32>"], "<260 x f32>",
     "%r = reduce %a: <300 x 260 x f32> by add init 0: f32 along 0")  # fmt: skip
# Long reductions into few outputs (CUDA reduces each with a whole block: test_cuda_kernels):
# 32-bit elements end in warp shuffles, others in shared memory; every combinator it takes.
case("reduce-long-max", ["<3 x 1000 x f32>"], "<3 x f32>",
     "%r = reduce %a: <3 x 1000 x f32> by max init -inf: f32 along 1")  # fmt: skip
case("reduce-long-i32-add", ["<700 x 5 x i32>"], "<5 x i32>",
     "%r = reduce %a: <700 x 5 x i32> by add init 7: i32 along 0")  # fmt: skip
case("reduce-long-f64-multiply", ["<2 x 400 x f64>"], "<2 x f64>",
     "%r = reduce %a: <2 x 400 x f64> by multiply init 1: f64 along 1")  # fmt: skip
case("reduce-long-all-min", ["<37 x 29 x f32>"], "f32",
     "%r = reduce %a: <37 x 29 x f32> by min init 5: f32 along 0, 1")  # fmt: skip
case("reduce-long-all-add", ["<37 x 29 x f32>"], "f32",
     "%e = exp %a: <37 x 29 x f32>",
     "%r = reduce %e: <37 x 29 x f32> by add init 1: f32 along 0, 1")  # fmt: skip
case("scan-subtract-int", ["<5 x 4 x i32>"], "<5 x 4 x i32>",
     "%r = scan %a: <5 x 4 x i32> by subtract along 0")  # fmt: skip
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
# Convolutions with 64 x 64 outputs or more (CUDA: a tiled implicit product): groups, strides,
# padding, dilations, a fused epilogue.
case("convolve-tiled-grouped-strided", ["<2 x 4 x 19 x 17 x f32>", "<32 x 2 x 3 x 3 x f32>",
     "<1 x 32 x 1 x 1 x f32>"], "<2 x 32 x 10 x 9 x f32>",
     "%v = convolve %a: <2 x 4 x 19 x 17 x f32> kernel %b: <32 x 2 x 3 x 3 x f32> strides 2, 2 "
     "padding (1, 1), (1, 1) groups 2",
     "%r = add %v: <2 x 32 x 10 x 9 x f32>, %c: <1 x 32 x 1 x 1 x f32>")  # fmt: skip
case("convolve-tiled-dilated-f64", ["<1 x 3 x 12 x 12 x f64>", "<40 x 3 x 2 x 2 x f64>"],
     "<1 x 40 x 23 x 10 x f64>",
     "%r = convolve %a: <1 x 3 x 12 x 12 x f64> kernel %b: <40 x 3 x 2 x 2 x f64> "
     "padding (1, 1), (0, 0) leftDilation 2, 1 rightDilation 2, 2")  # fmt: skip
# A small convolution with its bias and activation fused (CUDA: the element loop's epilogue).
case("convolve-epilogue-bias-relu", ["<2 x 3 x 6 x 5 x f32>", "<4 x 3 x 3 x 3 x f32>",
     "<1 x 4 x 1 x 1 x f32>"], "<2 x 4 x 6 x 5 x f32>",
     "%v = convolve %a: <2 x 3 x 6 x 5 x f32> kernel %b: <4 x 3 x 3 x 3 x f32> "
     "padding (1, 1), (1, 1)",
     "%s = add %v: <2 x 4 x 6 x 5 x f32>, %c: <1 x 4 x 1 x 1 x f32>",
     "%r = max %s: <2 x 4 x 6 x 5 x f32>, 0: f32")  # fmt: skip
case(
    "convolve-dilated",
    ["<1 x 2 x 6 x 6 x f64>", "<3 x 2 x 2 x 2 x f64>"],
    "<1 x 3 x 11 x 4 x f64>",
    "%r = convolve %a: <1 x 2 x 6 x 6 x f64> kernel %b: <3 x 2 x 2 x 2 x f64> "
    "padding (1, 1), (0, 0) leftDilation 2, 1 rightDilation 2, 2",
)

# bitCast: element types of one size in a kernel (fused, reshaped), other sizes
# in host code (the same bytes, read by the next kernel).
case("bitCast-f32-i32", ["<3 x 7 x f32>"], "<3 x 7 x i32>",
     "%r = bitCast %a: <3 x 7 x f32> to <3 x 7 x i32>")  # fmt: skip
case("bitCast-fused-reshaped", ["<3 x 7 x f32>"], "<21 x f32>",
     "%i = bitCast %a: <3 x 7 x f32> to <3 x 7 x i32>",
     "%j = add %i: <3 x 7 x i32>, 1048576: i32",
     "%r = bitCast %j: <3 x 7 x i32> to <21 x f32>")  # fmt: skip
case("bitCast-f64-i64", ["<5 x f64>"], "<5 x i64>", "%r = bitCast %a: <5 x f64> to <5 x i64>")
case("bitCast-f16-i16", ["<1 x 9 x f16>"], "<1 x 9 x i16>",
     "%r = bitCast %a: <1 x 9 x f16> to <1 x 9 x i16>")  # fmt: skip
case("bitCast-i8-i8", ["<11 x i8>"], "<11 x i8>",
     "%c = bitCast %a: <11 x i8> to <11 x i8>",
     "%r = negate %c: <11 x i8>")  # fmt: skip
case("bitCast-host-i16-i32", ["<6 x i16>"], "<3 x i32>",
     "%b = bitCast %a: <6 x i16> to <3 x i32>",
     "%r = add %b: <3 x i32>, 1: i32")  # fmt: skip
case("bitCast-host-scalar", ["<2 x i32>"], "i64", "%r = bitCast %a: <2 x i32> to i64")
# Shape queries: constants of the operand's type, read by later kernels.
case("queries", ["<3 x 7 x f32>", "f32"], "<2 x i64>",
     "%n = unitCount of %a: <3 x 7 x f32>",
     "%k = rank of %a: <3 x 7 x f32>",
     "%z = rank of %b: f32",
     "%s = shape of %a: <3 x 7 x f32>",
     "%m = multiply %n: i64, %k: i64",
     "%m1 = add %m: i64, %z: i64",
     "%r = add %s: <2 x i64>, %m1: i64")  # fmt: skip
# Reductions by a function (HELPERS): reduce calls it per element in host code; scan and
# reduceWindow compute its body inline in their kernels. @blend is not associative, so the
# order of the fold shows.
case("reduce-by-function", ["<3 x 4 x 5 x f32>"], "<4 x f32>",
     "%r = reduce %a: <3 x 4 x 5 x f32> by @blend: (f32, f32) -> f32 init 1: f32 "
     "along 2, 0")  # fmt: skip
case("reduce-all-by-function", ["<7 x 3 x i32>"], "i32",
     "%r = reduce %a: <7 x 3 x i32> by @twice_minus: (i32, i32) -> i32 init 1: i32 "
     "along 0, 1")  # fmt: skip
case("scan-by-function", ["<4 x 6 x f32>"], "<4 x 6 x f32>",
     "%r = scan %a: <4 x 6 x f32> by @blend: (f32, f32) -> f32 along 1, 0")  # fmt: skip
case(
    "reduce-window-by-function",
    ["<2 x 7 x 5 x f32>"],
    "<2 x 4 x 3 x f32>",
    "%r = reduceWindow %a: <2 x 7 x 5 x f32> by @blend_max: (f32, f32) -> f32 init 0: f32 "
    "dims 1, 3, 2 strides 1, 2, 2 padding half",
)

# Instructions the cases above left out (test_codegen_coverage fails while one is missing), and
# the cases where they differ from their neighbours: rint and round at exact halves (to even,
# away from zero), comparisons with ties (floats holding small integers).
for _op in ["erfc", "lgamma", "rint"]:
    case(f"unary-{_op}", ["<3 x 17 x f32>"], "<3 x 17 x f32>", f"%r = {_op} %a: <3 x 17 x f32>")
for _op in ["rint", "round"]:
    case(f"unary-{_op}-halves", ["<2 x 13 x f32>"], "<2 x 13 x f32>",
         f"%r = {_op} %a: <2 x 13 x f32>")  # fmt: skip
case("unary-f64-lgamma-erfc", ["<1 x 31 x f64>"], "<1 x 31 x f64>",
     "%l = lgamma %a: <1 x 31 x f64>",
     "%r = erfc %l: <1 x 31 x f64>")  # fmt: skip
# softplus far into both tails ("wide": |x| up to 120), where e^x overflows f32 or is subnormal;
# f16 and bf16 are computed in f32.
for _t in ["f32", "f64", "f16", "bf16"]:
    case(f"unary-softplus-wide-{_t}", [f"<3 x 17 x {_t}>"], f"<3 x 17 x {_t}>",
         f"%r = softplus %a: <3 x 17 x {_t}>")  # fmt: skip
for _op in COMPARE:
    case(f"compare-ties-{_op}", ["<5 x 9 x f32>", "<1 x 9 x f32>"], "<5 x 9 x bool>",
         f"%r = {_op} %a: <5 x 9 x f32>, %b: <1 x 9 x f32>")  # fmt: skip
    case(f"compare-ties-int-{_op}", ["<4 x 8 x i32>", "i32"], "<4 x 8 x bool>",
         f"%r = {_op} %a: <4 x 8 x i32>, %b: i32")  # fmt: skip
case(
    "bool-logic-or",
    ["<13 x f32>", "<13 x f32>"],
    "<13 x bool>",
    "%c = lessThan %a: <13 x f32>, %b: <13 x f32>",
    "%d = greaterThanOrEqual %a: <13 x f32>, 0.5: f32",
    "%r = or %c: <13 x bool>, %d: <13 x bool>",
)

# gather and scatterAdd: rows of a table by integer ids of any shape and width (ids are drawn
# in [0, 3), so scatterAdd meets repeated ids), along the first axis (rows copied whole) and
# others, a scalar id, ids computed by a kernel of their own, a literal base of zeros.
case("gather-rows", ["<7 x 19 x f32>", "<4 x 3 x i32>"], "<4 x 3 x 19 x f32>",
     "%r = gather %a: <7 x 19 x f32> at %b: <4 x 3 x i32> along 0")  # fmt: skip
case("gather-axis-1", ["<3 x 5 x 4 x f64>", "<6 x i64>"], "<3 x 6 x 4 x f64>",
     "%r = gather %a: <3 x 5 x 4 x f64> at %b: <6 x i64> along 1")  # fmt: skip
case("gather-last-axis-scalar-id", ["<3 x 5 x f32>", "i8"], "<3 x f32>",
     "%r = gather %a: <3 x 5 x f32> at %b: i8 along 1")  # fmt: skip
case("gather-int-table-computed-ids", ["<4 x 9 x i32>", "<2 x 5 x i16>"], "<2 x 5 x 9 x i32>",
     "%i = add %b: <2 x 5 x i16>, 1: i16",
     "%t = multiply %a: <4 x 9 x i32>, 3: i32",
     "%r = gather %t: <4 x 9 x i32> at %i: <2 x 5 x i16> along 0")  # fmt: skip
case("gather-literal-ids", ["<5 x 3 x f32>"], "<2 x 3 x f32>",
     "%i = literal <4: i32, 0: i32>: <2 x i32>",
     "%g = gather %a: <5 x 3 x f32> at %i: <2 x i32> along 0",
     "%s = gather %a: <5 x 3 x f32> at 2: i64 along 0",
     "%p = padShape %s: <3 x f32> at 0",
     "%r = add %g: <2 x 3 x f32>, %p: <1 x 3 x f32>")  # fmt: skip
case("scatterAdd-rows", ["<4 x 3 x 19 x f32>", "<4 x 3 x i32>", "<7 x 19 x f32>"],
     "<7 x 19 x f32>",
     "%r = scatterAdd %a: <4 x 3 x 19 x f32> at %b: <4 x 3 x i32> into %c: <7 x 19 x f32> "
     "along 0")  # fmt: skip
case("scatterAdd-axis-1-zeros", ["<3 x 6 x 4 x f64>", "<6 x i64>"], "<3 x 5 x 4 x f64>",
     "%z = literal zero: <3 x 5 x 4 x f64>",
     "%r = scatterAdd %a: <3 x 6 x 4 x f64> at %b: <6 x i64> into %z: <3 x 5 x 4 x f64> "
     "along 1")  # fmt: skip
case("scatterAdd-int-last-axis", ["<2 x 7 x i32>", "<7 x i32>", "<2 x 4 x i32>"], "<2 x 4 x i32>",
     "%r = scatterAdd %a: <2 x 7 x i32> at %b: <7 x i32> into %c: <2 x 4 x i32> "
     "along 1")  # fmt: skip

HELPERS = """
func @blend: (f32, f32) -> f32 {
'entry(%acc: f32, %x: f32):
    %h = multiply %acc: f32, 0.5: f32
    %r = add %h: f32, %x: f32
    return %r: f32
}

func @blend_max: (f32, f32) -> f32 {
'entry(%acc: f32, %x: f32):
    %b = apply @blend(%acc: f32, %x: f32): (f32, f32) -> f32
    %r = max %b: f32, %x: f32
    return %r: f32
}

func @twice_minus: (i32, i32) -> i32 {
'entry(%acc: i32, %x: i32):
    %d = multiply %acc: i32, 2: i32
    %r = subtract %d: i32, %x: i32
    return %r: i32
}

func @random_i32: (i32, i32) -> <37 x 29 x i32> {
'entry(%lo: i32, %hi: i32):
    %r = random 37 x 29 from %lo: i32 upto %hi: i32
    return %r: <37 x 29 x i32>
}

func @random_i8: (i8, i8) -> <1031 x i8> {
'entry(%lo: i8, %hi: i8):
    %r = random 1031 from %lo: i8 upto %hi: i8
    return %r: <1031 x i8>
}

func @random_i64: (i64, i64) -> <3 x 5 x i64> {
'entry(%lo: i64, %hi: i64):
    %r = random 3 x 5 from %lo: i64 upto %hi: i64
    return %r: <3 x 5 x i64>
}
"""


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
    return "\n".join(lines) + HELPERS


NP = {
    "f32": np.float32,
    "f64": np.float64,
    "f16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "i8": np.int8,
    "i16": np.int16,
    "i32": np.int32,
    "i64": np.int64,
    "bool": np.bool_,
}


BF16 = np.dtype(ml_dtypes.bfloat16)


def random_input(t: str, rng: np.random.Generator, name: str) -> np.ndarray:
    inner = t.strip("<>").split(" x ")
    dtype, shape = inner[-1], tuple(int(d) for d in inner[:-1])
    if dtype[0] == "i":
        if "gather" in name or "scatter" in name:  # ids (and integer tables) in [0, 3)
            return rng.integers(0, 3, shape).astype(NP[dtype])
        if "ties" in name:  # equal operands are common
            return rng.integers(-3, 3, shape).astype(NP[dtype])
        x = rng.integers(-20, 20, shape).astype(NP[dtype])
        return np.where(x == 0, 3, x) if "int-" in name else x
    x = rng.uniform(-2, 2, shape)
    if "ties" in name:
        x = np.round(x)
    if "halves" in name:
        x = np.round(x * 2) / 2
    if "wide" in name:
        x = x * 60
    if any(k in name for k in ("log", "sqrt", "rsqrt", "power", "modulo")):
        x = np.abs(x) + 0.1
    if any(k in name for k in ("asin", "acos")):
        x = x / 2.5
    return x.astype(NP[dtype])


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    text = module_text()
    with dlvm.load(ir_library(text, "ops", tmp_path_factory.mktemp("ops"))) as lib:
        yield lib, parse_module(text, "ops.dl")


@pytest.mark.parametrize("index, name", list(enumerate(CASES)), ids=list(CASES))
def test_instruction_matches_interpreter(library, index, name):
    lib, reference = library
    args, _, _ = CASES[name]
    rng = np.random.default_rng(index)
    inputs = [random_input(t, rng, name) for t in args]
    expected = np.asarray(run_function(reference, f"f{index}", inputs))
    assert_matches(name, np.asarray(getattr(lib, f"f{index}")(*inputs)), expected)


def assert_matches(name: str, got: np.ndarray, expected: np.ndarray, f32: float = 2e-6) -> None:
    """A compiled case's result against the interpreter's: integers exactly; floats to `f32`
    relative (1e-12 for f64), and sums (products, convolutions, reductions), which a kernel may
    take in another order (tiles, slices, fused multiply-adds, blocks of GPU threads), to a few
    ulp of the result's magnitude; f16 products accumulate in f16 on the CPU, so 1%; bf16 to
    one bf16 ulp (2^-8 to 2^-7 relative: f32 results that round differently near a tie)."""
    assert got.shape == expected.shape and got.dtype == expected.dtype
    if expected.dtype.kind in "biu":
        np.testing.assert_array_equal(got, expected)
        return
    narrow = expected.dtype in (np.dtype(np.float16), BF16)
    tol = {np.dtype(np.float64): 1e-12, np.dtype(np.float16): 1e-2, BF16: 8e-3}.get(
        expected.dtype, f32
    )
    atol = tol * 10
    if expected.dtype == BF16:  # assert_allclose does not take ml_dtypes' arrays
        got, expected = got.astype(np.float32), expected.astype(np.float32)
    if any(k in name for k in ("dot", "convolve", "reduce")) and expected.size:
        tol *= 1 if narrow else 5
        atol = tol * max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(got, expected, rtol=tol, atol=atol)


def test_random_integers_are_uniform_in_the_range(library):
    """The library's stream is not the interpreter's: what must agree is the distribution,
    uniform over [lo, hi) (rng.integers in the interpreter)."""
    lib, _ = library
    x = lib.random_i32(-3, 4)
    assert x.dtype == np.int32 and x.shape == (37, 29)
    values, counts = np.unique(x, return_counts=True)
    assert list(values) == list(range(-3, 4))
    assert counts.min() > 100 and counts.max() < 210  # 153 expected each
    assert not np.array_equal(x, lib.random_i32(-3, 4))  # each call draws anew
    b = lib.random_i8(-128, 127)
    assert b.dtype == np.int8 and b.min() >= -128 and b.max() <= 126
    assert len(np.unique(b)) > 220 and abs(b.mean() + 0.5) < 10
    w = lib.random_i64(-(2**62), 2**62)
    assert w.min() >= -(2**62) and w.max() < 2**62
    assert w.min() < -(2**60) and w.max() > 2**60
    assert np.all(lib.random_i32(5, 6) == 5)


def test_random_integers_refuse_an_empty_range(library):
    lib, reference = library
    with pytest.raises(dlvm.LibraryError, match=r"random range \[4, 4\) is empty") as e:
        lib.random_i32(4, 4)
    assert e.value.status is Status.INVALID_ARGUMENT
    with pytest.raises(InterpreterError, match=r"random range \[4, 4\) is empty"):
        run_function(reference, "random_i32", [4, 4])


def test_a_float32_sum_of_cancelling_terms_keeps_its_digits(tmp_path):
    """A reduction that sums one output element at a time accumulates f32 in f64: 4,096 terms
    of size 1e3 that cancel to about 1 come out within a few ulp of the exact sum, where an f32
    accumulator is off by about 1e-3 (a batch norm's gradient sums such terms)."""
    text = """module "sums"
stage raw

func @f: (<2 x 4096 x f32>) -> <2 x f32> {
'entry(%a: <2 x 4096 x f32>):
    %r = reduce %a: <2 x 4096 x f32> by add init 0: f32 along 1
    return %r: <2 x f32>
}
"""
    rng = np.random.default_rng(0)
    big = rng.normal(0.0, 1e3, (2, 2048)).astype(np.float32)
    small = rng.normal(0.0, 1e-3, (2, 4096)).astype(np.float32)
    a = (np.concatenate([big, -big], axis=1) + small).astype(np.float32)
    exact = a.astype(np.float64).sum(axis=1)
    with dlvm.load(ir_library(text, "sums", tmp_path)) as lib:
        got = np.asarray(lib.f(a), np.float64)
    np.testing.assert_allclose(got, exact, rtol=1e-6)
    sequential = np.float32(0) + np.zeros(2, np.float32)
    for column in a.T:  # what an f32 accumulator gives, in the same order
        sequential = (sequential + column).astype(np.float32)
    assert np.max(np.abs(sequential - exact)) > 100 * np.max(np.abs(got - exact))


def test_a_float16_sum_is_rounded_once(tmp_path):
    """An f16 sum accumulates in f64 too and is rounded once, as the interpreter's (NumPy's):
    64 terms of about 1 summed in f16 lose several ulp of the result."""
    text = """module "sums16"
stage raw

func @f: (<4 x 64 x f16>) -> <4 x f16> {
'entry(%a: <4 x 64 x f16>):
    %r = reduce %a: <4 x 64 x f16> by add init 0: f16 along 1
    return %r: <4 x f16>
}
"""
    a = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float16)
    with dlvm.load(ir_library(text, "sums16", tmp_path)) as lib:
        got = np.asarray(lib.f(a))
    np.testing.assert_array_equal(got, a.astype(np.float64).sum(axis=1).astype(np.float16))
    np.testing.assert_array_equal(got, run_function(parse_module(text, "s.dl"), "f", [a]))
