"""The C runtime (runtime/): its C unit tests under AddressSanitizer + UBSan (and the thread pool
under ThreadSanitizer), a warning-free build, the ctypes mirror against dlrt.h, the exported
symbols, the object cache, and safetensors files exchanged with the reference implementation."""

from __future__ import annotations

import ctypes
import os
import platform
import re
import shlex
import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest
import safetensors
import safetensors.numpy

from dlvm import runtime as rt

CC = shlex.split(os.environ.get("CC") or "cc")
ASAN = (
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=undefined",
    "-fno-omit-frame-pointer",
    "-g",
)
TSAN = ("-fsanitize=thread", "-g")
C_TESTS = sorted((rt.runtime_dir() / "tests").glob("test_*.c"))
HEADER = rt.runtime_dir() / "include" / "dlrt.h"


def run(args: list[str], cwd: Path | None = None, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=False, **kw)


def sanitized_runtime(cache: Path, tmp: Path, flags: tuple[str, ...]) -> list[Path]:
    """The runtime built with sanitizer `flags`; skips when the compiler rejects them."""
    (tmp / "probe.c").write_text("int main(void) { return 0; }\n")
    probe = run([*CC, *flags, "probe.c", "-o", "probe"], cwd=tmp)
    if probe.returncode != 0:
        pytest.skip(f"{shlex.join(CC)} rejects {flags[0]}: {probe.stderr.strip()}")
    return rt.build_runtime(shlex.join(CC), flags, cache)


def link_test(test: Path, objects: list[Path], flags: tuple[str, ...], out: Path) -> Path:
    include = rt.runtime_dir() / "include"
    cmd = [*CC, "-std=c11", *flags, "-Wall", "-Wextra", "-pthread", f"-I{include}"]
    done = run([*cmd, str(test), *map(str, objects), "-o", str(out)])
    assert done.returncode == 0, f"cannot build {test.name}:\n{done.stderr}"
    return out


def run_test(
    exe: Path, tmp: Path, env: dict[str, str], prefix: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """Runs a C test in `tmp` (its files go there too) with `env` added to the environment."""
    return run(
        [*prefix, str(exe)], cwd=tmp, env={**os.environ, "TMPDIR": str(tmp), **env}, timeout=180
    )


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dlvm-cache")


@pytest.fixture(scope="module")
def asan_objects(cache: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return sanitized_runtime(cache, tmp_path_factory.mktemp("asan"), ASAN)


# ---- C unit tests ----


@pytest.mark.parametrize("test", C_TESTS, ids=lambda p: p.stem)
def test_c_unit_test_under_asan_and_ubsan(
    test: Path, asan_objects: list[Path], tmp_path: Path
) -> None:
    exe = link_test(test, asan_objects, ASAN, tmp_path / test.stem)
    env = {"ASAN_OPTIONS": "detect_leaks=1", "UBSAN_OPTIONS": "print_stacktrace=1"}
    done = run_test(exe, tmp_path, env)
    assert done.returncode == 0, (
        f"{test.name} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    )
    assert "all checks passed" in done.stdout


def test_thread_pool_under_tsan(cache: Path, tmp_path: Path) -> None:
    objects = sanitized_runtime(cache, tmp_path, TSAN)
    source = rt.runtime_dir() / "tests" / "test_threadpool.c"
    exe = link_test(source, objects, TSAN, tmp_path / "test_threadpool")
    env = {"TSAN_OPTIONS": "halt_on_error=1"}
    done = run_test(exe, tmp_path, env)
    if "unexpected memory mapping" in done.stderr:
        # Older TSan runtimes cannot map their shadow with high ASLR entropy; run without ASLR.
        setarch = shutil.which("setarch")
        if setarch is None:
            pytest.skip("ThreadSanitizer cannot map its shadow memory here, and no setarch -R")
        done = run_test(exe, tmp_path, env, prefix=(setarch, platform.machine(), "-R"))
    assert done.returncode == 0, f"test_threadpool under TSan failed:\n{done.stdout}\n{done.stderr}"


def test_runtime_compiles_without_warnings(cache: Path) -> None:
    flags = ("-Wall", "-Wextra", "-Wpedantic", "-Wshadow", "-Wconversion", "-Werror")
    assert len(rt.build_runtime(shlex.join(CC), flags, cache)) == len(
        list((rt.runtime_dir() / "src").glob("*.c"))
    )


# ---- dlrt.h and its ctypes mirror ----


def header_text() -> str:
    return re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)


def header_enums() -> dict[str, dict[str, int]]:
    enums = {}
    for body, name in re.findall(r"typedef enum\s*\{(.*?)\}\s*(\w+);", header_text(), re.S):
        items = [item.strip() for item in body.split(",") if item.strip()]
        values = {}
        for item in items:
            key, value = (part.strip() for part in item.split("="))
            values[key] = int(value)
        enums[name] = values
    return enums


def header_structs() -> dict[str, list[str]]:
    """Each struct's fields: `typedef struct {…} name;`, or `struct name {…};` (the form of a
    struct that points to its own type, declared first by `typedef struct name name;`)."""
    structs = {}
    text = header_text()
    pattern = r"typedef struct(?:\s+\w+)?\s*\{(.*?)\}\s*(\w+);"
    found = re.findall(pattern, text, re.S)
    found += [
        (body, name)
        for name, body in re.findall(r"(?<!typedef )\bstruct\s+(\w+)\s*\{([^{}]*)\}\s*;", text)
    ]
    for body, name in found:
        fields = []
        for decl in (d.strip() for d in body.split(";") if d.strip()):
            pointer_to_function = re.search(r"\(\*\s*(\w+)\)", decl)
            fields.append(pointer_to_function[1] if pointer_to_function else decl.split()[-1])
        structs[name] = [re.sub(r"\[\d+\]$", "", f.lstrip("*")) for f in fields]  # x[3]: x
    return structs


MIRRORED_ENUMS = {
    "dlrt_status": (rt.Status, ("DLRT_ERR_", "DLRT_")),
    "dlrt_dtype": (rt.DType, ("DLRT_",)),
    "DLDeviceType": (rt.DLDeviceType, ("kDL",)),
    "DLDataTypeCode": (rt.DLDataTypeCode, ("kDL",)),
}
MIRRORED_STRUCTS = {
    "dlrt_tensor": rt.DlrtTensor,
    "dlrt_kernel": rt.DlrtKernel,
    "dlrt_launch": rt.DlrtLaunch,
    "dlrt_context": rt.DlrtContext,
    "dlrt_slot": rt.DlrtSlot,
    "dlrt_plan": rt.DlrtPlan,
    "dlrt_entry": rt.DlrtEntry,
    "dlrt_model_cuda": rt.DlrtModelCuda,
    "dlrt_model_spec": rt.DlrtModelSpec,
    "DLDevice": rt.DLDevice,
    "DLDataType": rt.DLDataType,
    "DLTensor": rt.DLTensor,
    "DLManagedTensor": rt.DLManagedTensor,
}


def test_ctypes_enums_match_the_header() -> None:
    enums = header_enums()
    assert set(MIRRORED_ENUMS) == set(enums)
    for c_name, (py_enum, prefixes) in MIRRORED_ENUMS.items():
        expected = {}
        for key, value in enums[c_name].items():
            prefix = next(p for p in prefixes if key.startswith(p))
            expected[key.removeprefix(prefix)] = value
        assert {m.name: m.value for m in py_enum} == expected, c_name


def test_ctypes_structs_match_the_header() -> None:
    structs = header_structs()
    assert set(MIRRORED_STRUCTS) == set(structs)
    for c_name, py_struct in MIRRORED_STRUCTS.items():
        assert [f[0] for f in py_struct._fields_] == structs[c_name], c_name


def test_ctypes_struct_layouts_match_the_compiler(tmp_path: Path) -> None:
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "dlrt.h"', "int main(void) {"]
    expected = []
    for c_name, py_struct in MIRRORED_STRUCTS.items():
        lines.append(f'    printf("%zu\\n", sizeof({c_name}));')
        expected.append(ctypes.sizeof(py_struct))
        for field, *_ in py_struct._fields_:
            lines.append(f'    printf("%zu\\n", offsetof({c_name}, {field}));')
            expected.append(getattr(py_struct, field).offset)
    lines += ['    printf("%zu\\n", sizeof(dlrt_dtype));', "    return 0;", "}"]
    expected.append(ctypes.sizeof(ctypes.c_int))
    (tmp_path / "layout.c").write_text("\n".join(lines))
    include = rt.runtime_dir() / "include"
    built = run([*CC, "-std=c11", f"-I{include}", "layout.c", "-o", "layout"], cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    printed = run([str(tmp_path / "layout")]).stdout.split()
    assert [int(x) for x in printed] == expected


def test_dtype_mapping() -> None:
    for dtype in rt.DType:
        assert rt.DType.from_ir(dtype.ir_name) is dtype
        assert rt.DType.from_numpy(dtype.numpy) is dtype
    assert rt.DType.F32.ir_name == "f32" and rt.DType.BOOL.numpy == np.bool_
    assert [d.size for d in rt.DType] == [1, 1, 2, 4, 8, 2, 4, 8, 2]
    assert (rt.DLDataType.of(rt.DType.BOOL).code, rt.DLDataType.of(rt.DType.I16).bits) == (6, 16)
    with pytest.raises(ValueError, match="no dlrt_dtype"):
        rt.DType.from_numpy(np.uint32)
    with pytest.raises(ValueError, match="no dlrt_dtype"):
        rt.DType.from_numpy(np.dtype(">f4" if np.little_endian else "<f4"))
    with pytest.raises(ValueError, match="not an IR element type"):
        rt.DType.from_ir("f128")


# ---- the shared library ----


def shared_library(objects: list[Path], out: Path) -> Path:
    done = run([*CC, "-shared", "-pthread", "-o", str(out), *map(str, objects)])
    assert done.returncode == 0, done.stderr
    return out


def test_only_dlrt_last_error_is_exported(cache: Path, tmp_path: Path) -> None:
    lib = shared_library(rt.build_runtime(shlex.join(CC), (), cache), tmp_path / "libdlrt.so")
    nm = run(["nm", "-D", "--defined-only", str(lib)])
    assert nm.returncode == 0, nm.stderr
    symbols = {line.split()[-1] for line in nm.stdout.splitlines() if line.strip()}
    assert {s for s in symbols if not s.startswith("_")} == {"dlrt_last_error"}
    loaded = ctypes.CDLL(str(lib))
    loaded.dlrt_last_error.restype = ctypes.c_char_p
    assert loaded.dlrt_last_error() == b""
    with pytest.raises(AttributeError):
        _ = loaded.dlrt_save


def test_two_libraries_in_one_program_share_the_last_error(cache: Path, tmp_path: Path) -> None:
    """Both libraries export dlrt_last_error and the program sees one of them; each library's
    errors must still reach it (error.c writes through the exported function)."""
    objects = [str(p) for p in rt.build_runtime(shlex.join(CC), (), cache)]
    include = f"-I{rt.runtime_dir() / 'include'}"
    for m in "ab":
        (tmp_path / f"{m}.c").write_text(
            '#include "dlrt.h"\n'
            f"DLRT_EXPORT dlrt_status {m}_fail(void) {{\n"
            f'    return dlrt_error(DLRT_ERR_IO, "{m}_fail: failed");\n}}\n'
        )
        flags = ["-std=c11", "-fPIC", "-fvisibility=hidden", "-shared", "-pthread", include]
        built = run([*CC, *flags, f"{m}.c", *objects, "-o", f"lib{m}.so"], cwd=tmp_path)
        assert built.returncode == 0, built.stderr
    (tmp_path / "main.c").write_text(
        "#include <stdio.h>\n"
        '#include "dlrt.h"\n'
        "dlrt_status a_fail(void);\n"
        "dlrt_status b_fail(void);\n"
        "int main(void) {\n"
        '    a_fail(); printf("%s\\n", dlrt_last_error());\n'
        '    b_fail(); printf("%s\\n", dlrt_last_error());\n'
        "    return 0;\n}\n"
    )
    linked = ["-L.", "-la", "-lb", "-Wl,-rpath,$ORIGIN"]
    built = run([*CC, include, "main.c", *linked, "-o", "main"], cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    assert run([str(tmp_path / "main")]).stdout.splitlines() == ["a_fail: failed", "b_fail: failed"]

    # Loaded privately (as ctypes and dlvm.load do), each library keeps its own message.
    a, b = (ctypes.CDLL(str(tmp_path / f"lib{m}.so")) for m in "ab")
    a.dlrt_last_error.restype = b.dlrt_last_error.restype = ctypes.c_char_p
    a.a_fail()
    b.b_fail()
    assert (a.dlrt_last_error(), b.dlrt_last_error()) == (b"a_fail: failed", b"b_fail: failed")


@pytest.fixture(scope="module")
def dlrt(cache: Path, tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    """The runtime as a library with every function visible, for calls from Python."""
    objects = rt.build_runtime(shlex.join(CC), ("-fvisibility=default",), cache)
    lib = ctypes.CDLL(str(shared_library(objects, tmp_path_factory.mktemp("lib") / "dlrt.so")))
    tensors = ctypes.POINTER(rt.DlrtTensor)
    lib.dlrt_save.argtypes = [ctypes.c_char_p, ctypes.c_char_p, tensors, ctypes.c_size_t]
    lib.dlrt_load.argtypes = [ctypes.c_char_p, tensors, ctypes.c_size_t, ctypes.c_size_t]
    lib.dlrt_save.restype = lib.dlrt_load.restype = ctypes.c_int
    lib.dlrt_last_error.restype = ctypes.c_char_p
    lib.dlrt_dtype_size.restype = ctypes.c_size_t
    return lib


# ---- safetensors against the reference implementation ----


def entries(arrays: dict[str, np.ndarray]) -> tuple[ctypes.Array[rt.DlrtTensor], list[object]]:
    """dlrt_tensor entries over `arrays`, and the objects that must outlive them."""
    ts = (rt.DlrtTensor * max(len(arrays), 1))()
    keep: list[object] = []
    for i, (name, a) in enumerate(arrays.items()):
        assert a.flags.c_contiguous
        shape = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
        keep += [shape, a]
        dtype = rt.DType.from_numpy(a.dtype)
        ts[i] = rt.DlrtTensor(name.encode(), dtype, a.ndim, shape, a.ctypes.data)
    return ts, keep


def sample_arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        "W1": rng.standard_normal((4, 3)).astype(np.float32),
        "b1": rng.standard_normal(3).astype(np.float64),
        "half": rng.standard_normal((2, 2)).astype(np.float16),
        "mask": rng.integers(0, 2, (3, 3)).astype(np.bool_),
        "i8": np.array([-128, 0, 127], dtype=np.int8),
        "i16": np.arange(-6, 6, dtype=np.int16).reshape(3, 4),
        "i32": np.array([np.iinfo(np.int32).min, 5], dtype=np.int32),
        "__step__": np.array(41, dtype=np.int64),
        "empty": np.zeros((0, 5), dtype=np.float32),
        "poids_é": np.ones((1, 1, 2), dtype=np.float32),
    }


def test_dtype_sizes_through_ctypes(dlrt: ctypes.CDLL) -> None:
    assert [dlrt.dlrt_dtype_size(d) for d in rt.DType] == [d.size for d in rt.DType]
    assert dlrt.dlrt_dtype_size(len(rt.DType)) == 0


def test_dlrt_save_loads_with_safetensors(dlrt: ctypes.CDLL, tmp_path: Path) -> None:
    arrays = sample_arrays()
    ts, _keep = entries(arrays)
    path = tmp_path / "model.safetensors"
    status = dlrt.dlrt_save(str(path).encode(), b"digits", ts, len(arrays))
    assert status == rt.Status.OK, dlrt.dlrt_last_error()
    loaded = safetensors.numpy.load_file(str(path))
    assert set(loaded) == set(arrays)
    for name, a in arrays.items():
        assert loaded[name].dtype == a.dtype and loaded[name].shape == a.shape, name
        assert np.array_equal(loaded[name], a), name
    with safetensors.safe_open(str(path), "np") as f:
        assert f.metadata() == {"format": "dlvm", "model": "digits"}
        assert list(f.keys()) == sorted(arrays)


def test_safetensors_files_load_with_dlrt_load(dlrt: ctypes.CDLL, tmp_path: Path) -> None:
    arrays = sample_arrays()
    path = tmp_path / "reference.safetensors"
    for metadata in ({"format": "pt"}, None):
        safetensors.numpy.save_file(arrays, str(path), metadata=metadata)
        targets = {name: np.zeros_like(a) for name, a in arrays.items()}
        ts, _keep = entries(targets)
        status = dlrt.dlrt_load(str(path).encode(), ts, len(targets), len(targets))
        assert status == rt.Status.OK, dlrt.dlrt_last_error()
        for name, a in arrays.items():
            assert np.array_equal(targets[name], a), name


def test_load_failures_are_reported_through_ctypes(dlrt: ctypes.CDLL, tmp_path: Path) -> None:
    path = tmp_path / "extra.safetensors"
    w = np.arange(4, dtype=np.float32)
    safetensors.numpy.save_file({"w": w, "stray": w}, str(path))
    target = {"w": np.full(4, -1.0, dtype=np.float32)}
    ts, _keep = entries(target)
    status = dlrt.dlrt_load(str(path).encode(), ts, 1, 1)
    assert rt.Status(status) is rt.Status.FORMAT
    assert b"unexpected tensor 'stray' in the file" in dlrt.dlrt_last_error()
    assert (target["w"] == -1).all(), "a failed load changes nothing"
    assert dlrt.dlrt_load(None, ts, 1, 1) == rt.Status.INVALID_ARGUMENT
    assert dlrt.dlrt_last_error() == b"dlrt_load: argument 'path' is NULL"


# ---- building and caching ----


def test_objects_are_cached_and_reused(cache: Path) -> None:
    first = rt.build_runtime(shlex.join(CC), ("-DDLVM_CACHE_TEST=1",), cache)
    stamps = [p.stat().st_mtime_ns for p in first]
    again = rt.build_runtime(shlex.join(CC), ("-DDLVM_CACHE_TEST=1",), cache)
    assert again == first and [p.stat().st_mtime_ns for p in again] == stamps
    other = rt.build_runtime(shlex.join(CC), ("-DDLVM_CACHE_TEST=2",), cache)
    assert other[0].parent != first[0].parent, "other flags, another cache entry"
    assert not list(first[0].parent.glob("*.tmp")), "no temporary file is left"


def test_objects_do_not_depend_on_the_checkout_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = rt.build_runtime(shlex.join(CC), ("-g",), tmp_path / "a")
    copy = tmp_path / "elsewhere" / "runtime"
    shutil.copytree(rt.runtime_dir(), copy)
    monkeypatch.setattr(rt, "runtime_dir", lambda: copy)
    there = rt.build_runtime(shlex.join(CC), ("-g",), tmp_path / "b")
    assert [p.name for p in there] == [p.name for p in here]
    assert there[0].parent.name == here[0].parent.name, "the same cache key"
    for a, b in zip(here, there):
        assert a.read_bytes() == b.read_bytes(), f"{a.name} differs"
    (copy / "src" / "error.c").write_text((copy / "src" / "error.c").read_text() + "\n")
    changed = rt.build_runtime(shlex.join(CC), ("-g",), tmp_path / "b")
    assert changed[0].parent != there[0].parent, "a changed source, another cache entry"


def test_parallel_builds_do_not_clash(tmp_path: Path) -> None:
    results: list[list[Path]] = []
    errors: list[BaseException] = []

    def build() -> None:
        try:
            results.append(rt.build_runtime(shlex.join(CC), ("-DPARALLEL",), tmp_path))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=build) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 4 and all(r == results[0] for r in results)
    assert sorted(p.name for p in results[0][0].parent.iterdir()) == sorted(
        [rt.MANIFEST, *(p.name for p in results[0])]
    )


@pytest.mark.parametrize(
    "damage",
    [
        lambda entry: (entry / "error.o").write_bytes(b"\x7fELF truncated"),
        lambda entry: (entry / "error.o").unlink(),
        lambda entry: (entry / rt.MANIFEST).unlink(),
        lambda entry: (entry / rt.MANIFEST).write_text("not a manifest\n"),
    ],
    ids=["corrupt-object", "missing-object", "missing-manifest", "bad-manifest"],
)
def test_a_damaged_entry_is_compiled_again(tmp_path: Path, damage) -> None:
    first = rt.build_runtime(shlex.join(CC), ("-DDAMAGE",), tmp_path)
    good = [p.read_bytes() for p in first]
    damage(first[0].parent)
    again = rt.build_runtime(shlex.join(CC), ("-DDAMAGE",), tmp_path)
    assert again == first and [p.read_bytes() for p in again] == good
    stamps = [p.stat().st_mtime_ns for p in again]
    assert rt.build_runtime(shlex.join(CC), ("-DDAMAGE",), tmp_path) == again
    assert [p.stat().st_mtime_ns for p in again] == stamps, "then reused as it is"


def test_build_errors_carry_the_compiler_output(tmp_path: Path) -> None:
    with pytest.raises(rt.RuntimeBuildError, match="cannot run the C compiler"):
        rt.build_runtime("/nonexistent/cc", (), tmp_path)
    with pytest.raises(rt.RuntimeBuildError, match="no-such-flag"):
        rt.build_runtime(shlex.join(CC), ("-fno-such-flag-at-all",), tmp_path)
    with pytest.raises(rt.RuntimeBuildError, match="compiler command is empty"):
        rt.build_runtime(" ", (), tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(rt.RuntimeBuildError, match="DLVM_CACHE_DIR"):
        rt.build_runtime(shlex.join(CC), ("-DX",), blocker)


def test_default_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DLVM_CACHE_DIR", str(tmp_path / "c"))
    assert rt.default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("DLVM_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert rt.default_cache_dir() == tmp_path / "x" / "dlvm"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert rt.default_cache_dir() == Path.home() / ".cache" / "dlvm"
