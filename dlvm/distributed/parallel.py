"""DataParallel: one model trained by several processes, each on its shard of every batch,
through a Communicator. The library (built with --distributed) sums the loss, gradients and
float buffers through the communicator in each train step and applies the optimiser to their
means, so every process keeps the same parameters, optimiser state and step count."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from dlvm.distributed.communicator import Communicator
from dlvm.loader import Entry, LibraryError, Model
from dlvm.runtime import Status


def shard(array: Any, rank: int, size: int) -> np.ndarray:
    """Process `rank`'s contiguous slice of `array`'s leading axis, one of `size` equal
    shards (a view). A leading axis that does not split equally is a ValueError: each
    process's library is built for one per-process batch."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"size must be the number of processes (at least 1), got {size!r}")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < size:
        raise ValueError(f"rank must be in [0, {size}), got {rank!r}")
    arr = np.asarray(array)
    if arr.ndim == 0:
        raise ValueError("a scalar has no leading axis to shard")
    rows = arr.shape[0]
    if rows % size != 0:
        raise ValueError(
            f"a batch of {rows} rows does not split into {size} equal shards; use a batch that"
            f" is a multiple of {size} (each process's library is built for {size}-th of it)"
        )
    per = rows // size
    return arr[rank * per : (rank + 1) * per]


class DataParallel:
    """`model` trained by the processes of `comm`, each on its own shard of every batch.
    At construction every parameter is set to rank `root`'s (the optimiser states and the
    step count are zero in a new model; resume from a checkpoint with `load`). Each
    `train_step` returns the loss averaged over all the processes' shards."""

    def __init__(self, model: Model, comm: Communicator, *, root: int = 0) -> None:
        if not 0 <= root < comm.size:
            raise ValueError(f"root {root} is not a rank of {comm.size} processes")
        self.model, self.comm, self.root = model, comm, root
        trains = [e for e in model.entries.values() if e.kind == "train"]
        if not trains:
            raise ValueError(f"model '{model.name}' ({model.path}) has no train entry")
        self._trains: list[Entry] = trains
        try:
            model.set_allreduce(comm.allreduce, comm.size)
        except LibraryError as e:
            if e.status != Status.INVALID_ARGUMENT:
                raise
            raise ValueError(
                f"{model.path} was built without --distributed, so its train steps cannot sum"
                " gradients across processes; rebuild it with `telc build --distributed`"
                " (and -D its batch dim to the per-process batch)"
            ) from e
        for name in model.param_specs:
            value = model.get_param(name)
            comm.broadcast(value, root)
            if comm.rank != root:
                model.set_param(name, value)

    @property
    def rank(self) -> int:
        return self.comm.rank

    @property
    def size(self) -> int:
        return self.comm.size

    def shard(self, array: Any) -> np.ndarray:
        """This process's shard of `array`'s leading axis (see `shard`)."""
        return shard(array, self.comm.rank, self.comm.size)

    def train_step(self, *args: Any, **kwargs: Any) -> Any:
        """One step of the model's train entry on this process's shard; the loss returned is
        the mean over every process. A failed collective raises LibraryError (status
        COLLECTIVE) from its CollectiveError, and the model is as it was."""
        if len(self._trains) != 1:
            names = ", ".join(e.name for e in self._trains)
            raise ValueError(
                f"model '{self.model.name}' has several train entries ({names}): call the one"
                " you mean as dp.model.entries[name](...)"
            )
        return self._trains[0](*args, **kwargs)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Rank `root` writes the checkpoint (atomically); no process returns before it
        exists."""
        if self.comm.rank == self.root:
            self.model.save(path)
        self.comm.barrier()

    def load(self, path: str | os.PathLike[str]) -> None:
        """Every process reads the same checkpoint (parameters, optimiser state, step count),
        once every process has reached this call."""
        self.comm.barrier()
        self.model.load(path)
