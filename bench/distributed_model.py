"""Predicted step times of data-parallel training: a cost model, not a measurement
(docs/distributed.md, "Cost model", says what it assumes and why).

    python bench/distributed_model.py           # prints the tables (Markdown)
    python bench/distributed_model.py --write   # and puts them into docs/distributed.md

Each of p GPUs runs the train step on its own shard of the batch (a fixed batch per GPU: weak
scaling), the gradients are summed by an all-reduce, and every GPU applies the same update. The
all-reduce is priced by the latency-bandwidth model of collectives: a message of s bytes over
one link costs alpha + s / B. Two layouts of the GPUs:

- flat: one GPU per machine, every hop of the ring a network link;
- 8 per machine: a reduce-scatter over NVLink inside each machine, then 8 all-reduces in
  parallel between the machines (GPU i of every machine, each GPU with its own NIC, on 1/8 of
  the bytes; a ring or a tree, whichever the model finds cheaper, as NCCL's tuner does), then
  an all-gather over NVLink.

A step without overlap is compute + one all-reduce of the whole gradient buffer; a step with
overlap all-reduces buckets of gradients while the backward pass computes the rest (the MLP:
the best split of its three layers; ResNet-50: equal buckets of at most 25 MiB). Every number
printed follows from the constants below, so the output is the same on every run: `--write`
changes the page only when a constant or a formula changes."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "distributed.md"
BEGIN = "<!-- predicted: bench/distributed_model.py --write -->"
END = "<!-- end of predicted -->"

GPUS = [8, 16, 32, 64, 128, 256]
NETWORKS_GBPS = [100, 200, 400]  # per NIC, one NIC per GPU; line rate, so times are lower bounds
PER_MACHINE = 8  # GPUs sharing a machine (NVLink) in the "8 per machine" layout
ALPHA_NET = 5e-6  # s per message between machines (InfiniBand or RoCE, software included)
ALPHA_NVLINK = 2e-6  # s per message between GPUs of one machine
NVLINK_BYTES_PER_S = 360e9  # what an all-reduce step gets of NVLink 4's 450 GB/s each way


@dataclass(frozen=True)
class Bucket:
    """Gradient bytes all-reduced in one call, ready `ready` seconds into the backward pass."""

    nbytes: float
    ready: float


@dataclass(frozen=True)
class Model:
    """A model's gradient buffer, its compute time per step on one GPU, the backward pass's
    share of that time, and the bucketings to try (each a list of buckets in ready order,
    given the backward time)."""

    name: str
    title: str  # what the model is, for the caption of its table
    grad_bytes: float
    compute: float  # s per train step at the per-GPU batch, one GPU, no all-reduce
    backward_share: float
    bucketings: Callable[[float], Iterator[list[Bucket]]]

    @property
    def backward(self) -> float:
        return self.compute * self.backward_share


# ---- all-reduce -------------------------------------------------------------------------------


def ring_allreduce(p: int, nbytes: float, link: float, alpha: float) -> float:
    """Ring all-reduce of `nbytes` over p ranks: a reduce-scatter then an all-gather, 2(p-1)
    steps, each sending 1/p of the bytes: 2(p-1)/p * S/B + 2(p-1) * alpha."""
    return 2 * (p - 1) / p * nbytes / link + 2 * (p - 1) * alpha


def tree_allreduce(p: int, nbytes: float, link: float, alpha: float) -> float:
    """Tree all-reduce as NCCL's tuning model prices its double binary tree: a reduce up and a
    broadcast down, 2 log2(p) hops of latency, each rank sending and receiving about 2 S."""
    if p == 1:
        return 0.0
    return 2 * nbytes / link + 2 * math.ceil(math.log2(p)) * alpha


def flat_allreduce(p: int, nbytes: float, link: float) -> float:
    """One GPU per machine: a ring whose every hop is a network link."""
    return ring_allreduce(p, nbytes, link, ALPHA_NET)


def between_machines(machines: int, nbytes: float, link: float) -> tuple[float, str]:
    """The cheaper of ring and tree between machines, and its name."""
    ring = ring_allreduce(machines, nbytes, link, ALPHA_NET)
    tree = tree_allreduce(machines, nbytes, link, ALPHA_NET)
    return (ring, "ring") if ring <= tree else (tree, "tree")


def hierarchical_allreduce(p: int, nbytes: float, link: float) -> float:
    """8 GPUs per machine: reduce-scatter over NVLink, 8 parallel all-reduces of nbytes/8
    between the p/8 machines, all-gather over NVLink."""
    g = PER_MACHINE
    assert p % g == 0, f"{p} GPUs do not fill machines of {g}"
    inside = (g - 1) / g * nbytes / NVLINK_BYTES_PER_S + (g - 1) * ALPHA_NVLINK
    across, _ = between_machines(p // g, nbytes / g, link)
    return 2 * inside + across


def across_algorithm(p: int, nbytes: float, link: float) -> str:
    """The algorithm hierarchical_allreduce uses between machines ("-" on one machine)."""
    if p == PER_MACHINE:
        return "-"
    return between_machines(p // PER_MACHINE, nbytes / PER_MACHINE, link)[1]


# ---- steps ------------------------------------------------------------------------------------


def overlapped_backward(buckets: list[Bucket], allreduce: Callable[[float], float]) -> float:
    """When the last bucket's all-reduce ends, counted from the start of the backward pass:
    buckets are all-reduced one at a time, in the order they become ready."""
    done = 0.0
    for b in buckets:
        done = max(done, b.ready) + allreduce(b.nbytes)
    return done


def step_time(model: Model, allreduce: Callable[[float], float]) -> float:
    """Compute, then one all-reduce of the whole buffer (no overlap)."""
    return model.compute + allreduce(model.grad_bytes)


def best_overlapped_step(
    model: Model, allreduce: Callable[[float], float]
) -> tuple[float, list[Bucket]]:
    """The fastest step over the model's bucketings, and that bucketing: the forward pass (and
    the update) cannot overlap, the backward pass can."""
    best: tuple[float, list[Bucket]] | None = None
    for buckets in model.bucketings(model.backward):
        t = model.compute - model.backward + overlapped_backward(buckets, allreduce)
        if best is None or t < best[0]:
            best = (t, buckets)
    assert best is not None
    return best


def efficiency(model: Model, step: float) -> float:
    """Weak scaling: the one-GPU step over the p-GPU step at the same per-GPU batch."""
    return model.compute / step


def smallest_paying_bucket(model: Model, allreduce: Callable[[float], float]) -> float:
    """The smallest bucket (bytes) with which overlap still saves time, for buckets ready at an
    even rate: k buckets pay while L < T_backward / k, L the latency of one all-reduce (its time
    for no bytes), so a bucket must hold S * L / T_backward bytes at least."""
    return model.grad_bytes * allreduce(0.0) / model.backward


# ---- models -----------------------------------------------------------------------------------

BUCKET_CAP = 25 * 2**20  # bytes: PyTorch DDP's default bucket_cap_mb (25 MiB)


def even_buckets(nbytes: float, backward: float, k: int) -> list[Bucket]:
    """k equal buckets, the i-th ready at i/k of the backward pass."""
    return [Bucket(nbytes / k, backward * (i + 1) / k) for i in range(k)]


def capped_buckets(nbytes: float) -> Callable[[float], Iterator[list[Bucket]]]:
    """Equal buckets of at most BUCKET_CAP bytes, ready at an even rate."""

    def bucketings(backward: float) -> Iterator[list[Bucket]]:
        yield even_buckets(nbytes, backward, math.ceil(nbytes / BUCKET_CAP))

    return bucketings


MLP_WIDTHS = [784, 512, 256, 10]
MLP_LAYERS = list(zip(MLP_WIDTHS, MLP_WIDTHS[1:]))  # (inputs, outputs), forward order
MLP_PARAMS = sum(i * o + o for i, o in MLP_LAYERS)  # 784*512+512 + 512*256+256 + 256*10+10
# Backward products per layer, in the order the backward pass runs them (last layer first):
# the weight's gradient, and the input's gradient except for the first layer (x is no
# parameter). Forward: one product per layer. Work is counted in multiply-adds per example.
MLP_BACKWARD_WORK = [i * o * (1 if n == 0 else 2) for n, (i, o) in enumerate(MLP_LAYERS)][::-1]
MLP_FORWARD_WORK = sum(i * o for i, o in MLP_LAYERS)
MLP_BACKWARD_SHARE = sum(MLP_BACKWARD_WORK) / (sum(MLP_BACKWARD_WORK) + MLP_FORWARD_WORK)


def mlp_bucketings(backward: float) -> Iterator[list[Bucket]]:
    """Every split of the three layers' gradients (last layer first) into consecutive buckets;
    a layer's gradient is ready when its backward products are done."""
    sizes = [4 * (i * o + o) for i, o in MLP_LAYERS][::-1]
    total = sum(MLP_BACKWARD_WORK)
    ready, done = [], 0
    for work in MLP_BACKWARD_WORK:
        done += work
        ready.append(backward * done / total)
    n = len(sizes)
    for cuts in range(2 ** (n - 1)):
        buckets, nbytes = [], 0.0
        for j in range(n):
            nbytes += sizes[j]
            if j == n - 1 or cuts >> j & 1:
                buckets.append(Bucket(nbytes, ready[j]))
                nbytes = 0.0
        yield buckets


def mlp(name: str, title: str, step: float) -> Model:
    return Model(name, title, 4.0 * MLP_PARAMS, step, MLP_BACKWARD_SHARE, mlp_bucketings)


RESNET50_PARAMS = 25.6e6
RESNET50_BATCH = 32  # per GPU: 256 GPUs train at a global batch of 8,192


def resnet50(name: str, title: str, images_per_s: float) -> Model:
    grad = 4.0 * RESNET50_PARAMS
    step = RESNET50_BATCH / images_per_s
    return Model(name, title, grad, step, 2 / 3, capped_buckets(grad))


# Measured: bench/RESULTS.md, "GPU" (H100, batch 4,096, SGD): our median, and JAX's.
MLP_OURS = mlp("MLP, ours", "MLP 784-512-256-10, f32, batch 4,096 per GPU, our step", 1.899e-3)
MLP_JAX = mlp("MLP, JAX's speed", "the same MLP at JAX's speed", 0.387e-3)
# Assumed, not measured here: ResNet-50 training images per second on one H100.
RESNET_F32 = resnet50("ResNet-50, f32", "ResNet-50-sized, f32, batch 32 per GPU", 1000.0)
RESNET_MIXED = resnet50("ResNet-50, mixed", "ResNet-50 in mixed precision", 3000.0)

# ---- tables -----------------------------------------------------------------------------------


def ms(seconds: float) -> str:
    v = seconds * 1e3
    return f"{v:.3f}" if v < 1 else f"{v:.2f}" if v < 100 else f"{v:.1f}"


def percent(x: float) -> str:
    return f"{100 * x:.1f} %"


def size(nbytes: float) -> str:
    return f"{nbytes / 1e6:.2f} MB" if nbytes >= 1e6 else f"{nbytes / 1e3:.0f} kB"


def link_bytes(gbps: int) -> float:
    return gbps * 1e9 / 8


def hierarchical(p: int, gbps: int) -> Callable[[float], float]:
    return lambda nbytes: hierarchical_allreduce(p, nbytes, link_bytes(gbps))


def model_table(model: Model, buckets_said: str) -> list[str]:
    rows = [
        f"**{model.title}**: {size(model.grad_bytes)} of gradients, {ms(model.compute)} ms per "
        f"step on one GPU, {ms(model.backward)} ms of it backward; overlapped: {buckets_said}.",
        "",
        "| GPUs | Gb/s | all-reduce, flat ring | all-reduce, 8 per machine (between machines) | "
        "step | step, overlapped (buckets) | efficiency | efficiency, overlapped |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in GPUS:
        for gbps in NETWORKS_GBPS:
            link = link_bytes(gbps)
            allreduce = hierarchical(p, gbps)
            plain = step_time(model, allreduce)
            over, buckets = best_overlapped_step(model, allreduce)
            algorithm = across_algorithm(p, model.grad_bytes, link)
            rows.append(
                f"| {p} | {gbps} | {ms(flat_allreduce(p, model.grad_bytes, link))} "
                f"| {ms(allreduce(model.grad_bytes))} ({algorithm}) | {ms(plain)} "
                f"| {ms(over)} ({len(buckets)}) | {percent(efficiency(model, plain))} "
                f"| {percent(efficiency(model, over))} |"
            )
    return rows


def break_even_table() -> list[str]:
    rows = [
        "**Four compute speeds, and when overlap pays** (8 per machine; the step on one GPU in "
        "brackets): the all-reduce's share of the backward pass, the smallest bucket that still "
        "saves time (S * L / T_backward, buckets ready at an even rate), what the tables' "
        "bucketing saves per step, and the efficiencies:",
        "",
        "| model | GPUs | Gb/s | backward | all-reduce | share | smallest bucket | saved "
        "| efficiency | overlapped |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m in (MLP_OURS, MLP_JAX, RESNET_F32, RESNET_MIXED):
        for p, gbps in ((64, 100), (256, 100), (256, 400)):
            allreduce = hierarchical(p, gbps)
            whole = allreduce(m.grad_bytes)
            plain = step_time(m, allreduce)
            over = best_overlapped_step(m, allreduce)[0]
            rows.append(
                f"| {m.name} ({ms(m.compute)}) | {p} | {gbps} | {ms(m.backward)} | {ms(whole)} "
                f"| {percent(whole / m.backward)} | {size(smallest_paying_bucket(m, allreduce))} "
                f"| {ms(plain - over)} | {percent(efficiency(m, plain))} "
                f"| {percent(efficiency(m, over))} |"
            )
    return rows


def report() -> str:
    """The tables, in Markdown, times in ms."""
    parts = [
        model_table(MLP_OURS, "the best split of its three layers' gradients"),
        model_table(RESNET_F32, f"{math.ceil(RESNET_F32.grad_bytes / BUCKET_CAP)} equal buckets"),
        break_even_table(),
    ]
    return "\n\n".join("\n".join(p) for p in parts) + "\n"


def write(path: Path, text: str) -> None:
    """The text between the markers of `path` replaced by `text`; the rest kept."""
    old = path.read_text(encoding="utf-8")
    start, end = old.find(BEGIN), old.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"error: {path}: no '{BEGIN}' ... '{END}' markers, in that order")
    start += len(BEGIN)
    path.write_text(old[:start] + "\n\n" + text + "\n" + old[end:], encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    ap.add_argument("--write", action="store_true", help="put the tables into the page")
    ap.add_argument("--doc", type=Path, default=DOC, help="the page (default: %(default)s)")
    args = ap.parse_args(argv)
    text = report()
    print(text, end="")
    if args.write:
        write(args.doc, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
