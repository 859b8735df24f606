"""The multi-rank launcher (tests/unit/mpilaunch.py): two ranks reduce, a rank's exception ends
the launch at once, a rank that never arrives is ended at the timeout, launches run side by
side (pytest-xdist), and CI, which requires MPI, cannot skip these tests."""

from __future__ import annotations

import subprocess
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from mpilaunch import (
    BIN,
    REQUIRE_MPI,
    TIMED_OUT,
    Launched,
    launch,
    missing_mpi,
    mpicc_path,
    mpiexec_path,
    needs_mpi,
)
from mpireap import mpich_segments, running, unheld

ALLREDUCE = """
import sys
from mpi4py import MPI
comm = MPI.COMM_WORLD
print(f"rank {comm.rank} of {comm.size}: {comm.allreduce(float(sys.argv[1]) * (comm.rank + 1))}")
"""

# Rank 1 fails before the barrier that rank 0 waits in.
RAISES = """
from mpi4py import MPI
comm = MPI.COMM_WORLD
if comm.rank == 1:
    raise RuntimeError("rank 1 gives up")
comm.barrier()
"""

# Rank 1 never reaches the barrier that rank 0 waits in.
HANGS = """
import os
import time
from mpi4py import MPI
comm = MPI.COMM_WORLD
print(f"rank {comm.rank} pid {os.getpid()}")
if comm.rank == 1:
    time.sleep(10**6)
comm.barrier()
"""


def script(directory: Path, text: str) -> Path:
    path = directory / "rank.py"
    path.write_text(textwrap.dedent(text))
    return path


def pids(launched: Launched) -> list[int]:
    """The pids the HANGS ranks printed."""
    return [int(line.split()[-1]) for line in launched.stdout.splitlines() if " pid " in line]


def test_mpi_is_installed_where_required():
    # CI sets DLVM_REQUIRE_MPI=1 (.ci/run): there a missing MPI must fail, not skip the tests.
    missing = missing_mpi()
    assert not (REQUIRE_MPI and missing), f"DLVM_REQUIRE_MPI=1, but {missing}"


def test_missing_mpi_names_what_is_missing(tmp_path):
    # An environment without the mpich wheel's scripts: the skip reason says how to get them.
    assert mpiexec_path(tmp_path) is None and mpicc_path(tmp_path) is None
    assert "pip install -e '.[mpi]'" in str(missing_mpi(tmp_path))


@needs_mpi
def test_two_ranks_allreduce(tmp_path):
    launched = launch(script(tmp_path, ALLREDUCE), 2, ["1.5"], timeout=60)
    assert launched.rc == 0, launched.report()
    assert launched.rank_stdout == ("rank 0 of 2: 4.5\n", "rank 1 of 2: 4.5\n"), launched.report()
    assert not launched.timed_out


@needs_mpi
def test_a_rank_that_raises_ends_the_launch(tmp_path):
    before = mpich_segments()
    launched = launch(script(tmp_path, RAISES), 2, [], timeout=120)
    assert launched.rc != 0, launched.report()
    assert "RuntimeError: rank 1 gives up" in launched.rank_stderr[1], launched.report()
    # MPI_Abort ends rank 0's wait at once (a fraction of a second here), not the timeout.
    assert launched.seconds < 60 and not launched.timed_out, launched.report()
    # The segment of shared memory that MPI_Finalize did not unlink is gone all the same.
    assert unheld(mpich_segments() - before) == []


@needs_mpi
def test_a_rank_that_never_arrives_is_ended_at_the_timeout(tmp_path):
    before = mpich_segments()
    launched = launch(script(tmp_path, HANGS), 2, [], timeout=10)
    assert launched.timed_out and launched.rc == TIMED_OUT, launched.report()
    assert 10 <= launched.seconds < 20, launched.report()
    # What the ranks printed before they were ended comes back, and neither outlives the launch.
    assert [len(out.splitlines()) for out in launched.rank_stdout] == [1, 1], launched.report()
    assert len(pids(launched)) == 2 and not any(running(pid) for pid in pids(launched))
    assert unheld(mpich_segments() - before) == []


@needs_mpi
def test_launches_run_side_by_side(tmp_path):
    # pytest-xdist runs MPI tests at once: hydra's ports and MPICH's shared memory are each
    # launch's own, so concurrent launches do not meet.
    def one(i: int) -> Launched:
        (tmp_path / str(i)).mkdir()
        return launch(script(tmp_path / str(i), ALLREDUCE), 2, [str(i)], timeout=60)

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(one, range(4)))
    for i, launched in enumerate(results):
        assert launched.rc == 0, launched.report()
        assert launched.rank_stdout[1] == f"rank 1 of 2: {3.0 * i}\n", launched.report()


@needs_mpi
@pytest.mark.skipif(mpicc_path() is None, reason=f"no mpicc in {BIN}")
def test_mpicc_builds_a_program_that_allreduces(tmp_path):
    source = tmp_path / "allreduce.c"
    source.write_text(
        textwrap.dedent("""
        #include <mpi.h>
        #include <stdio.h>
        int main(int argc, char **argv) {
            int rank, sum;
            MPI_Init(&argc, &argv);
            MPI_Comm_rank(MPI_COMM_WORLD, &rank);
            MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
            printf("%d %d\\n", rank, sum);
            return MPI_Finalize();
        }
        """)
    )
    mpicc = str(mpicc_path())
    # The wrapper compiles against the wheel's mpi.h and links its libmpi.
    shown = subprocess.run([mpicc, "-show"], capture_output=True, text=True, check=True).stdout
    assert f"-I{BIN.parent / 'include'}" in shown and "-lmpi" in shown.split()
    subprocess.run([mpicc, "-o", str(tmp_path / "allreduce"), str(source)], check=True)
    # The launcher runs Python scripts; this one becomes the compiled program.
    runner = script(tmp_path, f"import os\nos.execv({str(tmp_path / 'allreduce')!r}, ['x'])\n")
    launched = launch(runner, 2, [], timeout=60)
    assert launched.rc == 0 and launched.rank_stdout == ("0 1\n", "1 1\n"), launched.report()
