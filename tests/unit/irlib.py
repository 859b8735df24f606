"""Helpers for the code-generation tests: a library built from IR text (every function an
export), its functions run in another process, and distances in units in the last place."""

from __future__ import annotations

import subprocess
import sys
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


# The library's functions called in a fresh interpreter: the runtime reads its environment
# (DLRT_NUM_THREADS, a preloaded allocator) once, when its first parallel loop runs.
_RUNNER = """
import sys
import numpy as np
import dlvm
data = np.load(sys.argv[2])
with dlvm.load(sys.argv[1]) as lib:
    out = {}
    for name in sys.argv[3:]:
        args = [data[k] for k in sorted((k for k in data if k.rsplit(".", 1)[0] == name),
                                        key=lambda k: int(k.rsplit(".", 1)[1]))]
        out[name] = np.asarray(getattr(lib, name)(*args))
np.savez(sys.argv[2] + ".out.npz", **out)
"""


def run_elsewhere(
    library: Path, calls: dict[str, list[np.ndarray]], directory: Path, env: dict[str, str]
) -> dict[str, np.ndarray]:
    """Each function `calls` names, on its arguments, in a process of its own with `env`."""
    data = {f"{name}.{i}": a for name, args in calls.items() for i, a in enumerate(args)}
    np.savez(directory / "in.npz", **data)
    runner = directory / "run.py"
    runner.write_text(_RUNNER)
    command = [sys.executable, str(runner), str(library), str(directory / "in.npz"), *calls]
    subprocess.run(command, check=True, env=env)
    with np.load(directory / "in.npz.out.npz") as got:
        return {name: got[name] for name in calls}
