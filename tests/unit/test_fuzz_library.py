"""The library-file fuzzer: mutants of a real library (bits flipped, bytes overwritten, inserted
or appended, pages zeroed, the file cut short, header fields set past its end), each loaded
through dlvm.load in another process (loadprobe), which must refuse it with a LibraryFileError:
never load it, crash or hang. With its digest beside it, any change is refused; without one, the
structure is all there is to check, and every truncation and every header range past the end of
the file is refused (what structure cannot show, code and data with the wrong bytes, is left to
the digest: docs/c-abi.md section 8)."""

from __future__ import annotations

import hashlib
import shutil
import struct
from pathlib import Path

import pytest
from fuzzing import fuzz_settings
from hypothesis import assume, given
from hypothesis import strategies as st
from loadprobe import LoadProbe

from dlvm.library_check import digest_path


@pytest.fixture(scope="module")
def original(sample_library, tmp_path_factory) -> Path:
    """samples/xor.tel's library and its digest, in a directory of this module's own."""
    built = sample_library("xor")
    path = tmp_path_factory.mktemp("fuzz-library") / "xor.so"
    shutil.copy(built, path)
    shutil.copy(digest_path(built), digest_path(path))
    return path


@pytest.fixture(scope="module")
def probe():
    p = LoadProbe((4, 2))
    yield p
    p.close()


def mutant(original: Path, data: bytes, digest: bool) -> Path:
    path = original.with_name(f"m-{hashlib.sha256(data).hexdigest()[:16]}.so")
    path.write_bytes(data)
    if digest:
        shutil.copy(digest_path(original), digest_path(path))
    return path


def outcome(probe: LoadProbe, original: Path, data: bytes, digest: bool) -> str:
    """What loading `data` as a library gives; the mutant is kept when it crashed or hung."""
    path = mutant(original, data, digest)
    result = probe(path, "default" if digest else "off")
    if result.startswith("refused"):
        path.unlink()
        digest_path(path).unlink(missing_ok=True)
    return result


@st.composite
def mutations(draw: st.DrawFn, size: int) -> tuple[str, tuple[int | bytes, ...]]:
    kind = draw(st.sampled_from(["flip", "overwrite", "insert", "append", "zero", "truncate"]))
    position = draw(st.integers(0, size - 1))
    if kind == "flip":
        return kind, (position, 1 << draw(st.integers(0, 7)), draw(st.integers(0, 3)))
    if kind == "zero":
        return kind, (position & ~0xFFF,)
    if kind == "truncate":
        return kind, (position,)
    return kind, (position, draw(st.binary(min_size=1, max_size=64)))


def mutate(data: bytes, kind: str, args: tuple[int | bytes, ...]) -> bytes:
    out = bytearray(data)
    if kind == "flip":  # a bit, and as many more bits further on
        position, bit, more = args
        assert isinstance(position, int) and isinstance(bit, int) and isinstance(more, int)
        for i in range(more + 1):
            out[(position + 4099 * i) % len(out)] ^= bit
    elif kind == "zero":
        (start,) = args
        assert isinstance(start, int)
        out[start : start + 0x1000] = bytes(len(out[start : start + 0x1000]))
    elif kind == "truncate":
        (position,) = args
        assert isinstance(position, int)
        del out[position:]
    else:
        position, blob = args
        assert isinstance(position, int) and isinstance(blob, bytes)
        if kind == "overwrite":
            out[position : position + len(blob)] = blob
        elif kind == "insert":
            out[position:position] = blob
        else:
            out += blob
    return bytes(out)


@fuzz_settings(40, 4000)
@given(data=st.data())
def test_any_change_to_a_library_with_its_digest_is_refused(original, probe, data):
    library = original.read_bytes()
    kind, args = data.draw(mutations(len(library)))
    damaged = mutate(library, kind, args)
    assume(damaged != library)
    result = outcome(probe, original, damaged, digest=True)
    assert result.startswith("refused does not match its digest"), (kind, args, result)


@fuzz_settings(30, 3000)
@given(data=st.data())
def test_any_truncation_without_a_digest_is_refused(original, probe, data):
    library = original.read_bytes()
    keep = data.draw(st.integers(0, len(library) - 1))
    result = outcome(probe, original, library[:keep], digest=False)
    assert result.startswith("refused "), (keep, result)


def extent_fields(library: bytes) -> list[tuple[int, str, int]]:
    """Each field of the ELF header, program headers and section headers that says where in
    the file something is or how long it is, as (offset, struct format, the least value that
    puts that thing past the end of the file)."""
    size = len(library)
    phoff, shoff = struct.unpack_from("<QQ", library, 0x20)
    (phnum,) = struct.unpack_from("<H", library, 0x38)
    (shnum,) = struct.unpack_from("<H", library, 0x3C)
    fields = [
        (0x20, "<Q", size - 56 * phnum + 1),
        (0x28, "<Q", size - 64 * shnum + 1),
        (0x38, "<H", (size - phoff) // 56 + 1),
        (0x3C, "<H", (size - shoff) // 64 + 1),
    ]
    for at in range(phoff, phoff + 56 * phnum, 56):  # p_offset, p_filesz; not of PT_NULL
        kind, offset, length = struct.unpack_from("<I4xQ16xQ", library, at)
        if kind:
            fields += [(at + 8, "<Q", size - length + 1), (at + 32, "<Q", size - offset + 1)]
    for at in range(shoff + 64, shoff + 64 * shnum, 64):  # sh_offset, sh_size; not of NOBITS
        kind, offset, length = struct.unpack_from("<4xI16xQQ", library, at)
        if kind != 8:
            fields += [(at + 24, "<Q", size - length + 1), (at + 32, "<Q", size - offset + 1)]
    return fields


@fuzz_settings(30, 3000)
@given(data=st.data())
def test_header_ranges_past_the_end_of_the_file_are_refused_without_a_digest(original, probe, data):
    library = original.read_bytes()
    offset, fmt, least = data.draw(st.sampled_from(extent_fields(library)))
    value = data.draw(st.integers(least, (1 << (8 * struct.calcsize(fmt))) - 1))
    damaged = bytearray(library)
    struct.pack_into(fmt, damaged, offset, value)
    result = outcome(probe, original, bytes(damaged), digest=False)
    assert result.startswith("refused "), (offset, value, result)
