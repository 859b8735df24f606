"""Running a Python script under mpiexec from a test: `launch` with a hard timeout (the whole
process group is killed when it runs out), `needs_mpi` to skip where there is no MPI, and
`mpiexec_path`. A minimal version; branch dp-mpi owns this file."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

TIMED_OUT = 124  # the status `timeout` reports, for a launch killed at its limit


@dataclass
class Launched:
    """What a launch did: its exit status (TIMED_OUT if killed), its output and how long."""

    rc: int
    stdout: str
    stderr: str
    seconds: float


def mpiexec_path() -> str | None:
    """The virtual environment's mpiexec (the mpich wheel's), else one on PATH, else None."""
    beside = Path(sys.executable).parent / "mpiexec"
    return str(beside) if beside.exists() else shutil.which("mpiexec")


def _have_mpi() -> bool:
    return mpiexec_path() is not None and importlib.util.find_spec("mpi4py") is not None


needs_mpi = pytest.mark.skipif(not _have_mpi(), reason="needs mpi4py and mpiexec (telc[mpi])")


def launch(
    script: str | os.PathLike[str],
    ranks: int,
    args: list[str] | tuple[str, ...] = (),
    timeout: float = 60.0,
    env: dict[str, str] | None = None,
) -> Launched:
    """`mpiexec -n RANKS python SCRIPT ARGS`, killed (with every process it started) after
    `timeout` seconds."""
    mpiexec = mpiexec_path()
    assert mpiexec is not None, "no mpiexec: mark the test needs_mpi"
    command = [mpiexec, "-n", str(ranks), sys.executable, os.fspath(script), *args]
    start = time.monotonic()
    with subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        start_new_session=True,  # one process group: mpiexec, its proxies and the ranks
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
            rc = process.returncode
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            rc = TIMED_OUT
    return Launched(rc, stdout, stderr, time.monotonic() - start)
