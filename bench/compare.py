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

import copy
import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
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
LR = 0.01  # a model's `train … using adam(rate: 0.01)` unless its case says; betas, eps: defaults

Inputs = dict[str, np.ndarray]


@dataclass
class Case:
    name: str  # bench/models/NAME.tel, or samples/NAME.tel with `sample`
    module: Callable[[], nn.Module]  # forward(**inputs by TEL name) -> (logits, loss)
    inputs: Callable[[np.random.Generator], Inputs]
    params: dict[str, tuple[str, bool]]  # TEL parameter -> (state-dict key, transposed)
    buffers: dict[str, str] = field(default_factory=dict)  # TEL buffer -> state-dict key
    sample: bool = False  # the model is a shipped sample (samples/NAME.tel)
    prediction: Callable[[torch.Tensor], torch.Tensor] = lambda logits: logits  # what infer gives
    rate: float = LR  # the model's adam(rate: …)

    def source(self) -> str:
        """The TEL text built: a bench model as it is; a sample with the gradient entry that
        samples do not ship (`export def grads = grad(loss)`, every parameter in order)."""
        if not self.sample:
            return (HERE / "models" / f"{self.name}.tel").read_text()
        text = (HERE.parent / "samples" / f"{self.name}.tel").read_text()
        return text + "\nexport def grads = grad(loss)\n"


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


class PreNorm(nn.Module):
    """A pre-norm transformer block: causal self-attention over `heads` heads and a gelu MLP
    `f` wide, each with a LayerNorm before it and a residual around it."""

    def __init__(self, d: int = 8, heads: int = 2, f: int = 16) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.fc1, self.fc2 = nn.Linear(d, f), nn.Linear(f, d)

    def block(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        a = self.ln1(x)

        def split(u: torch.Tensor) -> torch.Tensor:  # [B x T x D] -> [B x H x T x D/H]
            return u.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)

        att = F.scaled_dot_product_attention(
            split(self.q(a)), split(self.k(a)), split(self.v(a)), is_causal=True
        )
        h = x + self.o(att.transpose(1, 2).reshape(b, t, d))
        return h + self.fc2(F.gelu(self.fc1(self.ln2(h))))


class Block(PreNorm):
    """bench/models/block.tel: one block (2 heads of 4) regressed onto a target."""

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.block(x)
        return y, F.mse_loss(y, target)


class GPT(nn.Module):
    """samples/transformer.tel: token and position embeddings, two pre-norm blocks (4 heads of
    8), a final LayerNorm and an untied output projection, next-token cross-entropy."""

    V, T, D = 32, 16, 32

    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(self.V, self.D)
        self.positions = nn.Parameter(0.02 * torch.randn(self.T, self.D))
        self.blocks = nn.ModuleList(PreNorm(self.D, 4, 4 * self.D) for _ in range(2))
        self.ln, self.out = nn.LayerNorm(self.D), nn.Linear(self.D, self.V)

    def forward(self, ids: torch.Tensor, next_ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = self.tokens(ids) + self.positions
        for block in self.blocks:
            x = block.block(x)
        logits = self.out(self.ln(x))
        return logits, F.cross_entropy(logits.reshape(-1, self.V), next_ids)


class ResNet(nn.Module):
    """samples/resnet.tel: a 3x3 stem, one residual block of two 3x3 convolutions with
    BatchNorm2d, global average pooling and a dense layer over 4 classes."""

    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.stem = nn.Conv2d(1, c, 3, padding=1)
        self.conv1, self.conv2 = (nn.Conv2d(c, c, 3, padding=1, bias=False) for _ in range(2))
        self.bn1, self.bn2 = nn.BatchNorm2d(c), nn.BatchNorm2d(c)
        self.fc = nn.Linear(c, 4)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        stem = F.relu(self.stem(x))
        h = F.relu(self.bn1(self.conv1(stem)))
        block = F.relu(self.bn2(self.conv2(h)) + stem)
        logits = self.fc(block.mean(dim=(2, 3)))
        return logits, F.cross_entropy(logits, labels)


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
    Case(
        "transformer",
        GPT,
        lambda rng: {
            "ids": rng.integers(0, 32, (8, 16), dtype=np.int32),
            "next_ids": rng.integers(0, 32, 128, dtype=np.int64),
        },
        {
            "tokens": ("tokens.weight", False),
            "positions": ("positions", False),
            **{
                tel.format(n=n + 1): (f"blocks.{n}.{key}", transposed)
                for n in range(2)
                for tel, key, transposed in (
                    ("norm{n}a", "ln1.weight", False),
                    ("shift{n}a", "ln1.bias", False),
                    ("Wq{n}", "q.weight", True),  # [D x D]^T as [D x H x K]: heads as PyTorch's
                    ("Wk{n}", "k.weight", True),
                    ("Wv{n}", "v.weight", True),
                    ("Wo{n}", "o.weight", True),  # [D x D]^T as [H x K x D]
                    ("norm{n}b", "ln2.weight", False),
                    ("shift{n}b", "ln2.bias", False),
                    ("W{n}up", "fc1.weight", True),
                    ("b{n}up", "fc1.bias", False),
                    ("W{n}down", "fc2.weight", True),
                    ("b{n}down", "fc2.bias", False),
                )
            },
            "normf": ("ln.weight", False),
            "shiftf": ("ln.bias", False),
            "Wout": ("out.weight", True),
            "bout": ("out.bias", False),
        },
        sample=True,
        rate=0.003,
    ),
    Case(
        "resnet",
        ResNet,
        lambda rng: {"x": normal(rng, 8, 1, 8, 8), "labels": rng.integers(0, 4, 8, dtype=np.int64)},
        {
            "K0": ("stem.weight", False),
            "k0": ("stem.bias", False),
            "K1": ("conv1.weight", False),
            "gamma1": ("bn1.weight", False),
            "beta1": ("bn1.bias", False),
            "K2": ("conv2.weight", False),
            "gamma2": ("bn2.weight", False),
            "beta2": ("bn2.bias", False),
            "W": ("fc.weight", True),
            "b": ("fc.bias", False),
        },
        buffers={
            "mean1": "bn1.running_mean",
            "var1": "bn1.running_var",
            "mean2": "bn2.running_mean",
            "var2": "bn2.running_var",
        },
        sample=True,
        prediction=lambda logits: F.softmax(logits, dim=-1),  # resnet.tel's `y`
    ),
]


# Comparing ---------------------------------------------------------------------------------------


def load_state_dict(model: Any, state: dict[str, np.ndarray], case: Case) -> None:
    """Sets each parameter of the TEL `model` from the state-dict entry the case names for it,
    transposed where asked (nn.Linear's [out x in] to TEL's [in x out]) and reshaped to the
    parameter's shape (a bias [n] to [1 x n]), as docs/pytorch.md shows; buffers likewise."""
    named = {name: (key, transposed) for name, (key, transposed) in case.params.items()}
    named.update({name: (key, False) for name, key in case.buffers.items()})
    for name, (key, transposed) in named.items():
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
    """The rows of the table for one model: (model, quantity, abs error, relative error).

    The reference is the PyTorch module in float64, started from the same float32 values, so
    each row measures our float32 error alone. A model with buffers (batch norm) is compared
    as PyTorch runs it: `infer` against eval() (the running statistics); the gradient entry,
    which differentiates the train objective, and the train steps against train() (the batch's
    statistics); then the buffers after the steps and the prediction with them.

    The parameters after the Adam steps come from the model built in float64 (`type float64`):
    Adam divides each gradient element by its own running magnitude, so an element that is
    float32 rounding noise (1e-9 where the largest is 1e-3) moves its parameter a whole step
    either way, whoever computes it. The float32 library's losses along the way are rows too."""
    from cases import build

    torch.manual_seed(0)
    theirs = case.module()
    state_file = directory / f"{case.name}.pt"
    torch.save(theirs.state_dict(), state_file)  # what a PyTorch user has
    state = {k: v.numpy() for k, v in torch.load(state_file).items()}
    theirs.double()
    ours = build(case.source(), case.name, directory, {})
    wide = build(in_float64(case.source()), f"{case.name}_f64", directory, {})
    trained = [p["name"] for p in ours.manifest["params"] if p.get("kind") != "buffer"]
    assert trained == list(case.params), f"{case.name}: map every parameter, in order: {trained}"
    for model in (ours, wide):
        load_state_dict(model, state, case)

    inputs = case.inputs(np.random.default_rng(0))
    tensors = {
        k: torch.from_numpy(v.astype(np.float64) if v.dtype == np.float32 else v)
        for k, v in inputs.items()
    }
    shapes = {name: ours.param_specs[name].shape for name in case.params}
    rows = []

    def row(quantity: str, a: Any, b: Any) -> None:
        rows.append((case.name, quantity, *errors(a, b)))

    def args(entry: Any) -> list[np.ndarray]:
        return [inputs[t.name] for t in entry.inputs]

    def prediction() -> torch.Tensor:
        with torch.no_grad():
            return case.prediction(theirs.eval()(**tensors)[0])

    running = " (running statistics)" if case.buffers else ""
    row(f"prediction{running}", ours.infer(*args(ours.infer)), prediction())
    twin = copy.deepcopy(theirs).train()  # its forward would move theirs's running statistics
    _, loss = twin(**tensors)
    loss.backward()
    named = dict(twin.named_parameters())
    for (name, (key, transposed)), g in zip(case.params.items(), ours.grads(*args(ours.grads))):
        row(f"d loss / d {name}", g, as_tel(named[key].grad, shapes[name], transposed))

    theirs.train()
    adam = torch.optim.Adam(theirs.parameters(), lr=case.rate, betas=(0.9, 0.999), eps=1e-8)
    for step in range(ADAM_STEPS):
        adam.zero_grad()
        _, loss = theirs(**tensors)
        loss.backward()
        adam.step()
        our_loss = ours.train_step(*args(ours.train_step))  # the loss before the step
        wide.train_step(*args(wide.train_step))
        row(f"loss (step {step + 1})", our_loss, loss.detach())
    named = dict(theirs.named_parameters())
    for name, (key, transposed) in case.params.items():
        after = as_tel(named[key], shapes[name], transposed)
        row(f"{name} after {ADAM_STEPS} Adam steps (float64)", wide.get_param(name), after)
    buffers = dict(theirs.named_buffers())
    for name, key in case.buffers.items():
        after = as_tel(buffers[key], ours.param_specs[name].shape, False)
        row(f"{name} after {ADAM_STEPS} steps", ours.get_param(name), after)
    if case.buffers:
        row(f"prediction after the steps{running}", ours.infer(*args(ours.infer)), prediction())
    ours.close()
    wide.close()
    return rows


def in_float64(text: str) -> str:
    """The model with float64 as its element type (its `type float32` line changed)."""
    line = re.compile(r"^type float32$", re.MULTILINE)
    assert line.search(text), "a compared model declares `type float32`"
    return line.sub("type float64", text)


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
    print_summary(rows)
    return 1 if failed else 0


def kind_of(quantity: str) -> str:
    """The column of the summary a row belongs to."""
    for kind, mark in (("gradients", "d loss / d"), ("losses", "loss ("), ("parameters", "Adam")):
        if quantity.startswith(mark) or mark in quantity:
            return kind
    return "predictions" if quantity.startswith("prediction") else "buffers"


def print_summary(rows: list[tuple[str, str, float, float]]) -> None:
    """The largest relative error of each model in each kind of quantity."""
    kinds = ["predictions", "gradients", "losses", "parameters", "buffers"]
    worst: dict[str, dict[str, float]] = {}
    for model, quantity, _, rel in rows:
        cell = worst.setdefault(model, {})
        kind = kind_of(quantity)
        cell[kind] = max(cell.get(kind, 0.0), rel)
    print("\n| model | " + " | ".join(kinds) + " |")
    print("|---|" + "---|" * len(kinds))
    for model, cell in worst.items():
        shown = (f"{cell[k]:.1e}" if k in cell else "-" for k in kinds)
        print(f"| {model} | " + " | ".join(shown) + " |")


if __name__ == "__main__":
    sys.exit(main())
