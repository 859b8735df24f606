"""Strings the loader hands to a library as C strings (dlvm.loader): a NUL character in a path,
a device, a model or parameter name would silently cut the string where C reads it
(`save("x.st\\0.bak")` wrote x.st, `device="cpu\\0junk"` made a CPU model), so each is refused
with a ValueError before any call, and nothing is written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from modellib import zoo_library

import dlvm


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return zoo_library(tmp_path_factory.mktemp("zoo"))


CALLS: dict[str, Callable[[Any, Path, Path], object]] = {
    "save": lambda m, lib, d: m.save(d / "x.st\0.bak"),
    "save bytes": lambda m, lib, d: m.save(bytes(d / "x.st") + b"\0.bak"),
    "load": lambda m, lib, d: m.load(d / "x.st\0.bak"),
    "get_param": lambda m, lib, d: m.get_param("W\0junk"),
    "set_param": lambda m, lib, d: m.set_param("W\0", np.zeros((3, 2), np.float32)),
    "device": lambda m, lib, d: dlvm.load(lib, device="cpu\0junk"),
    "library path": lambda m, lib, d: dlvm.load(str(lib) + "\0junk"),
    "model name": lambda m, lib, d: dlvm.load(lib, name="zoo\0junk"),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_nul_character_is_refused(call: str, library: Path, tmp_path: Path) -> None:
    with dlvm.load(library, seed=1) as model:
        W = model.get_param("W")
        with pytest.raises(ValueError, match="contains a NUL character"):
            CALLS[call](model, library, tmp_path)
        assert not (tmp_path / "x.st").exists(), "nothing was written under the cut name"
        assert (model.get_param("W") == W).all(), "the model is unchanged"


def test_the_strings_still_work_without_one(library: Path, tmp_path: Path) -> None:
    with dlvm.load(library, device="cpu", seed=1, name="zoo") as model:
        model.set_param("W", np.ones((3, 2), np.float32))
        model.save(tmp_path / "x.st")
        model.save(bytes(tmp_path / "y.st"))  # type: ignore[arg-type] # bytes work too
        model.load(tmp_path / "x.st")
        assert (model.get_param("W") == 1).all()
