"""`telc build --quantize int8` (docs/quantization.md): the rewrite of products by parameters
(dlvm/transforms/int8_products.py) against a NumPy reference of the same scheme, through the
interpreter and compiled (with and without VNNI in the target), against f32 within the
quantisation error, the digits sample's accuracy, and the option's errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from safetensors.numpy import load_file

import dlvm
from dlvm.diagnostics import DiagnosticError
from dlvm.interp import run_function
from dlvm.ir import module_text, parse_module
from dlvm.ir.builder import Builder
from dlvm.ir.types import DataType, FunctionType, TensorType
from dlvm.ir.values import Argument, Block, Function, Module
from dlvm.ir.verifier import verify
from dlvm.transforms.int8_products import (
    Int8Layout,
    QuantizedWeight,
    int8_rows_product,
    quantize_products,
    unpack,
    weights_function,
)
from telc import demo
from telc.build import produce
from telc.cli import cli
from telc.driver import BuildOptions

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "samples" / "digits.tel"

PRODUCTS = """module "m"
stage optimizable

func @f: (<3 x 40 x f32>, <40 x 5 x f32>, <5 x 40 x f32>, <40 x 5 x f32>) -> (<3 x 5 x f32>, <3 x 5 x f32>, <3 x 5 x f32>) {
'entry(%x: <3 x 40 x f32>, %W: <40 x 5 x f32>, %V: <5 x 40 x f32>, %A: <40 x 5 x f32>):
    %a = dot %x: <3 x 40 x f32>, %W: <40 x 5 x f32>
    %t = transpose %V: <5 x 40 x f32>
    %b = dot %x: <3 x 40 x f32>, %t: <40 x 5 x f32>
    %c = dot %x: <3 x 40 x f32>, %A: <40 x 5 x f32>
    %r = literal (%a: <3 x 5 x f32>, %b: <3 x 5 x f32>, %c: <3 x 5 x f32>): (<3 x 5 x f32>, <3 x 5 x f32>, <3 x 5 x f32>)
    return %r: (<3 x 5 x f32>, <3 x 5 x f32>, <3 x 5 x f32>)
}
"""  # noqa: E501


def quantized(v: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """The scheme's integers (as i64: exact sums) and scales of v along `axis`."""
    scale = np.abs(v).max(axis=axis, keepdims=True) / np.float32(127)
    q = np.rint(v / np.maximum(scale, np.float32(1e-30)))
    assert np.abs(q).max() <= 127
    return q.astype(np.int64), scale


def reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x · w as --quantize int8 computes it: exact integer sums, dequantised in f32."""
    xq, sx = quantized(x, 1)
    wq, sw = quantized(w, 0)
    return ((xq @ wq).astype(np.float32) * sx) * sw


def in_layout(w: np.ndarray) -> np.ndarray:
    """w (N x P, a channel per row) as Int8Layout keeps it, in NumPy: padded with zeros, then
    each panel's W[n, 4q .. 4q + 3] at lane q·width + n − first."""
    layout = Int8Layout(*w.shape)
    padded = np.zeros((layout.padded_channels, layout.padded_depth), np.int8)
    padded[: w.shape[0], : w.shape[1]] = w
    q = layout.quads
    return np.concatenate([
        padded[first : first + width].reshape(width, q, 4).transpose(1, 0, 2).reshape(-1, 4)
        for first, width in layout.panels()
    ])  # fmt: skip


def quantize_module() -> tuple[Module, list[QuantizedWeight]]:
    """PRODUCTS with W and V as weights, and @weights computing their int8 copies."""
    module = parse_module(PRODUCTS)
    fn = module.functions[0]
    x_, w_, v_, a_ = fn.arguments
    found = quantize_products(fn, {w_: "W", v_: "V"})
    params = [(a.name, a.type) for a in (w_, v_, a_)]
    module.add_function(weights_function("weights", params, found))
    assert verify(module) == []
    return module, found


def test_products_by_weights_only_are_rewritten_and_match_the_reference():
    module, found = quantize_module()
    assert [(q.weight, q.transposed, q.int8, q.scale) for q in found] == [
        ("W", False, "W_int8", "W_scale"),
        ("V", True, "V_int8_t", "V_scale_t"),
    ]
    text = module_text(module)
    assert "dot %x: <3 x 40 x f32>, %A" in text  # A is not a weight: its product stays f32
    # Each int8 copy in Int8Layout: 5 channels padded to 16, 40 depths in 10 lanes of 4.
    assert "%W_int8: <160 x 4 x i8>, %W_scale: <1 x 5 x f32>, %W_shift: <1 x 5 x i32>" in text
    assert "%V_int8_t: <160 x 4 x i8>, %V_scale_t: <1 x 5 x f32>, %V_shift_t: <1 x 5 x i32>" in text
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 40)).astype(np.float32)
    x[1] = 0  # a row of zeros: scale 0, product 0
    w, v, a = (rng.standard_normal(s).astype(np.float32) for s in ((40, 5), (5, 40), (40, 5)))
    w[:, 2] = 0  # a column of zeros
    derived = run_function(module, "weights", [w, v, a])
    wq, ws, wshift, vq, vs, vshift = derived
    np.testing.assert_array_equal(wq, in_layout(quantized(w, 0)[0].T))
    np.testing.assert_array_equal(vs, quantized(v, 1)[1].T)
    np.testing.assert_array_equal(wshift, 128 * quantized(w, 0)[0].sum(0, keepdims=True))
    got = run_function(module, "f", [x, w, v, a, *derived])
    np.testing.assert_array_equal(got[0], reference(x, w))
    np.testing.assert_array_equal(got[1], reference(x, v.T))
    np.testing.assert_array_equal(got[2], x @ a)
    assert not got[0][1].any() and not got[0][:, 2].any()
    # Within the quantisation error of the f32 product: half a step of each factor per term.
    bound = 40 * (np.abs(x).max() * np.abs(w).max()) / 127
    assert np.abs(got[0] - x @ w).max() < bound


def test_int8_copy_is_in_panels_of_lanes():
    """@quantize_weights lays a weight of 300 channels by 9 depths out as Int8Layout says:
    channels padded to 304, depths to 12, a panel of 256 channels then one of 48, four depths
    of a channel per lane; quantize_products' product reads it back as the weight."""
    w = np.random.default_rng(3).standard_normal((9, 300)).astype(np.float32)
    q = QuantizedWeight("W", (9, 300), transposed=False)
    assert q.layout.panels() == [(0, 256), (256, 48)] and q.types()[0].shape == (304 * 3, 4)
    module = Module("w", "optimizable")
    params = [("W", TensorType((9, 300), DataType.F32))]
    module.add_function(weights_function("weights", params, [q]))
    copy = run_function(module, "weights", [w])[0]
    np.testing.assert_array_equal(copy, in_layout(quantized(w, 0)[0].T.astype(np.int8)))
    assert copy[256 * 3 + 3, :].tolist() == [*quantized(w, 0)[0][:4, 259]]  # lane q=0, c=259
    assert not copy[-3:].any()  # the last lanes: padded channels, zeros


def test_rewriting_twice_changes_nothing_more():
    module, _ = quantize_module()
    fn = module.functions[0]
    assert quantize_products(fn, {fn.arguments[1]: "W", fn.arguments[2]: "V"}) == []


def build(tmp: Path, cpu: str, batch: int, quantize: str | None = "int8") -> Path:
    options = BuildOptions(defines=(("B", batch),), cpu=cpu, quantize=quantize)
    product = produce(str(DIGITS), "so", options, tmp / f"digits_{cpu}_{batch}.so")
    assert product.library is not None
    return product.library


def forward(params: dict[str, np.ndarray], x: np.ndarray, int8: bool) -> np.ndarray:
    """digits.tel's infer in NumPy, its products as --quantize int8 computes them or in f32."""
    product = reference if int8 else np.matmul
    h = np.maximum(product(x, params["W1"]) + params["b1"], 0)
    logits = product(h, params["W2"]) + params["b2"]
    e = np.exp(logits - logits.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


@pytest.mark.parametrize("cpu", ["native", "skylake-avx512"])
def test_compiled_library_matches_the_reference_and_follows_its_parameters(tmp_path, cpu):
    """Compiled (VNNI where the host has it; skylake-avx512 has none) against the NumPy
    scheme; set_param, a train step and load change what infer computes at once (the int8
    copies are remade); checkpoints hold the f32 parameters only."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    library = build(tmp_path, cpu, 4)
    header = library.with_suffix(".h").read_text()
    assert "W1_int8" not in header and "W1_shift" not in header
    with dlvm.load(library, seed=3) as model:
        assert model.manifest["states"] == []  # the derived states are the runtime's own
        np.testing.assert_allclose(model.infer(x), forward(model.params, x, True), atol=1e-6)
        model.set_param("W1", rng.standard_normal((64, 128)).astype(np.float32))
        np.testing.assert_allclose(model.infer(x), forward(model.params, x, True), atol=1e-6)
        labels = np.eye(10, dtype=np.float32)[[1, 2, 3, 4]]
        model.train_step(x, labels)
        np.testing.assert_allclose(model.infer(x), forward(model.params, x, True), atol=1e-6)
        assert np.abs(model.infer(x) - forward(model.params, x, False)).max() < 0.05
        model.save(tmp_path / "trained.safetensors")
        assert set(load_file(str(tmp_path / "trained.safetensors"))) == {
            "W1", "b1", "W2", "b2"
        }  # fmt: skip
        trained = model.params
    with dlvm.load(library, seed=4) as fresh:
        fresh.infer(x)  # its own parameters' int8 copies, made on this first call
        fresh.load(tmp_path / "trained.safetensors")
        np.testing.assert_allclose(fresh.infer(x), forward(trained, x, True), atol=1e-6)


def test_digits_accuracy_within_half_a_point_of_f32(tmp_path):
    """Trained through the int8 library (its train step is f32), its infer scores within 0.5
    points of the same parameters in f32 on the 357 test digits (docs/quantization.md)."""
    data = demo.load_data()
    with dlvm.load(build(tmp_path, "native", 32), seed=0) as model:
        demo.train(model, data, epochs=10, seed=0)
        int8 = demo.accuracy(demo.predict(model, data.x_test), data.y_test)
        f32 = demo.accuracy(forward(model.params, data.x_test, False), data.y_test)
    assert f32 >= 0.93
    assert abs(int8 - f32) <= 0.005, (int8, f32)


def test_the_option_is_checked_documented_and_part_of_the_cache_key():
    runner = CliRunner()
    bad = runner.invoke(cli, ["build", str(DIGITS), "--quantize", "int4"])
    assert bad.exit_code == 2
    assert "Invalid value for '--quantize': 'int4' is not a quantisation scheme" in bad.output
    assert "known: int8" in bad.output
    cuda = runner.invoke(cli, ["build", str(DIGITS), "--quantize", "int8", "--target", "cuda"])
    assert cuda.exit_code == 2 and "not with --target cuda" in cuda.output
    for command in ("build", "run"):
        assert "--quantize" in runner.invoke(cli, [command, "--help"]).stdout
    with pytest.raises(DiagnosticError, match="built for the CPU only") as refused:
        produce(str(DIGITS), "so", BuildOptions(target="cuda", quantize="int8"), Path("x.so"))
    assert "help: build without --target cuda" in refused.value.diagnostics[0].render()
    assert "--quantize=int8" in BuildOptions(quantize="int8").flags()
    assert not any("quantize" in f for f in BuildOptions().flags())


def int8_product_module(rows: int, depth: int, channels: int) -> Module:
    """x (i32, int8 values) times the weight in Int8Layout, as quantize_products writes the
    product."""
    layout = Int8Layout(channels, depth)
    x = TensorType((rows, depth), DataType.I32)
    w = TensorType(layout.shape, DataType.I8)
    module = Module("q", "optimizable")
    fn = Function("product", FunctionType((x, w), TensorType((rows, channels), DataType.I32)))
    entry = fn.add_block(Block("entry", [Argument("x", x), Argument("w", w)]))
    b = Builder().at_end(entry)
    weight = b.convert(unpack(b, entry.arguments[1], layout), dtype=DataType.I32)
    b.build("return", [b.dot(entry.arguments[0], weight)])
    module.add_function(fn)
    return module


SHAPES = [(1, 784, 512), (1, 10, 3), (3, 64, 17), (4, 129, 65), (16, 200, 40), (17, 70, 9),
          (2, 256, 48), (9, 100, 7), (23, 130, 37), (64, 200, 64), (10, 37, 290),
          (1, 6, 530)]  # fmt: skip


@pytest.mark.parametrize("cpu", ["native", "skylake-avx512"])
def test_int8_product_kernel_sums_exactly(tmp_path, cpu):
    """The VNNI kernel (where the CPU has VNNI) and the generic one give the exact integer sums,
    whatever the depth's remainder by 4, the channels' by 16 (the last vector's stores masked),
    by 32 (strips of 2 vectors and one left over) and by 256 (a narrower last panel), the rows'
    by 8 (tiles of 8 rows, rows left over), at the extremes (x 255, W -127) and for an x that is
    not bytes, wholly or in its last rows only (the VNNI kernel's own check)."""
    from dlvm.codegen.build import build_library, schedule
    from dlvm.codegen.spec import module_spec
    from dlvm.codegen.target import has_vnni

    rng = np.random.default_rng(5)
    for rows, depth, channels in SHAPES:
        module = int8_product_module(rows, depth, channels)
        scheduled = schedule(int8_product_module(rows, depth, channels), cpu)
        vnni = [f for f in scheduled.functions if f.schedule and f.schedule.get("vnni")]
        assert len(vnni) == int(has_vnni(cpu)), (cpu, rows)
        name = f"q_{rows}_{depth}_{channels}"
        path = tmp_path / f"{name}.so"
        build_library(module, module_spec(module, name), path, cpu=cpu)
        x = rng.integers(0, 256, (rows, depth)).astype(np.int32)
        w = rng.integers(-127, 128, (channels, depth)).astype(np.int8)
        x[0, :], w[0, :] = 255, -127  # the largest sums
        one_wide = x.copy()
        one_wide[-1, -1] = 256  # only the last rows' values are not all bytes
        with dlvm.load(path) as lib:
            for values in (x, x - 128, one_wide):
                got = lib.entries["product"](values, in_layout(w))
                want = values.astype(np.int64) @ w.T.astype(np.int64)
                np.testing.assert_array_equal(got, want)


def test_only_the_int8_product_is_recognised():
    """int8_rows_product (what compute-scheduling schedules `vnni 1`) on kernels of other
    shapes: a four-instruction kernel that is no product, a product of f32s."""
    from dlvm.codegen.build import schedule

    module = parse_module("""module "m"
stage optimizable

func @f: (<2 x 3 x 4 x f32>, <1 x 12 x f32>, <12 x 5 x f32>) -> (<3 x 4 x 2 x f32>, <1 x 5 x f32>) {
'entry(%x: <2 x 3 x 4 x f32>, %a: <1 x 12 x f32>, %b: <12 x 5 x f32>):
    %0.0 = shapeCast %x: <2 x 3 x 4 x f32> to 2 x 12
    %0.1 = transpose %0.0: <2 x 12 x f32>
    %0.2 = shapeCast %0.1: <12 x 2 x f32> to 3 x 4 x 2
    %p = dot %a: <1 x 12 x f32>, %b: <12 x 5 x f32>
    %r = literal (%0.2: <3 x 4 x 2 x f32>, %p: <1 x 5 x f32>): (<3 x 4 x 2 x f32>, <1 x 5 x f32>)
    return %r: (<3 x 4 x 2 x f32>, <1 x 5 x f32>)
}
""")  # noqa: E501
    kernels = [f for f in schedule(module).functions if f.compute]
    assert len(kernels) == 2
    assert all(int8_rows_product(f) is None for f in kernels)
