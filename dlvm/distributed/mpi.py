"""MpiCommunicator: the Communicator of dlvm.distributed over MPI (mpi4py), for models whose
all-reduce block is in host memory. Every collective is non-blocking and polled against a
deadline, so a rank that failed or stopped makes the others raise CollectiveError instead of
hanging. mpi4py is imported here only, when a communicator is made (the `mpi` extra)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from dlvm.distributed.communicator import CollectiveError
from dlvm.loader import DeviceBuffer

INSTALL_HELP = "pip install 'telc[mpi]' (mpi4py and an MPI library such as MPICH)"

# Polling backs off from a busy check to this pause (seconds): a collective that completes at
# once costs nothing, and a rank waiting for a slower one leaves the CPU to it.
LONGEST_PAUSE = 0.001
SPIN = 0.005  # seconds a collective is polled without pausing


def mpi_module() -> Any:
    """mpi4py's MPI module (importing it initialises MPI), or ImportError saying what to
    install."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise ImportError(f"dlvm.distributed.MpiCommunicator needs mpi4py: {INSTALL_HELP}") from e
    return MPI


class MpiCommunicator:
    """The processes of an MPI communicator (COMM_WORLD unless `comm` is given). A collective
    that has not finished after `timeout` seconds raises CollectiveError: the job should then
    end (`abort`), as the ranks are no longer in step."""

    def __init__(self, comm: Any = None, timeout: float = 60.0) -> None:
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self._mpi = mpi_module()
        self.comm = comm if comm is not None else self._mpi.COMM_WORLD
        self.timeout = float(timeout)
        # Requests given up on at their deadline, with the buffers MPI may still write: kept
        # alive so that a late completion lands in memory this object owns.
        self._abandoned: list[tuple[Any, np.ndarray | None]] = []
        self._staging: dict[tuple[np.dtype, int], np.ndarray] = {}

    @property
    def rank(self) -> int:
        """This process's rank in the communicator."""
        return int(self.comm.Get_rank())

    @property
    def size(self) -> int:
        """The number of processes in the communicator."""
        return int(self.comm.Get_size())

    def allreduce(self, buffer: np.ndarray | DeviceBuffer) -> None:
        """Sums the 1-D host array `buffer` in place across the processes (bf16 in f32,
        rounded once)."""
        if isinstance(buffer, DeviceBuffer):
            raise TypeError(
                f"MpiCommunicator sums host memory, but the model is on a GPU ({buffer!r}): use"
                " dlvm.distributed.NcclCommunicator for models on GPUs (CUDA-aware MPI is not"
                " supported)"
            )
        if not isinstance(buffer, np.ndarray) or not buffer.flags.c_contiguous:
            raise TypeError(f"allreduce needs a contiguous NumPy array, got {type(buffer)!r}")
        # The sum is taken in a block of this object's: after a timeout MPI may still write
        # into it, and the model's block must not be written once the step has failed (nor
        # after the model has freed it). The block is kept from step to step (a new one per
        # step costs its page faults, as much as the copies), and replaced once abandoned.
        # MPI has no bf16 sum: bf16 (an ml_dtypes array) is summed in f32 and rounded once.
        summed = np.dtype(np.float32) if buffer.dtype.kind == "V" else buffer.dtype
        key = (buffer.dtype, buffer.size)
        staging = self._staging.get(key)
        if staging is None:
            staging = self._staging[key] = np.empty(buffer.size, summed)
        staging[...] = buffer
        what = f"the all-reduce of {staging.size} {staging.dtype} elements"
        self._wait(
            lambda: self.comm.Iallreduce(self._mpi.IN_PLACE, staging, self._mpi.SUM), what, staging
        )
        buffer[...] = staging

    def broadcast(self, array: np.ndarray, root: int = 0) -> None:
        """Overwrites the host array `array` with rank `root`'s."""
        if not isinstance(array, np.ndarray):
            raise TypeError(f"broadcast needs a NumPy array, got {type(array)!r}")
        if not 0 <= root < self.size:
            raise ValueError(f"root {root} is not a rank of {self.size} processes")
        staging = np.ascontiguousarray(array).copy()
        what = f"the broadcast of {staging.size} {staging.dtype} elements from rank {root}"
        self._wait(lambda: self.comm.Ibcast(staging, root=root), what, staging)
        array[...] = staging

    def barrier(self) -> None:
        """Returns once every process has called it."""
        self._wait(self.comm.Ibarrier, "a barrier", None)

    def abort(self, code: int = 1) -> None:
        """Ends every process of the job with exit status `code` (MPI_Abort): what to do
        after a CollectiveError, as the processes are no longer in step."""
        self.comm.Abort(code)

    def _wait(self, start: Any, what: str, keep: np.ndarray | None) -> None:
        try:
            request = start()
            started = time.monotonic()
            deadline = started + self.timeout
            pause = 1e-5
            while not request.Test():
                now = time.monotonic()
                if now >= deadline:
                    self._abandoned.append((request, keep))
                    self._staging = {k: v for k, v in self._staging.items() if v is not keep}
                    raise CollectiveError(
                        f"rank {self.rank} of {self.size}: {what} did not finish in"
                        f" {self.timeout:g} s: another rank failed or stopped (end the job,"
                        " e.g. with MpiCommunicator.abort)"
                    )
                # Polled without a pause at first (a step's sum usually ends within SPIN, and a
                # sleep would add up to its length to every step), then less and less often.
                if now - started > SPIN:
                    time.sleep(pause)
                    pause = min(2 * pause, LONGEST_PAUSE)
        except self._mpi.Exception as e:
            raise CollectiveError(f"rank {self.rank} of {self.size}: {what} failed: {e}") from e
