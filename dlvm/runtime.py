"""The C runtime from Python (runtime/, docs/c-abi.md section 4): where it lives, building it into
cached object files that every shipped library links, and a ctypes mirror of dlrt.h's enums and
structs. The only module of dlvm that imports ctypes."""

from __future__ import annotations

import ctypes
import enum
import functools
import hashlib
import os
import shlex
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import numpy.typing as npt

try:
    import ml_dtypes
except ImportError:  # the optional extra `bf16`: bf16 tensors are then uint16 arrays of the bits
    ml_dtypes = None  # type: ignore[assignment]

from dlvm import artifacts
from dlvm.c_compiler import c_compiler
from dlvm.diagnostics import BuildFailure

# Flags every runtime object is compiled with (docs/c-abi.md section 4), before extra_flags.
BASE_FLAGS = ("-std=c11", "-O2", "-fPIC", "-fvisibility=hidden", "-pthread", "-Iruntime/include")

# Part of every cache key: bump it when the way objects are built or kept changes.
_CACHE_FORMAT = "dlvm-runtime-2"
# Written last in an entry: each object's SHA-256 (`sha256sum` format); an entry it does not
# vouch for is compiled again.
MANIFEST = "SHA256SUMS"


class RuntimeBuildError(BuildFailure):
    """The C compiler is missing, or it failed on the runtime; the message carries its output."""


def runtime_dir() -> Path:
    """runtime/ of this checkout (it is not installed as package data yet)."""
    return Path(__file__).resolve().parents[1] / "runtime"


def default_cache_dir() -> Path:
    """$DLVM_CACHE_DIR, else $XDG_CACHE_HOME/dlvm, else ~/.cache/dlvm (dlvm.artifacts)."""
    return artifacts.cache_dir()


@functools.cache
def compiler_identity(command: tuple[str, ...]) -> str:
    """The first line of `cc --version`: part of the cache key, so a new compiler rebuilds."""
    done = _run([*command, "--version"], cwd=None)
    if done.returncode != 0:
        raise RuntimeBuildError(
            f"the C compiler '{shlex.join(command)}' does not run: {done.stderr.strip()}"
        )
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0] if lines else ""


def build_runtime(
    cc: str | None = None,
    extra_flags: tuple[str, ...] = (),
    cache_dir: Path | None = None,
) -> list[Path]:
    """Compiles runtime/src/*.c with `cc` (default $CC, else "cc"), BASE_FLAGS and `extra_flags`,
    and returns the object files in source order. Objects are cached (dlvm.artifacts) under a
    key of the sources, headers, compiler identity and flags, and reused while the entry's
    MANIFEST vouches for every one of them; otherwise all are compiled again. Files are written
    atomically, so parallel builds do not clash. The compiler runs in runtime/'s parent
    directory with that path mapped away (-ffile-prefix-map), so objects are byte-identical
    wherever the checkout is."""
    try:
        command = c_compiler(cc)
    except ValueError as e:
        raise RuntimeBuildError(str(e)) from None
    root = runtime_dir()
    sources = sorted((root / "src").glob("*.c"))
    if not sources:
        raise RuntimeBuildError(f"no runtime sources in {root / 'src'}")
    flags = (*BASE_FLAGS, *extra_flags)
    key = _cache_key(root, sources, command, flags)
    target = (cache_dir if cache_dir is not None else default_cache_dir()) / f"runtime-{key}"
    objects = [target / f"{src.stem}.o" for src in sources]
    if _intact(target, objects):
        return objects
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RuntimeBuildError(
            f"cannot create the runtime cache {target}: {e.strerror} (set DLVM_CACHE_DIR)"
        ) from None
    # Not the C file's absolute path: one mapping for sources, __FILE__ and debug info.
    mapped = (*flags, f"-ffile-prefix-map={root.parent}=.")
    with ThreadPoolExecutor(max_workers=min(len(sources), os.cpu_count() or 1)) as pool:
        digests = list(
            pool.map(lambda job: _compile(command, mapped, root, *job), zip(sources, objects))
        )
    manifest = "".join(f"{digest}  {obj.name}\n" for digest, obj in zip(digests, objects))
    try:
        artifacts.write_atomically(target / MANIFEST, manifest.encode())
    except OSError as e:
        raise RuntimeBuildError(f"cannot write the runtime cache {target}: {e.strerror}") from None
    return objects


def _intact(target: Path, objects: list[Path]) -> bool:
    """Whether the entry's MANIFEST lists exactly `objects`, each with the bytes it has now."""
    try:
        listed: dict[str, str] = {}
        for line in (target / MANIFEST).read_text(encoding="utf-8").splitlines():
            digest, _, name = line.partition("  ")
            listed[name] = digest
        return listed.keys() == {obj.name for obj in objects} and all(
            artifacts.sha256(obj.read_bytes()) == listed[obj.name] for obj in objects
        )
    except (OSError, UnicodeDecodeError):
        return False


def _cache_key(
    root: Path, sources: list[Path], command: tuple[str, ...], flags: tuple[str, ...]
) -> str:
    """A hash of everything that decides the objects' bytes (never of where root is)."""
    digest = hashlib.sha256()

    def add(part: bytes) -> None:
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)

    add(_CACHE_FORMAT.encode())
    headers = sorted([*(root / "include").rglob("*.h"), *(root / "src").glob("*.h")])
    for path in [*sources, *headers]:
        add(path.relative_to(root).as_posix().encode())
        add(path.read_bytes())
    add(compiler_identity(command).encode())
    for part in (*command, *flags):
        add(part.encode())
    return digest.hexdigest()[:24]


def _compile(
    command: tuple[str, ...], flags: tuple[str, ...], root: Path, src: Path, obj: Path
) -> str:
    """Compiles `src` into a temporary file beside `obj`, then renames it into place; the
    SHA-256 of the bytes it compiled."""
    fd, temp = tempfile.mkstemp(dir=obj.parent, prefix=f".{obj.stem}-", suffix=".o.tmp")
    os.close(fd)
    try:
        relative = src.relative_to(root.parent).as_posix()
        done = _run([*command, *flags, "-c", relative, "-o", temp], cwd=root.parent)
        if done.returncode != 0:
            raise RuntimeBuildError(
                f"compiling the runtime's {src.name} failed ({shlex.join(command)}, "
                f"exit status {done.returncode}):\n{done.stderr.strip()}"
            )
        digest = artifacts.sha256(Path(temp).read_bytes())
        os.replace(temp, obj)
        return digest
    finally:
        if os.path.exists(temp):
            os.unlink(temp)


def _run(args: list[str], cwd: Path | None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=False)
    except OSError as e:
        raise RuntimeBuildError(f"cannot run the C compiler '{args[0]}': {e.strerror}") from None


# ---- The ctypes mirror of dlrt.h (tests/unit/test_runtime.py keeps it in step) ----


class Status(enum.IntEnum):
    """dlrt_status (DLRT_OK, DLRT_ERR_*)."""

    OK = 0
    INVALID_ARGUMENT = 1
    OUT_OF_MEMORY = 2
    DEVICE = 3
    IO = 4
    FORMAT = 5
    INTERNAL = 6
    TRAP = 7
    COLLECTIVE = 8


class DType(enum.IntEnum):
    """dlrt_dtype: the element types of tensors, named as in the IR."""

    BOOL = 0
    I8 = 1
    I16 = 2
    I32 = 3
    I64 = 4
    F16 = 5
    F32 = 6
    F64 = 7
    BF16 = 8

    @property
    def ir_name(self) -> str:
        """The IR's name of the type: "f32", "bool"…"""
        return self.name.lower()

    @property
    def numpy(self) -> np.dtype:
        """The NumPy dtype of the elements; bf16 is ml_dtypes.bfloat16 when ml_dtypes is
        installed, else uint16 (the bits)."""
        return np.dtype(_NUMPY_TYPES[self])

    @property
    def size(self) -> int:
        """Bytes per element (dlrt_dtype_size)."""
        return self.numpy.itemsize

    @classmethod
    def from_ir(cls, name: str) -> DType:
        try:
            return cls[name.upper()]
        except KeyError:
            raise ValueError(f"'{name}' is not an IR element type") from None

    @classmethod
    def from_numpy(cls, dtype: npt.DTypeLike) -> DType:
        """The DType of a NumPy dtype in native byte order; ValueError for any other."""
        wanted = np.dtype(dtype)
        for member in cls:
            if member.numpy == wanted and (member is not DType.BF16 or wanted.kind != "u"):
                return member
        raise ValueError(f"NumPy dtype {wanted.str} has no dlrt_dtype")


_NUMPY_TYPES: dict[DType, type] = {
    DType.BOOL: np.bool_,
    DType.I8: np.int8,
    DType.I16: np.int16,
    DType.I32: np.int32,
    DType.I64: np.int64,
    DType.F16: np.float16,
    DType.F32: np.float32,
    DType.F64: np.float64,
    DType.BF16: np.uint16 if ml_dtypes is None else ml_dtypes.bfloat16,
}


class DlrtTensor(ctypes.Structure):
    """dlrt_tensor: a named contiguous row-major tensor for dlrt_save and dlrt_load."""

    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_int),  # a DType
        ("rank", ctypes.c_int32),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("data", ctypes.c_void_p),
    ]


class DlrtKernel(ctypes.Structure):
    """dlrt_kernel: one kernel of a library's PTX and its launch (dlrt_cuda_open)."""

    _fields_ = [
        ("name", ctypes.c_char_p),
        ("grid", ctypes.c_uint32 * 3),
        ("block", ctypes.c_uint32 * 3),
        ("pointers", ctypes.c_int32),
    ]


class DlrtLaunch(ctypes.Structure):
    """dlrt_launch: a step of a device plan (dlrt_cuda_run)."""

    _fields_ = [("kernel", ctypes.c_int32), ("slots", ctypes.POINTER(ctypes.c_int32))]


class DlrtContext(ctypes.Structure):
    """dlrt_context: what every host function takes first (arena, random seed and counter)."""

    _fields_ = [
        ("arena", ctypes.c_void_p),
        ("seed", ctypes.c_uint64),
        ("counter", ctypes.c_uint64),
    ]


# dlrt_host: a host function called with its arguments and results as one array.
DlrtHost = ctypes.CFUNCTYPE(
    ctypes.c_int32, ctypes.POINTER(DlrtContext), ctypes.POINTER(ctypes.c_void_p)
)


class DlrtSlot(ctypes.Structure):
    """dlrt_slot: a slot of a device plan."""

    _fields_ = [
        ("argument", ctypes.c_int32),
        ("result", ctypes.c_int32),
        ("offset", ctypes.c_int64),
    ]


class DlrtPlan(ctypes.Structure):
    """dlrt_plan: an entry's device plan (its launches over slots)."""

    _fields_ = [
        ("steps", ctypes.POINTER(DlrtLaunch)),
        ("count", ctypes.c_int32),
        ("slot_count", ctypes.c_int32),
        ("slots", ctypes.POINTER(DlrtSlot)),
        ("uploads", ctypes.POINTER(ctypes.c_int32)),
        ("results", ctypes.POINTER(ctypes.c_int32)),
    ]


class DlrtEntry(ctypes.Structure):
    """dlrt_entry: an entry point of a model, as the glue describes it."""


DlrtEntry._fields_ = [
    ("name", ctypes.c_char_p),
    ("kind", ctypes.c_char_p),
    ("symbol", ctypes.c_char_p),
    ("host_name", ctypes.c_char_p),
    ("host", DlrtHost),
    ("inputs", ctypes.c_int32),
    ("outputs", ctypes.c_int32),
    ("args", ctypes.POINTER(DlrtTensor)),
    ("buffers", ctypes.c_int32),
    ("buffer", ctypes.POINTER(ctypes.c_int32)),
    ("step", ctypes.c_int32),  # a DType, or -1
    ("plan", ctypes.POINTER(DlrtPlan)),
    ("cpu", ctypes.c_char_p),
    ("grads", ctypes.POINTER(DlrtEntry)),  # the parts of a --distributed train entry
    ("apply", ctypes.POINTER(DlrtEntry)),
]


class DlrtModelCuda(ctypes.Structure):
    """dlrt_model_cuda: the kernels of a library built for CUDA."""

    _fields_ = [
        ("gpu", ctypes.c_char_p),
        ("ptx", ctypes.c_char_p),
        ("kernels", ctypes.POINTER(DlrtKernel)),
        ("count", ctypes.c_int32),
        ("scratch", ctypes.c_int64),
    ]


class DlrtModelSpec(ctypes.Structure):
    """dlrt_model_spec: a whole model, as the glue describes it to the runtime."""

    _fields_ = [
        ("name", ctypes.c_char_p),
        ("c_name", ctypes.c_char_p),
        ("compiler", ctypes.c_char_p),
        ("params", ctypes.c_int32),
        ("states", ctypes.c_int32),
        ("tensors", ctypes.POINTER(DlrtTensor)),
        ("state_params", ctypes.POINTER(ctypes.c_int32)),
        ("init", DlrtHost),
        ("init_name", ctypes.c_char_p),
        ("entry_count", ctypes.c_int32),
        ("entries", ctypes.POINTER(DlrtEntry)),
        ("cuda", ctypes.POINTER(DlrtModelCuda)),
        ("buffers", ctypes.c_int32),
        ("derived", ctypes.c_int32),
        ("derive", DlrtHost),
        ("derive_name", ctypes.c_char_p),
    ]


class DLDeviceType(enum.IntEnum):
    """DLPack v0.8 DLDeviceType (kDLCPU…)."""

    CPU = 1
    CUDA = 2
    CUDAHost = 3
    OpenCL = 4
    Vulkan = 7
    Metal = 8
    VPI = 9
    ROCM = 10
    ROCMHost = 11
    ExtDev = 12
    CUDAManaged = 13
    OneAPI = 14
    WebGPU = 15
    Hexagon = 16


class DLDataTypeCode(enum.IntEnum):
    """DLPack v0.8 DLDataTypeCode (kDLInt…)."""

    Int = 0
    UInt = 1
    Float = 2
    OpaqueHandle = 3
    Bfloat = 4
    Complex = 5
    Bool = 6


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int32)]


# dlrt_allreduce_fn (dlrt.h): (ctx, buffer, count, dtype, device) -> 0, or a failure.
AllreduceFn = ctypes.CFUNCTYPE(
    ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, DLDevice
)


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]

    @classmethod
    def of(cls, dtype: DType) -> DLDataType:
        """The DLPack description of a dlrt dtype (bool is kDLBool with 8 bits)."""
        if dtype is DType.BOOL:
            code = DLDataTypeCode.Bool
        elif dtype in (DType.F16, DType.F32, DType.F64):
            code = DLDataTypeCode.Float
        elif dtype is DType.BF16:
            code = DLDataTypeCode.Bfloat
        else:
            code = DLDataTypeCode.Int
        return cls(code, 8 * dtype.size, 1)


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


DLManagedTensorDeleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))

DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", DLManagedTensorDeleter),
]
