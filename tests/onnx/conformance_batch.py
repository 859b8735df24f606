"""Many ONNX models compiled as few libraries: each model is imported (dlvm.onnx) as one function
named after its case, the functions are put into modules of CHUNK_SIZE, and each module is
optimised as telc builds (-O2) and built into one library whose export entries are those
functions (dlvm.codegen.spec.module_spec). A built library is kept under a digest of the
module's IR and the compiler, so an unchanged chunk is only loaded again. A chunk that does not
build is built again in halves, down to the one function that breaks it, whose case gets the
build's error as its failure while the others run."""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import importlib.metadata
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import dlvm
from dlvm.artifacts import ROOT, cache_dir, compiler_files
from dlvm.codegen.build import build_library
from dlvm.codegen.spec import module_spec
from dlvm.diagnostics import DiagnosticError
from dlvm.ir.printer import module_text
from dlvm.ir.values import Function, Module
from dlvm.onnx import Imported, ValuesNeeded, import_model
from telc.cache import host_cpu
from telc.driver import optimize

CHUNK_SIZE = 96  # functions a library at most
# IR instructions a library at most (a model larger than this is a library alone): a light model
# takes LLVM a minute, and a chunk of its own is rebuilt only when it changes.
CHUNK_INSTRUCTIONS = 1500
MAX_LIBRARIES = 256  # kept in the cache; the least recently used beyond are removed
LIBRARY = "conformance"  # each library's model name
# Part of every key: bump it when what is built from a chunk changes outside the compiler.
FORMAT = "onnx-conformance-1"


@dataclass(frozen=True)
class Request:
    """A model to compile, as the function `name` (an IR and C identifier); `shapes` fixes its
    inputs' dynamic dimensions; `constant` holds the inputs that have one value in every data
    set of the case, which are fixed at import where the importer needs them (ValuesNeeded)."""

    name: str
    model: Any = field(repr=False)  # onnx.ModelProto
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict, repr=False)
    constant: dict[str, np.ndarray] = field(default_factory=dict, repr=False)


@dataclass
class Compiled:
    """What became of a request: its import and the library entry that runs it, or why there
    is none (`failure`: the importer's diagnostics, or the build's error)."""

    imported: Imported | None = None
    entry: Callable[..., Any] | None = None
    failure: str | None = None


@dataclass
class Stats:
    """How a compile_all went: seconds importing and building, libraries built and found."""

    import_s: float = 0.0
    build_s: float = 0.0
    built: int = 0
    cached: int = 0
    bisections: int = 0


Build = Callable[[list[Function], Path], None]  # writes a library of these functions to the path


def entry_name(label: str) -> str:
    """The function (and entry) name of a case: `node/test_abs` -> `node_test_abs`."""
    return re.sub(r"\W", "_", label)


def compile_all(
    requests: Sequence[Request],
    cache: Path | None = None,
    chunk_size: int = CHUNK_SIZE,
    build: Build | None = None,
    stats: Stats | None = None,
) -> dict[str, Compiled]:
    """Each request's Compiled, by name: imported, built in chunks of `chunk_size` functions
    by `build` (default build_chunk) into libraries kept under `cache` (default: DLVM's cache
    directory's onnx-conformance/), and loaded."""
    cache = cache if cache is not None else cache_dir() / "onnx-conformance"
    build = build or build_chunk
    stats = stats if stats is not None else Stats()
    results: dict[str, Compiled] = {}
    t0 = time.perf_counter()
    for r in requests:
        results[r.name] = _import(r)
    stats.import_s += time.perf_counter() - t0
    t0 = time.perf_counter()
    ready = sorted(n for n, c in results.items() if c.imported is not None)
    for names in _chunks(ready, results, chunk_size):
        _build_chunk(names, results, cache, build, stats)
    stats.build_s += time.perf_counter() - t0
    _prune(cache)
    return results


def _chunks(names: list[str], results: dict[str, Compiled], size: int) -> list[list[str]]:
    """`names` in order, cut into chunks of at most `size` functions and CHUNK_INSTRUCTIONS
    instructions (a larger function alone)."""
    chunks: list[list[str]] = []
    total = 0
    for n in names:
        imported = results[n].imported
        assert imported is not None
        count = sum(len(b.instructions) for b in imported.function.blocks)
        if not chunks or len(chunks[-1]) >= size or total + count > CHUNK_INSTRUCTIONS:
            chunks.append([])
            total = 0
        chunks[-1].append(n)
        total += count
    return chunks


def _import(r: Request) -> Compiled:
    """The request imported; where nodes need the values of inputs that are the same in every
    data set, imported again with those inputs fixed to them."""
    try:
        return Compiled(import_model(r.model, r.shapes, r.name, label=r.name))
    except ValuesNeeded as e:
        if not all(n in r.constant for n in e.names):
            return Compiled(failure=_failure(e))
        values = {n: r.constant[n] for n in e.names}
        try:
            return Compiled(import_model(r.model, r.shapes, r.name, label=r.name, values=values))
        except DiagnosticError as again:
            return Compiled(failure=_failure(again))
        except Exception as crash:  # the importer's own bug, as below
            return Compiled(failure=f"crash in the importer: {_first_line(crash)}")
    except DiagnosticError as e:
        return Compiled(failure=_failure(e))
    except Exception as e:  # the importer's own bug: the case fails, the others go on
        return Compiled(failure=f"crash in the importer: {_first_line(e)}")


def constant_inputs(
    names: Sequence[str], data: Sequence[tuple[Sequence[Any], Sequence[Any]]]
) -> dict[str, np.ndarray]:
    """The inputs (named in order) that hold one value, of one dtype, in every data set."""
    found: dict[str, np.ndarray] = {}
    for k, name in enumerate(names):
        arrays = [inputs[k] for inputs, _ in data if k < len(inputs)]
        if len(arrays) != len(data) or not arrays:
            continue
        if not all(isinstance(a, (np.ndarray, np.generic)) for a in arrays):
            continue
        first = np.asarray(arrays[0])
        if all(_identical(first, np.asarray(a)) for a in arrays[1:]):
            found[name] = first
    return found


def _identical(a: np.ndarray, b: np.ndarray) -> bool:
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    )


def _failure(e: DiagnosticError) -> str:
    return "; ".join(d.message for d in e.diagnostics)


def _build_chunk(
    names: list[str], results: dict[str, Compiled], cache: Path, build: Build, stats: Stats
) -> None:
    """Builds (or finds) the library of `names` and gives each its entry; a chunk that fails
    is built again in halves, and a single function that fails gets the error."""
    functions = [_function_copy(results[n]) for n in names]
    path = cache / _chunk_key(functions) / f"{LIBRARY}.so"
    try:
        if path.exists():
            stats.cached += 1
            os.utime(path.parent)  # recently used: pruned last
        else:
            _build_into(functions, path, build)
            stats.built += 1
        model = dlvm.load(path)
    except Exception as e:
        if len(names) == 1:
            results[names[0]].failure = f"crash in codegen: {_first_line(e)}"
            return
        stats.bisections += 1
        half = len(names) // 2
        _build_chunk(names[:half], results, cache, build, stats)
        _build_chunk(names[half:], results, cache, build, stats)
        return
    for n in names:
        results[n].entry = model.entries[n]


def _function_copy(compiled: Compiled) -> Function:
    """A copy of the imported function, in no module: the import stays as it was for the next
    try."""
    assert compiled.imported is not None
    module = copy.deepcopy(compiled.imported.module)
    fn = module.functions[0]
    module.remove_function(fn)
    return fn


def _chunk_key(functions: list[Function]) -> str:
    module = _module(functions)
    text = module_text(module)
    for fn in functions:
        module.remove_function(fn)
    digest = hashlib.sha256()
    for part in (FORMAT, _compiler_key(), text):
        data = part.encode()
        digest.update(len(data).to_bytes(8, "little") + data)
    return digest.hexdigest()[:32]


@functools.cache
def _compiler_key() -> str:
    """What decides a library besides its IR: the compiler's files (less the importer's, whose
    work the IR already is), llvmlite, the C compiler and this CPU."""
    digest = hashlib.sha256()
    onnx_dir = ROOT / "dlvm" / "onnx"
    for path in compiler_files():
        if onnx_dir in path.parents:
            continue
        for part in (path.relative_to(ROOT).as_posix().encode(), path.read_bytes()):
            digest.update(len(part).to_bytes(8, "little") + part)
    extra = [importlib.metadata.version("llvmlite"), os.environ.get("CC", ""), host_cpu()]
    return digest.hexdigest() + "\n" + "\n".join(extra)


def _module(functions: list[Function]) -> Module:
    module = Module(LIBRARY)
    for fn in functions:
        module.add_function(fn)
    return module


def build_chunk(functions: list[Function], output: Path) -> None:
    """The library of `functions` at `output`: optimised as telc builds (-O2), every function
    an export entry."""
    module = _module(functions)
    optimize(module)
    build_library(module, module_spec(module, "onnx conformance"), output)


def _build_into(functions: list[Function], path: Path, build: Build) -> None:
    """Builds into a directory of its own, renamed into place whole: a library in the cache is
    always complete. The functions are copied: a failed build leaves them as they were."""
    path.parent.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=path.parent.parent))
    try:
        build(copy.deepcopy(functions), work / path.name)
        with contextlib.suppress(OSError):  # another process put the same library there first
            work.rename(path.parent)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _prune(cache: Path) -> None:
    """Removes the least recently used libraries beyond MAX_LIBRARIES."""
    if not cache.is_dir():
        return
    entries = sorted(
        (p for p in cache.iterdir() if p.is_dir() and not p.name.startswith(".")),
        key=lambda p: p.stat().st_mtime,
    )
    for old in entries[:-MAX_LIBRARIES]:
        shutil.rmtree(old, ignore_errors=True)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(e).__name__}: {first}" if first else type(e).__name__
