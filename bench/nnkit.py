"""NNKit's JIT against JAX's jit on the same functions: the first call (staging,
compiling, loading; the compiler's own caches warm, the compiled-function cache empty) and the
steady-state overhead of a call on a tiny input. The first call waits for the JIT's first tier
(dlvm.nnkit.jit); the per-call overhead is measured once the optimised tier has taken over.
Goals: first call ≤ JAX's, per-call overhead ≤ 0.5× JAX's. Reports only; run in the
benchmark's environment (bench/.venv, which has JAX)."""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

RUNS = 2000


def main() -> int:
    os.environ["DLVM_CACHE_DIR"] = tempfile.mkdtemp(prefix="nnkit-bench-")
    import dlvm
    from dlvm import nnkit as nk

    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 784)).astype(np.float32)
    w = (rng.standard_normal((784, 128)) * 0.05).astype(np.float32)
    b = np.zeros((1, 128), np.float32)
    tiny = np.arange(4, dtype=np.float32)

    @dlvm.stage
    def warm(a, c):  # builds the C runtime into the fresh cache: not part of a first call
        return a * c

    warm(tiny, tiny)
    nk.wait_optimised()  # its optimised build (another process) is not part of a first call

    def layer_body(x, w, b):
        return nk.tanh(x @ w + b)

    def tiny_body(a, c):
        return a * c + 1.0

    rows = []
    ours_layer = dlvm.stage(layer_body)
    t0 = time.perf_counter()
    ours_layer(x, w, b)
    rows.append(("first call: tanh(x @ w + b), 32x784x128", "ours", time.perf_counter() - t0))
    ours_tiny = dlvm.stage(tiny_body)
    ours_tiny(tiny, tiny)
    nk.wait_optimised()  # the steady state: calls go to the -O2 libraries
    per_call = []
    for _ in range(RUNS):
        t0 = time.perf_counter()
        ours_tiny(tiny, tiny)
        per_call.append(time.perf_counter() - t0)
    rows.append(("per call: a * c + 1 on 4 floats", "ours", statistics.median(per_call)))

    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        print("JAX is not installed: run in bench/.venv (make bench installs it)")
        jax = None
    if jax is not None:
        layer = jax.jit(lambda x, w, b: jnp.tanh(x @ w + b))
        t0 = time.perf_counter()
        layer(x, w, b).block_until_ready()
        rows.append(("first call: tanh(x @ w + b), 32x784x128", "jax", time.perf_counter() - t0))
        small = jax.jit(lambda a, c: a * c + 1.0)
        small(tiny, tiny).block_until_ready()
        per_call = []
        for _ in range(RUNS):
            t0 = time.perf_counter()
            small(tiny, tiny).block_until_ready()
            per_call.append(time.perf_counter() - t0)
        rows.append(("per call: a * c + 1 on 4 floats", "jax", statistics.median(per_call)))

    print(f"{'case':44} {'who':5} {'seconds':>12}")
    for case, who, s in rows:
        print(f"{case:44} {who:5} {s:12.6f}")
    times = {(c, w): s for c, w, s in rows}
    for case, goal in (("first call: tanh(x @ w + b), 32x784x128", 1.0),
                       ("per call: a * c + 1 on 4 floats", 0.5)):  # fmt: skip
        if (case, "jax") in times:
            ratio = times[(case, "ours")] / times[(case, "jax")]
            verdict = "met" if ratio <= goal else "NOT met"
            print(f"{case}: ours / jax = {ratio:.2f} (goal ≤ {goal}): {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
