"""The build cache: finished builds (a library with its digest and headers, or an emitted LLVM
module or object) kept under a key of everything that decides their bytes: the sources (the root
file and every file it `use`s), the options, and the compiler's version and own source files. An
unchanged model rebuilds instantly; any change of source, option or compiler builds afresh.
Entries and installed files appear atomically (temporary name + rename), so concurrent builds
never see half a file; an entry whose files lost the bytes they were stored with is built
again."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import platform
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlvm.artifacts import ROOT, compiler_digest, compiler_files  # noqa: F401 - re-exported
from telc import __version__
from telc.driver import BuildOptions
from telc.program import Program

# Part of every key: bump it when what an entry holds changes (2: a library's digest file, and
# each file's SHA-256 in META).
FORMAT = "telc-cache-2"
META = "telc-cache.json"
MAX_ENTRIES = 128  # least recently used entries beyond this are removed after each store


def cache_root() -> Path:
    """$TELC_CACHE_DIR, else $XDG_CACHE_HOME/telc, else ~/.cache/telc."""
    if override := os.environ.get("TELC_CACHE_DIR"):
        return Path(override)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "telc"


@functools.cache
def compiler_version() -> str:
    """`telc 0.1.0+HASH`: the package version and a hash of the compiler's files
    (dlvm.artifacts.compiler_files)."""
    return f"telc {__version__}+{compiler_digest()[:12]}"


def build_key(
    program: Program, options: BuildOptions, emit: str, output_name: str, cc: str = ""
) -> str:
    """The key of a build of `program`: never of where the files are, so a moved project still
    hits. `output_name` (the library's file name, its soname) and `cc` (the C compiler's command
    and identity) matter for libraries only."""
    digest = _Digest()
    digest.add(FORMAT, compiler_version(), _llvmlite_version())
    for unit in program.units:  # the root first, then every module it uses
        digest.add(os.path.basename(unit.path), unit.source.text)
    digest.add(emit, *options.flags())
    if options.cpu == "native" and emit in ("llvm", "obj", "so"):
        digest.add(host_cpu())
    if emit == "so":
        digest.add(output_name, cc)
    return digest.hex()[:32]


@functools.cache
def host_cpu() -> str:
    """This machine's CPU model and features, which `--cpu native` compiles for (read without
    loading LLVM, so a cache hit stays fast)."""
    model, flags = "", ""
    with contextlib.suppress(OSError):
        for line in (
            Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines()
        ):
            name, _, value = line.partition(":")
            name = name.strip()
            if name in ("model name", "cpu model") and not model:
                model = value.strip()
            elif name in ("flags", "Features", "isa") and not flags:
                flags = value.strip()
    return f"{platform.machine()} {model or platform.processor()} {flags}"


@functools.cache
def _llvmlite_version() -> str:
    import importlib.metadata  # only for a key: a build without the cache does not pay for it

    try:
        return importlib.metadata.version("llvmlite")
    except importlib.metadata.PackageNotFoundError:
        return ""


class _Digest:
    def __init__(self) -> None:
        self._h = hashlib.sha256()

    def add(self, *parts: str | bytes) -> None:
        for part in parts:
            data = part.encode("utf-8") if isinstance(part, str) else part
            self._h.update(len(data).to_bytes(8, "little"))
            self._h.update(data)

    def hex(self) -> str:
        return self._h.hexdigest()


class CacheError(Exception):
    """The cache directory cannot be used; the build goes on without it."""


@dataclass
class Entry:
    """A finished build in the cache: `files` (names in `path`) and what the build reported."""

    key: str
    path: Path
    files: list[str]
    report: dict[str, Any]

    def file(self, name: str) -> Path:
        return self.path / name


class Cache:
    """Entries are directories `ROOT/KEY` holding the build's files and META, which is written
    last: a directory without it is not an entry. A build is made in `workspace()` and moved
    into place whole by `store`."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root if root is not None else cache_root()

    def lookup(self, key: str) -> Entry | None:
        """The entry for `key`: None when there is none, or when a file of it is missing or
        no longer has the bytes it was stored with (a damaged entry is built again)."""
        path = self.root / key
        try:
            meta = json.loads((path / META).read_text(encoding="utf-8"))
            if meta.get("format") != FORMAT or any(
                hashlib.sha256((path / f).read_bytes()).hexdigest() != meta["sha256"].get(f)
                for f in meta["files"]
            ):
                return None
            os.utime(path)  # recently used: pruned last
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
        return Entry(key, path, list(meta["files"]), dict(meta.get("report", {})))

    def workspace(self) -> Path:
        """A new private directory inside the cache to build in; CacheError if there is none."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            return Path(tempfile.mkdtemp(prefix=".build-", dir=self.root))
        except OSError as e:
            raise CacheError(f"cannot use the cache {self.root}: {e.strerror}") from None

    def store(self, key: str, workspace: Path, files: list[str], report: dict[str, Any]) -> Entry:
        """Turns `workspace` (holding `files`) into the entry for `key`. When another build
        stored the same key first, that entry is kept (the builds are byte-identical) and the
        workspace removed; a damaged entry is replaced. CacheError leaves the workspace."""
        target = self.root / key
        try:
            digests = {f: hashlib.sha256((workspace / f).read_bytes()).hexdigest() for f in files}
            meta = {"format": FORMAT, "compiler": compiler_version(), "files": files,
                    "sha256": digests, "report": report}  # fmt: skip
            (workspace / META).write_text(json.dumps(meta, indent=1), encoding="utf-8")
        except OSError as e:
            raise CacheError(f"cannot write to the cache {self.root}: {e.strerror}") from None
        for _ in range(2):
            try:
                os.rename(workspace, target)
            except OSError:
                found = self.lookup(key)
                if found is not None:
                    shutil.rmtree(workspace, ignore_errors=True)
                    return found
                _remove(target)  # damaged (a file lost, or META unreadable): replace it
                continue
            self.prune()
            return Entry(key, target, files, report)
        raise CacheError(f"cannot store a build in the cache {self.root}")

    def entries(self) -> list[Path]:
        """Every entry's directory, most recently used first."""
        try:
            found = [p for p in self.root.iterdir() if (p / META).is_file()]
        except OSError:
            return []
        return sorted(found, key=_mtime, reverse=True)

    def prune(self, keep: int = MAX_ENTRIES) -> None:
        """Removes the least recently used entries beyond `keep`, and workspaces abandoned for
        a day (by a build that was killed)."""
        for old in self.entries()[keep:]:
            _remove(old)
        with contextlib.suppress(OSError):
            for p in self.root.glob(".build-*"):
                if time.time() - _mtime(p) > 86400:
                    _remove(p)

    def clear(self) -> int:
        """Removes every entry; the number removed."""
        found = self.entries()
        for p in found:
            _remove(p)
        return len(found)

    def size(self) -> int:
        """The bytes the entries take."""
        return sum(f.stat().st_size for p in self.entries() for f in p.iterdir() if f.is_file())


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _remove(path: Path) -> None:
    # Renamed away first, so a reader never sees an entry with some of its files gone.
    doomed = path.with_name(f".remove-{path.name}-{os.getpid()}")
    try:
        os.rename(path, doomed)
    except OSError:
        return
    shutil.rmtree(doomed, ignore_errors=True)


def install(source: Path, target: Path) -> None:
    """Copies `source` to `target` atomically: a reader sees the old file or the new one whole.
    The copy keeps source's permission bits (a library stays executable)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{target.name}.{os.getpid()}-{time.monotonic_ns()}.tmp")
    try:
        shutil.copyfile(source, temp)
        shutil.copymode(source, temp)
        os.replace(temp, target)
    finally:
        if temp.exists():
            temp.unlink()


def write_atomically(target: Path, data: bytes) -> None:
    """Writes `data` to `target` through a temporary file in the same directory and a rename."""
    temp = target.with_name(f".{target.name}.{os.getpid()}-{time.monotonic_ns()}.tmp")
    try:
        with open(temp, "xb") as f:  # created with the umask's permissions, like a plain write
            f.write(data)
        os.replace(temp, target)
    finally:
        if temp.exists():
            temp.unlink()
