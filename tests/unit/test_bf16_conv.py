"""bf16 convolutions on the CPU (dlvm.codegen.conv_bf16; kernels' gradients on conv_kernel_grad's
product, in pairs by conv_kernel_grad_pairs; depthwise ones on conv_depthwise's loop in f32):
f32 sums over each output's whole sum,
rounded once, against the interpreter within docs/ir.md's bound (#bf16), on both paths (pairs
for vdpbf16ps on a CPU with AVX-512 BF16; widened to f32 on one without: `--cpu
skylake-avx512`), for padding, strides, odd channel counts, batches, groups, a left dilation
(a strided convolution's input gradient), 1-D and 1×1 kernels, blocks of several panels, and
bias + relu and residual + relu epilogues; which convolutions stay bf16
(dlvm.codegen.bf16_products) and the element loop's f32 sums for those the product does not
suit; a small CNN in bf16 trains."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from telhelp import build_snippet, compile_snippet, entry, run_train_step

import dlvm
from dlvm.codegen import conv_bf16, conv_kernel_grad
from dlvm.codegen.bf16_products import products_in_f32
from dlvm.codegen.build import LibraryBuild, Target, build_library, schedule
from dlvm.codegen.llgen import llvm_module
from dlvm.codegen.spec import module_spec
from dlvm.interp import run_function
from dlvm.ir import parse_module
from dlvm.ir.types import DataType

BF16 = np.dtype(ml_dtypes.bfloat16)
CPUS = ["native", "skylake-avx512"]


def ty(shape: tuple[int, ...], dt: str = "bf16") -> str:
    return "<" + " x ".join(map(str, shape)) + f" x {dt}>"


# name: (input shape, kernel shape, convolve's options, output shape, epilogue)
CASES: dict[str, tuple[tuple[int, ...], tuple[int, ...], str, tuple[int, ...], str]] = {
    "pad-3x3": ((2, 16, 12, 12), (24, 16, 3, 3), "padding (1, 1), (1, 1)", (2, 24, 12, 12), ""),
    "odd-channels": ((2, 5, 10, 9), (7, 5, 3, 3), "padding (1, 1), (1, 1)", (2, 7, 10, 9), ""),
    "stride-2": ((3, 8, 17, 17), (16, 8, 3, 3), "strides 2, 2 padding (1, 1), (1, 1)",
                 (3, 16, 9, 9), ""),
    "one-by-one": ((3, 32, 9, 9), (40, 32, 1, 1), "", (3, 40, 9, 9), ""),
    "groups": ((2, 12, 10, 10), (18, 6, 3, 3), "padding (1, 1), (1, 1) groups 2",
               (2, 18, 10, 10), ""),
    "long-sums": ((1, 64, 8, 10), (32, 64, 3, 3), "padding (1, 1), (1, 1)", (1, 32, 8, 10), ""),
    "left-dilation": ((2, 8, 5, 5), (6, 8, 3, 3), "padding (2, 2), (2, 2) leftDilation 2, 2",
                      (2, 6, 11, 11), ""),
    "panels": ((1, 16, 40, 40), (20, 16, 3, 3), "padding (1, 1), (1, 1)", (1, 20, 40, 40), ""),
    "one-axis": ((2, 8, 100), (16, 8, 5), "padding (2, 2)", (2, 16, 100), ""),
    "bias-relu": ((2, 9, 11, 11), (12, 9, 3, 3), "", (2, 12, 9, 9), "relu"),
    "odd-bias-relu": ((2, 3, 14, 14), (10, 3, 3, 3), "padding (1, 1), (1, 1)",
                      (2, 10, 14, 14), "relu"),
    "residual-relu": ((2, 8, 9, 13), (16, 8, 3, 3), "padding (1, 1), (1, 1)", (2, 16, 9, 13),
                      "residual"),
    # Kernels longer than the output (kernels' gradients: conv_kernel_grad's product in f32).
    "kgrad-pad": ((6, 4, 12, 12), (10, 4, 12, 12), "padding (1, 1), (1, 1)", (6, 10, 3, 3), ""),
    "kgrad-stride": ((5, 3, 17, 17), (8, 3, 8, 8), "strides 2, 2", (5, 8, 5, 5), ""),
    "kgrad-odd": ((3, 5, 9, 11), (7, 5, 7, 9), "padding (1, 1), (1, 1)", (3, 7, 5, 5), ""),
    "kgrad-one-axis": ((4, 6, 50), (9, 6, 48), "padding (1, 1)", (4, 9, 5), ""),
    "kgrad-relu": ((4, 3, 10, 10), (8, 3, 10, 10), "padding (1, 1), (1, 1)", (4, 8, 3, 3),
                   "relu"),
    # 438 steps of q a channel: two slices, C summed across them in f32.
    "kgrad-slices": ((2, 3, 20, 20), (6, 3, 20, 20), "padding (1, 1), (1, 1)", (2, 6, 3, 3), ""),
    # Depthwise (conv_depthwise's loop in f32): the interior in vectors, borders, a multiplier.
    "depthwise": ((2, 8, 12, 12), (8, 1, 3, 3), "padding (1, 1), (1, 1) groups 8",
                  (2, 8, 12, 12), ""),
    "depthwise-stride-2": ((2, 6, 17, 17), (12, 1, 3, 3),
                           "strides 2, 2 padding (1, 1), (1, 1) groups 6", (2, 12, 9, 9), ""),
    "depthwise-rows": ((1, 3, 6, 100), (3, 1, 3, 3), "padding (1, 1), (1, 1) groups 3",
                       (1, 3, 6, 100), ""),
    "depthwise-one-axis-relu": ((3, 5, 70), (5, 1, 5), "padding (2, 2) groups 5", (3, 5, 70),
                                "relu"),
}  # fmt: skip
KERNEL_GRADIENTS = [name for name in CASES if name.startswith("kgrad")]
DEPTHWISE = [name for name in CASES if name.startswith("depthwise")]


def extra(name: str) -> tuple[int, ...]:
    """What the epilogue adds: a bias per output channel, or a residual of the output's shape."""
    x, k, _, out, epilogue = CASES[name]
    return out if epilogue == "residual" else (1, k[0], *(1,) * (len(x) - 2))


def function(name: str, dt: str = "bf16") -> str:
    x, k, options, out, epilogue = CASES[name]
    params = [f"%x: {ty(x, dt)}", f"%k: {ty(k, dt)}"]
    lines = [f"%c = convolve %x: {ty(x, dt)} kernel %k: {ty(k, dt)} {options}".rstrip()]
    if epilogue:
        added = extra(name)
        params.append(f"%b: {ty(added, dt)}")
        lines += [f"%s = add %c: {ty(out, dt)}, %b: {ty(added, dt)}",
                  f"%r = max %s: {ty(out, dt)}, 0: {dt}"]  # fmt: skip
    else:
        lines.append(f"%r = add %c: {ty(out, dt)}, 0: {dt}")
    sig = ", ".join(p.split(": ", 1)[1] for p in params)
    body = "\n    ".join(lines)
    r = ty(out, dt)
    return (f"func @{name.replace('-', '_')}: ({sig}) -> {r} {{\n"
            f"'entry({', '.join(params)}):\n    {body}\n    return %r: {r}\n}}\n")  # fmt: skip


def module_text(dt: str = "bf16") -> str:
    funcs = [function(name, dt) for name in CASES]
    return f'module "conv{dt}"\nstage optimizable\n\n' + "\n".join(funcs)


def inputs(name: str) -> list[np.ndarray]:
    x, k, _, _, epilogue = CASES[name]
    rng = np.random.default_rng(list(CASES).index(name))
    shapes = [x, k] + ([extra(name)] if epilogue else [])
    return [rng.standard_normal(s).astype(BF16) for s in shapes]


@pytest.fixture(scope="module", params=CPUS)
def results(request, tmp_path_factory) -> dict[str, np.ndarray]:
    """Every case's result from a library built for the parameter's CPU."""
    module = parse_module(module_text(), "convbf16.dl")
    path = Path(tmp_path_factory.mktemp(request.param)) / "convbf16.so"
    build_library(module, module_spec(module, "convbf16"), path, cpu=request.param)
    with dlvm.load(path) as lib:
        return {name: np.asarray(getattr(lib, name.replace("-", "_"))(*inputs(name)))
                for name in CASES}  # fmt: skip


def bound(name: str, want: np.ndarray) -> np.ndarray:
    """docs/ir.md#bf16: one bf16 ulp of the result, plus twice the f32 rounding of a sum of k
    terms (k · 2^-24 · Σ|x·w| each way), per element; an epilogue (an add) adds one more ulp.
    Σ|x·w| is the same convolution of |x| and |w| in f64, by the interpreter."""
    x, k, _, _, epilogue = CASES[name]
    magnitude_module = parse_module(module_text("f64"), "convf64.dl")
    args = [np.abs(a.astype(np.float64)) for a in inputs(name)]
    if epilogue:
        args[2] = np.zeros_like(args[2])
    magnitude = np.asarray(run_function(magnitude_module, name.replace("-", "_"), args))
    sum_length = k[1] * int(np.prod(k[2:]))
    ulp = np.spacing(np.abs(want.astype(np.float32))) * 2.0**16
    return (2 if epilogue else 1) * ulp + 2 * sum_length * 2.0**-24 * magnitude


@pytest.mark.parametrize("name", list(CASES))
def test_bf16_convolution_within_the_bound(results, name):
    got = results[name]
    module = parse_module(module_text(), "convbf16.dl")
    want = np.asarray(run_function(module, name.replace("-", "_"), inputs(name)))
    assert got.dtype == BF16 and got.shape == want.shape
    diff = np.abs(got.astype(np.float32) - want.astype(np.float32))
    assert np.all(diff <= bound(name, want)), float(diff.max())


def kept_convolutions(text: str, cpu: str = "native") -> list[tuple[str, object]]:
    """The scheduled module's convolutions: their type's data type and the kernel's `pairs`."""
    module = parse_module(text, "s.dl")
    schedule(module, cpu)
    found = []
    for fn in module.functions:
        for inst in fn.instructions():
            if inst.opcode == "convolve":
                found.append((inst.type.dtype.name, fn.schedule.get("pairs")))  # type: ignore[attr-defined]
    return found


def test_convolutions_the_product_takes_stay_bf16_in_pairs_where_the_cpu_has_them():
    text = module_text()
    assert all(dt == "BF16" for dt, _ in kept_convolutions(text, "sapphirerapids"))
    assert {p for _, p in kept_convolutions(text, "sapphirerapids")} == {1}
    assert {p for _, p in kept_convolutions(text, "skylake-avx512")} == {0}


CONV = """module "s"
stage optimizable

func @f: ({x}, {k}) -> {r} {{
'entry(%x: {x}, %k: {k}):
    %r = convolve %x: {x} kernel %k: {k} {options}
    return %r: {r}
}}
"""


def casts(x: tuple[int, ...], k: tuple[int, ...], r: tuple[int, ...], options: str = "") -> int:
    """How many dataTypeCasts products_in_f32 writes for a bf16 convolution: 0 where it stays
    bf16, 3 where it is taken in f32."""
    module = parse_module(CONV.format(x=ty(x), k=ty(k), r=ty(r), options=options), "s.dl")
    products_in_f32(module)
    return [i.opcode for f in module.functions for i in f.instructions()].count("dataTypeCast")


def test_which_bf16_convolutions_stay_bf16():
    assert casts((2, 16, 12, 12), (16, 16, 3, 3), (2, 16, 10, 10)) == 0
    assert casts((2, 16, 7, 7), (16, 16, 3, 3), (2, 16, 5, 5)) == 3  # few positions
    assert casts((2, 8, 12, 12), (8, 1, 3, 3), (2, 8, 10, 10), "groups 8") == 0  # depthwise
    # A depthwise kernel's gradient (taps past conv_depthwise.MAX_TAPS): conv_long_sums' loop.
    assert casts((1, 8, 12, 12), (8, 1, 10, 10), (1, 8, 3, 3), "groups 8") == 3
    assert casts((1, 8, 12, 12), (1, 8, 3, 3), (1, 1, 10, 10)) == 3  # one output channel
    assert casts((2, 8, 12, 12), (4, 8, 11, 11), (2, 4, 2, 2)) == 0  # a kernel's gradient
    # A strided convolution's kernel gradient (taps apart): conv_kernel_grad does not take it.
    assert casts((2, 8, 12, 12), (4, 8, 6, 6), (2, 4, 2, 2), "rightDilation 2, 2") == 3
    assert casts((1, 512, 12, 12), (8, 512, 3, 3), (1, 8, 10, 10)) == 3  # sums past 4096
    assert casts((1, 512, 2100), (8, 512, 3), (1, 8, 2098)) == 3  # a row's block past 4 MiB


def test_kernel_gradients_take_conv_kernel_grads_product():
    """The kgrad cases (bf16) are conv_kernel_grad's product after scheduling, with f32
    vectors of half the schedule's 32 bf16 lanes, not the element loop."""
    module = parse_module(module_text(), "convbf16.dl")
    schedule(module, "sapphirerapids")
    taken = {fn.name for fn in module.functions for i in fn.instructions()
             if i.opcode == "convolve" and conv_kernel_grad.suits(i, 32)}  # fmt: skip
    assert len(taken) == len(KERNEL_GRADIENTS)
    assert all(any(n.replace("-", "_") in f for f in taken) for n in KERNEL_GRADIENTS)


@pytest.mark.parametrize("cpu", ["sapphirerapids", "skylake-avx512"])
def test_kernel_gradients_run_in_pairs_where_the_cpu_has_avx512bf16(cpu):
    """Each kgrad kernel's body is conv_kernel_grad's product (its scratch block), with
    vdpbf16ps where the CPU has AVX-512 BF16 (dlvm.codegen.conv_kernel_grad_pairs) and without
    it elsewhere (widened to f32); each depthwise one conv_depthwise's loop in f32."""
    module = parse_module(module_text(), "convbf16.dl")
    build = LibraryBuild(module, module_spec(module, "convbf16"), Path("unused.so"),
                         Target(cpu=cpu))  # fmt: skip
    text = str(llvm_module(build.module))
    for name in KERNEL_GRADIENTS:
        at = text.index(f'@"k.{name.replace("-", "_")}_k.body"')
        body = text[at : text.index("\n}\n", at)]
        assert "conv.kgrad" in body, name
        assert ("avx512bf16.dpbf16ps.512" in body) == (cpu == "sapphirerapids"), name
    for name in DEPTHWISE:  # conv_depthwise's loop; rows of 16 outputs or more in vectors
        at = text.index(f'@"k.{name.replace("-", "_")}_k.body"')
        body = text[at : text.index("\n}\n", at)]
        vectors = CASES[name][3][-1] >= 16 + 2
        assert "dwrow" in body and ("fmuladd.v16f32" in body) == vectors, name


# The kernel is read through a transpose (a strided view, dlvm.ir.strided) whose columns are
# not one run: conv_bf16.suits refuses it, and the element loop computes it.
ELEMENTS = """module "e"
stage optimizable

func @f: (<1 x 4 x 64 x bf16>, <1 x 4 x 2 x bf16>) -> <1 x 2 x 64 x bf16> {
'entry(%x: <1 x 4 x 64 x bf16>, %w: <1 x 4 x 2 x bf16>):
    %k = transpose %w: <1 x 4 x 2 x bf16>
    %r = convolve %x: <1 x 4 x 64 x bf16> kernel %k: <2 x 4 x 1 x bf16>
    return %r: <1 x 2 x 64 x bf16>
}
"""


@pytest.mark.parametrize("cpu", CPUS)
def test_the_element_loop_sums_a_bf16_convolution_in_f32(cpu, tmp_path):
    """A bf16 convolution kept bf16 that the product does not suit sums in f32 and rounds
    once: 256 + 1 + 1 + 1 is 259, 260 in bf16, where bf16 sums stop at 256 (256 + 1 is a tie,
    rounded to the even 256)."""
    module = parse_module(ELEMENTS, "e.dl")
    [conv] = [i for f in schedule(module, cpu).functions for i in f.instructions()
              if i.opcode == "convolve"]  # fmt: skip
    assert conv.type.dtype is DataType.BF16 and not conv_bf16.suits(conv, 32)  # type: ignore[attr-defined]
    module = parse_module(ELEMENTS, "e.dl")
    path = tmp_path / "e.so"
    build_library(module, module_spec(module, "e"), path, cpu=cpu)
    x = np.ones((1, 4, 64), BF16)
    x[0, 0] = 256
    w = np.ones((1, 4, 2), BF16)
    with dlvm.load(path) as lib:
        got = np.asarray(lib.f(x, w)).astype(np.float32)
    want = np.asarray(run_function(parse_module(ELEMENTS, "e.dl"), "f", [x, w]))
    assert np.array_equal(got, want.astype(np.float32)) and np.all(got == 260)


CNN = """module cnnbf16
type bfloat16

use nn
use optim

dim B = 4

x: in[B x 3 x 10 x 10]
labels: in[B x 3]

K1: param[8 x 3 x 3 x 3] = he()
K2: param[8 x 8 x 3 x 3] = he()
kb: param[1 x 8 x 1 x 1] = 0.0
W: param[800 x 3] = glorot()
b: param[1 x 3] = 0.0

c1: hidden[B x 8 x 10 x 10] = relu(conv2d(x, K1, stride: (1, 1), padding: (1, 1)))
c2: hidden[B x 8 x 10 x 10] = relu(conv2d(c1, K2, stride: (1, 1), padding: (1, 1)) + kb)
flat: hidden[B x 800] = c2 as [B x 800]
logits: hidden[B x 3] = linear(flat, W, b)
y: out[B x 3] = softmax(logits)
loss: out[] = softmax_cross_entropy(logits, labels)

train minimizing loss using sgd(rate: 0.02)
"""


def test_every_convolution_of_a_bf16_cnns_train_step_stays_bf16(tmp_path):
    """In the train step: both forward convolutions and the second's input gradient on the
    bf16 product (in pairs), both kernels' gradients bf16 too (conv_kernel_grad's product,
    summed in f32)."""
    module = compile_snippet(str(tmp_path), CNN, "cnnbf16").module
    schedule(module, "sapphirerapids")
    found = [(inst.type.dtype, fn.schedule.get("pairs")) for fn in module.functions  # type: ignore[attr-defined]
             if fn.name.startswith("train_step_k")
             for inst in fn.instructions() if inst.opcode == "convolve"]  # fmt: skip
    assert found == [(DataType.BF16, 1)] * 5
    grads = [i for fn in module.functions if fn.name.startswith("train_step_k")
             for i in fn.instructions()
             if i.opcode == "convolve" and conv_kernel_grad.takes(i)]  # fmt: skip
    assert len(grads) == 2


def test_a_bf16_cnn_trains_as_the_interpreter_does(tmp_path):
    """Two 3×3 convolutions (the second's input gradient on the bf16 product too), a few
    steps against the interpreter, then the loss of one batch falls."""
    library = build_snippet(tmp_path, CNN, "cnnbf16")
    compiled = compile_snippet(str(tmp_path), CNN, "cnnbf16")
    train = entry(compiled.interface, "train")
    rng = np.random.default_rng(5)
    tolerance = 4 * 2**-7
    with dlvm.load(library, seed=2) as m:
        params = {name: np.array(v) for name, v in m.params.items()}
        states: list[np.ndarray] = []
        for step in range(1, 4):
            inputs = {"x": rng.standard_normal((4, 3, 10, 10)).astype(BF16),
                      "labels": np.eye(3)[rng.integers(0, 3, 4)].astype(BF16)}  # fmt: skip
            got = float(m.train_step(inputs["x"], inputs["labels"]))
            loss, _, _ = run_train_step(compiled, train, inputs, params, states, step,
                                        float64=False)  # fmt: skip
            assert abs(got - loss) <= tolerance * max(1.0, abs(loss)), (step, got, loss)
            params = {name: np.array(v) for name, v in m.params.items()}
        first = float(m.train_step(inputs["x"], inputs["labels"]))
        for _ in range(30):
            last = float(m.train_step(inputs["x"], inputs["labels"]))
        assert last < first * 0.8
