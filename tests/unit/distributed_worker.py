"""One rank of the data-parallel tests (tests/unit/test_distributed_mpi.py), run as
`mpiexec -n RANKS python distributed_worker.py LIBRARY OUT [options]`: loads LIBRARY (built with
--distributed for the per-rank batch), wraps it in DataParallel over MpiCommunicator and trains
it on `batch(step)`, each rank on its shard. Each rank writes OUT/rankR.npz (the losses and the
parameters) and OUT/rankR.safetensors (its whole model: parameters, optimiser state, step
count). With --fail-rank, that rank's all-reduce raises at the --fail-at-th step: every rank then
also records its parameters from before that step, reports on stderr, waits for the other ranks'
records and ends the job with MPI_Abort (status 1)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import dlvm
from dlvm.distributed import DataParallel, MpiCommunicator
from dlvm.loader import DeviceBuffer, LibraryError

FEATURES, CLASSES = 64, 10  # samples/digits.tel's x and labels


def batch(step: int, rows: int, dtype: Any = np.float32) -> tuple[np.ndarray, np.ndarray]:
    """The global batch of step `step` (0-based): the same on every rank and in the tests."""
    rng = np.random.default_rng(1000 + step)
    x = rng.random((rows, FEATURES)).astype(dtype)
    labels = np.eye(CLASSES, dtype=dtype)[rng.integers(0, CLASSES, rows)]
    return x, labels


class FailingAt:
    """A Communicator whose all-reduce raises on rank `rank` at its `at`-th call (1-based)."""

    def __init__(self, comm: MpiCommunicator, rank: int, at: int) -> None:
        self.comm, self.fail_rank, self.at, self.calls = comm, rank, at, 0
        self.rank, self.size = comm.rank, comm.size

    def allreduce(self, buffer: np.ndarray | DeviceBuffer) -> None:
        self.calls += 1
        if self.rank == self.fail_rank and self.calls == self.at:
            raise ConnectionError(f"rank {self.rank}: planted failure at step {self.at}")
        self.comm.allreduce(buffer)

    def broadcast(self, array: np.ndarray, root: int = 0) -> None:
        self.comm.broadcast(array, root)

    def barrier(self) -> None:
        self.comm.barrier()


def write(out: Path, rank: int, arrays: dict[str, np.ndarray]) -> None:
    """OUT/rankR.npz, complete before it appears."""
    partial = out / f"rank{rank}.partial.npz"
    np.savez(partial, **arrays)
    os.replace(partial, out / f"rank{rank}.npz")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("library")
    ap.add_argument("out", type=Path)
    ap.add_argument("--per-rank", type=int, default=16, help="the batch the library was built for")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--first", type=int, default=0, help="the first step's number")
    ap.add_argument("--seed", type=int, default=5, help="rank R's model is created with seed+R")
    ap.add_argument("--same-shards", action="store_true", help="every rank gets shard 0")
    ap.add_argument("--save-at", type=int, help="after this many steps, dp.save(--checkpoint)")
    ap.add_argument("--checkpoint", type=Path)
    ap.add_argument("--load", type=Path, help="dp.load this checkpoint before training")
    ap.add_argument("--fail-rank", type=int)
    ap.add_argument("--fail-at", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=30.0, help="the collectives' timeout")
    a = ap.parse_args()

    comm = MpiCommunicator(timeout=a.timeout)
    rank, size = comm.rank, comm.size
    used = FailingAt(comm, a.fail_rank, a.fail_at) if a.fail_rank is not None else comm
    with dlvm.load(a.library, seed=a.seed + rank) as model:
        saves: list[str] = []
        save = model.save
        model.save = lambda path: (saves.append(str(path)), save(path))[1]  # type: ignore[method-assign]
        dp = DataParallel(model, used)
        if a.load is not None:
            dp.load(a.load)
        record: dict[str, np.ndarray] = {}
        losses = []
        for step in range(a.first, a.first + a.steps):
            x, labels = batch(step, a.per_rank * size, np.dtype(a.dtype))
            if a.same_shards:
                x, labels = x[: a.per_rank], labels[: a.per_rank]
            else:
                x, labels = dp.shard(x), dp.shard(labels)
            before = model.params
            try:
                losses.append(dp.train_step(x, labels))
            except LibraryError as e:
                return failed(a.out, comm, model, before, step, e)
            if a.save_at is not None and step + 1 - a.first == a.save_at:
                dp.save(a.checkpoint)
                record["checkpoint_there"] = np.array(a.checkpoint.exists())
        record["saves"] = np.array(len(saves))
        record["losses"] = np.array(losses)
        record.update(model.params)
        save(a.out / f"rank{rank}.safetensors")
        write(a.out, rank, record)
    return 0


def failed(
    out: Path,
    comm: MpiCommunicator,
    model: dlvm.Model,
    before: dict[str, np.ndarray],
    step: int,
    error: LibraryError,
) -> int:
    """Records the model after the failed step and before it, then ends the job."""
    rank = comm.rank
    print(f"rank {rank}: step {step} failed: {error}; cause: {error.__cause__!r}", file=sys.stderr)
    model.save(out / f"rank{rank}.safetensors")
    record = {"failed_at": np.array(step), **model.params}
    record.update({f"before.{name}": value for name, value in before.items()})
    write(out, rank, record)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # MPI_Abort ends every rank: let them all record first
        if all((out / f"rank{r}.npz").exists() for r in range(comm.size)):
            break
        time.sleep(0.05)
    sys.stderr.flush()
    comm.abort(1)
    return 1


if __name__ == "__main__":
    sys.exit(main())
