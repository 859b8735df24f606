"""A library file checked before dlopen maps it (docs/c-abi.md section 8): the digest its build
recorded beside it (NAME.so.sha256, in `sha256sum`'s format: every build writes one), and the
ELF structure ld.so trusts, each range it names within the file. A damaged file is refused here,
in Python, rather than crashing the process inside ld.so or at its first call."""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from pathlib import Path

from dlvm.elf import ElfError, check_header, read_elf
from dlvm.elf_dynamic import check_dynamic

DIGEST_SUFFIX = ".sha256"


class Refused(Exception):
    """Why a file is not loaded: not a library this process may load, or not as it was built."""


def digest_path(library: str | os.PathLike[str]) -> Path:
    """Where the digest of the library at `library` is: NAME.so.sha256 beside it."""
    return Path(os.fspath(library) + DIGEST_SUFFIX)


def write_library(path: Path, data: bytes) -> None:
    """Writes the library `data` at `path`, then its digest at digest_path(path), each through a
    temporary file and a rename: a reader sees the old file or the new one whole, never part of
    one (and a process that maps the old library keeps its pages, where writing over it in
    place would crash that process). OSError if either cannot be written."""
    digest = f"{hashlib.sha256(data).hexdigest()}  {path.name}\n"
    _replace(path, data)
    _replace(digest_path(path), digest.encode())


def _replace(target: Path, data: bytes) -> None:
    temp = target.with_name(f".{target.name}.{os.getpid()}-{time.monotonic_ns()}.tmp")
    try:
        with open(temp, "xb") as f:  # the umask's permissions, as a plain write would give
            f.write(data)
        os.replace(temp, target)
    finally:
        if temp.exists():
            temp.unlink()


# What has passed, by the files' identities (device, inode, size, times): loading one library
# again costs two stat calls, not a digest. A file replaced or written to has a new identity.
# The identity is the one of the bytes read (fstat of the open file), so a file replaced while
# it was read is checked again next time.
_passed: set[tuple[object, ...]] = set()
_RETRIES = 3  # a library replaced while read, then its digest: read both again


def check_library(path: str, verify: bool | None = None) -> None:
    """Raises Refused unless the file at `path` is an ELF shared library of this
    process's class, byte order and machine, and either matches its digest file byte for byte
    or, without one, has headers and a dynamic table that name only ranges within it and
    within its loaded segments (dlvm.elf, dlvm.elf_dynamic). `verify`: None (the default)
    checks the digest where there is one, True requires one, False reads none. OSError when
    the library cannot be read."""
    digest = path + DIGEST_SUFFIX
    with contextlib.suppress(OSError):  # unreadable: reported below, by open
        if (verify, _identity(os.stat(path)), _digest_identity(digest, verify)) in _passed:
            return
    for attempt in range(_RETRIES):
        with open(path, "rb") as f:
            identity = (verify, _identity(os.fstat(f.fileno())), _digest_identity(digest, verify))
            data = f.read()
        expected = _expected(digest, verify)
        actual = hashlib.sha256(data).hexdigest() if expected is not None else None
        if actual == expected:
            break
        if attempt == _RETRIES - 1:
            assert actual is not None and expected is not None
            raise Refused(
                f"does not match its digest {os.path.basename(digest)} (SHA-256 {actual[:16]}…, "
                f"recorded {expected[:16]}…): damaged or changed since it was built; build it "
                "again, or load it with verify=False"
            )
        time.sleep(0.01 * (attempt + 1))
    try:
        if expected is None:
            check_dynamic(data, read_elf(data))  # without a digest, the structure is all
        else:
            check_header(data)  # the digest vouches for the linker's bytes; is it for us?
    except ElfError as e:
        raise Refused(str(e)) from None
    _passed.add(identity)


def _identity(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _digest_identity(digest: str, verify: bool | None) -> tuple[int, ...] | None:
    if verify is False:
        return None
    try:
        return _identity(os.stat(digest))
    except OSError:
        return None


def _expected(digest: str, verify: bool | None) -> str | None:
    """The SHA-256 recorded in the digest file (hex), or None when it is not to be checked."""
    if verify is False:
        return None
    name = os.path.basename(digest)
    try:
        with open(digest, "rb") as f:
            text = f.read(4096).decode("ascii")
    except FileNotFoundError:
        if verify:
            raise Refused(
                f"has no digest {name} beside it (verify=True requires one; every build writes it)"
            ) from None
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise Refused(f"its digest {name} cannot be read ({e})") from None
    words = text.split()
    if not words or len(words[0]) != 64 or not set(words[0]) <= _HEX:
        raise Refused(f"its digest {name} is not a SHA-256 line (`sha256sum` format)")
    return words[0]


_HEX = frozenset("0123456789abcdef")
