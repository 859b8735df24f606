"""dlvm.distributed: data-parallel training of a model library built with --distributed
(docs/distributed.md). `DataParallel` wraps a loaded model and a `Communicator`:
`MpiCommunicator` (mpi4py, host memory) or `NcclCommunicator` (NCCL through CuPy, a GPU's
memory; imported when first named, so CuPy is not needed otherwise)."""

from __future__ import annotations

import importlib
from typing import Any

from dlvm.distributed.communicator import CollectiveError, Communicator
from dlvm.distributed.mpi import MpiCommunicator
from dlvm.distributed.parallel import DataParallel, shard

__all__ = [
    "CollectiveError",
    "Communicator",
    "DataParallel",
    "MpiCommunicator",
    "NcclCommunicator",
    "shard",
]


def __getattr__(name: str) -> Any:
    if name == "NcclCommunicator":
        return importlib.import_module("dlvm.distributed.nccl").NcclCommunicator
    raise AttributeError(f"module 'dlvm.distributed' has no attribute {name!r}")
