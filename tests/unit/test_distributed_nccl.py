"""NcclCommunicator where there is neither a GPU nor CuPy: a stand-in for the part of CuPy it
uses (FakeCupy, installed in sys.modules) whose NCCL "sums" across `size` equal ranks by
multiplying in place at the address it is given (a host address here), and whose streams
finish at once, never, or with an asynchronous NCCL error. What it checks is ours: the
arguments, the element types, the host arrays' round trip, the bounded wait, the abort and
the refusal after it, from_mpi's exchange. tests/gpu/test_distributed_gpu.py runs the real
thing."""

from __future__ import annotations

import ctypes
import sys
from types import SimpleNamespace

import ml_dtypes
import numpy as np
import pytest
import test_distributed_cuda
from test_cuda_library import XOR_LABELS, XOR_X, fresh_copy

import dlvm
from dlvm.distributed.communicator import CollectiveError
from dlvm.distributed.nccl import NcclCommunicator, nccl_type
from dlvm.loader import DeviceBuffer

fake_driver = test_distributed_cuda.fake_driver
on_fake_gpu = test_distributed_cuda.on_fake_gpu
xor = test_distributed_cuda.xor

BF16 = np.dtype(ml_dtypes.bfloat16)
TYPES = {0: np.int8, 1: np.uint8, 6: np.float16, 7: np.float32, 8: np.float64, 9: BF16}


class NcclError(RuntimeError):
    pass


class CUDARuntimeError(RuntimeError):
    pass


class FakeComm:
    """cupy.cuda.nccl.NcclCommunicator over `size` ranks holding the same values."""

    def __init__(self, size: int, unique_id: tuple[int, ...], rank: int) -> None:
        self.size, self.unique_id, self.rank = size, unique_id, rank
        self.calls: list[tuple] = []
        self.async_error: str | None = None
        self.aborted = self.destroyed = False

    def allReduce(self, send, recv, count, dtype, op, stream) -> None:  # noqa: N802 (CuPy's)
        assert send == recv and op == 0
        self.calls.append(("allReduce", count, dtype, stream))
        kind = TYPES[dtype]
        raw = (ctypes.c_char * (count * np.dtype(kind).itemsize)).from_address(recv)
        np.frombuffer(memoryview(raw), kind)[:] *= self.size

    def bcast(self, buffer, count, dtype, root, stream) -> None:
        self.calls.append(("bcast", count, dtype, root, stream))
        if root != self.rank:
            ctypes.memset(buffer, 7, count)  # rank `root`'s bytes

    def check_async_error(self) -> None:
        if self.async_error is not None:
            raise NcclError(self.async_error)

    def abort(self) -> None:
        self.aborted = True

    def destroy(self) -> None:
        self.destroyed = True


class FakeArray:
    """A cupy.ndarray: a copy of a host array, at its (host) address."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = np.array(array)
        self.size = self.array.size
        self.data = SimpleNamespace(ptr=self.array.ctypes.data)

    def get(self) -> np.ndarray:
        return self.array.copy()


class FakeStream:
    """A stream whose work is done when recorded (`finishes`), or never."""

    finishes = True

    def __init__(self, non_blocking: bool = False) -> None:
        assert non_blocking, "NCCL's stream must not wait for the legacy default stream"
        self.ptr = 0x5712EA

    def record(self) -> SimpleNamespace:
        return SimpleNamespace(done=FakeStream.finishes)

    def __enter__(self) -> FakeStream:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class FakeDevice:
    def __init__(self, ordinal: int) -> None:
        self.ordinal = ordinal

    def __enter__(self) -> FakeDevice:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def fake_cupy() -> SimpleNamespace:
    communicators: list[FakeComm] = []

    def communicator(size, unique_id, rank):
        communicators.append(FakeComm(size, unique_id, rank))
        return communicators[-1]

    nccl = SimpleNamespace(
        available=True, NCCL_INT8=0, NCCL_UINT8=1, NCCL_FLOAT16=6, NCCL_FLOAT32=7,
        NCCL_FLOAT64=8, NCCL_SUM=0, NcclError=NcclError, NcclCommunicator=communicator,
        get_unique_id=lambda: tuple(range(128)),
    )  # fmt: skip
    cuda = SimpleNamespace(
        Device=FakeDevice, Stream=FakeStream, nccl=nccl,
        runtime=SimpleNamespace(CUDARuntimeError=CUDARuntimeError),
    )  # fmt: skip
    return SimpleNamespace(
        cuda=cuda, asarray=FakeArray, zeros=lambda n, dtype: FakeArray(np.zeros(n, dtype)),
        communicators=communicators,
    )  # fmt: skip


@pytest.fixture
def cupy(monkeypatch):
    """The stand-in CuPy, importable as cupy and cupy.cuda.nccl."""
    fake = fake_cupy()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setitem(sys.modules, "cupy.cuda", fake.cuda)
    monkeypatch.setitem(sys.modules, "cupy.cuda.nccl", fake.cuda.nccl)
    monkeypatch.setattr(FakeStream, "finishes", True)
    return fake


def device_buffer(array: np.ndarray, device: int = 0) -> DeviceBuffer:
    return DeviceBuffer(array.ctypes.data, array.size, array.dtype, device)


def test_floats_are_summed_as_their_own_nccl_type(cupy):
    nccl = cupy.cuda.nccl
    kinds = (np.float16, np.float32, np.float64, BF16)
    # bf16 is ncclBfloat16 (9), which this stand-in CuPy, like some real ones, does not name.
    assert [nccl_type(nccl, np.dtype(t)) for t in kinds] == [6, 7, 8, 9]
    with pytest.raises(TypeError, match="bfloat16, float32 or float64 elements here, not int32"):
        nccl_type(nccl, np.dtype(np.int32))


def test_without_cupy_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(ImportError, match="needs CuPy built with NCCL: pip install cupy-cuda12x"):
        NcclCommunicator(0, 1)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 0), "size must be an int of at least 1, got 0"),
        ((2, 2, tuple(range(128))), "rank must be below 2, got 2"),
        ((-1, 1), "rank must be an int of at least 0, got -1"),
        ((0, 2), "several processes need rank 0's unique id"),
        ((0, 1, None, -1), "device must be an int of at least 0"),
        ((0, 1, None, 0, 0.0), "timeout must be a positive number of seconds, got 0.0"),
    ],
)
def test_bad_arguments_are_refused_before_nccl_starts(cupy, args, message):
    with pytest.raises(ValueError, match=message):
        NcclCommunicator(*args)
    assert cupy.communicators == []


def test_a_device_buffer_is_summed_in_place_on_the_communicators_stream(cupy):
    comm = NcclCommunicator(1, 2, tuple(range(128)), device=0)
    assert (comm.rank, comm.size, cupy.communicators[0].unique_id) == (1, 2, tuple(range(128)))
    for dtype, kind in ((np.float16, 6), (np.float32, 7), (np.float64, 8), (BF16, 9)):
        values = np.arange(5, dtype=dtype)
        comm.allreduce(device_buffer(values))
        np.testing.assert_array_equal(values, 2 * np.arange(5))
        assert cupy.communicators[0].calls[-1] == ("allReduce", 5, kind, 0x5712EA)
    with pytest.raises(ValueError, match=r"on cuda:1\) is not on this communicator's GPU"):
        comm.allreduce(device_buffer(np.zeros(3, np.float32), device=1))
    with pytest.raises(TypeError, match="not int64"):
        comm.allreduce(device_buffer(np.zeros(3, np.int64)))


def test_host_arrays_go_through_the_gpu(cupy):
    comm = NcclCommunicator(0, 2, tuple(range(128)))
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    comm.allreduce(values)
    np.testing.assert_array_equal(values, 2 * np.arange(6).reshape(2, 3))
    halves = np.array([0.5, 1.5, 3.0], BF16)  # CuPy has no bf16: its bits go up as uint16
    comm.allreduce(halves)
    assert halves.dtype == BF16 and halves.astype(np.float32).tolist() == [1.0, 3.0, 6.0]
    assert cupy.communicators[0].calls[-1] == ("allReduce", 3, 9, 0x5712EA)
    with pytest.raises(ValueError, match="in place: give a writable, C-contiguous array"):
        comm.allreduce(values.T)
    with pytest.raises(TypeError, match="a NumPy array or a DeviceBuffer, got list"):
        comm.allreduce([1.0, 2.0])  # type: ignore[arg-type]
    ints = np.arange(3, dtype=np.int64)
    comm.broadcast(ints, root=1)  # any dtype, as bytes: rank 1's are all 7s here
    assert ints.view(np.uint8).tolist() == [7] * 24
    assert cupy.communicators[0].calls[-1] == ("bcast", 24, 1, 1, 0x5712EA)
    comm.broadcast(np.zeros(0, np.float32))  # nothing to send
    with pytest.raises(ValueError, match="root must be below 2"):
        comm.broadcast(ints, root=2)
    comm.barrier()
    assert cupy.communicators[0].calls[-1] == ("allReduce", 1, 7, 0x5712EA)


def test_a_collective_that_does_not_finish_aborts_the_communicator(cupy, monkeypatch):
    comm = NcclCommunicator(0, 2, tuple(range(128)), timeout=0.05)
    monkeypatch.setattr(FakeStream, "finishes", False)
    with pytest.raises(CollectiveError, match="all-reduce did not finish within 0.05 s"):
        comm.allreduce(np.zeros(4, np.float32))
    assert cupy.communicators[0].aborted
    with pytest.raises(CollectiveError, match="refused on rank 0: the all-reduce did not finish"):
        comm.barrier()
    comm.close()
    assert not cupy.communicators[0].destroyed  # aborting freed it already


def test_an_asynchronous_nccl_error_aborts_the_communicator(cupy, monkeypatch):
    comm = NcclCommunicator(0, 2, tuple(range(128)))
    monkeypatch.setattr(FakeStream, "finishes", False)
    cupy.communicators[0].async_error = "NCCL_ERROR_SYSTEM_ERROR: a peer went away"
    with pytest.raises(CollectiveError, match="broadcast failed: NCCL_ERROR_SYSTEM_ERROR") as e:
        comm.broadcast(np.zeros(2, np.float32))
    assert isinstance(e.value.__cause__, NcclError) and cupy.communicators[0].aborted
    monkeypatch.setattr(FakeStream, "finishes", True)
    with NcclCommunicator(0, 1) as alone:  # closing frees it
        alone.barrier()
    assert cupy.communicators[1].destroyed


class FakeMpi:
    """An mpi4py communicator of `size` processes, seen from `rank`; `others_failed` ranks
    besides this one could not import CuPy."""

    def __init__(self, rank: int, size: int, others_failed: int = 0) -> None:
        self.rank, self.size, self.others_failed = rank, size, others_failed
        self.sent: list[object] = []

    def Get_rank(self) -> int:  # noqa: N802 (mpi4py's)
        return self.rank

    def Get_size(self) -> int:  # noqa: N802 (mpi4py's)
        return self.size

    def allreduce(self, value: int) -> int:
        return value + self.others_failed

    def bcast(self, value: object, root: int = 0) -> object:
        self.sent.append(value)
        return tuple(range(128)) if self.rank != root else value


def test_from_mpi_shares_rank_0s_unique_id(cupy):
    root = NcclCommunicator.from_mpi(FakeMpi(0, 3), device=0, timeout=5)
    assert (root.rank, root.size, root.timeout) == (0, 3, 5.0)
    other = NcclCommunicator.from_mpi(FakeMpi(2, 3))
    assert other.rank == 2
    assert [c.unique_id for c in cupy.communicators] == [tuple(range(128))] * 2
    with pytest.raises(CollectiveError, match="1 of the 3 processes cannot import CuPy"):
        NcclCommunicator.from_mpi(FakeMpi(0, 3, others_failed=1))


def test_a_gpu_models_hook_is_the_communicators_allreduce(cupy, xor, on_fake_gpu, tmp_path):
    """On the stand-in driver: the step's device block, summed by the stand-in NCCL over two
    equal ranks, trains exactly as one rank without a hook."""
    library, kernels = xor
    library = fresh_copy(library, tmp_path)  # its runtime loads this module's stand-in driver
    on_fake_gpu(kernels)
    comm = NcclCommunicator(0, 2, tuple(range(128)))
    with (
        dlvm.load(library, device="cuda:0", seed=4) as plain,
        dlvm.load(library, device="cuda:0", seed=4) as gpu,
    ):
        gpu.set_allreduce(comm.allreduce, ranks=comm.size)
        for _ in range(3):
            assert gpu.train_step(XOR_X, XOR_LABELS) == plain.train_step(XOR_X, XOR_LABELS)
        for p in plain.params:
            assert np.array_equal(gpu.params[p], plain.params[p]), p
    assert [c[0] for c in cupy.communicators[0].calls] == ["allReduce"] * 3
