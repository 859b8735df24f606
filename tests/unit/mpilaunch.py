"""Helpers for the multi-rank tests: a Python script run on several MPI ranks on this machine by
the mpich wheel's mpiexec (the `mpi` extra), bounded in time, each rank's output kept apart.

The launch is `mpiexec -n RANKS python -m mpi4py SCRIPT ARGS...`: under `-m mpi4py` a rank
whose exception goes uncaught calls MPI_Abort, so the others do not wait for it in a
collective until the timeout (plain `python SCRIPT` leaves them there).
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
import sysconfig
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from mpireap import mpich_segments, run_bounded, unheld

# The environment's scripts directory: the mpich wheel installs mpiexec and mpicc there, beside
# the python that runs the tests. A launcher of another MPI would not match the libmpi that
# mpi4py loads from this environment, so none is looked for elsewhere.
BIN = Path(sysconfig.get_path("scripts"))

# Set by CI (.ci/run): a missing MPI fails the MPI tests instead of skipping them.
REQUIRE_MPI = os.environ.get("DLVM_REQUIRE_MPI") == "1"

# Seconds past the launcher's timeout at which hydra's own (MPIEXEC_TIMEOUT) ends the ranks: a
# launch outlived by no test process (an xdist worker killed) still ends. Hydra's timeout is
# not the first resort: about one time in ten its proxy fails an assertion on the way, and
# mpiexec returns seconds late with status 0.
GRACE = 5.0
# launch's status when its timeout ended mpiexec, as timeout(1)'s.
TIMED_OUT = 124
# Seconds a launch waits for the segments its ranks leave behind to be released, to remove them.
REAP_WAIT = 2.0


@dataclass(frozen=True)
class Launched:
    """What one launch did: mpiexec's exit status, each rank's output, and the wall time."""

    # mpiexec's exit status (the first failing rank's, or hydra's), or TIMED_OUT.
    rc: int
    rank_stdout: tuple[str, ...]
    rank_stderr: tuple[str, ...]
    # mpiexec's own messages (hydra's reports of a rank's bad termination or of its timeout).
    launcher_stdout: str
    launcher_stderr: str
    seconds: float
    timed_out: bool

    @property
    def stdout(self) -> str:
        """Every rank's standard output, rank 0's first, then mpiexec's own."""
        return "".join(self.rank_stdout) + self.launcher_stdout

    @property
    def stderr(self) -> str:
        """Every rank's standard error, rank 0's first, then mpiexec's own."""
        return "".join(self.rank_stderr) + self.launcher_stderr

    def report(self) -> str:
        """All of it, labelled, for an assertion's message."""
        lines = [f"rc={self.rc} seconds={self.seconds:.1f} timed_out={self.timed_out}"]
        for rank, (out, err) in enumerate(zip(self.rank_stdout, self.rank_stderr)):
            lines += [f"--- rank {rank} stdout", out, f"--- rank {rank} stderr", err]
        lines += ["--- mpiexec stdout", self.launcher_stdout]
        lines += ["--- mpiexec stderr", self.launcher_stderr]
        return "\n".join(lines)


def mpiexec_path(bin_dir: Path = BIN) -> Path | None:
    """The environment's mpiexec (the mpich wheel's), or None where it is not installed."""
    path = bin_dir / "mpiexec"
    return path if path.is_file() and os.access(path, os.X_OK) else None


def mpicc_path(bin_dir: Path = BIN) -> Path | None:
    """The environment's MPI C compiler wrapper (the mpich wheel's), or None."""
    path = bin_dir / "mpicc"
    return path if path.is_file() and os.access(path, os.X_OK) else None


def missing_mpi(bin_dir: Path = BIN) -> str | None:
    """Why the MPI tests cannot run here, or None when they can."""
    # find_spec, not an import: importing mpi4py.MPI would initialize MPI in the test process.
    if importlib.util.find_spec("mpi4py") is None:
        return "mpi4py is not installed (pip install -e '.[mpi]')"
    if mpiexec_path(bin_dir) is None:
        return f"no mpiexec in {bin_dir} (pip install -e '.[mpi]' installs the mpich wheel's)"
    return None


needs_mpi = pytest.mark.skipif(
    missing_mpi() is not None and not REQUIRE_MPI, reason=missing_mpi() or "MPI is installed"
)


def launch(
    script: str | os.PathLike[str],
    ranks: int,
    args: Sequence[str] = (),
    timeout: float = 60.0,
    env: dict[str, str] | None = None,
) -> Launched:
    """Runs `script` with `args` on `ranks` MPI ranks on this machine, with the environment's
    python and `env` added to this process's environment; returns when all of them have ended,
    or, past `timeout` seconds, once they have been ended (within 2 * TERM_WAIT more).
    MPICH's shared memory that a failed launch leaves behind is removed."""
    mpiexec = mpiexec_path()
    if mpiexec is None:
        raise FileNotFoundError(missing_mpi())
    with tempfile.TemporaryDirectory(prefix="mpilaunch-") as scratch:
        out = Path(scratch)
        command = [
            str(mpiexec),
            # The ranks are forked here, never started through ssh, and hydra's proxy reaches
            # mpiexec on loopback whatever this host's name resolves to.
            *("-launcher", "fork", "-iface", "lo"),
            # Files of each rank's own: ranks that share mpiexec's output interleave in it,
            # mid-line when Python's output is unbuffered.
            *("-outfile-pattern", f"{out}/%r.out", "-errfile-pattern", f"{out}/%r.err"),
            *("-n", str(ranks)),
            *(sys.executable, "-m", "mpi4py", os.fspath(script), *args),
        ]
        child_env = {
            **os.environ,
            **(env or {}),
            "MPIEXEC_TIMEOUT": str(math.ceil(timeout + GRACE)),
            # What a rank printed before it was ended reaches its file.
            "PYTHONUNBUFFERED": "1",
        }
        before = mpich_segments()
        rc, seconds, expired = run_bounded(command, timeout, child_env, out)
        remove_garbage(before)
        return Launched(
            rc=TIMED_OUT if expired else rc,
            rank_stdout=tuple(_read(out / f"{r}.out") for r in range(ranks)),
            rank_stderr=tuple(_read(out / f"{r}.err") for r in range(ranks)),
            launcher_stdout=_read(out / "mpiexec.out"),
            launcher_stderr=_read(out / "mpiexec.err"),
            seconds=seconds,
            timed_out=expired,
        )


def remove_garbage(before: set[Path]) -> None:
    """Unlinks the MPICH segments made since `before` that no process holds: a rank that is
    killed or aborts never unlinks its node's segment (2 MiB of memory). A rank that has just
    ended may still be releasing its mapping, so this looks again for a moment (REAP_WAIT)
    while new segments remain; one a launch of another process holds stays, and is its own."""
    deadline = time.monotonic() + REAP_WAIT
    while new := mpich_segments() - before:
        for segment in unheld(new):
            segment.unlink(missing_ok=True)
        if time.monotonic() >= deadline:
            return
        time.sleep(0.05)


def _read(path: Path) -> str:
    """The file's text, or "" when the rank never wrote to it (hydra creates it on first use)."""
    return path.read_text(errors="replace") if path.exists() else ""
