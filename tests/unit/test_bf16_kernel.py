"""bf16 matrix products on the CPU (dlvm.codegen.matmul, panels, bf16_pairs): f32 sums over the
whole sum, rounded once, against the interpreter within docs/ir.md's bound (#bf16), on every
path a product takes (packed in pairs for vdpbf16ps on a CPU with AVX-512 BF16, widened to f32
on one without: `--cpu skylake-avx512`; unpacked tiles; few rows), for odd sizes, batches,
transposed operands (x · Wᵀ), a b of one row, prologues and epilogues. Which products stay bf16
(dlvm.codegen.bf16_products) and which targets have AVX-512 BF16 (dlvm.codegen.target)."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import dlvm
from dlvm.codegen.bf16_products import LONGEST_SUM, products_in_f32
from dlvm.codegen.build import build_library, schedule
from dlvm.codegen.spec import module_spec
from dlvm.codegen.target import has_avx512bf16
from dlvm.interp import run_function
from dlvm.ir import parse_module

BF16 = np.dtype(ml_dtypes.bfloat16)
CPUS = ["native", "skylake-avx512"]


def ty(shape: tuple[int, ...]) -> str:
    return "<" + " x ".join(map(str, shape)) + " x bf16>"


# name: (argument shapes, body lines with %a, %b, … ending in %r, result shape)
CASES: dict[str, tuple[list[tuple[int, ...]], list[str], tuple[int, ...]]] = {}


def product(name: str, a: tuple[int, ...], b: tuple[int, ...], *, wt: bool = False,
            bias: str | None = None) -> None:  # fmt: skip
    """A case %r = a · b (b given as W, %b transposed, with `wt`), then + %c and `bias`'s
    activation (relu or tanh)."""
    batch, (m, k) = a[:-2], a[-2:]
    n = b[-2] if wt else b[-1]
    bt = (*batch, k, n)
    out = (*batch, m, n)
    lines = [f"%t = transpose %b: {ty(b)}"] if wt else []
    lines.append(f"%d = dot %a: {ty(a)}, {'%t' if wt else '%b'}: {ty(bt)}")
    args = [a, b]
    if bias is None:
        lines.append(f"%r = add %d: {ty(out)}, 0: bf16")
    else:
        c = (*(1,) * len(batch), 1, n)
        args.append(c)
        lines.append(f"%s = add %d: {ty(out)}, %c: {ty(c)}")
        act = "max %s: {0}, 0: bf16" if bias == "relu" else "tanh %s: {0}"
        lines.append("%r = " + act.format(ty(out)))
    CASES[name] = (args, lines, out)


product("packed-odd", (117, 201), (201, 67))
product("packed-even-wide", (64, 64), (64, 96))
product("packed-one-step", (70, 1), (1, 70))
product("packed-linear-relu", (64, 37), (45, 37), wt=True, bias="relu")
product("packed-linear-tanh", (90, 784), (130, 784), wt=True, bias="tanh")
product("packed-batched-bias", (2, 60, 33), (2, 33, 65), bias="tanh")
product("tiles-few-rows", (9, 300), (300, 41), bias="relu")
product("tiles-linear-few-rows", (3, 129), (77, 129), wt=True, bias="tanh")
product("one-row", (1, 64), (64, 33))
product("one-row-linear", (1, 200), (50, 200), wt=True, bias="relu")
product("packed-long-sums", (64, 2049), (2049, 64))
product("one-column", (65, 20), (20, 1))
CASES["packed-prologue"] = (
    [(131, 60), (60, 70)],
    ["%s = multiply %a: <131 x 60 x bf16>, 0.5: bf16",
     "%t = transpose %s: <131 x 60 x bf16>",
     "%u = transpose %t: <60 x 131 x bf16>",
     "%r = dot %u: <131 x 60 x bf16>, %b: <60 x 70 x bf16>"],
    (131, 70),
)  # fmt: skip

CASES["packed-transposed-operands"] = (  # a gradient's xᵀ · dy, packed down the columns
    [(61, 131), (70, 61)],
    ["%x = transpose %a: <61 x 131 x bf16>",
     "%w = multiply %b: <70 x 61 x bf16>, 0.5: bf16",
     "%t = transpose %w: <70 x 61 x bf16>",
     "%r = dot %x: <131 x 61 x bf16>, %t: <61 x 70 x bf16>"],
    (131, 70),
)  # fmt: skip


def module_text() -> str:
    funcs = []
    for name, (args, lines, out) in CASES.items():
        names = "abcd"[: len(args)]
        params = ", ".join(f"%{x}: {ty(s)}" for x, s in zip(names, args))
        sig = ", ".join(ty(s) for s in args)
        body = "\n    ".join(lines)
        funcs.append(f"func @{name.replace('-', '_')}: ({sig}) -> {ty(out)} {{\n"
                     f"'entry({params}):\n    {body}\n    return %r: {ty(out)}\n}}\n")  # fmt: skip
    return 'module "bf16k"\nstage optimizable\n\n' + "\n".join(funcs)


def inputs(name: str) -> list[np.ndarray]:
    rng = np.random.default_rng(list(CASES).index(name))
    return [rng.standard_normal(s).astype(BF16) for s in CASES[name][0]]


@pytest.fixture(scope="module", params=CPUS)
def results(request, tmp_path_factory) -> dict[str, np.ndarray]:
    """Every case's result from a library built for the parameter's CPU."""
    text = module_text()
    module = parse_module(text, "bf16k.dl")
    path = Path(tmp_path_factory.mktemp(request.param)) / "bf16k.so"
    build_library(module, module_spec(module, "bf16k"), path, cpu=request.param)
    with dlvm.load(path) as lib:
        return {name: np.asarray(getattr(lib, name.replace("-", "_"))(*inputs(name)))
                for name in CASES}  # fmt: skip


def interpreted(name: str) -> np.ndarray:
    module = parse_module(module_text(), "bf16k.dl")
    return np.asarray(run_function(module, name.replace("-", "_"), inputs(name)))


def bound(name: str, want: np.ndarray) -> np.ndarray:
    """docs/ir.md#bf16: one bf16 ulp of the result, plus twice the f32 rounding of a sum of k
    terms (k · 2^-24 · Σ|a·b| each way), per element; an epilogue (an add and a contraction)
    adds one more ulp."""
    args, lines, _ = CASES[name]
    a, b = (x.astype(np.float32) for x in inputs(name)[:2])
    if any(line.startswith("%x = transpose %a") for line in lines):
        a = np.swapaxes(a, -1, -2)
    if any(line.startswith(("%t = transpose %b", "%t = transpose %w")) for line in lines):
        b = np.swapaxes(b, -1, -2)  # (a scaling by 1/2 only loosens the bound)
    k = a.shape[-1]
    magnitude = np.abs(a) @ np.abs(b)
    ulp = np.spacing(np.abs(want.astype(np.float32))) * 2.0**16
    ulps = 2 if len(args) > 2 else 1
    return ulps * ulp + 2 * k * 2.0**-24 * magnitude


@pytest.mark.parametrize("name", sorted(CASES))
def test_bf16_product_within_the_bound(results, name):
    got = results[name]
    want = interpreted(name)
    assert got.dtype == BF16 and got.shape == want.shape
    diff = np.abs(got.astype(np.float32) - want.astype(np.float32))
    assert np.all(diff <= bound(name, want)), float(diff.max())


def test_without_avx512bf16_the_same_numbers(tmp_path):
    """The widened path (skylake-avx512) and the pairs path (the host, when it has AVX-512
    BF16) agree with each other as each does with the interpreter: to one bf16 ulp here (the
    products are exact in f32 and the sums short)."""
    name = "packed-linear-relu"
    text = module_text()
    got = {}
    for cpu in CPUS:
        module = parse_module(text, "bf16k.dl")
        path = tmp_path / f"{cpu}.so"
        build_library(module, module_spec(module, "bf16k"), path, cpu=cpu)
        with dlvm.load(path) as lib:
            got[cpu] = np.asarray(getattr(lib, name.replace("-", "_"))(*inputs(name)))
    x, y = (got[cpu].astype(np.float32) for cpu in CPUS)
    ulp = np.spacing(np.abs(x)) * 2.0**16
    assert np.all(np.abs(x - y) <= ulp)


def scheduled(text: str, cpu: str):
    module = parse_module(text, "s.dl")
    schedule(module, cpu)
    return module


DOT = """module "s"
stage optimizable

func @f: (<64 x {k} x bf16>, <{k} x 64 x bf16>) -> <64 x 64 x bf16> {{
'entry(%a: <64 x {k} x bf16>, %b: <{k} x 64 x bf16>):
    %r = dot %a: <64 x {k} x bf16>, %b: <{k} x 64 x bf16>
    return %r: <64 x 64 x bf16>
}}
"""


def test_a_bf16_product_is_scheduled_in_pairs_only_where_the_cpu_has_avx512bf16():
    def pairs(cpu: str) -> list[int]:
        module = scheduled(DOT.format(k=40), cpu)
        return [f.schedule.get("pairs") for f in module.functions if f.compute]

    assert pairs("sapphirerapids") == [1]
    assert pairs("skylake-avx512") == [0]
    assert pairs("x86-64-v3") == [0]
    assert pairs("native") == [1 if has_avx512bf16() else 0]


def test_which_bf16_products_stay_bf16():
    """Matrix products with sums up to LONGEST_SUM stay bf16; longer ones and products of two
    vectors are taken in f32 (convolutions: tests/unit/test_bf16_conv.py)."""

    def opcodes(text: str) -> list[str]:
        module = parse_module(text, "s.dl")
        products_in_f32(module)
        return [i.opcode for f in module.functions for i in f.instructions()]

    assert opcodes(DOT.format(k=LONGEST_SUM)) == ["dot", "return"]
    longer = opcodes(DOT.format(k=LONGEST_SUM + 1))
    assert longer.count("dataTypeCast") == 3 and "dot" in longer
    vectors = """module "s"
stage optimizable

func @f: (<37 x bf16>, <37 x bf16>) -> bf16 {
'entry(%a: <37 x bf16>, %b: <37 x bf16>):
    %r = dot %a: <37 x bf16>, %b: <37 x bf16>
    return %r: bf16
}
"""
    assert opcodes(vectors).count("dataTypeCast") == 3


def test_which_cpus_have_avx512bf16():
    assert has_avx512bf16("znver4") and has_avx512bf16("cooperlake")
    assert not has_avx512bf16("icelake-server") and not has_avx512bf16("x86-64-v4")


def test_a_product_keep_refuses_is_taken_in_f32():
    """As a build for CUDA refuses a product its tensor cores do not take (the GPU's other
    product kernels would sum in bf16): operands cast to f32, the product rounded once."""
    module = parse_module(DOT.format(k=40), "s.dl")
    products_in_f32(module, keep=lambda inst: False)
    opcodes = [i.opcode for f in module.functions for i in f.instructions()]
    assert opcodes.count("dataTypeCast") == 3


# --precision bf16's weight gradient and its SGD update: a bf16 product read through a cast to
# f32 (dlvm.transforms.compute_generation fuses the update into the product's kernel).
UPDATE = """module "u"
stage optimizable

func @update: (<61 x 131 x bf16>, <61 x 70 x bf16>, <131 x 70 x f32>) -> <131 x 70 x f32> {
'entry(%a: <61 x 131 x bf16>, %b: <61 x 70 x bf16>, %w: <131 x 70 x f32>):
    %x = transpose %a: <61 x 131 x bf16>
    %d = dot %x: <131 x 61 x bf16>, %b: <61 x 70 x bf16>
    %c = dataTypeCast %d: <131 x 70 x bf16> to f32
    %m = multiply 0.01: f32, %c: <131 x 70 x f32>
    %r = subtract %w: <131 x 70 x f32>, %m: <131 x 70 x f32>
    return %r: <131 x 70 x f32>
}
"""


def test_a_bf16_products_f32_update_is_one_kernel():
    [kernel] = [f for f in scheduled(UPDATE, "native").functions if f.compute]
    opcodes = [i.opcode for i in kernel.instructions()]
    assert "dot" in opcodes and opcodes[-2] == "subtract"


@pytest.mark.parametrize("cpu", CPUS)
def test_a_bf16_products_f32_update_rounds_the_product_once(cpu, tmp_path):
    """Integer operands: every f32 sum is exact, so the library's product, rounded to bf16 as
    the IR says (the sums exceed bf16's 8 bits), is the interpreter's; the update's f32
    arithmetic may differ by a contraction (one f32 ulp)."""
    rng = np.random.default_rng(5)
    a = rng.integers(-30, 31, (61, 131)).astype(BF16)
    b = rng.integers(-30, 31, (61, 70)).astype(BF16)
    w = rng.standard_normal((131, 70)).astype(np.float32)
    module = parse_module(UPDATE, "u.dl")
    path = tmp_path / "u.so"
    build_library(module, module_spec(module, "u"), path, cpu=cpu)
    with dlvm.load(path) as lib:
        got = np.asarray(lib.update(a, b, w))
    want = np.asarray(run_function(parse_module(UPDATE, "u.dl"), "update", [a, b, w]))
    assert got.dtype == np.float32
    np.testing.assert_array_max_ulp(got, want, maxulp=1)


# --precision bf16's forward product: an f32 weight converted to bf16 as it is packed.
CONVERTED = """module "c"
stage optimizable

func @forward: (<117 x 201 x bf16>, <201 x 67 x f32>) -> <117 x 67 x bf16> {
'entry(%a: <117 x 201 x bf16>, %w: <201 x 67 x f32>):
    %c = convert %w: <201 x 67 x f32> to bf16
    %r = dot %a: <117 x 201 x bf16>, %c: <201 x 67 x bf16>
    return %r: <117 x 67 x bf16>
}
"""


@pytest.mark.parametrize("cpu", CPUS)
def test_a_converted_f32_weight_rounds_as_convert(cpu, tmp_path):
    """Multiples of 1/32 after rounding, so every f32 sum is exact: the library's product is
    the interpreter's exactly, the weight rounded to nearest even as `convert` rounds it (the
    offsets of 1/1024, 1/64 + 1/1024 and 1/64 round down, up and to even)."""
    rng = np.random.default_rng(6)
    a = rng.integers(-8, 9, (117, 201)).astype(BF16)
    offsets = np.array([1 / 1024, 1 / 64 + 1 / 1024, 1 / 64], np.float32)
    w = (rng.integers(4, 8, (201, 67)) + rng.choice(offsets, (201, 67))).astype(np.float32)
    w *= rng.choice(np.array([-1, 1], np.float32), (201, 67))
    module = parse_module(CONVERTED, "c.dl")
    path = tmp_path / "c.so"
    build_library(module, module_spec(module, "c"), path, cpu=cpu)
    with dlvm.load(path) as lib:
        got = np.asarray(lib.forward(a, w))
    want = np.asarray(run_function(parse_module(CONVERTED, "c.dl"), "forward", [a, w]))
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))
