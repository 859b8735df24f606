"""What dlvm.load checks before dlopen (dlvm.library_check, dlvm.elf, dlvm.elf_dynamic): a
truncated or damaged library, one for another machine, or one that does not match the digest its
build wrote beside it is refused with a LibraryFileError, never a crash; every load of a damaged
file runs in another process (loadprobe), so that a crash fails the test instead of killing the
worker. Every path that writes a library writes its digest: the build, telc's cache and install,
NNKit's cache."""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
from loadprobe import LoadProbe

import dlvm.library_check as library_check
from dlvm.elf import read_elf
from dlvm.library_check import Refused, check_library, digest_path
from dlvm.loader import LibraryError, LibraryFileError, load
from telc import cache
from telc.build import produce
from telc.driver import BuildOptions
from telc.run import RunError, execute

XOR_INPUT = (4, 2)  # samples/xor.tel: infer(x: f32[4 x 2]) -> y


@pytest.fixture(scope="module")
def probe():
    p = LoadProbe(XOR_INPUT)
    yield p
    p.close()


@pytest.fixture
def xor(sample_library, tmp_path: Path) -> Path:
    """A copy of samples/xor.tel's library, with its digest, in this test's directory."""
    built = sample_library("xor")
    path = tmp_path / "xor.so"
    shutil.copy(built, path)
    shutil.copy(digest_path(built), digest_path(path))
    return path


def damaged(path: Path, data: bytes, digest: bool = True) -> Path:
    """`data` written as a library beside `path`, with path's digest (or without one)."""
    target = path.with_name(f"damaged-{hashlib.sha256(data).hexdigest()[:12]}.so")
    target.write_bytes(data)
    if digest:
        shutil.copy(digest_path(path), digest_path(target))
    return target


def test_every_build_writes_the_librarys_digest_beside_it(xor: Path):
    line = digest_path(xor).read_text()
    assert line == f"{hashlib.sha256(xor.read_bytes()).hexdigest()}  xor.so\n"
    if shutil.which("sha256sum"):
        subprocess.run(["sha256sum", "--check", "--quiet", "xor.so.sha256"], cwd=xor.parent,
                       check=True)  # fmt: skip


def test_an_intact_library_loads_with_and_without_its_digest(xor: Path, probe):
    expected = probe(xor)
    assert expected.startswith("loaded ")
    assert probe(xor, "required") == probe(xor, "off") == expected
    digest_path(xor).unlink()  # built by an older telc, or copied alone
    assert probe(xor) == expected
    assert probe(xor, "required").startswith("refused has no digest xor.so.sha256 beside it")


@pytest.mark.parametrize("keep", [0, 15, 63, 64, 600, 4096, 50_000, -4096, -1])
@pytest.mark.parametrize("digest", [True, False], ids=["digest", "no-digest"])
def test_a_truncated_library_is_refused_not_a_crash(xor: Path, probe, keep: int, digest: bool):
    """ld.so maps the segments of a truncated file past its end: SIGBUS at the first touch."""
    data = xor.read_bytes()
    path = damaged(xor, data[:keep], digest)
    outcome = probe(path, "default" if digest else "off")
    assert outcome.startswith("refused "), outcome
    if digest:
        assert "does not match its digest" in outcome
    else:
        assert "truncated" in outcome or "not an ELF file" in outcome


def offset_of(data: bytes, name: bytes) -> int:
    """Where the named symbol's code starts in the file (its st_value: the code segment maps
    the file one to one in these libraries)."""
    image = read_elf(data)
    (dynsym,) = [s for s in image.sections if s.type == 11]
    strtab = image.sections[dynsym.link]
    for i in range(dynsym.size // 24):
        st_name, _, _, _, value, _ = struct.unpack_from("<IBBHQQ", data, dynsym.offset + 24 * i)
        start = strtab.offset + st_name
        if data[start : data.index(b"\0", start)] == name:
            return value
    raise AssertionError(f"no symbol {name!r}")


def test_a_library_with_flipped_bytes_is_refused_by_its_digest(xor: Path, probe):
    """Bytes of code the structure says nothing about: without the digest, the entry runs them
    (the process dies of SIGILL or SIGSEGV); with it, nothing is loaded."""
    data = bytearray(xor.read_bytes())
    start = offset_of(bytes(data), b"xor_create")
    data[start : start + 16] = b"\x0f\x0b" * 8  # ud2: an illegal instruction, where create begins
    path = damaged(xor, bytes(data))
    outcome = probe(path)
    assert outcome.startswith(f"refused does not match its digest {path.name}.sha256"), outcome
    assert "build it again, or load it with verify=False" in outcome
    assert probe(path, "off").startswith("crashed")  # what the digest is for


def test_a_damaged_digest_is_refused_and_verify_false_skips_it(xor: Path, probe):
    digest_path(xor).write_text("not a digest\n")
    assert probe(xor).startswith("refused its digest xor.so.sha256 is not a SHA-256 line")
    assert probe(xor, "off").startswith("loaded ")


def test_a_library_changed_after_its_build_is_refused_unless_verify_is_false(xor: Path, probe):
    with open(xor, "ab") as f:
        f.write(b"\0" * 64)  # harmless to ld.so: only the digest sees it
    assert probe(xor).startswith("refused does not match its digest")
    assert probe(xor, "off").startswith("loaded ")


def header_patched(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


@pytest.mark.parametrize(
    "offset, fmt, value, message",
    [
        (0, "<I", 0x464C457E, "not an ELF file"),
        (4, "<B", 1, "a 32-bit library; this process is 64-bit"),
        (5, "<B", 2, "a library of the other byte order"),
        (16, "<H", 2, "not a shared library (ELF type 2)"),
        (18, "<H", 183, "built for AArch64; this process runs on x86-64"),
        (0x20, "<Q", 1 << 40, "truncated or damaged: its program headers end at byte"),
        (0x28, "<Q", 1 << 40, "truncated or damaged: its section headers end at byte"),
        (0x38, "<H", 0xFFFF, "truncated or damaged: its program headers end at byte"),
        (0x3C, "<H", 0xFFFF, "truncated or damaged: its section headers end at byte"),
        (64 + 8, "<Q", 1 << 40, "truncated or damaged: segment 0 ends at byte"),
        (64 + 32, "<Q", 1 << 40, "truncated or damaged: segment 0 ends at byte"),
    ],
)
def test_headers_that_do_not_fit_this_process_or_the_file_are_refused(
    xor: Path, probe, offset: int, fmt: str, value: int, message: str
):
    if os.uname().machine != "x86_64" and "AArch64" in message:
        pytest.skip("the message names this machine")
    path = damaged(xor, header_patched(xor.read_bytes(), offset, fmt, value), digest=False)
    outcome = probe(path, "off")
    assert outcome.startswith(f"refused {message}"), outcome


def test_a_second_load_of_an_unchanged_file_is_not_read_again(xor: Path, monkeypatch):
    check_library(str(xor))
    monkeypatch.setattr(library_check.hashlib, "sha256", None)  # would fail if called
    check_library(str(xor))
    monkeypatch.undo()
    data = bytearray(xor.read_bytes())
    data[-1] ^= 1
    xor.write_bytes(bytes(data))  # in place: a new modification time
    with pytest.raises(Refused, match="does not match its digest"):
        check_library(str(xor))


def test_a_library_replaced_between_its_digest_and_itself_is_read_again(xor: Path, monkeypatch):
    """A build replaces the library, then its digest: a reader between the two renames sees
    them disagree, and reads both again."""
    right = digest_path(xor).read_text()
    digest_path(xor).write_text(f"{'0' * 64}  xor.so\n")
    waits = []

    def sleep(seconds: float) -> None:  # the build installs the digest meanwhile
        waits.append(seconds)
        digest_path(xor).write_text(right)

    monkeypatch.setattr(library_check.time, "sleep", sleep)
    check_library(str(xor))
    assert len(waits) == 1


def test_load_raises_a_library_file_error_and_telc_run_says_cannot_load(xor: Path):
    data = xor.read_bytes()
    path = damaged(xor, data[: len(data) // 2], digest=False)
    with pytest.raises(LibraryFileError, match="truncated or damaged") as e:
        load(path)
    assert isinstance(e.value, LibraryError) and e.value.status == 5  # DLRT_ERR_FORMAT
    assert e.value.path == str(path) and str(e.value).startswith(f"{path}: ")
    with pytest.raises(RunError, match=f"^cannot load {path}: truncated or damaged"):
        execute(path, None, {}, 0, 1, None, None, lambda step, loss: None)


def test_a_build_replaces_the_library_and_its_digest_by_renames(tmp_path: Path):
    """A process that maps the old library keeps its bytes (writing over it in place would
    change them under that process); no temporary file is left."""
    from telhelp import build_sample

    first = build_sample("xor", tmp_path)
    inode = first.stat().st_ino
    with load(first) as model:
        build_sample("xor", tmp_path)
        assert first.stat().st_ino != inode
        assert model.infer(np.ones(XOR_INPUT, np.float32)).shape == (4, 1)
    check_library(str(first), verify=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "dlrt.h", "xor.h", "xor.so", "xor.so.sha256"
    ]  # fmt: skip


def test_telc_build_installs_the_digest_and_its_cache_keeps_it(tmp_path: Path, telc_cache: Path):
    options = BuildOptions()
    first = produce(
        "samples/xor.tel", "so", options, tmp_path / "a" / "xor.so", cache=cache.Cache()
    )
    again = produce(
        "samples/xor.tel", "so", options, tmp_path / "b" / "xor.so", cache=cache.Cache()
    )
    assert not first.cached and again.cached
    for out in (tmp_path / "a" / "xor.so", tmp_path / "b" / "xor.so"):
        check_library(str(out), verify=True)
    assert digest_path(tmp_path / "b" / "xor.so").read_text().endswith("  xor.so\n")


def test_a_damaged_library_in_telc_s_cache_is_built_again(tmp_path: Path, telc_cache: Path):
    options = BuildOptions()
    out = tmp_path / "xor.so"
    produce("samples/xor.tel", "so", options, out, cache=cache.Cache())
    [entry] = [p for p in telc_cache.iterdir() if (p / cache.META).is_file()]
    stored = bytearray((entry / "xor.so").read_bytes())
    stored[len(stored) // 2] ^= 0xFF
    (entry / "xor.so").write_bytes(bytes(stored))  # the disk lost a bit
    again = produce("samples/xor.tel", "so", options, out, cache=cache.Cache())
    assert not again.cached
    check_library(str(out), verify=True)
    assert produce("samples/xor.tel", "so", options, out, cache=cache.Cache()).cached
