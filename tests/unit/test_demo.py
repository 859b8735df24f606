"""The demo `make demo` runs (telc/demo.py), with few epochs: it builds digits.so and its header,
training lowers the loss and learns, the safetensors checkpoint reloads into a fresh model with
bit-identical predictions, the plot is a PNG, and the report names every step."""

from __future__ import annotations

import io
import struct

import numpy as np
from click.testing import CliRunner
from rich.console import Console
from safetensors.numpy import load_file

import dlvm
from telc import demo
from telc.cli import cli

EPOCHS = 8  # about 97% on the test set with seed 0; 30 (the default) reach about 98%


def test_demo_builds_trains_saves_reloads_and_plots(tmp_path):
    """One run (the build is most of its time, and pytest-xdist would repeat a module fixture
    in each worker); each part checked by its own function below."""
    text = io.StringIO()
    console = Console(file=text, width=100)  # not a terminal: no spinner, no bar
    report = demo.run(tmp_path / "out", epochs=EPOCHS, seed=0, console=console)
    check_library(report)
    check_training(report)
    check_checkpoint(report)
    check_plot(report)
    check_printed(report, text.getvalue())


def check_library(report: demo.Report) -> None:
    assert report.library.name == "digits.so" and report.library.stat().st_size > 0
    assert report.header == report.library.with_suffix(".h")
    assert "digits_train_step(" in report.header.read_text()
    assert (report.library.parent / "dlrt.h").exists()


def check_training(report: demo.Report) -> None:
    history = report.history
    assert len(history.loss) == len(history.train_accuracy) == len(history.test_accuracy) == EPOCHS
    assert history.loss[-1] < history.loss[0] / 3, history.loss
    assert report.test_accuracy == history.test_accuracy[-1]
    assert report.test_accuracy >= 0.93, f"test accuracy {report.test_accuracy:.3f}"


def check_checkpoint(report: demo.Report) -> None:
    """The safetensors file holds the parameters; a fresh model predicts differently until it
    loads them, then bit for bit like the trained one."""
    assert report.identical
    tensors = load_file(str(report.checkpoint))
    shapes = {name: value.shape for name, value in tensors.items()}
    assert shapes == {"W1": (64, 128), "b1": (1, 128), "W2": (128, 10), "b2": (1, 10)}
    x_test = demo.load_data().x_test
    assert report.predictions.shape == (len(x_test), 10)
    with dlvm.load(report.library, seed=5) as fresh:
        assert not np.array_equal(demo.predict(fresh, x_test), report.predictions)
        fresh.load(report.checkpoint)
        assert demo.predict(fresh, x_test).tobytes() == report.predictions.tobytes()


def check_plot(report: demo.Report) -> None:
    data = report.plot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    assert struct.unpack(">II", data[16:24]) == (900, 340)
    assert len(data) > 10_000  # two curves and their axes, not a blank canvas


def check_printed(report: demo.Report, text: str) -> None:
    names = [line.split()[0] for line in text.splitlines()]
    assert names == ["build", "data", "train", "test", "save", "reload", "plot", "done"]
    assert f"{EPOCHS} epochs of 45 steps (batch 32)" in text
    assert f"accuracy {report.test_accuracy:.1%}" in text
    assert "(all 357 bit-identical)" in text
    assert "\x1b" not in text
    assert set(report.seconds) == {"build", "data", "train", "save and reload", "plot", "total"}


def test_command_line_options():
    result = CliRunner().invoke(demo.demo, ["--help"])
    assert result.exit_code == 0
    for option in ("--epochs", "--out", "--seed", "--cpu", "--quiet"):
        assert option in result.output
    result = CliRunner().invoke(demo.demo, ["--epochs", "-1"])
    assert result.exit_code == 2
    result = CliRunner().invoke(cli, ["demo", "--help"])  # also `telc demo`
    assert result.exit_code == 0 and "--epochs" in result.output


def test_terminal_shows_a_live_bar_with_epoch_loss_and_accuracy():
    text = io.StringIO()
    steps = demo._Steps(Console(file=text, force_terminal=True, width=120))
    history = demo.History()
    with steps.progress(2) as after_epoch:
        for loss, acc in [(0.5, 0.9), (0.25, 0.975)]:
            history.loss.append(loss)
            history.test_accuracy.append(acc)
            after_epoch(history)
    shown = text.getvalue()
    assert "epoch 2/2" in shown and "loss 0.250" in shown and "test accuracy 97.5%" in shown
