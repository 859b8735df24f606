"""NNKit's annotations are usable by a static type checker: mypy accepts every
example of docs/nnkit.md, sees `Tensor[f32, 1, 784]` as a staged f32 tensor, and reports mixed
element types and non-tensor arguments at the user's lines, before anything is staged."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dlvm
from dlvm import nnkit as nk

ROOT = Path(__file__).resolve().parents[2]

WRONG = """\
from dlvm import nnkit as nk
from dlvm.nnkit import Tensor, f32, f64


def layer(x: Tensor[f32, 1, 784], w: Tensor[f32, 784, 10]) -> Tensor[f32, 1, 10]:
    y = nk.tanh(x @ w + 1.0)
    reveal_type(y)
    return y


def mixed(x: Tensor[f32, 3], y: Tensor[f64, 3]) -> Tensor[f32, 3]:
    return x + y


def not_a_tensor(x: Tensor[f32, 3]) -> Tensor[f32, 3]:
    return nk.maximum(x, nk.tanh(2.0))


def comparison(x: Tensor[f32, 3]) -> Tensor[f32, 3]:
    return x < 0.0
"""


def mypy(tmp_path: Path, text: str) -> tuple[int, list[str]]:
    path = tmp_path / "staged.py"
    path.write_text(text)
    # The checkout comes first on mypy's path: an editable install's import hook is invisible
    # to mypy (an installed telc is found through site-packages and dlvm/py.typed).
    env = {"MYPYPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "--follow-imports=silent",
         "--cache-dir", str(tmp_path / "cache"), str(path)],
        capture_output=True, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    lines = [re.sub(r"^.*staged\.py:", "", x) for x in proc.stdout.splitlines()]
    return proc.returncode, lines


def test_the_docs_examples_type_check(tmp_path):
    text = (ROOT / "docs" / "nnkit.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 3
    code, lines = mypy(tmp_path, "\n".join(blocks))
    assert (code, lines) == (0, [])


def test_mistakes_are_reported_at_the_users_lines(tmp_path):
    code, lines = mypy(tmp_path, WRONG)
    assert code == 1
    assert lines == [
        '7: note: Revealed type is "dlvm.nnkit.tensor.f32"',
        '12: error: Unsupported operand types for + ("f32" and "f64")  [operator]',
        '16: error: Value of type variable "T" of "__call__" of "Elementwise" cannot be '
        '"float"  [type-var]',
        '20: error: Incompatible return value type (got "bool_", expected "f32")  [return-value]',
    ]


def test_a_staged_tensor_is_an_instance_of_its_element_types_class(tmp_path, monkeypatch):
    monkeypatch.setenv("DLVM_CACHE_DIR", str(tmp_path))
    seen = []

    @dlvm.stage
    def f(x: nk.Tensor[nk.f64, 2]):
        y = x < 1.0
        seen.extend((type(x), type(x * 2), type(y)))
        return x

    f.ir()
    assert seen == [nk.f64, nk.f64, nk.bool_]
    assert nk.Tensor[nk.i32, 2, 3] == nk.TensorSpec(nk.i32.element, (2, 3))
    np.testing.assert_array_equal(f(np.ones(2)), np.ones(2))


def test_an_annotation_that_cannot_be_evaluated_is_a_located_error():
    from dlvm.nnkit import f16  # a local name: invisible to string annotations

    def f(x: nk.Tensor[f16, 2]):
        return x

    with pytest.raises(nk.StagingError) as e:
        dlvm.stage(f)
    text = str(e.value)
    assert "test_nnkit_typing.py:" in text and "cannot evaluate its annotations" in text
    assert "name 'f16' is not defined" in text and "dlvm.stage(f)" in text
