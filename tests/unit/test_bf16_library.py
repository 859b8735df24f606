"""A bf16 model end to end: samples/ffnn.tel in `type bfloat16` built into a library, trained a
few steps against the interpreter running the same IR in bf16; its checkpoint read by the
`safetensors` package (BF16) and a BF16 file written by hand loaded back; arguments given as
float32 arrays rounded to bf16 as ml_dtypes rounds them. (DLPack with a torch bf16 tensor is
not tested: torch is not in the environment.)"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import safetensors
from telhelp import build_snippet, compile_snippet, entry, run_train_step, sample_path

import dlvm
from dlvm.runtime import DLDataType, DLDataTypeCode, DType

BF16 = np.dtype(ml_dtypes.bfloat16)
STEPS = 4
# One bf16 ulp is 2^-8 to 2^-7 of a value; the library and the interpreter round the same
# values, but a kernel may sum in another order (f32 products in tiles), so a result can sit
# on the other side of a rounding step, and a step on it moves later values by as much again.
TOLERANCE = 4 * 2**-7


def ffnn_bf16() -> str:
    text = Path(sample_path("ffnn")).read_text()
    assert "type float32" in text
    return text.replace("type float32", "type bfloat16")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    directory = tmp_path_factory.mktemp("ffnn_bf16")
    text = ffnn_bf16()
    return build_snippet(directory, text, "ffnn"), compile_snippet(str(directory), text, "ffnn")


def batch(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 4)]
    xa, xb = rng.standard_normal((3, 4)), rng.standard_normal((5, 4))
    return {"xa": xa.astype(BF16), "xb": xb.astype(BF16), "labels": labels.astype(BF16)}


def close(got: np.ndarray, want: np.ndarray) -> bool:
    scale = max(1.0, float(np.abs(want.astype(np.float32)).max()))
    diff = np.abs(got.astype(np.float32) - want.astype(np.float32))
    return bool(diff.max() <= TOLERANCE * scale)


def test_trains_as_the_interpreter_does(built):
    library, compiled = built
    train = entry(compiled.interface, "train")
    with dlvm.load(library, seed=3) as m:
        params = {name: np.array(v) for name, v in m.params.items()}
        assert all(v.dtype == BF16 for v in params.values())
        states = [np.zeros(t.shape, BF16) for _, _, t in train.states]  # momentum's, from 0
        losses = []
        for step in range(1, STEPS + 1):
            inputs = batch(step)
            got = float(m.train_step(inputs["xa"], inputs["xb"], inputs["labels"]))
            loss, params, states = run_train_step(
                compiled, train, inputs, params, states, step, float64=False
            )
            assert abs(got - loss) <= TOLERANCE * max(1.0, abs(loss)), (step, got, loss)
            for name, want in params.items():
                assert m.params[name].dtype == BF16
                assert close(m.params[name], want), name
            params = {name: np.array(v) for name, v in m.params.items()}  # the next step's start
            losses.append(got)
        for _ in range(40):  # the same batch again and again: its loss falls
            loss_now = float(m.train_step(inputs["xa"], inputs["xb"], inputs["labels"]))
        assert loss_now < losses[-1] * 0.8


def test_float32_arguments_are_rounded_to_bf16(built):
    library, _ = built
    rng = np.random.default_rng(7)
    xa, xb = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((5, 4))
    with dlvm.load(library, seed=1) as m:
        exact = m.infer(xa.astype(BF16), xb.astype(BF16))
        assert exact.dtype == BF16
        np.testing.assert_array_equal(m.infer(xa, xb).view(np.uint16), exact.view(np.uint16))


def test_arrays_numpy_saved_in_bf16_are_read_back(built, tmp_path):
    """numpy.save writes an ml_dtypes.bfloat16 array as 2-byte opaque elements (|V2), and so
    does `telc run -o`; np.load gives them back so, and they are taken as bf16 bits."""
    library, _ = built
    inputs = batch(5)
    with dlvm.load(library, seed=1) as m:
        want = m.infer(inputs["xa"], inputs["xb"])
        np.save(tmp_path / "xa.npy", inputs["xa"])
        loaded = np.load(tmp_path / "xa.npy")
        assert loaded.dtype == np.dtype("V2")
        got = m.infer(loaded, inputs["xb"])
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
        with pytest.raises(TypeError, match="must be bf16"):  # a record of two bytes is not
            m.infer(np.zeros((3, 4), [("a", "u1"), ("b", "u1")]), inputs["xb"])


def test_checkpoint_is_safetensors_bf16(built, tmp_path):
    library, _ = built
    path = tmp_path / "ffnn.safetensors"
    with dlvm.load(library, seed=2) as m:
        m.save(path)
        saved = {name: np.array(v) for name, v in m.params.items()}
    tensors = dict(safetensors.deserialize(path.read_bytes()))
    for name, value in saved.items():
        assert tensors[name]["dtype"] in ("BF16", "bfloat16")
        assert list(tensors[name]["shape"]) == list(value.shape)
        assert bytes(tensors[name]["data"]) == value.tobytes()
    # A file written here, not by the library: every parameter 0.5 (0x3F00 in bf16).
    header: dict = {}
    offset = 0
    for name, value in saved.items():
        header[name] = {"dtype": "BF16", "shape": list(value.shape),
                        "data_offsets": [offset, offset + value.nbytes]}  # fmt: skip
        offset += value.nbytes
    text = json.dumps(header).encode()
    data = b"".join(np.full(v.shape, 0.5, BF16).tobytes() for v in saved.values())
    handmade = tmp_path / "half.safetensors"
    handmade.write_bytes(struct.pack("<Q", len(text)) + text + data)
    with dlvm.load(library, seed=2) as m:
        m.load(handmade)
        assert all((v.view(np.uint16) == 0x3F00).all() for v in m.params.values())


def test_dlpack_type_is_kdlbfloat_16():
    dl = DLDataType.of(DType.BF16)
    assert (dl.code, dl.bits, dl.lanes) == (DLDataTypeCode.Bfloat, 16, 1)
    assert DType.from_ir("bf16") is DType.BF16 and DType.BF16.numpy == BF16


def test_without_ml_dtypes_numbers_round_to_bf16_bits():
    """dlvm.load's bf16 arguments without ml_dtypes: uint16 bits, taken as they are, and other
    numbers rounded as ml_dtypes rounds them (ties to even, NaN quiet, past the range inf)."""
    from dlvm.loader import _bf16

    bits = np.dtype(np.uint16)
    x = np.array([1 + 2**-8, 1 + 3 * 2**-8, -2.5, np.nan, np.inf, 3.4e38, 1e-39], np.float32)
    np.testing.assert_array_equal(_bf16(x, bits), x.astype(BF16).view(np.uint16))
    np.testing.assert_array_equal(_bf16(np.array([3, -7]), bits), [0x4040, 0xC0E0])
    raw = np.array([0x3F80, 0x7FC1], np.uint16)
    assert _bf16(raw, bits) is raw


@pytest.fixture(scope="module")
def distributed(tmp_path_factory):
    """ffnn in bfloat16 built with --distributed."""
    from dlvm.codegen.build import build_library
    from telc.driver import compile_text, optimize

    compiled = compile_text("ffnn.tel", ffnn_bf16(), distributed=True)
    optimize(compiled.module)
    library = tmp_path_factory.mktemp("ffnn_bf16_dp") / "ffnn.so"
    build_library(compiled.module, compiled.spec, library)
    return library


def test_a_bf16_model_trains_across_ranks(distributed):
    """The hook gets the bf16 block as an ml_dtypes array; two equal ranks (the block doubled,
    then halved: exact in bf16) train bitwise as one."""
    seen: list[np.dtype] = []

    def doubling(block: np.ndarray) -> None:
        seen.append(block.dtype)
        block[...] = (block.astype(np.float32) * 2).astype(BF16)

    with dlvm.load(distributed, seed=3) as plain, dlvm.load(distributed, seed=3) as ranked:
        ranked.set_allreduce(doubling, ranks=2)
        for seed in range(3):
            assert ranked.train_step(**batch(seed)) == plain.train_step(**batch(seed))
        for name, value in plain.params.items():
            np.testing.assert_array_equal(ranked.params[name], value, err_msg=name)
    assert seen == [BF16] * 3


def test_without_ml_dtypes_a_bf16_block_is_not_summed_as_bits(distributed, monkeypatch):
    """Without ml_dtypes bf16 is uint16 bits to dlvm.load; summing those as integers would be
    wrong, so the step fails, saying what to install, and changes nothing."""
    from dlvm import runtime
    from dlvm.loader import LibraryError

    with dlvm.load(distributed, seed=3) as model:
        monkeypatch.setitem(runtime._NUMPY_TYPES, DType.BF16, np.uint16)
        model.set_allreduce(lambda block: None, ranks=2)
        before = model.params
        with pytest.raises(LibraryError, match="all-reduce hook failed") as failed:
            model.train_step(**batch(0))
        assert "with ml_dtypes installed (pip install 'telc[bf16]')" in str(failed.value.__cause__)
        for name, value in before.items():
            np.testing.assert_array_equal(model.params[name], value)
