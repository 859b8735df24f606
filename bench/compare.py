"""TEL against PyTorch (`make compare`): each model of bench/models is built by telc and loaded
with dlvm.load, the same model is built in PyTorch (float32), and the two are compared on the
forward output, the loss, the gradient of the loss with respect to every parameter and the
parameters after three Adam steps. Both start from the PyTorch module's initial parameters: its
state dict, saved with torch.save and loaded into the library as docs/pytorch.md shows.

A model is one entry of CASES: its TEL file, a builder of the PyTorch module (whose forward
takes the inputs by TEL name and returns the logits and the loss), an input generator, and which
state-dict entry each TEL parameter is (transposed or not). Run in the benchmark's environment
(bench/.venv, which has PyTorch); exits with 1 if any comparison fails."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812 (PyTorch's own spelling)
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

TOLERANCE = 1e-5  # on max|ours - torch| / max|torch|
ADAM_STEPS = 3
LR = 0.01  # each model's `train … using adam(rate: 0.01)`; betas and eps are both's defaults

Inputs = dict[str, np.ndarray]


@dataclass
class Case:
    name: str  # bench/models/NAME.tel
    module: Callable[[], nn.Module]  # forward(**inputs by TEL name) -> (logits, loss)
    inputs: Callable[[np.random.Generator], Inputs]
    params: dict[str, tuple[str, bool]]  # TEL parameter -> (state-dict key, transposed)


# The PyTorch models -------------------------------------------------------------------------------


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(64, 32), nn.Linear(32, 10)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.fc2(F.relu(self.fc1(x)))
        return logits, F.cross_entropy(logits, labels)  # labels: one-hot rows (probabilities)


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.fc = nn.Conv2d(1, 4, 3), nn.Linear(36, 4)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pooled = F.max_pool2d(F.relu(self.conv(x)), 2, 2)
        logits = self.fc(pooled.reshape(len(x), 36))
        return logits, F.cross_entropy(logits, labels)


class Embed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb, self.fc = nn.Embedding(20, 6), nn.Linear(6, 3)

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.fc(self.emb(ids).mean(dim=1))
        return logits, F.cross_entropy(logits, labels)  # labels: class indices


class LM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(11, 8)
        self.q, self.out = nn.Linear(8, 8, bias=False), nn.Linear(8, 11, bias=False)

    def forward(self, ids: torch.Tensor, next: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.out(torch.tanh(self.q(self.emb(ids)))).reshape(-1, 11)
        return logits, F.cross_entropy(logits, next)


class Block(nn.Module):
    """A pre-norm transformer block: causal 2-head self-attention and a gelu MLP."""

    def __init__(self) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(8), nn.LayerNorm(8)
        self.q, self.k, self.v, self.o = (nn.Linear(8, 8, bias=False) for _ in range(4))
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 8)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, t, d = x.shape
        a = self.ln1(x)

        def heads(u: torch.Tensor) -> torch.Tensor:  # [B x T x D] -> [B x 2 x T x D/2]
            return u.reshape(b, t, 2, d // 2).transpose(1, 2)

        att = F.scaled_dot_product_attention(
            heads(self.q(a)), heads(self.k(a)), heads(self.v(a)), is_causal=True
        )
        h = x + self.o(att.transpose(1, 2).reshape(b, t, d))
        y = h + self.fc2(F.gelu(self.fc1(self.ln2(h))))
        return y, F.mse_loss(y, target)


def one_hot(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    return np.eye(k, dtype=np.float32)[rng.integers(0, k, n)]


def normal(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


CASES = [
    Case(
        "mlp",
        MLP,
        lambda rng: {"x": normal(rng, 16, 64), "labels": one_hot(rng, 16, 10)},
        {
            "W1": ("fc1.weight", True),
            "b1": ("fc1.bias", False),
            "W2": ("fc2.weight", True),
            "b2": ("fc2.bias", False),
        },
    ),
    Case(
        "cnn",
        CNN,
        lambda rng: {"x": normal(rng, 8, 1, 8, 8), "labels": one_hot(rng, 8, 4)},
        {
            "K": ("conv.weight", False),
            "kb": ("conv.bias", False),
            "W": ("fc.weight", True),
            "b": ("fc.bias", False),
        },
    ),
    Case(
        "embed",
        Embed,
        lambda rng: {
            "ids": rng.integers(0, 20, (8, 5), dtype=np.int32),
            "labels": rng.integers(0, 3, 8, dtype=np.int64),
        },
        {"E": ("emb.weight", False), "W": ("fc.weight", True), "b": ("fc.bias", False)},
    ),
    Case(
        "lm",
        LM,
        lambda rng: {
            "ids": rng.integers(0, 11, (2, 4), dtype=np.int32),
            "next": rng.integers(0, 11, 8, dtype=np.int64),
        },
        {"E": ("emb.weight", False), "Wq": ("q.weight", True), "Wo": ("out.weight", True)},
    ),
    Case(
        "block",
        Block,
        lambda rng: {"x": normal(rng, 2, 5, 8), "target": normal(rng, 2, 5, 8)},
        {
            "g1": ("ln1.weight", False),
            "b1": ("ln1.bias", False),
            "Wq": ("q.weight", True),
            "Wk": ("k.weight", True),
            "Wv": ("v.weight", True),
            "Wo": ("o.weight", True),
            "g2": ("ln2.weight", False),
            "b2": ("ln2.bias", False),
            "W1": ("fc1.weight", True),
            "c1": ("fc1.bias", False),
            "W2": ("fc2.weight", True),
            "c2": ("fc2.bias", False),
        },
    ),
]


# Comparing ---------------------------------------------------------------------------------------


def load_state_dict(
    model: Any, state: dict[str, np.ndarray], params: dict[str, tuple[str, bool]]
) -> None:
    """Sets each parameter of the TEL `model` from the state-dict entry `params` names for it,
    transposed where asked (nn.Linear's [out x in] to TEL's [in x out]) and reshaped to the
    parameter's shape (a bias [n] to [1 x n]), as docs/pytorch.md shows."""
    for name, (key, transposed) in params.items():
        value = state[key].T if transposed else state[key]
        model.set_param(name, value.reshape(model.param_specs[name].shape))


def as_tel(value: torch.Tensor, shape: tuple[int, ...], transposed: bool) -> np.ndarray:
    array = value.detach().numpy()
    return (array.T if transposed else array).reshape(shape)


def errors(ours: Any, theirs: Any) -> tuple[float, float]:
    """max|ours - theirs| and that over max|theirs| (the absolute error where theirs is 0)."""
    a, b = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    err = float(np.max(np.abs(a - b)))
    scale = float(np.max(np.abs(b)))
    return err, err / scale if scale else err


def compare(case: Case, directory: Path) -> list[tuple[str, str, float, float]]:
    """The rows of the table for one model: (model, quantity, abs error, relative error)."""
    from cases import build

    torch.manual_seed(0)
    theirs = case.module()
    state_file = directory / f"{case.name}.pt"
    torch.save(theirs.state_dict(), state_file)  # what a PyTorch user has
    state = {k: v.numpy() for k, v in torch.load(state_file).items()}
    ours = build((HERE / "models" / f"{case.name}.tel").read_text(), case.name, directory, {})
    load_state_dict(ours, state, case.params)

    inputs = case.inputs(np.random.default_rng(0))
    tensors = {k: torch.from_numpy(v) for k, v in inputs.items()}
    shapes = {name: ours.param_specs[name].shape for name in case.params}
    named = dict(theirs.named_parameters())
    rows = []

    def row(quantity: str, a: Any, b: Any) -> None:
        rows.append((case.name, quantity, *errors(a, b)))

    def args(entry: Any) -> list[np.ndarray]:
        return [inputs[t.name] for t in entry.inputs]

    logits, loss = theirs(**tensors)
    loss.backward()
    row("logits", ours.infer(*args(ours.infer)), logits.detach())
    grads = ours.grads(*args(ours.grads))
    for (name, (key, transposed)), g in zip(case.params.items(), grads):
        row(f"d loss / d {name}", g, as_tel(named[key].grad, shapes[name], transposed))

    adam = torch.optim.Adam(theirs.parameters(), lr=LR, betas=(0.9, 0.999), eps=1e-8)
    for step in range(ADAM_STEPS):
        adam.zero_grad()
        _, loss = theirs(**tensors)
        loss.backward()
        adam.step()
        our_loss = ours.train_step(*args(ours.train_step))  # the loss before the step
        row(f"loss (step {step + 1})", our_loss, loss.detach())
    for name, (key, transposed) in case.params.items():
        after = as_tel(named[key], shapes[name], transposed)
        row(f"{name} after {ADAM_STEPS} Adam steps", ours.get_param(name), after)
    ours.close()
    return rows


def main() -> int:
    torch.set_num_threads(1)
    rows = []
    with tempfile.TemporaryDirectory(prefix="compare-") as tmp:
        for case in CASES:
            rows += compare(case, Path(tmp))
    print("| model | quantity | max abs error | max relative error | ≤ 1e-5 |")
    print("|---|---|---|---|---|")
    failed = 0
    for model, quantity, err, rel in rows:
        ok = rel <= TOLERANCE
        failed += not ok
        print(f"| {model} | {quantity} | {err:.2e} | {rel:.2e} | {'pass' if ok else 'FAIL'} |")
    print(f"\n{len(rows) - failed} of {len(rows)} comparisons within {TOLERANCE:g} (relative)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
