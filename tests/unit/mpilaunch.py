"""Helpers for the multi-rank tests: a Python script run on several MPI ranks on this machine by
the mpich wheel's mpiexec (the `mpi` extra), bounded in time, each rank's output kept apart.

The launch is `mpiexec -n RANKS python -m mpi4py SCRIPT ARGS...`: under `-m mpi4py` a rank
whose exception goes uncaught calls MPI_Abort, so the others do not wait for it in a
collective until the timeout (plain `python SCRIPT` leaves them there).
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

# The environment's scripts directory: the mpich wheel installs mpiexec and mpicc there, beside
# the python that runs the tests. A launcher of another MPI would not match the libmpi that
# mpi4py loads from this environment, so none is looked for elsewhere.
BIN = Path(sysconfig.get_path("scripts"))

# Set by CI (.ci/run): a missing MPI fails the MPI tests instead of skipping them.
REQUIRE_MPI = os.environ.get("DLVM_REQUIRE_MPI") == "1"

# Seconds that mpiexec is given, past its own timeout (MPIEXEC_TIMEOUT), to end the ranks and
# return, before the launcher ends it, and seconds between asking (SIGTERM) and killing.
GRACE = 5.0
TERM_WAIT = 3.0

# Every process of one launch (mpiexec, hydra's proxy, the ranks) inherits this variable with
# the launch's own value: hydra puts the proxy and each rank in a session of its own, so the
# launch's process group does not hold them, but their environment names them.
TAG = "DLVM_MPILAUNCH"


@dataclass(frozen=True)
class Launched:
    """What one launch did: mpiexec's exit status, each rank's output, and the wall time."""

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
    script: str | Path,
    ranks: int,
    args: list[str],
    timeout: float,
    env: dict[str, str] | None = None,
) -> Launched:
    """Runs `script` with `args` on `ranks` MPI ranks on this machine, with the environment's
    python and `env` added to this process's environment; returns when all of them have ended,
    or, past `timeout` seconds, once they have been ended (never later than about
    timeout + GRACE + TERM_WAIT)."""
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
            *(sys.executable, "-m", "mpi4py", str(script), *args),
        ]
        child_env = {
            **os.environ,
            **(env or {}),
            "MPIEXEC_TIMEOUT": str(max(1, math.ceil(timeout))),
            # What a rank printed before it was ended reaches its file.
            "PYTHONUNBUFFERED": "1",
        }
        rc, seconds, expired = run_bounded(command, timeout + GRACE, child_env, out)
        return Launched(
            rc=rc,
            rank_stdout=tuple(_read(out / f"{r}.out") for r in range(ranks)),
            rank_stderr=tuple(_read(out / f"{r}.err") for r in range(ranks)),
            launcher_stdout=_read(out / "mpiexec.out"),
            launcher_stderr=_read(out / "mpiexec.err"),
            seconds=seconds,
            timed_out=expired or "APPLICATION TIMED OUT" in _read(out / "mpiexec.out"),
        )


def run_bounded(
    command: list[str], timeout: float, env: dict[str, str], out: Path
) -> tuple[int, float, bool]:
    """Runs `command` (output to out/mpiexec.out and .err, no input) for at most `timeout`
    seconds, then ends it and every process started under it; returns its exit status, the
    seconds it took, and whether the timeout ended it."""
    tag = uuid.uuid4().hex
    start = time.monotonic()
    with open(out / "mpiexec.out", "wb") as stdout, open(out / "mpiexec.err", "wb") as stderr:
        # Files, not pipes: a process that outlived mpiexec would hold a pipe open.
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            env={**env, TAG: tag},
            start_new_session=True,
        )
        expired = False
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            expired = True
            # SIGTERM first: mpiexec passes it to the ranks and cleans up after them.
            process.terminate()
            try:
                process.wait(TERM_WAIT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        finally:
            # Whatever still carries the tag outlived mpiexec, whichever way it ended.
            end_tagged(tag)
    return process.returncode, time.monotonic() - start, expired


def end_tagged(tag: str) -> None:
    """Kills every process tagged `tag` and waits (a few seconds at most) until none runs:
    a process may go on for a moment after SIGKILL is sent."""
    deadline = time.monotonic() + TERM_WAIT
    while (left := tagged_processes(tag)) and time.monotonic() < deadline:
        for pid in left:
            _kill(pid)
        time.sleep(0.05)


def tagged_processes(tag: str) -> list[int]:
    """The running processes whose environment has TAG=`tag` (Linux's /proc; none elsewhere)."""
    needle = f"{TAG}={tag}".encode()
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            tagged = needle in (entry / "environ").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if tagged and running(int(entry.name)):
            found.append(int(entry.name))
    return found


def running(pid: int) -> bool:
    """Whether process `pid` runs. A zombie has ended: only its parent can reap it, and one
    orphaned in a container whose init does not reap (hydra's proxy, here) stays listed."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _read(path: Path) -> str:
    """The file's text, or "" when the rank never wrote to it (hydra creates it on first use)."""
    return path.read_text(errors="replace") if path.exists() else ""
