"""The demo `make demo` runs (`python -m telc.demo`): samples/digits.tel built into a shared
library and trained through it on scikit-learn's 8x8 digits with a live progress bar, then
tested, saved (safetensors), reloaded into a fresh model and plotted (PNG)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import click
import numpy as np
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from dlvm.diagnostics import BuildFailure, DiagnosticError
from dlvm.tools.driver import EXIT_INPUT, report
from telc.driver import Timings, compile_text, optimize

if TYPE_CHECKING:
    from dlvm.codegen.build import BuildResult
    from dlvm.loader import Model

DIGITS = Path(__file__).resolve().parents[1] / "samples" / "digits.tel"
TRAIN_SIZE = 1440  # of the 1797 images; the other 357 are the test set
SPLIT_SEED = 0  # the split is the same whatever --seed says, so runs compare
SHOWN = 10  # test predictions printed before and after the reload


@dataclass(frozen=True)
class Dataset:
    """Images as f32 rows of 64 pixels in [0, 1]; labels one-hot f32 rows of 10."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


@dataclass
class History:
    """Per epoch: the mean train_step loss, and accuracy on the training and test sets."""

    loss: list[float] = field(default_factory=list)
    train_accuracy: list[float] = field(default_factory=list)
    test_accuracy: list[float] = field(default_factory=list)


@dataclass
class Report:
    """What a run produced; `seconds` holds each step's wall time and the total."""

    library: Path
    header: Path
    checkpoint: Path
    plot: Path
    history: History
    test_accuracy: float
    predictions: np.ndarray  # the trained model's outputs on the test set
    reloaded: np.ndarray  # the same from a fresh model that loaded the checkpoint
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def identical(self) -> bool:
        return self.predictions.tobytes() == self.reloaded.tobytes()


def build(
    out: Path,
    cpu: str = "native",
    started: Callable[[str], None] | None = None,
    precision: str = "f32",
) -> BuildResult:
    """samples/digits.tel compiled into OUT/digits.so, with digits.h and dlrt.h beside it;
    its train step computes in `precision` (telc build --precision)."""
    from telc.library import build_so  # llvmlite loads only when building

    timings = Timings(started=started)
    text = DIGITS.read_text(encoding="utf-8")
    compiled = compile_text(str(DIGITS), text, timings=timings, precision=precision)
    optimize(compiled.module, timings)
    out.mkdir(parents=True, exist_ok=True)
    return build_so(compiled, out / "digits.so", cpu, timings)


def load_data() -> Dataset:
    """scikit-learn's bundled digits, pixels scaled to [0, 1], in a fixed shuffled split."""
    from sklearn.datasets import load_digits  # type: ignore[import-untyped]

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[digits.target]
    order = np.random.default_rng(SPLIT_SEED).permutation(len(x))
    x, y = x[order], y[order]
    return Dataset(x[:TRAIN_SIZE], y[:TRAIN_SIZE], x[TRAIN_SIZE:], y[TRAIN_SIZE:])


def batch_size(model: Model) -> int:
    """The batch dimension B the library was built with (the first of infer's input)."""
    return model.entries["infer"].inputs[0].shape[0]


def predict(model: Model, x: np.ndarray) -> np.ndarray:
    """The model's class probabilities for every row of x, in batches of B (the last one
    padded with zeros)."""
    b = batch_size(model)
    out = []
    for i in range(0, len(x), b):
        rows = x[i : i + b]
        padded = np.zeros((b, *x.shape[1:]), x.dtype)
        padded[: len(rows)] = rows
        out.append(model.entries["infer"](padded)[: len(rows)])
    return np.concatenate(out)


def accuracy(probs: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.argmax(probs, 1) == np.argmax(y, 1)))


def train_epoch(model: Model, x: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> float:
    """One pass of train_step over x in a random order, in batches of B (a remainder smaller
    than a batch is left out); the mean loss."""
    b = batch_size(model)
    order = rng.permutation(len(x))
    step = model.entries["train_step"]
    batches = [order[i : i + b] for i in range(0, len(x) - b + 1, b)]
    return float(np.mean([float(step(x[rows], y[rows])) for rows in batches]))


def train(
    model: Model,
    data: Dataset,
    epochs: int,
    seed: int,
    after_epoch: Callable[[History], None] | None = None,
) -> History:
    """EPOCHS epochs of train_epoch (shuffled by SEED), measuring after each."""
    rng = np.random.default_rng(seed)
    history = History()
    for _ in range(epochs):
        history.loss.append(train_epoch(model, data.x_train, data.y_train, rng))
        history.train_accuracy.append(accuracy(predict(model, data.x_train), data.y_train))
        history.test_accuracy.append(accuracy(predict(model, data.x_test), data.y_test))
        if after_epoch is not None:
            after_epoch(history)
    return history


def plot(history: History, path: Path) -> None:
    """Loss and accuracy per epoch, side by side, as a PNG."""
    from matplotlib.figure import Figure  # Agg through the Figure itself: no pyplot, no display
    from matplotlib.ticker import MaxNLocator, PercentFormatter

    epochs = range(1, len(history.loss) + 1)
    fig = Figure(figsize=(9, 3.4), layout="constrained")
    loss, acc = fig.subplots(1, 2)
    loss.plot(epochs, history.loss, marker=".", color="tab:red")
    loss.set(title="training loss (cross-entropy)", xlabel="epoch", ylabel="mean loss")
    acc.plot(epochs, history.train_accuracy, marker=".", label="train")
    final = f" ({history.test_accuracy[-1]:.1%})" if history.test_accuracy else ""
    acc.plot(epochs, history.test_accuracy, marker=".", label="test" + final)
    acc.set(title="accuracy", xlabel="epoch")
    acc.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    acc.legend(loc="lower right")
    for ax in (loss, acc):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    fig.suptitle("samples/digits.tel on scikit-learn's 8x8 digits, trained through digits.so")
    fig.savefig(path, dpi=100)


def run(
    out: Path, epochs: int = 30, seed: int = 0, cpu: str = "native", console: Console | None = None
) -> Report:
    """The whole demo into directory OUT, told step by step on CONSOLE (None: silently)."""
    from dlvm.loader import load  # ctypes and NumPy only

    say, clock = _Steps(console), _Clock()
    with say.status("building digits.so") as status:
        built = build(out, cpu, lambda stage: status(f"building digits.so: {stage}"))
    files = f"{_shown(built.library)} ({_size(built.library)}), {built.header.name}, dlrt.h"
    say.step("build", files, clock.lap("build"))

    data = load_data()
    n_train, n_test = len(data.x_train), len(data.x_test)
    text = f"{n_train + n_test} 8x8 digits (scikit-learn): {n_train} train, {n_test} test"
    say.step("data", text, clock.lap("data"))

    checkpoint = out / "digits.safetensors"
    with load(built.library, seed=seed) as model:
        with say.progress(epochs) as after_epoch:
            history = train(model, data, epochs, seed, after_epoch)
        say.step("train", _trained(history, n_train, batch_size(model)), clock.lap("train"))
        predictions = predict(model, data.x_test)
        model.save(checkpoint)
    test_accuracy = accuracy(predictions, data.y_test)
    right = round(test_accuracy * n_test)
    say.step(
        "test",
        f"accuracy {test_accuracy:.1%} ({right} of {n_test}), predicts {_digits(predictions)}",
    )
    say.step("save", f"{_shown(checkpoint)} ({_size(checkpoint)})")

    with load(built.library, seed=seed + 1) as fresh:  # other initial parameters
        fresh.load(checkpoint)
        reloaded = predict(fresh, data.x_test)
    same = predictions.tobytes() == reloaded.tobytes()
    clock.lap("save and reload")
    verdict = f"all {n_test} bit-identical" if same else "DIFFERENT outputs"
    say.step("reload", f"a fresh model predicts {_digits(reloaded)} ({verdict})")

    picture = out / "training.png"
    plot(history, picture)
    say.step("plot", f"{_shown(picture)} ({_size(picture)})", clock.lap("plot"))
    say.step("done", f"everything is in {_shown(out)}", clock.total())
    return Report(
        library=built.library,
        header=built.header,
        checkpoint=checkpoint,
        plot=picture,
        history=history,
        test_accuracy=test_accuracy,
        predictions=predictions,
        reloaded=reloaded,
        seconds=clock.seconds,
    )


def _trained(history: History, n_train: int, batch: int) -> str:
    steps = f"{len(history.loss)} epochs of {n_train // batch} steps (batch {batch})"
    if not history.loss:
        return steps
    return f"{steps}, loss {history.loss[0]:.3f} → {history.loss[-1]:.3f}"


class _Clock:
    """Wall time per named step, each from the end of the previous one."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.start = self.last = time.perf_counter()

    def lap(self, name: str) -> float:
        now = time.perf_counter()
        self.seconds[name], self.last = now - self.last, now
        return self.seconds[name]

    def total(self) -> float:
        self.seconds["total"] = time.perf_counter() - self.start
        return self.seconds["total"]


class _Steps:
    """The demo's output: one aligned line per finished step, a spinner while building and a
    progress bar while training (both live on a terminal only, and erased when done); nothing
    at all without a console."""

    WIDTH = 72  # where a step's time starts

    def __init__(self, console: Console | None) -> None:
        self.console = console
        self.live = console is not None and console.is_terminal and not console.is_dumb_terminal

    def step(self, name: str, text: str, seconds: float | None = None) -> None:
        if self.console is None:
            return
        line = Text("  ")
        line.append(f"{name:<8}", style="bold")
        line.append(text)
        if seconds is not None:
            line.pad_right(max(1, self.WIDTH - len(line)))
            line.append(f"{seconds:6.2f} s", style="cyan")
        self.console.print(line, soft_wrap=True)  # one line per step, even in a narrow log

    @contextmanager
    def status(self, text: str) -> Iterator[Callable[[str], None]]:
        """A spinner showing TEXT; yields the function that changes it."""
        if self.console is None or not self.live:
            yield lambda text: None
            return
        with self.console.status(text) as live:
            yield live.update

    @contextmanager
    def progress(self, epochs: int) -> Iterator[Callable[[History], None]]:
        """A bar over EPOCHS epochs with the last one's loss and test accuracy; yields the
        function to call after each epoch."""
        if self.console is None or not self.live:
            yield lambda history: None
            return
        columns = [
            TextColumn("  [bold]train[/]   epoch {task.completed}/{task.total}"),
            BarColumn(),
            TextColumn("loss {task.fields[loss]}  test accuracy {task.fields[accuracy]}"),
            TimeElapsedColumn(),
        ]
        with Progress(*columns, console=self.console, transient=True) as bar:
            task = bar.add_task("train", total=epochs, loss="-", accuracy="-")

            def advance(history: History) -> None:
                loss, acc = f"{history.loss[-1]:.3f}", f"{history.test_accuracy[-1]:.1%}"
                bar.update(task, advance=1, loss=loss, accuracy=acc)

            yield advance


def _digits(probs: np.ndarray) -> str:
    """The first SHOWN predicted digits."""
    shown = " ".join(str(d) for d in np.argmax(probs[:SHOWN], 1))
    return shown + (" …" if len(probs) > SHOWN else "")


def _shown(path: Path) -> str:
    """PATH relative to the working directory when it lies below it."""
    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative


def _size(path: Path) -> str:
    return f"{path.stat().st_size / 1024:.1f} KiB"


@click.command(
    name="demo",
    help="Build samples/digits.tel into a shared library, train it through the library on "
    "scikit-learn's 8x8 digits, test it, save its parameters (safetensors) and reload them into "
    "a fresh model, and plot loss and accuracy (PNG).",
)
@click.option("--epochs", default=30, show_default=True, type=click.IntRange(0))
@click.option(
    "--out",
    default="build/demo",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Directory for the library, checkpoint and plot.",
)
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0, 2**63 - 1))
@click.option("--cpu", default="native", show_default=True, help="Target CPU of the library.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
def demo(epochs: int, out: str, seed: int, cpu: str, quiet: bool) -> None:
    console = None if quiet else Console(highlight=False)
    try:
        result = run(Path(out), epochs, seed, cpu, console)
    except DiagnosticError as e:
        report(e.diagnostics)
        sys.exit(EXIT_INPUT)
    except BuildFailure as e:
        click.echo(f"telc demo: cannot build: {e}", err=True)
        sys.exit(EXIT_INPUT)
    if not result.identical:
        click.echo("telc demo: the reloaded model predicts differently (a bug)", err=True)
        sys.exit(EXIT_INPUT)


def main() -> None:
    demo()


if __name__ == "__main__":
    main()
