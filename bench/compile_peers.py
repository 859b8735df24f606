"""Cold compile time of the MLP (inference and training step) by a peer, in a fresh process:
`python compile_peers.py jax` times jax.jit's lowering and compilation of both functions;
`python compile_peers.py torch` times torch.compile's first calls of both, with Inductor's
caches off. Prints the seconds (imports and data excluded)."""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def jax_seconds() -> float:
    import jax
    import jax.numpy as jnp
    from cases import inputs

    inp = inputs("train_b128")
    p = {k: jnp.asarray(v) for k, v in inp["params"].items()}
    x, labels = jnp.asarray(inp["x"]), jnp.asarray(inp["labels"])

    def forward(x, p):  # type: ignore[no-untyped-def]
        h1 = jax.nn.relu(x @ p["W1"] + p["b1"])
        h2 = jax.nn.relu(h1 @ p["W2"] + p["b2"])
        return jax.nn.softmax(h2 @ p["W3"] + p["b3"], axis=1)

    def train(p, x, labels):  # type: ignore[no-untyped-def]
        def loss_fn(p):  # type: ignore[no-untyped-def]
            return -jnp.sum(labels * jnp.log(forward(x, p))) / x.shape[0]

        loss, g = jax.value_and_grad(loss_fn)(p)
        return jax.tree_util.tree_map(lambda w, d: w - 0.01 * d, p, g), loss

    t0 = time.perf_counter()
    jax.jit(forward).lower(x, p).compile()
    jax.jit(train, donate_argnums=0).lower(p, x, labels).compile()
    return time.perf_counter() - t0


def torch_seconds() -> float:
    os.environ.setdefault("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")
    import torch
    from cases import inputs

    inp = inputs("train_b128")
    p = {k: torch.from_numpy(v.copy()).requires_grad_(True) for k, v in inp["params"].items()}
    x, labels = torch.from_numpy(inp["x"]), torch.from_numpy(inp["labels"])

    def forward(x):  # type: ignore[no-untyped-def]
        h1 = torch.relu(torch.addmm(p["b1"], x, p["W1"]))
        h2 = torch.relu(torch.addmm(p["b2"], h1, p["W2"]))
        return torch.addmm(p["b3"], h2, p["W3"])

    def train(x, labels):  # type: ignore[no-untyped-def]
        loss = torch.nn.functional.cross_entropy(forward(x), labels)
        loss.backward()
        with torch.no_grad():
            for w in p.values():
                w -= 0.01 * w.grad
                w.grad = None
        return loss

    infer = torch.compile(lambda x: torch.softmax(forward(x), dim=1))
    step = torch.compile(train)
    t0 = time.perf_counter()
    with torch.no_grad():
        infer(x)
    step(x, labels)
    return time.perf_counter() - t0


if __name__ == "__main__":
    peer = sys.argv[1]
    seconds = {"jax": jax_seconds, "torch": torch_seconds}[peer]()
    print(f"{seconds:.3f}")
