"""The ELF structure checks (dlvm.elf, dlvm.elf_dynamic), in this process (they only read bytes):
real libraries pass, and each kind of damage they are for is refused with its reason. That a
refusal comes before ld.so sees the file, and a crash never, is test_library_check.py's."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from dlvm.elf import ElfError, read_elf
from dlvm.elf_dynamic import check_dynamic


@pytest.fixture
def xor(sample_library, tmp_path: Path) -> Path:
    built = sample_library("xor")
    path = tmp_path / "xor.so"
    shutil.copy(built, path)
    return path


def check(data: bytes) -> None:
    check_dynamic(data, read_elf(data))


def patched(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


def test_every_section_must_lie_within_the_file(xor: Path):
    data = xor.read_bytes()
    shoff, shnum = struct.unpack_from("<Q", data, 0x28)[0], struct.unpack_from("<H", data, 0x3C)[0]
    for i in range(1, shnum):
        size_at = shoff + 64 * i + 32
        if struct.unpack_from("<I", data, shoff + 64 * i + 4)[0] == 8:  # NOBITS: no bytes
            continue
        with pytest.raises(ElfError, match="truncated or damaged: section"):
            check(patched(data, size_at, "<Q", len(data)))


def test_the_structure_of_real_libraries_passes(xor: Path):
    """No false alarm: the checks hold for this library and for NumPy's and ctypes' own."""
    import _ctypes

    found = sorted(Path(np.__file__).parent.rglob("*.so"))[:8] + [Path(_ctypes.__file__)]
    for path in [xor, *found]:
        data = path.read_bytes()
        check_dynamic(data, read_elf(data))


def dynamic_entry(data: bytes, tag: int) -> int:
    """Where in the file the dynamic table's entry `tag` is (its tag; its value 8 bytes on)."""
    image = read_elf(data)
    (dynamic,) = [s for s in image.segments if s.type == 2]
    for at in range(dynamic.offset, dynamic.offset + dynamic.filesz, 16):
        if struct.unpack_from("<q", data, at)[0] == tag:
            return at
    raise AssertionError(f"no dynamic entry {tag:#x}")


@pytest.mark.parametrize(
    "tag, value, message",
    [
        (6, 1 << 40, "dynamic entry 0x6 points outside the loaded segments"),  # DT_SYMTAB
        (6, 0x10, "dynamic entry 0x6 is not where its section is"),
        (5, 1 << 40, "dynamic table 0x5 lies outside the loaded segments"),  # DT_STRTAB
        (7, 0x1000, "dynamic entry 0x7 is not made of whole sections of its kind"),  # DT_RELA
        (9, 16, "the dynamic table gives wrong record sizes"),  # DT_RELAENT
        (20, 17, "the dynamic table gives a relocation kind this machine has not"),  # DT_PLTREL
        (0x6FFFFFF9, 1 << 20, "counts more relocations than its table holds"),  # DT_RELACOUNT
    ],
)
def test_a_damaged_dynamic_table_is_refused(xor: Path, tag: int, value: int, message: str):
    data = xor.read_bytes()
    with pytest.raises(ElfError, match=message):
        check(patched(data, dynamic_entry(data, tag) + 8, "<Q", value))


def test_a_lost_dynamic_entry_is_refused(xor: Path):
    """An entry whose tag was damaged is one ld.so no longer sees: the relocations it named
    would not be applied (DT_RELA), or an assertion in ld.so would abort (DT_RELAENT)."""
    data = xor.read_bytes()
    for tag, message in [(7, "section is missing from the dynamic table"),
                         (9, "lacks the entries that go with it")]:  # fmt: skip
        with pytest.raises(ElfError, match=message):
            check(patched(data, dynamic_entry(data, tag), "<q", 0x7FFF0000))
