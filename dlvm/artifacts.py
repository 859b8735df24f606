"""The compiler's own cache: what telc and dlc make for themselves whatever the model (the C
runtime's objects, dlvm.runtime; the TEL parser's tables, telc.syntax), kept per user under keys
of everything that decides them. It is not the build cache of finished libraries
(telc/cache.py): `telc build --no-cache` still uses it. Files appear whole (a temporary name,
then a rename) and checked files are verified when read, so concurrent builds never see half a
file and a damaged one is made again instead of used."""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the checkout: telc/, dlvm/, runtime/


def cache_dir() -> Path:
    """$DLVM_CACHE_DIR, else $XDG_CACHE_HOME/dlvm, else ~/.cache/dlvm."""
    if override := os.environ.get("DLVM_CACHE_DIR"):
        return Path(override)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "dlvm"


def write_atomically(path: Path, data: bytes) -> None:
    """Writes `data` to `path` through a temporary file beside it and a rename; OSError if it
    cannot (nothing is left behind)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(temp, path)
    finally:
        if os.path.exists(temp):
            os.unlink(temp)


def compiler_files() -> list[Path]:
    """The files that make up the compiler: a change to any of them changes every key that
    depends on the compiler (telc's build cache, NNKit's compiled functions)."""
    files = [*ROOT.glob("telc/**/*.py"), *ROOT.glob("telc/**/*.lark"), *ROOT.glob("dlvm/**/*.py")]
    files += [*ROOT.glob("runtime/include/*"), *ROOT.glob("runtime/src/*")]
    return sorted(f for f in files if f.is_file())


@functools.cache
def compiler_digest() -> str:
    """SHA-256 of compiler_files(): each file's path and bytes, length-prefixed."""
    h = hashlib.sha256()
    for path in compiler_files():
        for part in (path.relative_to(ROOT).as_posix().encode(), path.read_bytes()):
            h.update(len(part).to_bytes(8, "little"))
            h.update(part)
    return h.hexdigest()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_checked(path: Path, payload: bytes) -> None:
    """Stores `payload` with its checksum (read_checked verifies it); OSError if it cannot."""
    write_atomically(path, sha256(payload).encode() + b"\n" + payload)


def read_checked(path: Path) -> bytes | None:
    """The payload write_checked stored at `path`; None when there is none or it is damaged."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    digest, _, payload = data.partition(b"\n")
    return payload if digest == sha256(payload).encode() else None
