"""Ending what a launch leaves behind (tests/unit/mpireap.py): processes that left its session,
found by their environment, and files that no process holds."""

from __future__ import annotations

import mmap
import os
import sys

from mpireap import run_bounded, running, tagged_processes, unheld


def test_run_bounded_ends_processes_that_left_its_session(tmp_path):
    # Hydra puts each rank in a session of its own; the launcher finds them by their
    # environment. Here a grandchild leaves the session and both would sleep for ever.
    grandchild = "import time; time.sleep(10**6)"
    child = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', {grandchild!r}], start_new_session=True)\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(10**6)\n"
    )
    command = [sys.executable, "-c", child]
    rc, seconds, expired = run_bounded(command, 3, dict(os.environ), tmp_path)
    assert expired and rc != 0 and 3 <= seconds < 15
    grandchild_pid = int((tmp_path / "mpiexec.out").read_text())
    assert not running(grandchild_pid)


def test_tagged_processes_finds_none_for_an_unused_tag():
    assert tagged_processes("no launch has this tag") == []


def test_unheld_finds_files_no_process_holds(tmp_path):
    held, loose = tmp_path / "held", tmp_path / "loose"
    held.write_bytes(b"x")
    loose.write_bytes(b"x")
    with open(held, "rb"):
        assert unheld({held, loose}) == [loose]
    # Mapped with its descriptor closed, as MPICH holds its segments.
    with open(held, "rb") as file:
        mapped = mmap.mmap(file.fileno(), 1, prot=mmap.PROT_READ)
    assert unheld({held, loose}) == [loose]
    mapped.close()
    assert unheld({held, loose}) == [held, loose]
