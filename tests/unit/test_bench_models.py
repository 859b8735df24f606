"""The models of `make compare` (bench/models) keep the shape bench/compare.py relies on, so they
stay buildable without PyTorch: each compiles, its `grads` returns one gradient per parameter in
declaration order, and it trains with adam on the same inputs `grads` takes."""

from __future__ import annotations

from pathlib import Path

import pytest

from telc.driver import compile_text

MODELS = sorted((Path(__file__).resolve().parents[2] / "bench" / "models").glob("*.tel"))


def test_there_are_models() -> None:
    assert [p.stem for p in MODELS] == ["block", "cnn", "embed", "lm", "mlp"]


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_model_exports_a_gradient_per_parameter(path: Path) -> None:
    spec = compile_text(str(path), path.read_text(encoding="utf-8")).spec
    entries = {e.name: e for e in spec.entries}
    assert set(entries) == {"infer", "train_step", "grads"}
    grads, train = entries["grads"], entries["train_step"]
    assert [(o.dtype, o.shape) for o in grads.outputs] == [(p.dtype, p.shape) for p in spec.params]
    assert [i.name for i in grads.inputs] == [i.name for i in train.inputs]
    assert [s.name for s in spec.states] == [f"{p.name}_{m}" for p in spec.params for m in "mv"]
