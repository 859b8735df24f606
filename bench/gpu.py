"""The GPU benchmark: libraries built by telc for CUDA against PyTorch eager,
torch.compile and JAX on the same GPU, in one run: MLP 784-512-256-10 inference at batch 1 and
4096, its SGD train step at batch 4096 (also built with --distributed, through the all-reduce
hook with NCCL on one rank: the data-parallel path's own cost), the chain
tanh(a*x + b) * sigmoid(x) on 256M floats
(with the device-to-device copy bandwidth it is held to), and an 8192^3 f32 matrix product
(cuBLAS through PyTorch) in f32 and in TF32 (ours built with --tf32, cuBLAS with TF32
allowed), and the same product of bf16 matrices (tensor cores, f32 sums, on both sides).
Every contender's arrays live on the GPU; ours are passed through DLPack, so the library reads
and writes them in place.

In two steps, since the GPU machine has no compiler toolchain of ours:
    python bench/gpu.py build DIR            # here: the CUDA libraries into DIR
    python3 bench/gpu.py run DIR [--write]   # there (PYTHONPATH=.): times, ratios, goals
`--write` puts the table into bench/RESULTS.md (between the GPU markers)."""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from cases import CHAIN, MATMUL, MLP  # noqa: E402

CHAIN_N = 1 << 28  # 256M floats: 1 GiB in, 1 GiB out
MATMUL_N = 8192
# The product of bf16 matrices: the f32 case's source in a `type bfloat16` module.
MATMUL_BF16 = MATMUL.replace("dim N", "type bfloat16\ndim N", 1)
BATCHES = {"mlp_b1": 1, "mlp_b4096": 4096, "train_b4096": 4096}
RATE = 0.01
# (case, peer, ours/peer time at most): the goals the CUDA path is held to.
GOALS = [
    ("train_b4096", "best", 0.8),
    ("mlp_b1", "torch", 0.5),
    ("matmul", "torch", 1 / 0.7),
    ("matmul_tf32", "torch", 1 / 0.7),
]
CHAIN_GOAL = 0.9  # of the device-to-device copy bandwidth
MARKS = ("<!-- gpu results: bench/gpu.py run --write -->", "<!-- end of gpu results -->")


def build(directory: Path, gpu: str) -> None:
    """Every case's library, built as `telc build -O2 --target cuda --gpu GPU` does."""
    from dlvm.codegen.build import build_library
    from telc.driver import compile_text, optimize

    directory.mkdir(parents=True, exist_ok=True)
    sources = {
        "mlp_b1": (MLP, {"B": 1}),
        "mlp_b4096": (MLP, {"B": 4096}),
        "train_b4096": (MLP, {"B": 4096}),
        "train_b4096_dp": (MLP, {"B": 4096}),
        "chain": (CHAIN, {"N": CHAIN_N}),
        "matmul": (MATMUL, {"N": MATMUL_N}),
        "matmul_tf32": (MATMUL, {"N": MATMUL_N}),
        "matmul_bf16": (MATMUL_BF16, {"N": MATMUL_N}),
    }
    for name, (text, defines) in sources.items():
        t0 = time.perf_counter()
        compiled = compile_text(f"{name}.tel", text, defines, distributed=name.endswith("_dp"))
        optimize(compiled.module)
        build_library(compiled.module, compiled.spec, directory / f"{name}.so",
                      cuda=True, gpu=gpu, tf32=name.endswith("tf32"))  # fmt: skip
        print(f"built {name}.so in {time.perf_counter() - t0:.1f} s", flush=True)


def _product_row(
    library: Path, a: Any, b: Any, sync: Callable[[], None], runs: int
) -> dict[str, list[float]]:
    """Our `matmul` of `library` and torch.mm on the same GPU operands, timed alike."""
    import torch

    import dlvm

    c = torch.empty_like(a)
    model = dlvm.load(library, device="cuda:0")
    try:
        row = {"ours": timed(lambda: model.matmul(a, b, out=c), sync, runs)}
    finally:
        model.close()
    row["torch"] = timed(lambda: torch.mm(a, b, out=c), sync, runs)
    return row


def timed(fn: Callable[[], Any], sync: Callable[[], None], runs: int) -> list[float]:
    """Seconds of each of `runs` calls of fn after warm-up calls, each waited for."""
    for _ in range(3):
        fn()
    sync()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return times


def run(directory: Path, runs: int, write: bool) -> int:
    import numpy as np

    import dlvm

    try:
        import torch

        if not torch.cuda.is_available():
            raise ImportError("PyTorch sees no GPU")
    except ImportError as e:
        print(f"bench/gpu.py run: nothing measured: it needs PyTorch and a GPU ({e})")
        return 0

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda:0")
    sync = torch.cuda.synchronize
    rng = np.random.default_rng(8)
    results: dict[str, dict[str, list[float]]] = {}

    def gpu(a: np.ndarray) -> Any:
        return torch.from_numpy(a).to(dev)

    def params() -> dict[str, Any]:
        out = {}
        for i, (n_in, n_out) in enumerate([(784, 512), (512, 256), (256, 10)], 1):
            limit = np.sqrt(6.0 / (n_in + n_out))
            out[f"W{i}"] = rng.uniform(-limit, limit, (n_in, n_out)).astype(np.float32)
            out[f"b{i}"] = np.zeros((1, n_out), np.float32)
        return out

    def forward(x: Any, p: dict[str, Any]) -> Any:
        h1 = torch.relu(torch.addmm(p["b1"], x, p["W1"]))
        h2 = torch.relu(torch.addmm(p["b2"], h1, p["W2"]))
        return torch.softmax(torch.addmm(p["b3"], h2, p["W3"]), dim=1)

    peers = _peers()

    def mlp(case: str) -> dict[str, list[float]]:
        batch = BATCHES[case]
        p = params()
        x = rng.standard_normal((batch, 784)).astype(np.float32)
        labels = np.eye(10, dtype=np.float32)[rng.integers(0, 10, batch)]
        model = dlvm.load(directory / f"{case}.so", device="cuda:0")
        for k, v in p.items():
            model.set_param(k, v)
        xg, lg = gpu(x), gpu(labels)
        row: dict[str, list[float]] = {}
        if case == "train_b4096":
            row["ours"] = timed(lambda: model.train_step(xg, lg), sync, runs)
            tp = {k: gpu(v).requires_grad_(True) for k, v in p.items()}
            opt = torch.optim.SGD(list(tp.values()), lr=RATE)

            def step() -> Any:
                opt.zero_grad(set_to_none=True)
                z = torch.addmm(tp["b3"], torch.relu(torch.addmm(
                    tp["b2"], torch.relu(torch.addmm(tp["b1"], xg, tp["W1"])), tp["W2"])),
                    tp["W3"])  # fmt: skip
                loss = torch.nn.functional.cross_entropy(z, lg)
                loss.backward()
                opt.step()
                return loss

            row["torch"] = timed(step, sync, runs)
            if "compile" in peers:
                row["torch.compile"] = timed(torch.compile(step), sync, runs)
            if "jax" in peers:
                row["jax"] = timed(_jax_train(p, x, labels), sync, runs)
        else:
            out = torch.empty((batch, 10), device=dev)
            row["ours"] = timed(lambda: model.infer(xg, out=out), sync, runs)
            tp = {k: gpu(v) for k, v in p.items()}
            with torch.no_grad():
                row["torch"] = timed(lambda: forward(xg, tp), sync, runs)
                if "compile" in peers:
                    compiled = torch.compile(forward)
                    row["torch.compile"] = timed(lambda: compiled(xg, tp), sync, runs)
            if "jax" in peers:
                row["jax"] = timed(_jax_infer(p, x), sync, runs)
        model.close()
        return row

    for case in ("mlp_b1", "mlp_b4096", "train_b4096"):
        results[case] = mlp(case)
    try:
        dp = _data_parallel(directory, params(), rng, gpu, sync, runs)
    except Exception as e:  # noqa: BLE001 - reported; the other cases still run
        print(f"bench/gpu.py: the data-parallel step failed: {e!r}")
        dp = None
    if dp is not None:
        results["train_dp"] = dp

    x = torch.randn(CHAIN_N, device=dev)
    out = torch.empty_like(x)
    model = dlvm.load(directory / "chain.so", device="cuda:0")
    row = {"ours": timed(lambda: model.chain(x, out=out), sync, runs)}
    row["copy"] = timed(lambda: out.copy_(x), sync, runs)

    def chain_torch() -> Any:
        return torch.tanh(0.5 * x + 0.25) * torch.sigmoid(x)

    row["torch"] = timed(chain_torch, sync, runs)
    if "compile" in peers:
        row["torch.compile"] = timed(torch.compile(chain_torch), sync, runs)
    if "jax" in peers:
        row["jax"] = timed(_jax_chain(), sync, runs)
    model.close()
    results["chain"] = row

    a = torch.randn(MATMUL_N, MATMUL_N, device=dev)
    b = torch.randn(MATMUL_N, MATMUL_N, device=dev)
    product_runs = max(5, runs // 10)
    results["matmul"] = _product_row(directory / "matmul.so", a, b, sync, product_runs)
    torch.backends.cuda.matmul.allow_tf32 = True  # cuBLAS in TF32, as our --tf32 library
    try:
        results["matmul_tf32"] = _product_row(
            directory / "matmul_tf32.so", a, b, sync, product_runs
        )
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False
    a, b = a.to(torch.bfloat16), b.to(torch.bfloat16)
    results["matmul_bf16"] = _product_row(directory / "matmul_bf16.so", a, b, sync, product_runs)

    table = report(results, torch.cuda.get_device_name(0), runs)
    print(table)
    if write:
        write_results(Path(__file__).with_name("RESULTS.md"), table)
    return 0


def _data_parallel(
    directory: Path,
    p: dict[str, Any],
    rng: Any,
    gpu: Callable[[Any], Any],
    sync: Callable[[], None],
    runs: int,
) -> dict[str, list[float]] | None:
    """The MLP train step at batch 4096 of a library built with --distributed: its plain step,
    and the step through the all-reduce hook summed by NCCL on one rank (the whole
    data-parallel path but the network); "in NCCL" is the time inside the hook."""
    import numpy as np

    import dlvm

    try:
        from dlvm.distributed import NcclCommunicator

        comm = NcclCommunicator(0, 1)
    except ImportError as e:
        print(f"bench/gpu.py: the data-parallel step is not measured ({e})")
        return None
    x = rng.standard_normal((4096, 784)).astype(np.float32)
    labels = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 4096)]
    xg, lg = gpu(x), gpu(labels)
    inside: list[float] = []

    def hook(buffer: Any) -> None:
        t0 = time.perf_counter()
        comm.allreduce(buffer)
        inside.append(time.perf_counter() - t0)

    with dlvm.load(directory / "train_b4096_dp.so", device="cuda:0") as model:
        for k, v in p.items():
            model.set_param(k, v)
        row = {"plain step": timed(lambda: model.train_step(xg, lg), sync, runs)}
        model.set_allreduce(hook, 1)
        row["ours"] = timed(lambda: model.train_step(xg, lg), sync, runs)
    row["in NCCL"] = inside[-runs:]
    return row


def _peers() -> set[str]:
    found = {"compile"}
    try:
        import jax

        if any(d.platform == "gpu" for d in jax.devices()):
            found.add("jax")
    except Exception:  # noqa: BLE001 - JAX absent or without a GPU: not a peer here
        pass
    return found


def _jax_infer(p: dict[str, Any], x: Any) -> Callable[[], Any]:
    import jax
    import jax.numpy as jnp

    jp = {k: jnp.asarray(v) for k, v in p.items()}
    jx = jnp.asarray(x)

    @jax.jit
    def forward(x: Any, p: dict[str, Any]) -> Any:
        h1 = jax.nn.relu(x @ p["W1"] + p["b1"])
        h2 = jax.nn.relu(h1 @ p["W2"] + p["b2"])
        return jax.nn.softmax(h2 @ p["W3"] + p["b3"], axis=1)

    return lambda: forward(jx, jp).block_until_ready()


def _jax_train(p: dict[str, Any], x: Any, labels: Any) -> Callable[[], Any]:
    import jax
    import jax.numpy as jnp

    state = {"p": {k: jnp.asarray(v) for k, v in p.items()}}
    jx, jl = jnp.asarray(x), jnp.asarray(labels)

    def loss(p: dict[str, Any], x: Any, labels: Any) -> Any:
        h1 = jax.nn.relu(x @ p["W1"] + p["b1"])
        h2 = jax.nn.relu(h1 @ p["W2"] + p["b2"])
        z = h2 @ p["W3"] + p["b3"]
        return -jnp.mean(jnp.sum(labels * jax.nn.log_softmax(z, axis=1), axis=1))

    @jax.jit
    def step(p: dict[str, Any], x: Any, labels: Any) -> Any:
        value, grads = jax.value_and_grad(loss)(p, x, labels)
        return value, jax.tree_util.tree_map(lambda w, g: w - RATE * g, p, grads)

    def call() -> Any:
        value, state["p"] = step(state["p"], jx, jl)
        return value.block_until_ready()

    return call


def _jax_chain() -> Callable[[], Any]:
    import jax
    import jax.numpy as jnp

    x = jax.random.normal(jax.random.PRNGKey(0), (CHAIN_N,), jnp.float32)
    f = jax.jit(lambda x: jnp.tanh(0.5 * x + 0.25) * jax.nn.sigmoid(x))
    return lambda: f(x).block_until_ready()


def report(results: dict[str, dict[str, list[float]]], device: str, runs: int) -> str:
    titles = {
        "mlp_b1": "MLP inference, batch 1",
        "mlp_b4096": "MLP inference, batch 4096",
        "train_b4096": "MLP train step (SGD), batch 4096",
        "train_dp": "the same, --distributed, all-reduce by NCCL on 1 rank",
        "chain": "tanh(a*x+b)*sigmoid(x), 256M f32",
        "matmul": "matmul 8192^3 f32 (no TF32)",
        "matmul_tf32": "matmul 8192^3 f32 in TF32 (--tf32; cuBLAS with TF32)",
        "matmul_bf16": "matmul 8192^3 bf16 (tensor cores, f32 sums; cuBLAS bf16)",
    }
    lines = [
        f"GPU run: {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}, {device},"
        f" {runs} timed runs per contender (matmul {max(5, runs // 10)}).",
        "",
        "| case | contender | median ms | min ms | rate | ours / contender |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for case, row in results.items():
        ours = statistics.median(row["ours"])
        for name, ts in row.items():
            med = statistics.median(ts)
            rate = ""
            if case == "chain":
                rate = f"{2 * 4 * CHAIN_N / med / 1e9:.0f} GB/s"
            elif case.startswith("matmul"):
                rate = f"{2 * MATMUL_N**3 / med / 1e12:.1f} TFLOP/s"
            ratio = "" if name in ("ours", "in NCCL") else f"{ours / med:.2f}"
            lines.append(f"| {titles[case]} | {name} | {med * 1e3:.3f} | {min(ts) * 1e3:.3f} |"
                         f" {rate} | {ratio} |")  # fmt: skip
    lines += ["", "| goal | measured | met |", "|---|---:|---|"]
    for case, peer, limit in GOALS:
        row = results[case]
        peers = [k for k in row if k != "ours"] if peer == "best" else [peer]
        best = min(statistics.median(row[k]) for k in peers)
        ratio = statistics.median(row["ours"]) / best
        lines.append(f"| {titles[case]}: ours / {peer} time ≤ {limit:.2f} | {ratio:.2f} |"
                     f" {'yes' if ratio <= limit else 'no'} |")  # fmt: skip
    chain = results["chain"]
    share = statistics.median(chain["copy"]) / statistics.median(chain["ours"])
    lines.append(f"| chain ≥ {CHAIN_GOAL:.0%} of the copy bandwidth | {share:.0%} |"
                 f" {'yes' if share >= CHAIN_GOAL else 'no'} |")  # fmt: skip
    return "\n".join(lines)


def write_results(path: Path, table: str) -> None:
    """The table between the GPU markers of RESULTS.md (added at its end the first time)."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    block = f"{MARKS[0]}\n## GPU\n\n{table}\n{MARKS[1]}"
    if MARKS[0] in text and MARKS[1] in text:
        head, rest = text.split(MARKS[0], 1)
        text = head + block + rest.split(MARKS[1], 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the CUDA libraries (where telc is installed)")
    b.add_argument("directory", type=Path)
    b.add_argument("--gpu", default="sm_90")
    r = sub.add_parser("run", help="time them against the peers (on the GPU machine)")
    r.add_argument("directory", type=Path)
    r.add_argument("--runs", type=int, default=50)
    r.add_argument("--write", action="store_true", help="put the table into bench/RESULTS.md")
    args = ap.parse_args(argv)
    if args.command == "build":
        build(args.directory, args.gpu)
        return 0
    return run(args.directory, args.runs, args.write)


if __name__ == "__main__":
    sys.exit(main())
