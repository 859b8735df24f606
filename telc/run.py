"""`telc run`: one entry point of a built model run on inputs read from .npy files (checked
against the library's manifest), its outputs printed, summarised when large, or saved as one
.npy file per output or one .npz. A train entry may run several steps on the same inputs."""

from __future__ import annotations

import difflib
import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.text import Text

from telc.cache import write_atomically
from telc.npy import NpyError, read_array

FULL = 64  # tensors with more elements are summarised: corners and min/mean/max


class RunError(Exception):
    """Why the run cannot go on: a missing, unknown or ill-shaped input, an unreadable file, a
    library error; the message names the input and the file."""


@dataclass
class Outputs:
    """An entry's outputs by name (manifest order) and, for a train entry, each step's loss."""

    values: dict[str, Any]
    losses: list[float]


def dims(shape: tuple[int, ...]) -> str:
    return "[" + " x ".join(map(str, shape)) + "]"


def typed(t: Any) -> str:
    """`x: f32[4 x 2]` for a loader Tensor (dlvm.loader)."""
    return f"{t.name}: {t.dtype_name}{dims(t.shape)}"


def choose_entry(model: Any, name: str | None) -> Any:
    """The entry `name`, by default `infer` (or the only entry there is)."""
    entries = model.entries
    if name is None:
        if "infer" in entries or len(entries) != 1:
            name = "infer"
        else:
            name = next(iter(entries))
    if name not in entries:
        listed = ", ".join(entries) or "none"
        raise RunError(f"model '{model.name}' has no entry '{name}'{_suggest(name, entries)}"
                       f" (entries: {listed})")  # fmt: skip
    return entries[name]


def read_inputs(entry: Any, given: dict[str, str]) -> list[np.ndarray]:
    """Each input of `entry` from the file `given` names for it, converted to its manifest dtype
    (a cast that keeps the kind, such as float64 to f32, is allowed)."""
    names = [t.name for t in entry.inputs]
    listed = ", ".join(typed(t) for t in entry.inputs) or "none"
    for name in given:
        if name not in names:
            raise RunError(f"{entry.name} has no input '{name}'{_suggest(name, names)}"
                           f" (its inputs: {listed})")  # fmt: skip
    missing = [t for t in entry.inputs if t.name not in given]
    if missing:
        needed = ", ".join(typed(t) for t in missing)
        flags = " ".join(f"--input {t.name}=FILE.npy" for t in missing)
        raise RunError(f"{entry.name} needs input {needed}: pass {flags}")
    return [_convert(t, given[t.name], _read(t.name, given[t.name])) for t in entry.inputs]


def _read(name: str, path: str) -> np.ndarray:
    try:
        return read_array(path, key=name)
    except NpyError as e:
        raise RunError(f"input '{name}': {e}") from None


def _convert(t: Any, path: str, arr: np.ndarray) -> np.ndarray:
    where = f"input '{t.name}' ({path})"
    if arr.shape != t.shape:
        raise RunError(f"{where} has shape {dims(arr.shape)}; it must be {t.dtype_name}"
                       f"{dims(t.shape)}")  # fmt: skip
    try:
        converted: np.ndarray = t.convert(arr, "input")
    except (TypeError, ValueError):
        raise RunError(f"{where} has dtype {arr.dtype}, which does not convert to"
                       f" {t.dtype_name} without changing kind") from None  # fmt: skip
    return converted


def execute(
    library: Path,
    entry_name: str | None,
    inputs: dict[str, str],
    seed: int,
    steps: int,
    checkpoint: str | None,
    save: str | None,
    step_done: Callable[[int, float], None],
    device: str = "cpu",
) -> tuple[Any, Outputs]:
    """Creates the model of `library` on `device` with parameters from `seed` (or the
    `checkpoint`), runs the entry on the inputs read from their files, saves the parameters to
    `save` if given; the entry and its outputs."""
    from dlvm.loader import LibraryError, LibraryFileError, load

    try:
        model = load(library, device=device, seed=seed)
    except (OSError, ValueError) as e:
        raise RunError(f"cannot load {library}: {e}") from None
    except LibraryFileError as e:
        raise RunError(f"cannot load {library}: {e.reason}") from None
    except LibraryError as e:
        raise RunError(f"cannot create the model on {device}: {e.message}") from None
    entry = choose_entry(model, entry_name)
    arrays = read_inputs(entry, inputs)
    if checkpoint:
        try:
            model.load(checkpoint)
        except LibraryError as e:
            raise RunError(f"cannot load parameters from {checkpoint}: {e.message}") from None
    outputs = run_entry(entry, arrays, steps, step_done)
    if save:
        try:
            model.save(save)
        except LibraryError as e:
            raise RunError(f"cannot save parameters to {save}: {e.message}") from None
    return entry, outputs


def run_entry(
    entry: Any, arrays: list[np.ndarray], steps: int, step_done: Callable[[int, float], None]
) -> Outputs:
    """Calls `entry` once, or `steps` times for a train entry (each time telling `step_done`
    the step and its loss)."""
    from dlvm.loader import LibraryError

    losses: list[float] = []
    result: Any = None
    try:
        for step in range(1, (steps if entry.kind == "train" else 1) + 1):
            result = entry(*arrays)
            if entry.kind == "train":
                first = result[0] if isinstance(result, tuple) else result
                losses.append(float(np.asarray(first).reshape(-1)[0]))
                step_done(step, losses[-1])
    except LibraryError as e:
        raise RunError(f"{entry.name} failed: {e.message}") from None
    values = result if isinstance(result, tuple) else (() if result is None else (result,))
    return Outputs({t.name: v for t, v in zip(entry.outputs, values)}, losses)


def show(console: Console, entry: Any, outputs: Outputs) -> None:
    """Each output: name and type, then its values (a large tensor by its corners, with its
    minimum, mean and maximum)."""
    specs = {t.name: t for t in entry.outputs}
    for name, value in outputs.values.items():
        arr = np.asarray(value)
        head = Text(name, "bold")
        head.append(f": {specs[name].dtype_name}{dims(arr.shape)}", "dim")
        if arr.ndim == 0:
            head.append(" = ")
            head.append(_scalar(arr))
            console.print(head, soft_wrap=True)
            continue
        console.print(head, soft_wrap=True)
        text = np.array2string(arr, threshold=FULL, edgeitems=3, precision=6, max_line_width=100)
        console.print(Text("\n".join("  " + line for line in text.splitlines())), soft_wrap=True)
        if arr.size > FULL and arr.dtype.kind in "biuf":
            a = arr.astype(np.float64)
            stats = f"  min {a.min():.6g}  mean {a.mean():.6g}  max {a.max():.6g}"
            console.print(Text(f"{stats}  ({arr.size} values)", "dim"), soft_wrap=True)


def _scalar(arr: np.ndarray) -> str:
    value = arr.item()
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def save(outputs: Outputs, target: Path) -> list[Path]:
    """Writes the outputs to `target`: one .npz archive when it ends in .npz, else a directory
    with NAME.npy per output. Every file appears whole (temporary file and rename)."""
    arrays = {name: np.asarray(v) for name, v in outputs.values.items()}
    try:
        if target.suffix == ".npz":
            target.parent.mkdir(parents=True, exist_ok=True)
            buffer = io.BytesIO()
            np.savez(buffer, **arrays)  # type: ignore[arg-type]
            write_atomically(target, buffer.getvalue())
            return [target]
        target.mkdir(parents=True, exist_ok=True)
        written = []
        for name, arr in arrays.items():
            buffer = io.BytesIO()
            np.save(buffer, arr, allow_pickle=False)
            write_atomically(target / f"{name}.npy", buffer.getvalue())
            written.append(target / f"{name}.npy")
        return written
    except OSError as e:
        raise RunError(f"cannot write {target}: {e.strerror}") from None


def _suggest(name: str, known: Any) -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""
