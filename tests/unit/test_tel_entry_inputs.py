"""An entry point takes only the inputs it reads: one read only in the branch of `if training`
that the entry does not compile is not demanded (docs/tel.md, "Training"), in the IR, the
manifest and the library alike."""

from __future__ import annotations

import json

import numpy as np
from telhelp import compile_snippet

import dlvm
from dlvm.codegen.build import build_library
from dlvm.codegen.glue import manifest_json

MODEL = """module noisy
use nn
use optim

x: in[4 x 3]
noisy: in[4 x 3]
target: in[4 x 2]
W: param[3 x 2] = glorot()

h: hidden = if training then noisy . W else x . W
y: out = h
loss: out[] = mse(h, target)

train minimizing loss using sgd(rate: 0.5)
"""


def test_each_entry_takes_only_the_inputs_of_its_branch(tmp_path) -> None:
    compiled = compile_snippet(str(tmp_path), MODEL, "noisy")
    inputs = {e.name: [n for n, _ in e.inputs] for e in compiled.interface.entries}
    assert inputs == {"init": [], "infer": ["x"], "train_step": ["noisy", "target"]}
    arity = {f.name: len(f.entry.arguments) for f in compiled.module.functions if f.entry}
    assert arity["infer"] == 2  # x, W
    assert arity["train_step_objective"] == 3  # noisy, target, W

    library = tmp_path / "noisy.so"
    build_library(compiled.module, compiled.spec, library)
    rng = np.random.default_rng(0)
    x, noisy = (rng.standard_normal((4, 3)).astype(np.float32) for _ in range(2))
    target = rng.standard_normal((4, 2)).astype(np.float32)
    with dlvm.load(library) as m:
        assert json.loads(manifest_json(compiled.spec)) == m.manifest
        listed = {e["name"]: [i["name"] for i in e["inputs"]] for e in m.manifest["entries"]}
        assert listed == {"infer": ["x"], "train_step": ["noisy", "target"]}
        w = m.get_param("W").astype(np.float64)
        y = m.infer(x)
        np.testing.assert_allclose(y, x @ w, rtol=1e-5, atol=1e-6)
        train_loss = m.train_step(noisy, target)
        d = noisy @ w - target
        np.testing.assert_allclose(train_loss, np.mean(d * d), rtol=1e-5)
        step = w - 0.5 * noisy.T @ (2 * d / d.size)
        np.testing.assert_allclose(m.get_param("W"), step, rtol=1e-5, atol=1e-6)
