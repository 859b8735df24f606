"""What dlvm.distributed needs of a communication library: the processes' number and count, a
sum in place across them (host memory or a GPU's), a broadcast from one of them and a barrier.
MpiCommunicator (mpi4py, host memory) and NcclCommunicator (NCCL through CuPy, a GPU's memory)
implement it; anything else with these methods can be given to DataParallel too."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from dlvm.loader import DeviceBuffer


class CollectiveError(RuntimeError):
    """A collective that failed or did not finish in time: the step that called it changes
    nothing, and the job should stop (the other processes cannot be trusted to be in step)."""


class Communicator(Protocol):
    """The processes that train one model together."""

    @property
    def rank(self) -> int:
        """This process's number, 0 … size - 1."""
        ...

    @property
    def size(self) -> int:
        """How many processes there are."""
        ...

    def allreduce(self, buffer: np.ndarray | DeviceBuffer) -> None:
        """Sums `buffer` in place across the processes; CollectiveError on failure or timeout."""
        ...

    def broadcast(self, array: np.ndarray, root: int = 0) -> None:
        """Overwrites `array` (host memory) with rank `root`'s."""
        ...

    def barrier(self) -> None:
        """Returns once every process has called it; CollectiveError on timeout."""
        ...
