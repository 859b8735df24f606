"""The convolution cases of `make bench` (bench/conv_cases.py) stay buildable without the peers'
libraries: each TEL source compiles through telc's front end with the entries the benchmark
calls, taking and returning the shapes the benchmark passes."""

from __future__ import annotations

import benchlib
import pytest

from telc.driver import compile_text, optimize

cc = benchlib.load("conv_cases")
KEYS = [key for key, *_ in cc.case_rows()]


def test_every_case_has_a_source_and_inputs() -> None:
    assert sorted(KEYS) == sorted(cc.SOURCES)
    assert len(KEYS) == 9


@pytest.mark.parametrize("key", KEYS)
def test_case_compiles_with_the_entries_the_benchmark_calls(key: str) -> None:
    name, text, defines = cc.SOURCES[key]
    compiled = compile_text(f"{name}.tel", text, defines)
    optimize(compiled.module)
    entries = {e.name: e for e in compiled.spec.entries}
    inp = cc.inputs(key)
    if "params" in inp:  # a model: its parameters and buffers are the ones the inputs set
        assert {p.name: tuple(p.shape) for p in compiled.spec.params} == {
            k: v.shape for k, v in inp["params"].items()
        }
    if key.endswith(("_fwd", "_fwdbwd")):
        shapes = [tuple(i.shape) for i in entries["forward"].inputs]
        assert shapes == [inp["x"].shape, inp["k"].shape]
        assert [tuple(o.shape) for o in entries["forward"].outputs] == [inp["x"].shape]
        # backward: the gradients with respect to the input and the kernel, then the loss
        outs = [tuple(o.shape) for o in entries["backward"].outputs]
        assert outs == [inp["x"].shape, inp["k"].shape, ()]
    elif key == "lenet_train":
        assert [i.name for i in entries["train_step"].inputs] == ["x", "labels"]
        assert [tuple(o.shape) for o in entries["infer"].outputs] == [(16, 10)]
    else:
        assert [i.name for i in entries["infer"].inputs] == ["x"]
        assert [tuple(o.shape) for o in entries["infer"].outputs] == [inp["x"].shape]
        assert [i.name for i in entries["train_step"].inputs] == ["x", "target"]


def test_flops_count_the_forward_once_and_fwd_bwd_three_times() -> None:
    rows = {key: work for key, _, _, work in cc.case_rows()}
    assert rows["conv3x3_fwd"] == 2 * 32 * 64 * 32 * 32 * 64 * 3 * 3
    assert rows["conv3x3_fwdbwd"] == 3 * rows["conv3x3_fwd"]
    assert rows["depthwise3x3_fwd"] == 2 * 32 * 64 * 32 * 32 * 1 * 3 * 3
    assert rows["conv1x1_fwd"] == 2 * 32 * 64 * 32 * 32 * 64


def test_cpu_selects_cases_by_key_or_group() -> None:
    cpu = benchlib.load("cpu")
    assert [c.key for c in cpu.selected("conv")] == KEYS
    assert "matmul" in [c.key for c in cpu.selected("dense")]
    assert not set(KEYS) & {c.key for c in cpu.selected("dense")}
    assert [c.key for c in cpu.selected("matmul,block_b1")] == ["matmul", "block_b1"]
