"""Non-temporal stores under `--fast-math` (dlvm/transforms/stream_schedule.py decides which
kernels, dlvm/codegen/streaming.py emits them): values bitwise those of the plain build, on every
element type, aligned or not, on one thread's share or several; `!nontemporal` and `sfence` in the
LLVM IR exactly for the kernels that qualify; a default build's IR untouched. The threshold is
lowered (STREAM_BYTES patched) so that the tensors stay small."""

from __future__ import annotations

import numpy as np
import pytest
from telhelp import compile_snippet

import dlvm
from dlvm.codegen.build import build_library, schedule
from dlvm.codegen.llgen import compile_object, llvm_module
from dlvm.ir.values import Function
from dlvm.transforms import stream_schedule

N = 100_003  # odd, and over PARALLEL_WORK: the threads' shares start anywhere in a line
SOURCE = f"""module nt
dim N = {N}
dim R = 61
dim C = 517
export def affine(x: [N]) -> [N] = 0.5 * x + 0.25
export def rows(x: [R x C], b: [C]) -> [R x C] = max(x * b, 0.0)
export def wide(x: float64[N]) -> float64[N] = x * x - 1.0
export def ints(x: int32[N], y: int32[N]) -> int32[N] = x * y + x
export def positive(x: [N]) -> bool[N] = x > 0.0
export def halves(x: bfloat16[N]) -> bfloat16[N] = x * x + x
export def chain(x: [N]) -> [N] = tanh(0.5 * x + 0.25) * x
export def divided(x: [N]) -> [N] = x / 3.0
"""
STREAMED = {"affine", "rows", "wide", "ints", "positive", "halves"}


@pytest.fixture
def low_threshold(monkeypatch):
    """Every output of SOURCE over the threshold, every row long enough."""
    monkeypatch.setattr(stream_schedule, "STREAM_BYTES", 1024)
    monkeypatch.setattr(stream_schedule, "STREAM_ROW_BYTES", 256)


def library(directory, fast_math: bool):
    compiled = compile_snippet(str(directory), SOURCE, "nt")
    path = directory / "nt.so"
    build_library(compiled.module, compiled.spec, path, fast_math=fast_math)
    return dlvm.load(path)


def arguments(name: str) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    if name == "rows":
        return [rng.standard_normal((61, 517), np.float32), rng.standard_normal(517, np.float32)]
    x = rng.uniform(-4, 4, N)
    if name == "wide":
        return [x]
    if name == "ints":
        return [rng.integers(-1000, 1000, N, np.int32), rng.integers(-1000, 1000, N, np.int32)]
    if name == "halves":
        import ml_dtypes

        return [x.astype(ml_dtypes.bfloat16)]
    return [x.astype(np.float32)]


def test_values_bitwise_those_of_the_plain_build(tmp_path, low_threshold):
    (tmp_path / "nt").mkdir()
    (tmp_path / "plain").mkdir()
    streamed = library(tmp_path / "nt", fast_math=True)
    stream_schedule.STREAM_BYTES = 1 << 62  # the plain build of the same fast-math kernels
    plain = library(tmp_path / "plain", fast_math=True)
    for name in sorted(STREAMED | {"chain", "divided"}):
        args = arguments(name)
        want = np.asarray(getattr(plain, name)(*args))
        got = np.asarray(getattr(streamed, name)(*args))
        assert got.tobytes() == want.tobytes(), name
        # Into an output that starts off a vector boundary (4 bytes past one, then 12).
        for skew in (1, 3):
            buffer = np.zeros(want.size + skew, want.dtype)
            out = buffer[skew:].reshape(want.shape)
            getattr(streamed, name)(*args, out=out)
            assert out.tobytes() == want.tobytes(), (name, skew)


@pytest.mark.parametrize("cpu", ["native", "x86-64"])  # x86-64: SSE only, 16-byte stores
def test_one_thread_runs_the_whole_range(tmp_path, low_threshold, monkeypatch, cpu):
    monkeypatch.setenv("DLRT_NUM_THREADS", "1")
    text = f"module one\ndim N = {N}\nexport def affine(x: [N]) -> [N] = 0.5 * x + 0.25\n"
    compiled = compile_snippet(str(tmp_path), text, "one")
    build_library(compiled.module, compiled.spec, tmp_path / "one.so", cpu=cpu, fast_math=True)
    x = arguments("affine")[0]
    with dlvm.load(tmp_path / "one.so") as one:
        got = np.asarray(one.affine(x))
    assert np.array_equal(got, np.float32(0.5) * x + np.float32(0.25))


def kernels_ir(directory, fast_math: bool) -> dict[str, str]:
    """The optimised LLVM IR of each exported function's kernel body."""
    compiled = compile_snippet(str(directory), SOURCE, "nt")
    module = schedule(compiled.module, fast_math=fast_math)
    _, text = compile_object(module)
    bodies: dict[str, str] = {}
    for chunk in text.split("\ndefine ")[1:]:
        head = chunk.split("(", 1)[0]
        if head.endswith("_k.body"):
            bodies[head.split("@k.", 1)[1].removesuffix("_k.body")] = chunk.split("\n}", 1)[0]
    return bodies


def test_nontemporal_stores_exactly_where_they_qualify(tmp_path, low_threshold):
    bodies = kernels_ir(tmp_path, fast_math=True)
    assert set(bodies) == STREAMED | {"chain", "divided"}
    for name, body in bodies.items():
        want = name in STREAMED
        assert ("!nontemporal" in body) is want, name
        assert ("@llvm.x86.sse.sfence()" in body) is want, name
    for name, body in kernels_ir(tmp_path, fast_math=False).items():
        assert "!nontemporal" not in body and "sfence" not in body, name


def test_small_outputs_keep_plain_stores(tmp_path):
    for name, body in kernels_ir(tmp_path, fast_math=True).items():
        assert "!nontemporal" not in body and "sfence" not in body, name


def test_default_build_ir_does_not_depend_on_the_threshold(tmp_path, monkeypatch):
    def default_ir() -> str:
        compiled = compile_snippet(str(tmp_path), SOURCE, "nt")
        return str(llvm_module(schedule(compiled.module)))

    before = default_ir()
    monkeypatch.setattr(stream_schedule, "STREAM_BYTES", 0)
    monkeypatch.setattr(stream_schedule, "STREAM_ROW_BYTES", 0)
    assert default_ir() == before


def kernel(tmp_path, body: str, shape: str = "[N]") -> Function:
    text = f"module k\ndim N = {N}\nexport def f(x: {shape}, y: {shape}) -> {shape} = {body}\n"
    compiled = compile_snippet(str(tmp_path), text, "k")
    module = schedule(compiled.module)
    return next(f for f in module.functions if f.compute)


@pytest.mark.parametrize(
    "body, streams",
    [
        ("x * y + x", True),
        ("x * y + x - y * 3.0 + max(x, y) - min(x, 0.5)", True),  # 8 operations
        ("x * y + x - y * 3.0 + max(x, y) - min(x, 0.5) * y", False),  # 9
        ("x / y", False),
        ("exp(x) + y", False),
        ("x ** y", False),
    ],
)
def test_memory_bound_measure(tmp_path, low_threshold, body, streams):
    assert stream_schedule.streams(kernel(tmp_path, body)) is streams


def test_short_rows_do_not_stream(tmp_path, low_threshold):
    assert stream_schedule.streams(kernel(tmp_path, "x + y", "[N x 63]")) is False
    assert stream_schedule.streams(kernel(tmp_path, "x + y", "[63 x N]")) is True


TRAINED = f"""module upd
use optim
dim N = {N}
x: in[N]
W: param[N] = 0.5
loss: out[] = sum(x * W * W)
train minimizing loss using sgd(rate: 0.001)
"""


def test_a_parameter_update_streamed_in_place(tmp_path, low_threshold):
    """SGD's update W - rate·g is cheap and written over W: each vector is loaded before it
    is stored non-temporally, so three steps give the plain build's parameters bit for bit."""
    compiled = compile_snippet(str(tmp_path), TRAINED, "upd")
    module = schedule(compiled.module, fast_math=True)
    streamed_kernels = [f for f in module.functions if f.compute and f.schedule.get("stream") == 1]
    assert streamed_kernels, "no kernel of the train step streams"
    x = arguments("affine")[0]
    weights = []
    for threshold in (1024, 1 << 62):  # streamed, then the plain build
        stream_schedule.STREAM_BYTES = threshold
        directory = tmp_path / str(threshold)
        directory.mkdir()
        compiled = compile_snippet(str(directory), TRAINED, "upd")
        build_library(compiled.module, compiled.spec, directory / "upd.so", fast_math=True)
        with dlvm.load(directory / "upd.so") as model:
            for _ in range(3):
                model.train_step(x)
            weights.append(model.get_param("W").copy())
    assert weights[0].tobytes() == weights[1].tobytes()
    assert not np.array_equal(weights[0], np.full(N, 0.5, np.float32))
