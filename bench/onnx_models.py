"""Real models exported from PyTorch, imported by telc (issue 26, part 5; `make bench-onnx`).

Each model of onnx_zoo.py is exported to ONNX (opset 17, a dynamic batch) and built with
`telc build model.onnx -D batch=B`; then, in one run:

- its outputs are compared with ONNX Runtime's and PyTorch's (float32) on the same inputs, as
  max|ours - theirs| / max|theirs|, at batch 1 and 32;
- the model exported in float64 is built with a train entry (`--train-loss
  softmax_cross_entropy --labels labels:8x10:f64 --optimizer 'sgd(rate: 0.05)'`) and trained
  three steps against the same steps of the PyTorch module in float64, in train mode (batch
  normalisation on the batch's statistics, its running statistics moved); the losses, every
  parameter and every buffer are compared;
- inference is timed at batch 1 and 32 against ONNX Runtime, 1 thread each and 2 threads
  each, interleaved in blocks as bench/cpu.py times (ratio: our median over theirs).

Prints the table and writes it into bench/RESULTS.md as the section "ONNX models (issue 26)".
Runs in bench/.venv; exits with 1 when a comparison exceeds its tolerance."""

from __future__ import annotations

import argparse
import copy
import datetime
import functools
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import torch
import torch.nn.functional as F  # noqa: N812 (PyTorch's own spelling)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from cpu import cpu_name, local_block, measure, versions  # noqa: E402
from onnx_zoo import CLASSES, MODELS, Model, export, made  # noqa: E402

import dlvm  # noqa: E402
from dlvm.library_check import digest_path  # noqa: E402

INFER_TOLERANCE = 1e-5  # float32 outputs: max|ours - theirs| / max|theirs|
TRAIN_TOLERANCE = 1e-9  # float64 losses, parameters and buffers after the steps
BATCHES = (1, 32)
THREADS = (1, 2)
TRAIN_BATCH = 8
STEPS = 3
RATE = 0.05
CASE_BUDGET_S = 2.0  # about this much of ours per timed series; at least one block
SECTION = "## ONNX models (issue 26)"


@dataclass
class Result:
    """One model's row: errors, training agreement, medians (seconds) by contender."""

    model: Model
    build_s: float = 0.0  # the slower of the two inference builds
    train_build_s: float = 0.0
    errors: dict[str, float] = field(default_factory=dict)  # "ort b32" -> relative error
    train: dict[str, float] = field(default_factory=dict)  # "loss", "params", "buffers"
    times: dict[tuple[int, int, str], float] = field(default_factory=dict)  # (batch, threads, who)
    fastest: dict[tuple[int, int, str], float] = field(default_factory=dict)  # the same, minimums
    failure: str = ""


def telc(*args: str | Path) -> None:
    """`telc` of this checkout (the worktree the script lives in), in this interpreter."""
    command = [sys.executable, "-c", "from telc.cli import main; main()", *map(str, args)]
    done = subprocess.run(command, capture_output=True, text=True, env=_env())
    if done.returncode != 0:
        raise RuntimeError(f"telc {' '.join(map(str, args[:2]))}: {done.stderr.strip()[-2000:]}")


def _env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": str(HERE.parent) + (os.pathsep + path if path else "")}


def relative(ours: Any, theirs: Any) -> float:
    a, b = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    scale = float(np.max(np.abs(b)))
    err = float(np.max(np.abs(a - b)))
    return err / scale if scale else err


def load_with_threads(library: Path, threads: int) -> Any:
    """The library loaded from a copy of its own whose runtime runs `threads` threads. Each
    library links its own runtime, which reads DLRT_NUM_THREADS when its first parallel loop
    runs: the copy is loaded and called once with the variable set (its later calls run the
    same loops)."""
    copy = library.with_name(f"{library.stem}_t{threads}.so")
    shutil.copyfile(library, copy)
    shutil.copyfile(digest_path(library), digest_path(copy))
    before = os.environ.get("DLRT_NUM_THREADS")
    os.environ["DLRT_NUM_THREADS"] = str(threads)
    try:
        loaded = dlvm.load(copy)
        spec = loaded.infer.inputs[0]
        loaded.infer(np.zeros(spec.shape, np.float32))
    finally:
        if before is None:
            del os.environ["DLRT_NUM_THREADS"]
        else:
            os.environ["DLRT_NUM_THREADS"] = before
    return loaded


def ort_session(path: Path, threads: int) -> Any:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def ort_runner(session: Any, x: np.ndarray) -> Callable[[], None]:
    """ONNX Runtime with its input and output bound in place, as ours are."""
    binding = session.io_binding()
    binding.bind_cpu_input("x", x)
    out = np.empty((x.shape[0], CLASSES), np.float32)
    binding.bind_output("logits", "cpu", 0, np.float32, list(out.shape), out.ctypes.data)
    kept = [x, out]

    def run() -> None:
        session.run_with_iobinding(binding)
        assert kept

    return run


def inputs(model: Model, batch: int, seed: int, dtype: Any = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, *model.sample)).astype(dtype)


def check_inference(model: Model, module: Any, path: Path, built: dict[int, Path],
                    result: Result) -> None:  # fmt: skip
    """Our outputs against ONNX Runtime's and PyTorch's, float32, at each batch."""
    session = ort_session(path, 1)
    for batch, library in built.items():
        x = inputs(model, batch, seed=batch)
        with dlvm.load(library) as loaded:
            ours = loaded.infer(x)
        (theirs,) = session.run(None, {"x": x})
        with torch.no_grad():
            reference = module(torch.from_numpy(x)).numpy()
        result.errors[f"ort b{batch}"] = relative(ours, theirs)
        result.errors[f"torch b{batch}"] = relative(ours, reference)


def one_hot(labels: np.ndarray) -> np.ndarray:
    return np.eye(CLASSES)[labels]


def check_training(model: Model, module: Any, directory: Path, result: Result) -> None:
    """Three SGD steps of the float64 export's train entry against the same steps of the
    module in float64 (train mode), from the same values."""
    theirs = copy.deepcopy(module).double()
    path = directory / f"{model.name}_f64.onnx"
    export(theirs, model.sample, path, torch.float64)
    for m in theirs.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            # BatchNormalization's momentum is a float32 attribute: PyTorch's 0.1 is exported
            # as 0.9f = 0.89999998, which the graph then computes with; the twin does too.
            m.momentum = 1.0 - float(np.float32(1.0 - m.momentum))
    library = directory / f"{model.name}_train.so"
    t0 = time.perf_counter()
    telc("build", path, "-D", f"batch={TRAIN_BATCH}", "--train-loss", "softmax_cross_entropy",
         "--labels", f"labels:{TRAIN_BATCH}x{CLASSES}:f64", "--optimizer", f"sgd(rate: {RATE})",
         "-o", library, "-q", "--no-cache")  # fmt: skip
    result.train_build_s = time.perf_counter() - t0
    theirs.train()
    sgd = torch.optim.SGD(theirs.parameters(), lr=RATE)
    loss_err = 0.0
    with dlvm.load(library) as ours:
        for step in range(STEPS):
            x = inputs(model, TRAIN_BATCH, seed=100 + step, dtype=np.float64)
            rng = np.random.default_rng(200 + step)
            labels = one_hot(rng.integers(0, CLASSES, TRAIN_BATCH))
            our_loss = ours.train_step(x, labels)
            sgd.zero_grad()
            logits = theirs(torch.from_numpy(x))
            loss = -(torch.from_numpy(labels) * F.log_softmax(logits, -1)).sum(-1).mean()
            loss.backward()
            sgd.step()
            loss_err = max(loss_err, relative(our_loss, loss.item()))
        result.train["loss"] = loss_err
        state = {k: v.detach().numpy() for k, v in theirs.state_dict().items()}
        params = {p["name"]: p.get("kind", "param") for p in ours.manifest["params"]}
        worst = {"param": 0.0, "buffer": 0.0}
        for key, value in state.items():
            if key.endswith("num_batches_tracked"):
                continue  # an integer count, not in the ONNX graph
            name = re.sub(r"[^A-Za-z0-9_]", "_", key)
            kind = params.pop(name)  # KeyError: a state-dict entry the library lacks
            worst[kind] = max(worst[kind], relative(ours.get_param(name), value))
        assert not params, f"{model.name}: parameters PyTorch does not have: {sorted(params)}"
        result.train["params"] = worst["param"]
        if any(k == "buffer" for k in (p.get("kind") for p in ours.manifest["params"])):
            result.train["buffers"] = worst["buffer"]


def time_inference(model: Model, path: Path, built: dict[int, Path], runs: int,
                   result: Result) -> None:  # fmt: skip
    """Medians of ours and ONNX Runtime's inference, at each batch and thread count."""
    sessions = {n: ort_session(path, n) for n in THREADS}
    for batch, library in built.items():
        x = inputs(model, batch, seed=7)
        out = np.empty((batch, CLASSES), np.float32)
        blocks: dict[tuple[int, str], Callable[[int], list[float]]] = {}
        loaded = {n: load_with_threads(library, n) for n in THREADS}
        try:
            for n in THREADS:
                run = functools.partial(loaded[n].infer, x, out=out)
                blocks[(n, "ours")] = local_block(run)
                theirs = ort_runner(sessions[n], x)
                theirs()
                blocks[(n, "ort")] = local_block(theirs)
            t0 = time.perf_counter()
            loaded[1].infer(x, out=out)
            first = time.perf_counter() - t0
            timed = measure(blocks, max(1, min(runs, int(CASE_BUDGET_S / max(first, 1e-6)))))
        finally:
            for m in loaded.values():
                m.close()
        for (n, who), ts in timed.items():
            result.times[(batch, n, who)] = statistics.median(ts)
            result.fastest[(batch, n, who)] = min(ts)


def run_model(model: Model, directory: Path, runs: int) -> Result:
    result = Result(model)
    module = made(model)
    path = directory / f"{model.name}.onnx"
    export(module, model.sample, path, torch.float32)
    built: dict[int, Path] = {}
    try:
        for batch in BATCHES:
            built[batch] = directory / f"{model.name}_b{batch}.so"
            t0 = time.perf_counter()
            telc("build", path, "-D", f"batch={batch}", "-o", built[batch], "-q", "--no-cache")
            result.build_s = max(result.build_s, time.perf_counter() - t0)
        check_inference(model, module, path, built, result)
        check_training(model, module, directory, result)
        time_inference(model, path, built, runs, result)
    except (RuntimeError, AssertionError, KeyError) as e:
        result.failure = f"{type(e).__name__}: {e}"
    return result


def ratio(r: Result, batch: int, threads: int) -> str:
    ours, theirs = r.times.get((batch, threads, "ours")), r.times.get((batch, threads, "ort"))
    if ours is None or theirs is None:
        return "-"
    low = r.fastest[(batch, threads, "ours")] / r.fastest[(batch, threads, "ort")]
    return f"{ours * 1e3:.3f} / {theirs * 1e3:.3f} = **{ours / theirs:.2f}** ({low:.2f})"


def worst(values: dict[str, float], prefix: str) -> float:
    return max((v for k, v in values.items() if k.startswith(prefix)), default=float("nan"))


def report(results: list[Result], runs: int) -> str:
    lines = [
        f"Run: {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}, {cpu_name()},"
        f" {os.cpu_count()} CPUs (load average {os.getloadavg()[0]:.1f} at the end: other"
        " processes share them); `make bench-onnx` (bench/onnx_models.py). Versions: "
        + ", ".join(f"{k} {v}" for k, v in versions().items() if k != "jax")
        + ".",
        "",
        "Inference: median ms of ours / ONNX Runtime's (ORT_ENABLE_ALL, inputs and output"
        " bound in place) = ratio, below 1 we are faster (in brackets: the ratio of the"
        " minimums); both with the same number of threads;"
        f" up to {runs} timed runs each, interleaved in blocks. Errors: max|ours - theirs| /"
        " max|theirs|, float32, the worse of batches 1 and 32. Build: seconds of `telc build"
        " --no-cache` of the inference library (of the float64 train library).",
        "",
        "| model | params | b1, 1 thread | b1, 2 threads | b32, 1 thread | b32, 2 threads |"
        " error vs ORT | error vs PyTorch | build s (train) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        count = sum(p.numel() for p in made(r.model).parameters())
        cells = [ratio(r, b, n) for b in BATCHES for n in THREADS]
        lines.append(
            f"| {r.model.title} | {count / 1e6:.2f}M | " + " | ".join(cells) + f" |"
            f" {worst(r.errors, 'ort'):.1e} | {worst(r.errors, 'torch'):.1e} |"
            f" {r.build_s:.1f} ({r.train_build_s:.1f}) |"
        )
    lines += [
        "",
        f"Training: {STEPS} SGD steps (rate {RATE}, batch {TRAIN_BATCH}, softmax cross-entropy)"
        " of the float64 export's train entry against PyTorch's module in float64, train mode"
        " (batch norm's momentum as the ONNX attribute holds it, float32 0.9); largest"
        " relative error over the steps' losses, over every parameter and buffer after them.",
        "",
        "| model | losses | parameters after | batch-norm buffers after |",
        "|---|---:|---:|---:|",
    ]
    for r in results:
        t = r.train
        buffers = f"{t['buffers']:.1e}" if "buffers" in t else "-"
        if t:
            lines.append(f"| {r.model.title} | {t['loss']:.1e} | {t['params']:.1e} | {buffers} |")
    failed = [r for r in results if r.failure]
    if failed:
        lines += ["", "Failures:", ""] + [f"- {r.model.title}: {r.failure}" for r in failed]
    return "\n".join(lines)


def summary(r: Result) -> str:
    """One line of a model's figures, printed as it finishes."""
    if r.failure:
        return f"failed: {r.failure.splitlines()[0]}"
    errors = ", ".join(f"{k} {v:.1e}" for k, v in r.errors.items())
    train = ", ".join(f"{k} {v:.1e}" for k, v in r.train.items())
    ratios = ", ".join(
        f"b{b}/{n}t {r.times[(b, n, 'ours')] / r.times[(b, n, 'ort')]:.2f}"
        for b in BATCHES
        for n in THREADS
        if (b, n, "ours") in r.times
    )
    return f"errors: {errors}; training: {train}; ours/ORT: {ratios}; build {r.build_s:.1f} s"


def problems(results: list[Result]) -> list[str]:
    found = []
    for r in results:
        if r.failure:
            found.append(f"{r.model.name}: {r.failure}")
        found += [f"{r.model.name}: {k} error {v:.1e}" for k, v in r.errors.items()
                  if not v <= INFER_TOLERANCE]  # fmt: skip
        found += [f"{r.model.name}: training {k} error {v:.1e}" for k, v in r.train.items()
                  if not v <= TRAIN_TOLERANCE]  # fmt: skip
    return found


def write_section(path: Path, text: str) -> None:
    """The section SECTION of RESULTS.md replaced by `text` (added at the end the first time);
    the rest of the file kept."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    body = f"{SECTION}\n\n{text}\n"
    pattern = re.compile(re.escape(SECTION) + r"\n.*?(?=^## |\Z)", re.DOTALL | re.MULTILINE)
    if pattern.search(old):
        new = pattern.sub(lambda _: body + "\n", old, count=1).rstrip("\n") + "\n"
    else:
        new = old.rstrip("\n") + "\n\n" + body
    path.write_text(new, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--models", default=",".join(m.name for m in MODELS),
                    help="models to run, comma-separated")  # fmt: skip
    ap.add_argument("--runs", type=int, default=20, help="timed runs per contender, at most")
    ap.add_argument("--results", default=str(HERE / "RESULTS.md"),
                    help="Markdown file to write the section to ('' for none; written only"
                         " when every model runs)")  # fmt: skip
    args = ap.parse_args(argv)
    here = Path(dlvm.__file__).resolve()
    assert here.is_relative_to(HERE.parent), f"dlvm imported from {here}, not this checkout"
    warnings.filterwarnings("ignore")  # the exporter's, about what TorchScript traces
    torch.set_num_threads(1)
    wanted = args.models.split(",")
    results = []
    with tempfile.TemporaryDirectory(prefix="dlvm-onnx-models-") as tmp:
        for model in MODELS:
            if model.name in wanted:
                print(f"{model.title}…", flush=True)
                results.append(run_model(model, Path(tmp), args.runs))
                print("  " + summary(results[-1]), flush=True)
    text = report(results, args.runs)
    print(text)
    if args.results and len(results) == len(MODELS):
        write_section(Path(args.results), text)
    found = problems(results)
    for p in found:
        print(f"error: {p}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
