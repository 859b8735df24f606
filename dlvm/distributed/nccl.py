"""NcclCommunicator: the Communicator of processes that each drive one GPU, through NCCL as CuPy
binds it (cupy.cuda.nccl). A model on "cuda:N" hands its all-reduce hook a DeviceBuffer, which
NCCL sums in place in the GPU's memory; a host array (a model that runs its step on the CPU)
takes the slow path, copied up to the GPU and back.

Every collective is enqueued on a stream of the communicator's own and waited for by polling,
at most `timeout` seconds: NCCL never gives up by itself, so on timeout (or an error NCCL
reports while waiting) the communicator is aborted and CollectiveError raised; it refuses every
later call, since the other processes can no longer be trusted to be in step. Creating one
waits, without a time limit, until all `size` processes have joined (NCCL's ncclCommInitRank).

CuPy is imported only when a communicator is made: `pip install cupy-cuda12x` (or
cupy-cuda13x, matching the CUDA driver), which brings NCCL's library with it."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from dlvm.distributed.communicator import CollectiveError
from dlvm.loader import DeviceBuffer
from dlvm.runtime import DType

# The NCCL element type (a name in cupy.cuda.nccl) NCCL sums each float dtype as; bf16 when it
# is a number type here (ml_dtypes installed: without it dlvm.load refuses to sum its bits).
SUMMED = {
    np.dtype(np.float16): "NCCL_FLOAT16",
    np.dtype(np.float32): "NCCL_FLOAT32",
    np.dtype(np.float64): "NCCL_FLOAT64",
}
if DType.BF16.numpy.kind == "V":
    SUMMED[DType.BF16.numpy] = "NCCL_BFLOAT16"
# ncclBfloat16's value in NCCL's ABI, for a CuPy that does not name it.
NCCL_BFLOAT16 = 9


def import_cupy() -> tuple[Any, Any]:
    """cupy and cupy.cuda.nccl, or an ImportError that says what to install."""
    try:
        import cupy  # type: ignore[import-not-found,import-untyped]
        from cupy.cuda import nccl  # type: ignore[import-not-found,import-untyped]
    except ImportError as e:
        raise ImportError(
            "dlvm.distributed.nccl needs CuPy built with NCCL: pip install cupy-cuda12x (or "
            f"cupy-cuda13x, for the CUDA version of the driver) ({e})"
        ) from e
    if not getattr(nccl, "available", True):
        raise ImportError("dlvm.distributed.nccl: this CuPy was built without NCCL")
    return cupy, nccl


def nccl_type(nccl: Any, dtype: np.dtype) -> int:
    """The NCCL element type that sums `dtype` (f16, f32 or f64)."""
    name = SUMMED.get(np.dtype(dtype))
    if name is None:
        raise TypeError(
            f"NCCL sums float16, bfloat16, float32 or float64 elements here, not {dtype}"
        )
    fallback = NCCL_BFLOAT16 if name == "NCCL_BFLOAT16" else None
    value: Any = getattr(nccl, name, fallback)
    return int(value)


def _index(value: Any, what: str, low: int, high: int | None = None) -> int:
    """`value` as an int in [low, high), or a ValueError naming `what`."""
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{what} must be an int of at least {low}, got {value!r}")
    if high is not None and value >= high:
        raise ValueError(f"{what} must be below {high}, got {value}")
    return value


def _host_array(array: Any, what: str) -> np.ndarray:
    """`array` if it is a writable, C-contiguous NumPy array (summed or overwritten in place)."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"{what} takes a NumPy array or a DeviceBuffer, got {type(array).__name__}")
    if not array.flags.c_contiguous or not array.flags.writeable:
        raise ValueError(f"{what} works in place: give a writable, C-contiguous array")
    return array


class NcclCommunicator:
    """Process `rank` of `size`, on GPU `device`; the processes share `unique_id` (rank 0's
    cupy.cuda.nccl.get_unique_id(), sent to the others by any means: from_mpi uses MPI). One
    process alone needs none: NcclCommunicator(0, 1)."""

    def __init__(
        self,
        rank: int,
        size: int,
        unique_id: tuple[int, ...] | None = None,
        device: int = 0,
        timeout: float = 60.0,
    ) -> None:
        self._size = _index(size, "size", 1)
        self._rank = _index(rank, "rank", 0, size)
        self.device = _index(device, "device", 0)
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.timeout = float(timeout)
        if unique_id is None and size > 1:
            raise ValueError(
                "several processes need rank 0's unique id (cupy.cuda.nccl.get_unique_id()), "
                "or use NcclCommunicator.from_mpi"
            )
        self._cupy, self._nccl = import_cupy()
        self._broken: str | None = None
        with self._cupy.cuda.Device(self.device):
            uid = tuple(unique_id) if unique_id is not None else self._nccl.get_unique_id()
            self._comm = self._nccl.NcclCommunicator(size, uid, rank)
            self._stream = self._cupy.cuda.Stream(non_blocking=True)
            self._flag = self._cupy.zeros(1, np.float32)  # what barrier() sums

    @classmethod
    def from_mpi(cls, mpi_comm: Any, device: int = 0, timeout: float = 60.0) -> NcclCommunicator:
        """The communicator of the processes of `mpi_comm` (an mpi4py communicator), rank for
        rank: rank 0 makes the unique id and broadcasts it over MPI."""
        rank, size = mpi_comm.Get_rank(), mpi_comm.Get_size()
        try:  # every rank, before any waits in NCCL for a rank that cannot come
            import_cupy()
            missing = None
        except ImportError as e:
            missing = e
        failed = mpi_comm.allreduce(0 if missing is None else 1)
        if missing is not None:
            raise missing
        if failed:
            raise CollectiveError(f"{failed} of the {size} processes cannot import CuPy with NCCL")
        unique_id = mpi_comm.bcast(import_cupy()[1].get_unique_id() if rank == 0 else None)
        return cls(rank, size, unique_id, device, timeout)

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def size(self) -> int:
        return self._size

    def allreduce(self, buffer: np.ndarray | DeviceBuffer) -> None:
        """Sums `buffer` in place across the processes (f16, bf16, f32 or f64 elements). A
        host array is the slow path: copied to the GPU, summed there and copied back."""
        if isinstance(buffer, DeviceBuffer):
            if buffer.device != self.device:
                raise ValueError(
                    f"{buffer!r} is not on this communicator's GPU (cuda:{self.device})"
                )
            self._sum(buffer.pointer, buffer.count, np.dtype(buffer.dtype))
            return
        array = _host_array(buffer, "allreduce")
        # CuPy has no bf16: its bits travel as uint16, and NCCL sums them as bf16.
        bits = array.view(np.uint16) if array.dtype.kind == "V" else array
        with self._cupy.cuda.Device(self.device), self._stream:
            on_gpu = self._cupy.asarray(bits)
            self._sum(on_gpu.data.ptr, array.size, array.dtype)
            bits[...] = on_gpu.get()

    def broadcast(self, array: np.ndarray, root: int = 0) -> None:
        """Overwrites `array` (host memory, any dtype) with rank `root`'s, through the GPU."""
        array = _host_array(array, "broadcast")
        root = _index(root, "root", 0, self._size)
        raw = array.reshape(-1).view(np.uint8)
        if raw.size == 0:
            return
        with self._cupy.cuda.Device(self.device), self._stream:
            on_gpu = self._cupy.asarray(raw)
            self._run("broadcast", "bcast", on_gpu.data.ptr, raw.size, self._nccl.NCCL_UINT8, root)
            raw[...] = on_gpu.get()

    def barrier(self) -> None:
        """Returns once every process has called it (a sum of one element)."""
        with self._cupy.cuda.Device(self.device):
            self._sum(self._flag.data.ptr, 1, np.dtype(np.float32))

    def close(self) -> None:
        """Frees NCCL's resources (once); later collectives raise CollectiveError."""
        if self._broken is None:
            self._broken = "it was closed"
            self._comm.destroy()

    def __enter__(self) -> NcclCommunicator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _sum(self, pointer: int, count: int, dtype: np.dtype) -> None:
        kind = nccl_type(self._nccl, dtype)
        with self._cupy.cuda.Device(self.device):
            self._run("all-reduce", "allReduce", pointer, pointer, count, kind,
                      self._nccl.NCCL_SUM)  # fmt: skip

    def _run(self, what: str, method: str, *args: Any) -> None:
        """NCCL's `method` on `args` and this stream, then waited for at most `timeout`."""
        if self._broken is not None:
            raise CollectiveError(f"NCCL {what} refused on rank {self._rank}: {self._broken}")
        errors = (self._nccl.NcclError, self._cupy.cuda.runtime.CUDARuntimeError)
        try:
            getattr(self._comm, method)(*args, self._stream.ptr)
            done = self._stream.record()
        except errors as e:
            raise self._aborted(f"the {what} failed: {e}") from e
        deadline = time.monotonic() + self.timeout
        pause = 0.0
        while True:
            try:
                if done.done:
                    return
                self._comm.check_async_error()
            except errors as e:
                raise self._aborted(f"the {what} failed: {e}") from e
            if time.monotonic() > deadline:
                raise self._aborted(f"the {what} did not finish within {self.timeout:g} s")
            time.sleep(pause)  # a short sum is done in microseconds, a stuck one never
            pause = min(2 * pause + 1e-5, 1e-3)

    def _aborted(self, why: str) -> CollectiveError:
        """Aborts the communicator (every later call is refused); the error to raise."""
        self._broken = f"{why}; the communicator was aborted (stop the job)"
        self._comm.abort()
        return CollectiveError(f"NCCL on rank {self._rank} of {self._size}: {self._broken}")
