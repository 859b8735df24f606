"""One build, as `telc build` and `telc run` do it: the pipeline from a TEL file to the stage
asked for, through the build cache (telc/cache.py) for the stages worth keeping (llvm, obj,
so). Libraries are built in a private directory and installed atomically."""

from __future__ import annotations

import contextlib
import functools
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlvm.c_compiler import c_compiler
from dlvm.diagnostics import BuildFailure, Diagnostic, DiagnosticError
from dlvm.ir.printer import module_text
from dlvm.library_check import digest_path
from dlvm.sources import Unreadable, read_bytes, read_text
from telc.ast import dump
from telc.cache import Cache, CacheError, build_key, install, write_atomically
from telc.driver import (
    BuildOptions,
    Compiled,
    Timings,
    lower_program,
    optimize,
    quantize,
)
from telc.onnx_use import MAX_ONNX_BYTES, OnnxOptions, model_source
from telc.program import load

CACHED = ("llvm", "obj", "so")
SUFFIX = {"llvm": ".ll", "obj": ".o"}


@dataclass
class Product:
    """What a build made: `data` (text, or bytes for obj) for a stage other than so; for so, the
    `library` and its `header`. `report` holds what --verbose shows."""

    data: str | bytes | None = None
    library: Path | None = None
    header: Path | None = None
    cached: bool = False
    report: dict[str, Any] = field(default_factory=dict)


def produce(
    path: str,
    emit: str,
    options: BuildOptions,
    output: Path | None = None,
    timings: Timings | None = None,
    cache: Cache | None = None,
    warn: Callable[[str], None] = lambda message: None,
    onnx: OnnxOptions | None = None,
) -> Product:
    """Builds `path` up to stage `emit`; an ONNX file is built as the TEL model that
    model_text makes of it (`onnx` says what to add), which emit `tel` gives. For so, the
    library is installed at `output` (with the headers beside it). `warn` hears why the cache
    could not be used; the build goes on without it."""
    assert emit != "so" or output is not None, "a library needs an output path"
    timings = timings if timings is not None else Timings()
    path, text = model_text(path, onnx)
    if emit == "tel":
        return Product(text)
    values = dict(onnx.values) if onnx is not None else None
    if emit == "ast":
        with timings.stage("parse"):
            return Product(dump(load(path, text, options.values, values).root.tree))
    with timings.stage("parse"):
        program = load(path, text, options.values, values)
    report: dict[str, Any] = {"sources": [u.path for u in program.units]}
    name = output.name if output is not None else ""
    key = None
    if cache is not None and emit in CACHED:
        t0 = time.perf_counter()
        key = build_key(program, options, emit, name, _cc_identity() if emit == "so" else "")
        report["key"] = key
        report["cache"] = str(cache.root)
        entry = cache.lookup(key)
        if entry is not None:
            if timings.started:
                timings.started("cache")
            product = _from_cache(entry.file, entry.files, emit, output)
            timings.stages.append(("cache", time.perf_counter() - t0))  # key, lookup, copy
            product.report = {**report, **entry.report}
            return product
    if options.quantize is not None and options.target == "cuda":
        help_ = Diagnostic("  help: build without --target cuda", severity="detail")
        message = f"--quantize {options.quantize} is built for the CPU only (docs/quantization.md)"
        raise DiagnosticError([Diagnostic(message, notes=(help_,))])
    compiled = lower_program(program, timings, options.distributed, options.precision)
    if emit == "ir":
        return Product(module_text(compiled.module), report=report)
    optimize(compiled.module, timings, options.level)
    if options.quantize is not None:
        quantize(compiled, options.quantize, timings)
    report["passes"] = [[p.name, p.changed, p.seconds] for p in timings.passes]
    if emit == "optimized":
        return Product(module_text(compiled.module), report=report)
    with timings.stage("load llvm"):
        from telc import library  # llvmlite loads only when needed

    if emit != "so":
        data = library.emit_stage(compiled.module, emit, options, timings)
        report.update(library.describe(compiled.module, None))
        if key is not None and cache is not None:
            _store(cache, key, {"output" + SUFFIX[emit]: data}, report, warn)
        return Product(data, report=report)
    assert output is not None
    return _build_library(compiled, options, output, timings, cache, key, report, warn)


def _build_library(
    compiled: Compiled,
    options: BuildOptions,
    output: Path,
    timings: Timings,
    cache: Cache | None,
    key: str | None,
    report: dict[str, Any],
    warn: Callable[[str], None],
) -> Product:
    from telc import library

    name = output.name
    files = [name, digest_path(name).name, Path(name).stem + ".h", "dlrt.h"]
    workspace = None
    if cache is not None and key is not None:
        try:
            workspace = cache.workspace()
        except CacheError as e:
            warn(str(e))
    with contextlib.ExitStack() as cleanup:
        if workspace is None:
            workspace = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="telc-")))
        else:  # a failed build leaves nothing; a stored one has moved away
            cleanup.callback(shutil.rmtree, workspace, True)
        gpu = options.gpu if options.target == "cuda" else None
        built = library.build_so(
            compiled,
            workspace / name,
            options.cpu,
            timings,
            options.level,
            gpu,
            options.tf32,
            options.fast_math,
        )
        report.update(library.describe(built.module, compiled.spec))
        source = workspace
        if cache is not None and key is not None:
            try:
                source = cache.store(key, workspace, files, _cacheable(report)).path
            except CacheError as e:
                warn(str(e))
        t0 = time.perf_counter()
        product = _install(source.joinpath, files, output)
        _add_time(timings, "write", time.perf_counter() - t0)
        product.report = report
        return product


def _from_cache(
    file: Callable[[str], Path], files: list[str], emit: str, output: Path | None
) -> Product:
    if emit != "so":
        data = file(files[0]).read_bytes()
        return Product(data if emit == "obj" else data.decode("utf-8"), cached=True)
    assert output is not None
    product = _install(file, files, output)
    product.cached = True
    return product


def _install(file: Callable[[str], Path], files: list[str], output: Path) -> Product:
    """The library, its digest, its header and dlrt.h copied beside each other at `output`,
    each atomically (the library before its digest: dlvm.load reads both again when they
    disagree, as they do for a moment while a library is replaced)."""
    header = output.with_suffix(".h")
    targets = [output, digest_path(output), header, output.parent / "dlrt.h"]
    for name, target in zip(files, targets, strict=True):
        try:
            install(file(name), target)
        except OSError as e:
            raise BuildFailure(f"cannot write {target}: {e.strerror}") from None
    return Product(library=output, header=header)


def _store(
    cache: Cache,
    key: str,
    files: dict[str, str | bytes],
    report: dict[str, Any],
    warn: Callable[[str], None],
) -> None:
    try:
        workspace = cache.workspace()
        for name, data in files.items():
            raw = data.encode("utf-8") if isinstance(data, str) else data
            write_atomically(workspace / name, raw)
        cache.store(key, workspace, list(files), _cacheable(report))
    except (CacheError, OSError) as e:
        warn(str(e))


def _cacheable(report: dict[str, Any]) -> dict[str, Any]:
    # Where the sources were and which key found the entry belong to each build, not the entry.
    return {k: v for k, v in report.items() if k not in ("sources", "key", "cache")}


def _add_time(timings: Timings, stage: str, seconds: float) -> None:
    for i, (name, before) in enumerate(timings.stages):
        if name == stage:
            timings.stages[i] = (name, before + seconds)
            return
    timings.stages.append((stage, seconds))


def model_text(path: str, onnx: OnnxOptions | None) -> tuple[str, str]:
    """The path and text of the TEL model `path` is: the file itself, or for an ONNX file the
    model that uses it (telc/onnx_use.py), as `model.onnx.tel` beside it, which no file is."""
    if not path.endswith(".onnx"):
        return path, read_text(path)
    try:
        data = read_bytes(path, MAX_ONNX_BYTES, "an ONNX model")
    except Unreadable as e:
        raise DiagnosticError([Diagnostic(f"{path}: {e.reason}")]) from None
    return path + ".tel", model_source(path, data, onnx or OnnxOptions())


def _cc_identity() -> str:
    """The C compiler a library is linked with (dlvm.c_compiler: $CC as the build splits it):
    its words and the first line of its `--version` (a compiler that does not run, or a $CC
    that does not parse, is left for the build to report)."""
    try:
        return _identity(c_compiler())
    except ValueError as e:
        return f"unavailable: {e}"


@functools.cache
def _identity(command: tuple[str, ...]) -> str:
    text = shlex.join(command)
    try:
        done = subprocess.run([*command, "--version"], capture_output=True, text=True, check=False)
        lines = (done.stdout or done.stderr).strip().splitlines()
        return f"{text}\n{done.returncode}\n{lines[0] if lines else ''}"
    except OSError as e:
        return f"{text}\nunavailable: {e}"
