"""Trains samples/transformer.tel, a small character-level language model, through its built
library: `python samples/transformer_train.py [--steps N]` builds transformer.so with `telc
build` (into a temporary folder, or --out), makes a deterministic text, and prints the loss
falling from about log(V), the loss of predicting every character evenly, as it learns the text.

The text is generated here, so nothing is downloaded: sentences drawn by a seeded generator from
a few words and a fixed sentence pattern, over an alphabet of V characters at most."""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

SAMPLE = Path(__file__).resolve().parent / "transformer.tel"
B, T, V = 8, 16, 32  # the sample's dims: batch, sequence length, vocabulary
SUBJECTS = ["the cat", "a dog", "my bird", "the fox", "one owl"]
VERBS = ["sees", "likes", "finds", "chases"]
OBJECTS = ["the moon", "a red ball", "some milk", "its tail", "the sun"]


def make_text(sentences: int = 400, seed: int = 0) -> str:
    """SENTENCES sentences "SUBJECT VERB OBJECT. " drawn with a generator seeded by SEED."""
    rng = np.random.default_rng(seed)
    return "".join(
        " ".join(words[rng.integers(len(words))] for words in (SUBJECTS, VERBS, OBJECTS)) + ". "
        for _ in range(sentences)
    )


def alphabet(text: str) -> str:
    """The characters of TEXT, sorted: character i has token id i."""
    chars = "".join(sorted(set(text)))
    assert len(chars) <= V, f"{len(chars)} characters, more than the vocabulary's {V}"
    return chars


def encode(text: str) -> np.ndarray:
    """TEXT as token ids (int64)."""
    index = {c: i for i, c in enumerate(alphabet(text))}
    return np.array([index[c] for c in text], dtype=np.int64)


def batch(tokens: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """B windows of T ids from random places in TOKENS (i32 [B x T]) and, for each position,
    the id that follows it (i64 [B * T])."""
    starts = rng.integers(0, len(tokens) - T - 1, size=B)
    windows = np.stack([tokens[s : s + T + 1] for s in starts])
    return windows[:, :T].astype(np.int32), windows[:, 1:].reshape(-1).astype(np.int64)


def build(out: Path) -> Path:
    """samples/transformer.tel built with `telc build` into OUT/transformer.so."""
    out.mkdir(parents=True, exist_ok=True)
    library = out / "transformer.so"
    telc = Path(sys.executable).with_name("telc")
    command = [str(telc) if telc.exists() else "telc", "build", str(SAMPLE), "-o", str(library)]
    subprocess.run(command, check=True, stderr=subprocess.DEVNULL)
    return library


def train(model, tokens: np.ndarray, steps: int, seed: int = 0, every: int = 50) -> list[float]:
    """STEPS train steps on random windows of TOKENS; the losses, one per step, printed as the
    mean of each EVERY steps."""
    rng = np.random.default_rng(seed)
    losses = []
    for step in range(1, steps + 1):
        ids, next_ids = batch(tokens, rng)
        losses.append(float(model.train_step(ids=ids, next_ids=next_ids)))
        if every and step % every == 0:
            print(f"step {step:4d}  loss {np.mean(losses[-every:]):.3f}", flush=True)
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--out", type=Path, help="where to build (default: a temporary folder)")
    args = parser.parse_args()
    import dlvm

    tokens = encode(make_text())
    with tempfile.TemporaryDirectory() as tmp:
        library = build(args.out or Path(tmp))
        with dlvm.load(library, seed=0) as model:
            print(
                f"{len(tokens)} characters, {len(alphabet(make_text()))} distinct; "
                f"uniform-prediction loss log({V}) = {math.log(V):.3f}"
            )
            losses = train(model, tokens, args.steps)
    first, last = np.mean(losses[:20]), np.mean(losses[-20:])
    print(f"loss {first:.3f} -> {last:.3f} (log(V) = {math.log(V):.3f})")
    if not last < math.log(V) - 1:
        sys.exit("the loss did not fall clearly below log(V)")


if __name__ == "__main__":
    main()
