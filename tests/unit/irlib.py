"""Helpers for the code-generation tests: a library built from IR text (every function an
export), and distances in units in the last place."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dlvm.codegen.build import build_library
from dlvm.codegen.spec import module_spec
from dlvm.ir import parse_module


def ir_library(text: str, name: str, directory: Path) -> Path:
    """Builds directory/NAME.so from the IR module `text` (read as NAME.dl) and returns its path."""
    module = parse_module(text, f"{name}.dl")
    path = Path(directory) / f"{name}.so"
    build_library(module, module_spec(module, "test"), path)
    return path


def ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in units of the spacing of `want` rounded to got's type."""
    spacing = np.spacing(np.abs(want.astype(got.dtype))).astype(np.float64)
    return np.abs(got.astype(np.float64) - want) / spacing
