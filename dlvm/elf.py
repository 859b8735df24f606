"""An ELF shared library's file structure, read and checked in pure Python before ld.so reads it:
the header (an ELF shared library of this process's class, byte order and machine), the program
headers and the section headers, each range they name within the file (ld.so maps past the end
of a truncated file, and the process gets SIGBUS at the first touch) and each allocated section
where the loadable segments put it, with their permissions. The dynamic table is
dlvm/elf_dynamic.py's. What neither can see, code and data of the right shape with the wrong
bytes, is the digest's job (dlvm.library_check)."""

from __future__ import annotations

import functools
import struct
import sys
from dataclasses import dataclass
from typing import Literal, NamedTuple

ET_DYN = 3
PT_LOAD, PT_DYNAMIC, PT_TLS, PT_GNU_RELRO = 1, 2, 7, 0x6474E552
PAGE = 0x1000  # the smallest page of the machines we know: a bound, not the page size
PF_X, PF_W = 1, 2
SHT_NOBITS = 8
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR, SHF_TLS = 0x1, 0x2, 0x4, 0x400
MACHINES = {3: "x86", 8: "MIPS", 20: "PowerPC", 21: "PowerPC64", 22: "S/390", 40: "ARM",
            62: "x86-64", 183: "AArch64", 243: "RISC-V", 258: "LoongArch"}  # fmt: skip


class ElfError(ValueError):
    """The file is not an intact ELF shared library for this process; the message says why."""


class Segment(NamedTuple):
    type: int
    flags: int
    offset: int
    vaddr: int
    filesz: int
    memsz: int
    align: int

    def holds(self, address: int, size: int) -> bool:
        """Whether [address, address + size) lies within the segment's memory."""
        return self.vaddr <= address and address + size <= self.vaddr + self.memsz


class Section(NamedTuple):
    name: int
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int

    @property
    def loaded(self) -> bool:
        """Whether it takes room in a loadable segment (.tbss takes none)."""
        return bool(self.flags & SHF_ALLOC and self.size) and not (
            self.flags & SHF_TLS and self.type == SHT_NOBITS
        )


@dataclass(frozen=True)
class Layout:
    """The record formats of one ELF class (native byte order: the only one checked further)."""

    bits: int
    header: struct.Struct
    segment: struct.Struct
    section: struct.Struct
    dynamic: struct.Struct
    symbol: struct.Struct
    rela: int  # bytes per Elf_Rela
    rel: int
    word: Literal["I", "Q"]  # the memoryview format of an address
    symbol_shift: int  # r_info >> this is the symbol index

    def segment_of(self, record: tuple[int, ...]) -> Segment:
        if self.bits == 64:
            type_, flags, offset, vaddr, _, filesz, memsz, align = record
        else:
            type_, offset, vaddr, _, filesz, memsz, flags, align = record
        return Segment(type_, flags, offset, vaddr, filesz, memsz, align)


LAYOUTS = {
    1: Layout(
        bits=32,
        header=struct.Struct("=16sHHIIIIIHHHHHH"),
        segment=struct.Struct("=IIIIIIII"),
        section=struct.Struct("=IIIIIIIIII"),
        dynamic=struct.Struct("=iI"),
        symbol=struct.Struct("=IIIBBH"),
        rela=12,
        rel=8,
        word="I",
        symbol_shift=8,
    ),
    2: Layout(
        bits=64,
        header=struct.Struct("=16sHHIQQQIHHHHHH"),
        segment=struct.Struct("=IIQQQQQQ"),
        section=struct.Struct("=IIQQQQIIQQ"),
        dynamic=struct.Struct("=qQ"),
        symbol=struct.Struct("=IBBHQQ"),
        rela=24,
        rel=16,
        word="Q",
        symbol_shift=32,
    ),
}
NATIVE_CLASS = 2 if sys.maxsize > 2**32 else 1
NATIVE_DATA = 1 if sys.byteorder == "little" else 2


@functools.cache
def native_machine() -> int | None:
    """This process's e_machine, read from its executable; None where that cannot be read."""
    for exe in ("/proc/self/exe", sys.executable):
        try:
            with open(exe, "rb") as f:
                head = f.read(20)
        except OSError:
            continue
        if head[:4] == b"\x7fELF" and head[4] == NATIVE_CLASS and head[5] == NATIVE_DATA:
            return int(struct.unpack_from("=H", head, 18)[0])
    return None


def machine_name(machine: int) -> str:
    return MACHINES.get(machine, f"machine {machine}")


@dataclass(frozen=True)
class Header:
    """What the ELF header says, once checked against this process."""

    layout: Layout
    machine: int
    phoff: int
    phnum: int
    shoff: int
    shnum: int
    shstrndx: int


def check_header(data: bytes) -> Header:
    """The ELF header of `data`, checked: an ELF shared library this process could load.
    ElfError otherwise."""
    if len(data) < 16 or data[:4] != b"\x7fELF":
        raise ElfError("not an ELF file" + (f" ({len(data)} bytes)" if len(data) < 16 else ""))
    if data[4] not in LAYOUTS or data[5] not in (1, 2) or data[6] != 1:
        raise ElfError("not an ELF file of a known class, byte order and version")
    if data[4] != NATIVE_CLASS:
        bits = LAYOUTS[data[4]].bits
        raise ElfError(f"a {bits}-bit library; this process is {LAYOUTS[NATIVE_CLASS].bits}-bit")
    if data[5] != NATIVE_DATA:
        raise ElfError(f"a library of the other byte order; this process is {sys.byteorder}-endian")
    layout = LAYOUTS[NATIVE_CLASS]
    if len(data) < layout.header.size:
        raise ElfError(f"truncated: {len(data)} bytes, less than an ELF header")
    (_, kind, machine, version, _, phoff, shoff, _, ehsize, phentsize, phnum, shentsize, shnum,
     shstrndx) = layout.header.unpack_from(data)  # fmt: skip
    if kind != ET_DYN:
        raise ElfError(f"not a shared library (ELF type {kind})")
    native = native_machine()
    if native is not None and machine != native:
        raise ElfError(f"built for {machine_name(machine)}; this process runs on "
                       f"{machine_name(native)}")  # fmt: skip
    if version != 1 or ehsize != layout.header.size or phentsize != layout.segment.size:
        raise ElfError("a damaged ELF header (its version or record sizes)")
    if shoff and shentsize != layout.section.size:
        raise ElfError("a damaged ELF header (the size of its section headers)")
    return Header(layout, machine, phoff, phnum, shoff, shnum, shstrndx)


@dataclass(frozen=True)
class Image:
    """A library file's structure, checked (read_elf)."""

    header: Header
    segments: list[Segment]
    loads: list[Segment]
    sections: list[Section]  # none when the file has no section headers (sstrip)


def read_elf(data: bytes) -> Image:
    """The structure of `data`; ElfError unless it is an ELF shared library for this process
    whose headers name only ranges within the file, with loadable segments in order and each
    allocated section where they put it."""
    header = check_header(data)
    layout = header.layout
    records = _records(data, layout.segment, header.phoff, header.phnum, "program headers")
    segments = [layout.segment_of(r) for r in records]
    loads = _check_segments(segments, len(data))
    sections: list[Section] = []
    if header.shoff:
        first = _records(data, layout.section, header.shoff, 1, "section headers")
        count = header.shnum or first[0][5]  # 0: the count is the first section's size
        records = _records(data, layout.section, header.shoff, count, "section headers")
        sections = [Section(*r[:7]) for r in records]
        _check_sections(data, sections, header.shstrndx, segments, loads)
    return Image(header, segments, loads, sections)


def _records(
    data: bytes, record: struct.Struct, offset: int, count: int, what: str
) -> list[tuple[int, ...]]:
    end = offset + count * record.size
    if end > len(data):
        raise ElfError(f"truncated or damaged: its {what} end at byte {end}, past its end "
                       f"({len(data)} bytes)")  # fmt: skip
    return list(record.iter_unpack(data[offset:end]))


def _check_segments(segments: list[Segment], size: int) -> list[Segment]:
    """The loadable segments, checked: each within the file, aligned, in ascending order
    without overlap; and one dynamic segment."""
    for i, s in enumerate(segments):
        if s.type and s.offset + s.filesz > size:
            raise ElfError(f"truncated or damaged: segment {i} ends at byte {s.offset + s.filesz}"
                           f", past its end ({size} bytes)")  # fmt: skip
    loads = [s for s in segments if s.type == PT_LOAD]
    if not loads:
        raise ElfError("damaged: no loadable segment")
    end = 0
    for s in loads:
        if s.filesz > s.memsz or s.align & (s.align - 1) or (s.vaddr - s.offset) % max(1, s.align):
            raise ElfError(f"damaged: a loadable segment at {s.vaddr:#x} has impossible sizes or "
                           "alignment")  # fmt: skip
        if s.vaddr < end:
            raise ElfError(f"damaged: loadable segments overlap or are out of order at "
                           f"{s.vaddr:#x}")  # fmt: skip
        end = s.vaddr + s.memsz
    if sum(1 for s in segments if s.type == PT_DYNAMIC) != 1:
        raise ElfError("damaged: not one dynamic segment")
    for s in segments:  # made read-only after relocation, whole pages: within a data segment
        if s.type == PT_GNU_RELRO and not any(
            g.flags & PF_W and g.vaddr <= s.vaddr and s.vaddr + s.memsz <= _page_up(g)
            for g in loads
        ):
            raise ElfError("damaged: the read-only-after-relocation segment lies outside the "
                           "data segment")  # fmt: skip
    return loads


def _page_up(s: Segment) -> int:
    end = s.vaddr + s.memsz
    return end + -end % PAGE


def _check_sections(
    data: bytes, sections: list[Section], shstrndx: int, segments: list[Segment],
    loads: list[Segment],
) -> None:  # fmt: skip
    """Each section within the file; each allocated one within the loadable segment that
    holds its bytes (at the same place in the file and in memory), with its permissions; the
    thread-local ones within the one thread-local segment."""
    names = sections[shstrndx] if 0 < shstrndx < len(sections) else None

    def name(s: Section) -> str:
        if names is None or names.type == SHT_NOBITS or s.name >= names.size:
            return f"at {s.offset:#x}"
        start = names.offset + s.name
        return data[start : data.find(b"\0", start, names.offset + names.size)].decode(
            "ascii", "replace"
        )

    for s in sections[1:]:
        if s.type != SHT_NOBITS and s.offset + s.size > len(data):
            raise ElfError(f"truncated or damaged: section {name(s)} ends at byte "
                           f"{s.offset + s.size}, past its end ({len(data)} bytes)")  # fmt: skip
        if s.flags & SHF_ALLOC and s.flags & SHF_TLS and s.size:
            tls = [g for g in segments if g.type == PT_TLS]
            if len(tls) != 1 or not tls[0].holds(s.addr, s.size):
                raise ElfError(f"damaged: thread-local section {name(s)} lies outside the one "
                               "thread-local segment")  # fmt: skip
        if not s.loaded:
            continue
        for load in loads:  # a loop, not any() or next(): this runs for every section
            if load.vaddr <= s.addr and s.addr + s.size <= load.vaddr + load.memsz:
                break
        else:
            raise ElfError(f"damaged: section {name(s)} lies outside the loadable segments")
        if s.type != SHT_NOBITS and (
            s.addr - load.vaddr != s.offset - load.offset
            or s.offset + s.size > load.offset + load.filesz
        ):
            raise ElfError(f"damaged: section {name(s)} is not where its segment loads it")
        if (s.flags & SHF_EXECINSTR and not load.flags & PF_X) or (
            s.flags & SHF_WRITE and not load.flags & PF_W
        ):
            raise ElfError(f"damaged: section {name(s)} lies in a segment without its "
                           "permissions")  # fmt: skip
