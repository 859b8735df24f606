"""dlvm.load: a shipped model library (docs/c-abi.md) opened with ctypes, with one method per
entry point that takes and returns NumPy arrays checked against the library's manifest. Needs
only ctypes and NumPy: no llvmlite and no C compiler."""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import os
import re
import struct
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from dlvm.library_check import Refused, check_library
from dlvm.runtime import (
    AllreduceFn,
    DLDataType,
    DLDevice,
    DLDeviceType,
    DLTensor,
    DType,
    Status,
)

ABI_VERSION = 1


class LibraryError(RuntimeError):
    """A non-OK status from a model library (a Status, or the int a library made up), with its
    dlrt_last_error() message."""

    def __init__(self, status: int, message: str) -> None:
        try:
            self.status: int = Status(status)
            name = Status(status).name
        except ValueError:
            self.status, name = status, f"status {status}"
        self.message = message
        super().__init__(f"{message} [{name}]")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (int(self.status), self.message))


class DeviceBuffer:
    """What an all-reduce hook is given for a model on a GPU: `count` elements of `dtype` at
    device address `pointer` of GPU `device` (for NCCL, CuPy or PyTorch to sum in place)."""

    def __init__(self, pointer: int, count: int, dtype: np.dtype, device: int) -> None:
        self.pointer, self.count, self.dtype, self.device = pointer, count, dtype, device

    def __repr__(self) -> str:
        where = f"{self.pointer:#x} on cuda:{self.device}"
        return f"DeviceBuffer({self.count} x {self.dtype} at {where})"


# A model's all-reduce hook in Python: sums its argument in place across the processes (a NumPy
# array of host memory, or a DeviceBuffer), raising on failure.
AllreduceHook = Callable[["np.ndarray | DeviceBuffer"], None]


class LibraryFileError(LibraryError):
    """The library file refused before it was opened (status FORMAT): truncated or damaged, not
    for this process's machine, or not matching the digest its build wrote beside it
    (dlvm.library_check); or ld.so could not load it. `reason` says why."""

    def __init__(self, path: str, reason: str) -> None:
        self.path, self.reason = path, reason
        super().__init__(Status.FORMAT, f"{path}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.reason))


def load(
    path: str | os.PathLike[str],
    device: str = "cpu",
    seed: int = 0,
    name: str | None = None,
    verify: bool | None = None,
) -> Model:
    """Opens the model library at `path` and creates a model on `device` whose parameters are
    initialised with random stream `seed`. `name` is the model's C name (NAME of NAME_create);
    by default the one model the library exports. Before it is opened, the file is checked
    (docs/c-abi.md section 8): against the digest NAME.so.sha256 its build wrote beside it,
    when there is one (`verify=True`: there must be one; `verify=False`: not read), else for an
    intact ELF structure; LibraryFileError if it fails."""
    return Model(path, device=device, seed=seed, name=name, verify=verify)


def open_library(path: str, verify: bool | None = None) -> ctypes.CDLL:
    """The library at `path`, checked (dlvm.library_check), then opened with ctypes."""
    try:
        check_library(path, verify)
    except Refused as e:
        raise LibraryFileError(path, str(e)) from None
    try:
        return ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
    except OSError as e:
        raise LibraryFileError(path, f"ld.so cannot load it: {e}") from None


def _no_nul(text: str, what: str) -> str:
    """`text`, which the library receives as a C string: ValueError when it holds a NUL
    character, at which C would silently cut it ("x.st\0.bak" would name x.st)."""
    if "\0" in text:
        raise ValueError(f"{what} {text!r} contains a NUL character, which a C string cannot hold")
    return text


def _c_path(path: str | os.PathLike[str]) -> bytes:
    """A file name as the library's C functions take it (checked by _no_nul)."""
    return os.fsencode(_no_nul(os.fsdecode(path), "path"))


def dims(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


class Tensor:
    """An argument, output or parameter as the manifest describes it."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.name: str = doc["name"]
        self.dtype_name: str = doc["dtype"]
        self.dtype = DType.from_ir(self.dtype_name).numpy
        self.shape: tuple[int, ...] = tuple(doc["shape"])

    def __str__(self) -> str:
        return f"{self.name}: {self.dtype_name}{dims(self.shape)}"

    def convert(self, value: Any, where: str) -> np.ndarray:
        """`value` as a C-contiguous, aligned array of exactly this dtype and shape. Another
        dtype is cast when np.can_cast allows it with 'same_kind' (f64 to f32, int to float, i64
        to i32 when the values fit); anything else is a TypeError."""
        what = f"{where} '{self.name}'"
        arr = _as_array(value, what)
        if self.dtype_name == "bf16" and _bf16_bits(arr.dtype):
            arr = arr.view(self.dtype)  # numpy.save of a bfloat16 array, loaded back
        if self.dtype_name == "bf16" and arr.dtype != self.dtype and arr.dtype.kind in "biuf":
            arr = _bf16(arr, self.dtype)
        if arr.dtype != self.dtype:
            ok = arr.dtype.kind in "biuf" and np.can_cast(arr.dtype, self.dtype, "same_kind")
            if not ok:
                raise TypeError(
                    f"{what} must be {self.dtype_name}{dims(self.shape)}, got dtype {arr.dtype}"
                    f" (which does not cast to {self.dtype} without changing kind)"
                )
            if self.dtype.kind in "iu" and arr.dtype.kind in "iu" and arr.size:
                info = np.iinfo(self.dtype)
                if arr.min() < info.min or arr.max() > info.max:
                    raise ValueError(f"{what}: values do not fit in {self.dtype_name}")
        if arr.shape != self.shape:
            raise ValueError(
                f"{what} must have shape {dims(self.shape)} ({self.dtype_name}),"
                f" got {dims(arr.shape)}"
            )
        return np.require(arr, dtype=self.dtype, requirements=["C_CONTIGUOUS", "ALIGNED"])


def _bf16_bits(dtype: np.dtype) -> bool:
    """Whether `dtype` is how a .npy file holds bf16: NumPy writes an ml_dtypes.bfloat16 array
    as 2-byte opaque elements (`|V2`), the bits as they are, and reads them back so."""
    return dtype.kind == "V" and dtype.itemsize == 2 and dtype.fields is None


def _bf16(arr: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Numbers (bool, integers, floats) as bf16 elements of `dtype`: ml_dtypes.bfloat16, or
    without ml_dtypes uint16 bits, which are taken as they are (already bf16) and every other
    dtype rounded to nearest even through f32, NaN kept (quiet), as ml_dtypes rounds."""
    if dtype.kind != "u":
        return arr.astype(dtype)
    if arr.dtype == dtype:
        return arr
    # As dlvm.ir.literals.bf16_bits rounds; the loader may not import the compiler (layering).
    bits = np.ascontiguousarray(arr, np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> 16) & 1)) >> 16
    quiet_nan = (bits >> 16) | 0x40
    return np.where(np.isnan(bits.view(np.float32)), quiet_nan, rounded).astype(np.uint16)


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        layout = "" if value.flags.carray else " not C-contiguous"
        layout += "" if value.flags.writeable else " read-only"
        return f"{value.dtype}{dims(value.shape)}{layout}"
    return type(value).__name__


def _as_array(value: Any, what: str) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "__dlpack__"):
        try:
            return np.from_dlpack(value)
        except (TypeError, ValueError, RuntimeError, BufferError) as e:
            if not hasattr(value, "__array__"):
                raise TypeError(f"{what}: NumPy cannot read this DLPack array ({e})") from e
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{what}: cannot be made an array ({e})") from e
    return arr


def _pointer(arr: np.ndarray) -> int:
    # An empty array may have no storage; the library needs a non-NULL pointer all the same.
    # A ctypes view of a writable buffer gives the address in a quarter of the time of
    # arr.ctypes.data, which counts at batch 1 (a few calls per microsecond of model).
    if arr.flags.writeable and arr.size:
        try:
            return ctypes.addressof(_BYTES.from_buffer(arr))  # type: ignore[arg-type]
        except ValueError:  # ml_dtypes' bfloat16 has no buffer-protocol format
            pass
    return arr.ctypes.data or _EMPTY.ctypes.data


def _as_list(out: Any) -> list[Any]:
    return list(out) if isinstance(out, tuple) else [out]


def cuda_ordinal(value: Any) -> int | None:
    """N when value is a DLPack array in the memory of GPU N (kDLCUDA), else None."""
    device = getattr(value, "__dlpack_device__", None)
    if device is None or isinstance(value, np.ndarray):
        return None
    kind, ordinal = device()
    return int(ordinal) if kind == DLDeviceType.CUDA else None


def dlpack_type(value: Any) -> tuple[tuple[int, ...], DType]:
    """The shape and element type of a DLPack array, read from its DLTensor: nothing is copied
    or moved (for arrays in GPU memory); TypeError for an element type dlrt has not."""
    keep: list[Any] = []
    t = DLTensor.from_address(_capsule_tensor(value, keep))
    shape = tuple(int(t.shape[i]) for i in range(t.ndim))
    code = (t.dtype.code, t.dtype.bits, t.dtype.lanes)
    for dtype in DType:
        dl = DLDataType.of(dtype)
        if (dl.code, dl.bits, dl.lanes) == code:
            return shape, dtype
    raise TypeError(f"no DLVM element type for DLPack type code {code[0]} with {code[1]} bits")


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _capsule_tensor(value: Any, keep: list[Any]) -> int:
    """The address of value's DLTensor (the head of the DLManagedTensor of its capsule). The
    capsule is kept, not consumed: when it is dropped after the call, its producer's deleter
    runs as for any capsule nobody took."""
    capsule = value.__dlpack__()
    keep.append(capsule)
    pointer = _capsule_pointer(capsule, b"dltensor")
    if not pointer:
        raise TypeError(f"{type(value).__name__}.__dlpack__() did not give a DLPack capsule")
    return int(pointer)


def _host_tensor(spec: Tensor, arr: np.ndarray, keep: list[Any]) -> int:
    """A DLTensor (kDLCPU) describing a C-contiguous host array of spec's dtype and shape."""
    shape = (ctypes.c_int64 * max(1, len(spec.shape)))(*spec.shape)
    t = DLTensor(
        data=_pointer(arr),
        device=DLDevice(DLDeviceType.CPU, 0),
        ndim=len(spec.shape),
        dtype=DLDataType.of(DType.from_ir(spec.dtype_name)),
        shape=ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64)),
        strides=None,
        byte_offset=0,
    )
    keep += [arr, shape, t]
    return ctypes.addressof(t)


_EMPTY = np.zeros(8, np.uint8)
_BYTES = ctypes.c_char * 0


class Entry:
    """One entry point of a loaded model: call it with the inputs, positionally or by name;
    returns the output, or a tuple of the outputs in manifest order (a 0-d output is a NumPy
    scalar)."""

    def __init__(self, model: Model, doc: dict[str, Any]) -> None:
        self.model = model
        self.name: str = doc["name"]
        self.kind: str = doc["kind"]
        self.symbol: str = doc["symbol"]
        self.inputs = [Tensor(t) for t in doc["inputs"]]
        self.outputs = [Tensor(t) for t in doc["outputs"]]
        self._fn = model._function(self.symbol, 1 + len(self.inputs) + len(self.outputs))
        self._input_specs = [(t.dtype, t.shape) for t in self.inputs]
        self._dl_fn: Any = None  # NAME_<entry>_dl, looked up on first use
        self._output_specs = [(t.dtype, t.shape) for t in self.outputs]
        self._into = self._direct_into()
        self.__doc__ = f"{self.signature} ({self.kind} entry of model '{model.name}')"

    @property
    def signature(self) -> str:
        ins = ", ".join(str(t) for t in self.inputs)
        outs = ", ".join(str(t) for t in self.outputs) or "()"
        return f"{self.name}({ins}) -> {outs}"

    def __repr__(self) -> str:
        return f"<dlvm entry {self.signature}>"

    def __call__(self, *args: Any, out: Any = None, **kwargs: Any) -> Any:
        """`out`: an array (one output) or a tuple of arrays (several) of exactly the outputs'
        dtypes and shapes, C-contiguous and writable, overlapping no input, that receive the
        results and are returned; by default new arrays are made."""
        # The hot path of a small model (batch-1 latency): about 1.5 µs of Python around the
        # call, so it avoids comprehensions and helper calls where a plain loop will do; and
        # arrays of exactly the entry's types into an array `out` take _into's 0.3 µs.
        if type(out) is np.ndarray and not kwargs and self._into is not None:
            done = self._into(args, out)
            if done is not None:
                return done
        if kwargs or len(args) != len(self.inputs):
            args = tuple(self._bind(args, kwargs))
        for v in args:
            if type(v) is not np.ndarray and cuda_ordinal(v) is not None:
                return self._call_dl(args, out)
        if (out is not None and type(out) is not np.ndarray
                and any(cuda_ordinal(o) is not None for o in _as_list(out))):  # fmt: skip
            return self._call_dl(args, out)
        arrays = list(args)  # holds converted arrays alive until the call returns
        pointers = []
        for i, (dtype, shape) in enumerate(self._input_specs):
            v = args[i]
            if not (type(v) is np.ndarray and v.dtype == dtype and v.shape == shape
                    and v.flags.carray):  # fmt: skip
                v = arrays[i] = self.inputs[i].convert(v, f"{self.model.name}.{self.name}: input")
            pointers.append(_pointer(v))
        if out is None:
            outs = [np.empty(shape, dtype) for dtype, shape in self._output_specs]
            self.model._call(self._fn, *pointers, *[_pointer(o) for o in outs])
            if len(outs) == 1:
                return outs[0][()] if outs[0].ndim == 0 else outs[0]
            return tuple(o[()] if o.ndim == 0 else o for o in outs) if outs else None
        if len(self._output_specs) == 1 and type(out) is np.ndarray:
            dtype, shape = self._output_specs[0]
            flags = out.flags
            if out.dtype == dtype and out.shape == shape and flags.carray and flags.writeable:
                q = _pointer(out)
                size = out.nbytes
                for a, p in zip(arrays, pointers):
                    if p < q + size and q < p + a.nbytes and a.nbytes and size:
                        self._check_overlap(arrays, pointers, [out], [q])  # raises
                self.model._call(self._fn, *pointers, q)
                return out
        outs = self._given_outputs(out)
        out_pointers = [_pointer(o) for o in outs]
        self._check_overlap(arrays, pointers, outs, out_pointers)
        self.model._call(self._fn, *pointers, *out_pointers)
        return out

    def direct(self) -> Callable[..., Any]:
        """This entry as a function of NumPy arrays, for the least Python around the call:
        C-contiguous writable arrays of exactly the inputs' dtypes and shapes go straight to
        the library and the one output comes back new; anything else takes the full call,
        which converts or refuses it. It skips conversion, never the bounds: the library reads
        as many bytes as each input's shape says, so each shape and dtype is compared."""
        return self._direct(checked=True)

    def unsafe_direct(self) -> Callable[..., Any]:
        """`direct()` without its dtype and shape checks, for a caller that made them: NNKit's
        JIT, whose signature key is each array's exact type, dtype and shape (0.2 µs a call).
        Unsafe: an array of another dtype or shape is read or written out of bounds."""
        return self._direct(checked=False)

    def _direct(self, checked: bool) -> Callable[..., Any]:
        specs = self._output_specs
        sizes = [int(np.prod(shape)) for _, shape in self._input_specs + specs]
        if len(specs) != 1 or not specs[0][1] or not all(sizes):
            return self  # several, 0-d or empty tensors: the general path
        ((dtype, shape),) = specs
        shapes = [s for _, s in self._input_specs]
        dtypes = [np.dtype(d) for d, _ in self._input_specs]
        count = len(shapes)
        model, fn, full, lock = self.model, self._fn, self, self.model._lock
        addressof, view, empty, ndarray = ctypes.addressof, _BYTES.from_buffer, np.empty, np.ndarray

        def call(*args: Any) -> Any:
            pointers = []
            if not checked:
                for a in args:
                    if not a.flags.carray:  # C-contiguous, aligned and writable
                        return full(*args)
                    pointers.append(addressof(view(a)))
            elif len(args) != count:
                return full(*args)
            else:
                i = 0  # a counter, not zip or enumerate: 0.1 µs less per call at batch 1
                for a in args:
                    # An equal dtype that is not the same object (one with metadata, say) is
                    # rare enough to take the full call.
                    if (type(a) is not ndarray or a.shape != shapes[i] or a.dtype is not dtypes[i]
                            or not a.flags.carray):  # fmt: skip
                        return full(*args)
                    pointers.append(addressof(view(a)))  # type: ignore[arg-type]
                    i += 1  # noqa: SIM113
            result = empty(shape, dtype)
            with lock:
                if model._handle is None:
                    return full(*args)  # raises the closed model's error
                status = fn(model._handle, *pointers, addressof(view(result)))  # type: ignore[arg-type]
            if status:
                model._check(status)
            return result

        return call

    def _direct_into(self) -> Callable[[Sequence[Any], np.ndarray], Any] | None:
        """For __call__: a function of (inputs, out) that calls the entry when each input and
        `out` is a C-contiguous writable NumPy array of exactly its dtype and shape and `out`
        overlaps no input, and returns out; else None, for the full call to convert or refuse
        them. None itself where the entry has not one output, or has an empty or bf16 tensor
        (no buffer to view, so no quick address)."""
        tensors = self.inputs + self.outputs
        if len(self.outputs) != 1 or any(
            not math.prod(t.shape) or t.dtype_name == "bf16" for t in tensors
        ):
            return None
        specs = [(np.dtype(t.dtype), t.shape) for t in self.inputs]
        ((dtype, shape),) = [(np.dtype(t.dtype), t.shape) for t in self.outputs]
        count, model, fn, lock = len(specs), self.model, self._fn, self.model._lock
        addressof, view, ndarray = ctypes.addressof, _BYTES.from_buffer, np.ndarray

        def into(args: Sequence[Any], out: np.ndarray) -> Any:
            if len(args) != count or out.shape != shape or out.dtype is not dtype:
                return None
            if not out.flags.carray:  # C-contiguous, aligned and writable
                return None
            q = addressof(view(out))  # type: ignore[arg-type]
            end = q + out.nbytes
            pointers = []
            i = 0  # a counter, not zip or enumerate, as in _direct
            for a in args:
                if (type(a) is not ndarray or a.shape != specs[i][1] or a.dtype is not specs[i][0]
                        or not a.flags.carray):  # fmt: skip
                    return None
                p = addressof(view(a))  # type: ignore[arg-type]
                if p < end and q < p + a.nbytes:
                    return None  # overlapping: the full call says so
                pointers.append(p)
                i += 1  # noqa: SIM113
            with lock:
                if model._handle is None:
                    return None  # the full call raises the closed model's error
                status = fn(model._handle, *pointers, q)
            if status:
                model._check(status)
            return out

        return into

    def _call_dl(self, args: Sequence[Any], out: Any) -> Any:
        """The call through NAME_<entry>_dl, for arguments in GPU memory (DLPack kDLCUDA, such
        as CuPy or PyTorch CUDA arrays), which the library reads and writes in place; the other
        arguments are NumPy arrays in host memory as usual. Outputs not given by `out=` come
        back as NumPy arrays."""
        keep: list[Any] = []  # what the DLTensors point into, alive until the call returns
        tensors = []
        where = f"{self.model.name}.{self.name}"
        for t, v in zip(self.inputs, args):
            if cuda_ordinal(v) is not None:
                tensors.append(_capsule_tensor(v, keep))
            else:
                tensors.append(_host_tensor(t, t.convert(v, f"{where}: input"), keep))
        given = _as_list(out) if out is not None else [None] * len(self.outputs)
        if len(given) != len(self.outputs):
            self._given_outputs(out)  # raises the usual message
        results = []
        for t, o in zip(self.outputs, given):
            if o is None:
                o = np.empty(t.shape, t.dtype)
            elif cuda_ordinal(o) is None:
                self._check_output(t, o)
            results.append(o)
            if cuda_ordinal(o) is not None:
                tensors.append(_capsule_tensor(o, keep))
            else:
                tensors.append(_host_tensor(t, o, keep))
        if self._dl_fn is None:
            self._dl_fn = self.model._function(self.symbol + "_dl", 2)
        table = (ctypes.c_void_p * max(1, len(tensors)))(*tensors)
        self.model._call(self._dl_fn, table)
        if out is not None:
            return out
        if len(results) == 1:
            return results[0][()] if results[0].ndim == 0 else results[0]
        return tuple(r[()] if r.ndim == 0 else r for r in results) if results else None

    def _given_outputs(self, out: Any) -> list[np.ndarray]:
        given = list(out) if isinstance(out, tuple) else [out]
        if len(given) != len(self.outputs):
            raise TypeError(
                f"{self.model.name}.{self.name}(): out= needs {len(self.outputs)} array(s)"
                f" ({', '.join(str(t) for t in self.outputs) or 'none'}), got {len(given)}"
            )
        for t, o in zip(self.outputs, given):
            self._check_output(t, o)
        return given

    def _check_output(self, t: Tensor, o: Any) -> None:
        ok = (isinstance(o, np.ndarray) and o.dtype == t.dtype and o.shape == t.shape
              and o.flags.carray and o.flags.writeable)  # fmt: skip
        if not ok:
            raise TypeError(
                f"{self.model.name}.{self.name}(): out '{t.name}' must be a writable"
                f" C-contiguous {t.dtype_name}{dims(t.shape)} array, got {_describe(o)}"
            )

    def _check_overlap(
        self, arrays: list[np.ndarray], pointers: list[int], outs: list[np.ndarray],
        out_pointers: list[int],
    ) -> None:  # fmt: skip
        """Each output's bytes must be its own: the library reads inputs while it writes."""
        spans = [(p, p + a.nbytes) for a, p in zip(arrays, pointers) if a.nbytes]
        for i, (o, q) in enumerate(zip(outs, out_pointers)):
            if not o.nbytes:
                continue
            others = spans + [(p, p + x.nbytes) for j, (x, p) in enumerate(zip(outs, out_pointers))
                              if j != i and x.nbytes]  # fmt: skip
            if any(lo < q + o.nbytes and q < hi for lo, hi in others):
                raise ValueError(
                    f"{self.model.name}.{self.name}(): out '{self.outputs[i].name}' overlaps"
                    " an input or another output"
                )

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        names = [t.name for t in self.inputs]
        listed = ", ".join(names) or "none"
        if len(args) > len(names):
            raise TypeError(
                f"{self.model.name}.{self.name}() takes {len(names)} input(s) ({listed}),"
                f" got {len(args)}"
            )
        values = dict(zip(names, args))
        for key, value in kwargs.items():
            if key not in names:
                raise TypeError(
                    f"{self.model.name}.{self.name}() has no input '{key}' (inputs: {listed})"
                )
            if key in values:
                raise TypeError(
                    f"{self.model.name}.{self.name}() got input '{key}' by position and by name"
                )
            values[key] = value
        missing = [n for n in names if n not in values]
        if missing:
            raise TypeError(
                f"{self.model.name}.{self.name}() is missing input(s) "
                + ", ".join(f"'{n}'" for n in missing)
                + f" (inputs: {listed})"
            )
        return [values[n] for n in names]


class Model:
    """A model created from a shipped library (see `load`). Each entry point is a method named
    after it (and always reachable as `model.entries[name]`). One call at a time: calls from
    several threads are serialised."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        device: str = "cpu",
        seed: int = 0,
        name: str | None = None,
        verify: bool | None = None,
    ) -> None:
        self._handle: ctypes.c_void_p | None = None
        self._lock = threading.RLock()
        self.path = os.path.abspath(os.fspath(path))
        self.device = device
        self.seed = seed
        if not isinstance(device, str):
            raise TypeError(f"device must be a string such as 'cpu', got {device!r}")
        if not isinstance(seed, int) or not 0 <= seed < 2**64:
            raise ValueError(f"seed must be an integer in [0, 2**64), got {seed!r}")
        _no_nul(device, "device")
        _no_nul(self.path, "library path")
        if name is not None:
            _no_nul(name, "model name")
        self._lib = open_library(self.path, verify)
        self.c_name = name if name is not None else library_name(self._lib, self.path)
        self._last_error = self._lookup("dlrt_last_error")
        self._last_error.restype = ctypes.c_char_p
        self._last_error.argtypes = []
        manifest = self._symbol("manifest")
        manifest.restype = ctypes.c_char_p
        manifest.argtypes = []
        try:
            self.manifest: dict[str, Any] = json.loads(manifest().decode("utf-8"))
        except ValueError as e:  # not UTF-8, or not JSON
            raise LibraryFileError(self.path, f"its manifest is damaged ({e})") from None
        if self.manifest.get("abi") != ABI_VERSION:
            raise ValueError(
                f"{self.path}: library ABI {self.manifest.get('abi')!r} is not supported"
                f" (this dlvm reads ABI {ABI_VERSION})"
            )
        self.name: str = self.manifest["name"]
        self.param_specs = {p["name"]: Tensor(p) for p in self.manifest["params"]}
        self._destroy = self._symbol("destroy")
        self._destroy.restype = None
        self._destroy.argtypes = [ctypes.c_void_p]
        create = self._symbol("create")
        create.restype = ctypes.c_int32
        create.argtypes = [ctypes.c_char_p, ctypes.c_uint64, ctypes.POINTER(ctypes.c_void_p)]
        self._save = self._function(self.c_name + "_save", 2)
        self._load = self._function(self.c_name + "_load", 2)
        self._get_param = self._function(self.c_name + "_get_param", 3)
        self._set_param = self._function(self.c_name + "_set_param", 3)
        self._set_allreduce = self._lookup(self.c_name + "_set_allreduce")
        self._set_allreduce.restype = ctypes.c_int32
        self._set_allreduce.argtypes = [
            ctypes.c_void_p, AllreduceFn, ctypes.c_void_p, ctypes.c_int32
        ]  # fmt: skip
        self._hook: Any = None  # the ctypes callback the library holds, kept alive here
        self._hook_error: BaseException | None = None
        self.entries = {e["name"]: Entry(self, e) for e in self.manifest["entries"]}
        handle = ctypes.c_void_p()
        self._check(create(device.encode("utf-8"), seed, ctypes.byref(handle)))
        self._handle = handle
        for entry_name, entry in self.entries.items():
            if entry_name.isidentifier() and not hasattr(self, entry_name):
                setattr(self, entry_name, entry)

    # -- the C calls --

    def _symbol(self, suffix: str) -> Any:
        return self._lookup(f"{self.c_name}_{suffix}")

    def _lookup(self, symbol: str) -> Any:
        try:
            return self._lib[symbol]
        except AttributeError:
            raise ValueError(
                f"{self.path} has no function {symbol}: not the library of a model"
                f" named '{self.c_name}'"
            ) from None

    def _function(self, symbol: str, n_args: int) -> Any:
        fn = self._lookup(symbol)
        fn.restype = ctypes.c_int32
        fn.argtypes = [ctypes.c_void_p] * n_args
        return fn

    def _check(self, status: int) -> None:
        if status != 0:
            error = LibraryError(status, self._last_error().decode("utf-8", "replace"))
            cause, self._hook_error = self._hook_error, None
            raise error from cause

    def _call(self, fn: Any, *args: Any) -> None:
        with self._lock:
            if self._handle is None:
                raise ValueError(f"model '{self.name}' is closed")
            status = fn(self._handle, *args)
        self._check(status)  # the last error is the calling thread's: no lock needed

    # -- parameters and checkpoints --

    @property
    def params(self) -> dict[str, np.ndarray]:
        """A copy of every parameter, by name, in manifest order."""
        return {n: self.get_param(n) for n in self.param_specs}

    def _param(self, name: str) -> Tensor:
        _no_nul(name, "parameter name")
        if name not in self.param_specs:
            known = ", ".join(self.param_specs) or "none"
            raise ValueError(f"model '{self.name}' has no parameter '{name}' (known: {known})")
        return self.param_specs[name]

    def get_param(self, name: str) -> np.ndarray:
        spec = self._param(name)
        out = np.empty(spec.shape, spec.dtype)
        self._call(self._get_param, name.encode("utf-8"), _pointer(out))
        return out

    def set_param(self, name: str, value: Any) -> None:
        arr = self._param(name).convert(value, f"{self.name}.set_param: parameter")
        self._call(self._set_param, name.encode("utf-8"), _pointer(arr))

    def save(self, path: str | os.PathLike[str]) -> None:
        """Writes the parameters, optimiser state and step count (safetensors, atomically)."""
        self._call(self._save, _c_path(path))

    def load(self, path: str | os.PathLike[str]) -> None:
        """Reads a checkpoint written by `save`; on error the model is unchanged."""
        self._call(self._load, _c_path(path))

    # -- data-parallel training --

    def set_allreduce(self, hook: AllreduceHook | None, ranks: int = 1) -> None:
        """Makes each train step sum its loss, gradients and float buffers across `ranks`
        processes by calling `hook` on them (a 1-D NumPy array over host memory, or a
        DeviceBuffer for a model on a GPU), then apply the optimiser to the means
        (docs/distributed.md); None removes it. The library must be built with
        --distributed. An exception in the hook fails the step, which changes nothing, with
        a LibraryError (status COLLECTIVE) raised from it."""
        if hook is None:
            self._call(self._set_allreduce, AllreduceFn(), None, 0)
            self._hook = None
            return
        if not callable(hook):
            raise TypeError(f"the all-reduce hook must be callable, got {_describe(hook)}")
        if not isinstance(ranks, int) or isinstance(ranks, bool) or not 1 <= ranks < 2**31:
            raise ValueError(f"ranks must be the number of processes (at least 1), got {ranks!r}")

        def call(_ctx: Any, pointer: int, count: int, dtype: int, device: DLDevice) -> int:
            try:
                kind = DType(dtype).numpy
                if kind.kind not in "fV":  # bf16 as uint16 bits: a sum of them would be wrong
                    raise TypeError(
                        f"{self.name}: the model's gradients are {DType(dtype).ir_name}, which"
                        " the all-reduce can only sum as numbers with ml_dtypes installed"
                        " (pip install 'telc[bf16]')"
                    )
                if device.device_type == DLDeviceType.CUDA:
                    hook(DeviceBuffer(pointer, count, kind, device.device_id))
                else:
                    buffer = (ctypes.c_char * (count * kind.itemsize)).from_address(pointer)
                    hook(np.frombuffer(memoryview(buffer), kind, count))
                return 0
            except BaseException as e:  # noqa: BLE001 - it goes back to the caller of the step
                self._hook_error = e
                return 1

        callback = AllreduceFn(call)
        self._call(self._set_allreduce, callback, None, ranks)
        self._hook = callback

    # -- lifetime --

    def close(self) -> None:
        """Frees the model (once); later calls raise ValueError."""
        with self._lock:
            if self._handle is not None:
                self._destroy(self._handle)
                self._handle = None

    @property
    def closed(self) -> bool:
        return self._handle is None

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else self.device
        lines = [f"<dlvm.Model '{self.name}' from {self.path} ({state}, seed {self.seed})"]
        lines += [f"  {e.signature}  ({e.kind})" for e in self.entries.values()]
        params = ", ".join(str(p) for p in self.param_specs.values())
        lines.append(f"  params {params or '(none)'}>")
        return "\n".join(lines)


def library_name(lib: ctypes.CDLL, path: str) -> str:
    """The NAME of the one model that library `path` exports: the prefix P of the P_manifest,
    P_create and P_destroy functions of its ELF dynamic symbol table; where that cannot be read
    (not ELF, no section headers), the file stem (without "lib") made a C identifier."""
    symbols = elf_exported_functions(path) or []
    found = set(symbols)
    names = sorted(
        s[: -len("_manifest")]
        for s in symbols
        if s.endswith("_manifest")
        and {s[: -len("manifest")] + x for x in ("create", "destroy")} <= found
    )
    if len(names) > 1:
        raise ValueError(f"{path} exports several models ({', '.join(names)}); pass name=")
    if names:
        return names[0]
    stem = re.sub(r"[^A-Za-z0-9_]", "_", os.path.basename(path).split(".")[0])
    for candidate in [stem, *([stem[3:]] if stem.startswith("lib") else [])]:
        with contextlib.suppress(AttributeError):
            lib[candidate + "_manifest"]
            return candidate
    raise ValueError(f"{path} is not a dlvm model library (no NAME_manifest function found)")


def elf_exported_functions(path: str) -> list[str] | None:
    """The defined global functions of the ELF file's dynamic symbol table, or None when the
    file is not ELF."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF":
        return None
    try:
        return _dynamic_functions(data)
    except (struct.error, IndexError, ValueError):
        return None


def _dynamic_functions(data: bytes) -> list[str]:
    wide = data[4] == 2
    end = "<" if data[5] == 1 else ">"
    if wide:
        (shoff,) = struct.unpack_from(end + "Q", data, 0x28)
        shentsize, shnum = struct.unpack_from(end + "HH", data, 0x3A)
        section, symbol = end + "IIQQQQIIQQ", end + "IBBHQQ"
    else:
        (shoff,) = struct.unpack_from(end + "I", data, 0x20)
        shentsize, shnum = struct.unpack_from(end + "HH", data, 0x2E)
        section, symbol = end + "IIIIIIIIII", end + "IIIBBH"
    sections = [struct.unpack_from(section, data, shoff + i * shentsize) for i in range(shnum)]
    names = []
    for sh in sections:
        if sh[1] != 11:  # SHT_DYNSYM
            continue
        strings = sections[sh[6]][4]
        for off in range(sh[4], sh[4] + sh[5], sh[9]):
            fields = struct.unpack_from(symbol, data, off)
            if wide:
                name, info, shndx = fields[0], fields[1], fields[3]
            else:
                name, info, shndx = fields[0], fields[3], fields[5]
            binding, kind = info >> 4, info & 0xF
            if shndx == 0 or binding not in (1, 2) or kind != 2:  # defined GLOBAL/WEAK FUNC
                continue
            start = strings + name
            names.append(data[start : data.index(b"\0", start)].decode("utf-8", "replace"))
    return names
