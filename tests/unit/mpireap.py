"""Helpers for the multi-rank tests: what a launch leaves behind, ended or removed. Its
processes are found by an environment variable of the launch's own, as hydra puts its proxy and
each rank in a session of its own, out of the launch's process group; MPICH's shared-memory
segments by no process holding them."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

# Every process started under one run_bounded inherits this variable with the run's own value.
TAG = "DLVM_MPILAUNCH"

# Seconds between asking a command to end (SIGTERM: mpiexec ends the ranks and returns within a
# tenth of a second here) and killing what is left, and at most waiting for that to end.
TERM_WAIT = 3.0

# Where MPICH's POSIX shared memory lives: one segment a node, mpich_shm_WORLD_NODE, named
# after the launch (a hash of hydra's name for it: mpiexec's pid, the time, the host), and
# unlinked by MPI_Finalize.
SHM = Path("/dev/shm")


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


def mpich_segments() -> set[Path]:
    """MPICH's shared-memory segments on this machine now."""
    return set(SHM.glob("mpich_*")) if SHM.is_dir() else set()


def unheld(paths: set[Path]) -> list[Path]:
    """Those of `paths` that no process maps or has open: garbage, since MPICH opens a segment,
    maps it, then closes it, so that from its creation to its unlinking some process holds it
    while its launch runs."""
    held = set()
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):  # gone meanwhile, or not ours to read
            for line in (entry / "maps").read_text().splitlines():
                held.add(line.split(maxsplit=5)[-1])
            for fd in (entry / "fd").iterdir():
                with contextlib.suppress(OSError):
                    held.add(os.readlink(fd))
    return sorted(path for path in paths if str(path) not in held)
