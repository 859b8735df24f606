"""Loading a checkpoint file into a model, judged against the reference implementation (the
`safetensors` package, NumPy API): the model accepts exactly the files the reference accepts
whose tensors are the model's (every parameter; states and `__step__` optional; the same dtypes
and shapes; bools 0 or 1, which the reference does not check), with the reference's values; any
other file fails with a FORMAT or IO error and leaves the model as it was."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import safetensors.numpy

from dlvm.loader import LibraryError, Model
from dlvm.runtime import Status


def reference(path: Path) -> dict[str, np.ndarray] | None:
    """The file's tensors as the reference reads them; None when it rejects the file."""
    try:
        return safetensors.numpy.load_file(str(path))
    except Exception:  # noqa: BLE001 - any failure of the reference is a rejection
        return None


def checkpoint(model: Model, path: Path) -> dict[str, np.ndarray]:
    """Every tensor of the model (parameters, states, step), through a save."""
    model.save(path)
    loaded = safetensors.numpy.load_file(str(path))
    path.unlink()
    return loaded


def fits(model: Model, tensors: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> bool:
    """Whether a file holding `tensors` should load into `model`, whose tensors are `expected`:
    every parameter, no tensor the model lacks, each with the model's dtype and shape, and bools
    that are 0 or 1."""
    if not set(model.param_specs) <= set(tensors) <= set(expected):
        return False
    for name, value in tensors.items():
        want = expected[name]
        if value.dtype != want.dtype or value.shape != want.shape:
            return False
        if value.dtype == np.bool_ and value.view(np.uint8).max(initial=0) > 1:
            return False
    return True


def check_load(model: Model, path: Path, scratch: Path) -> bool:
    """Loads `path` into `model` and checks the outcome against the reference (see the module);
    returns whether the load succeeded. `scratch` is a file name the check may use."""
    before = checkpoint(model, scratch)
    ref = reference(path)
    should = ref is not None and fits(model, ref, before)
    try:
        model.load(path)
        loaded = True
    except LibraryError as e:
        loaded = False
        assert e.status in (Status.FORMAT, Status.IO), e
        assert e.message.startswith(f"{model.c_name}_load: "), e.message
    after = checkpoint(model, scratch)
    assert loaded == should, f"{path.name}: loaded {loaded}, but the reference " + (
        "rejects it" if ref is None else f"reads {describe(ref)}"
    )
    for name, value in after.items():
        want = ref[name] if loaded and ref is not None and name in ref else before[name]
        assert value.dtype == want.dtype and value.tobytes() == want.tobytes(), name
    return loaded


def describe(tensors: dict[str, np.ndarray]) -> str:
    return ", ".join(f"{k}: {v.dtype}{list(v.shape)}" for k, v in tensors.items()) or "nothing"


def split(data: bytes) -> tuple[dict[str, Any], bytes]:
    """A well-formed file's header (as JSON, in order) and its data section."""
    (n,) = struct.unpack_from("<Q", data)
    return json.loads(data[8 : 8 + n]), data[8 + n :]


def join(header: dict[str, Any] | str | bytes, data: bytes) -> bytes:
    """A file of `header` (a dict, or raw JSON text) and `data`."""
    if isinstance(header, dict):
        header = json.dumps(header, separators=(",", ":"))
    text = header.encode() if isinstance(header, str) else header
    return struct.pack("<Q", len(text)) + text + data
