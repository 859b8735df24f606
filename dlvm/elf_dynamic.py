"""An ELF shared library's dynamic table checked as ld.so will read it, from the loaded segments
(dlvm/elf.py checked the file's structure): ended, with the entries ld.so needs side by side, each
address and table within the loaded segments and where the section headers say the linker put
it, each string within the string table, each relocation writing within a segment it may write
for a symbol that exists, and each defined symbol within the segments."""

from __future__ import annotations

from dlvm.elf import PF_W, PF_X, SHF_ALLOC, ElfError, Image, Layout, Section, Segment

DT_NULL, DT_NEEDED, DT_PLTRELSZ, DT_PLTGOT, DT_HASH, DT_STRTAB = 0, 1, 2, 3, 4, 5
DT_SYMTAB, DT_RELA, DT_RELASZ, DT_RELAENT, DT_STRSZ, DT_SYMENT = 6, 7, 8, 9, 10, 11
DT_INIT, DT_FINI, DT_SONAME, DT_RPATH, DT_REL, DT_RELSZ, DT_RELENT = 12, 13, 14, 15, 17, 18, 19
DT_PLTREL, DT_TEXTREL, DT_JMPREL, DT_INIT_ARRAY, DT_FINI_ARRAY = 20, 22, 23, 25, 26
DT_INIT_ARRAYSZ, DT_FINI_ARRAYSZ, DT_RUNPATH, DT_FLAGS, DF_TEXTREL = 27, 28, 29, 30, 0x4
DT_RELRSZ, DT_RELR, DT_GNU_HASH, DT_VERSYM = 35, 36, 0x6FFFFEF5, 0x6FFFFFF0
DT_RELACOUNT, DT_RELCOUNT, DT_VERDEF, DT_VERNEED = 0x6FFFFFF9, 0x6FFFFFFA, 0x6FFFFFFC, 0x6FFFFFFE
SHT_RELA, SHT_HASH, SHT_REL, SHT_DYNSYM, SHT_INIT_ARRAY, SHT_FINI_ARRAY = 4, 5, 9, 11, 14, 15
SHT_RELR, SHT_GNU_HASH, SHT_VERDEF, SHT_VERNEED = 19, 0x6FFFFFF6, 0x6FFFFFFD, 0x6FFFFFFE
SHT_VERSYM = 0x6FFFFFFF
STT_OBJECT, STT_FUNC, STT_TLS, SHN_LORESERVE = 1, 2, 6, 0xFF00

# Tags whose value is an address ld.so reads or calls, and the section type there, if any.
ADDRESSES = {DT_PLTGOT: None, DT_INIT: None, DT_FINI: None, DT_SYMTAB: SHT_DYNSYM,
             DT_HASH: SHT_HASH, DT_GNU_HASH: SHT_GNU_HASH, DT_VERSYM: SHT_VERSYM,
             DT_VERDEF: SHT_VERDEF, DT_VERNEED: SHT_VERNEED}  # fmt: skip
# Tables (address tag, size tag, section types that make them up), and what each needs beside.
TABLES = [(DT_STRTAB, DT_STRSZ, ()), (DT_RELA, DT_RELASZ, (SHT_RELA,)),
          (DT_REL, DT_RELSZ, (SHT_REL,)), (DT_JMPREL, DT_PLTRELSZ, (SHT_RELA, SHT_REL)),
          (DT_RELR, DT_RELRSZ, (SHT_RELR,)), (DT_INIT_ARRAY, DT_INIT_ARRAYSZ, (SHT_INIT_ARRAY,)),
          (DT_FINI_ARRAY, DT_FINI_ARRAYSZ, (SHT_FINI_ARRAY,))]  # fmt: skip
NEEDS = {DT_RELA: (DT_RELASZ, DT_RELAENT), DT_REL: (DT_RELSZ, DT_RELENT),
         DT_JMPREL: (DT_PLTRELSZ, DT_PLTREL, DT_PLTGOT), DT_RELR: (DT_RELRSZ,),
         DT_INIT_ARRAY: (DT_INIT_ARRAYSZ,), DT_FINI_ARRAY: (DT_FINI_ARRAYSZ,)}  # fmt: skip
STRINGS = (DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH)
# Machines whose ld.so knows only Elf_Rela relocations (it asserts on Elf_Rel ones).
RELA_ONLY = {21, 22, 62, 183, 243, 258}
# The relocation types a shared library of x86-64 or AArch64 may hold (ld.so stops the process on
# another); other machines' are not checked.
RELOCATIONS = {
    62: {0, 1, 2, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25,
         26, 32, 33, 34, 35, 36, 37, 38},
    183: {0, 257, 258, 259, 260, 261, 262, *range(1024, 1033)},
}  # fmt: skip


def _damaged(why: str) -> ElfError:
    return ElfError(f"damaged: {why}")


def check_dynamic(data: bytes, image: Image) -> None:
    """ElfError unless the dynamic table of `data` (whose structure is `image`) is one ld.so
    can follow without reading or writing outside the library."""
    layout, loads = image.header.layout, image.loads
    (dynamic,) = [s for s in image.segments if s.type == 2]  # PT_DYNAMIC: read_elf made one
    start = file_offset(loads, dynamic.vaddr, dynamic.filesz, "the dynamic table")
    end = start + dynamic.filesz - dynamic.filesz % layout.dynamic.size
    tags: dict[int, int] = {}
    strings: list[int] = []
    for tag, value in layout.dynamic.iter_unpack(data[start:end]):
        if tag == DT_NULL:
            break
        if tag in STRINGS:
            strings.append(value)
        tags[tag] = value  # ld.so keeps the last of each
    else:
        raise _damaged("the dynamic table has no end")
    if DT_STRTAB not in tags or DT_STRSZ not in tags or DT_SYMTAB not in tags:
        raise _damaged("the dynamic table names no symbol or string table")
    for tag, needs in NEEDS.items():
        if tag in tags and not all(n in tags for n in needs):
            raise _damaged(f"dynamic entry {tag:#x} lacks the entries that go with it")
    _check_kinds(tags, layout, image.header.machine)
    for tag in ADDRESSES:
        if tag in tags and not any(s.holds(tags[tag], 1) for s in loads):
            raise _damaged(f"dynamic entry {tag:#x} points outside the loaded segments")
    for tag, size_tag, _ in TABLES:
        if tag in tags and not any(s.holds(tags[tag], tags.get(size_tag, 0)) for s in loads):
            raise _damaged(f"dynamic table {tag:#x} lies outside the loaded segments")
    if image.sections:
        _check_against_sections(tags, image.sections)
    table = file_offset(loads, tags[DT_STRTAB], tags[DT_STRSZ], "the string table")
    names = data[table : table + tags[DT_STRSZ]]
    if any(offset >= len(names) or names.find(b"\0", offset) < 0 for offset in strings):
        raise _damaged("a library name lies outside the string table")
    symbols = _check_symbols(data, image, tags, len(names))
    _check_all_relocations(data, image, tags, symbols)


def file_offset(loads: list[Segment], address: int, size: int, what: str) -> int:
    """Where in the file the bytes at [address, address + size) of memory come from."""
    for s in loads:
        if s.vaddr <= address and address + size <= s.vaddr + s.filesz:
            return s.offset + address - s.vaddr
    raise _damaged(f"{what} at {address:#x} lies outside the loaded file")


def _check_kinds(tags: dict[int, int], layout: Layout, machine: int) -> None:
    sizes = {DT_SYMENT: layout.symbol.size, DT_RELAENT: layout.rela, DT_RELENT: layout.rel}
    if any(tags.get(tag, size) != size for tag, size in sizes.items()):
        raise _damaged("the dynamic table gives wrong record sizes")
    kinds = (DT_RELA,) if machine in RELA_ONLY else (DT_RELA, DT_REL)
    if tags.get(DT_PLTREL, kinds[0]) not in kinds or (machine in RELA_ONLY and DT_REL in tags):
        raise _damaged("the dynamic table gives a relocation kind this machine has not")
    for count, size, entry in ((DT_RELACOUNT, DT_RELASZ, layout.rela),
                               (DT_RELCOUNT, DT_RELSZ, layout.rel)):  # fmt: skip
        if count in tags and tags[count] > tags.get(size, 0) // entry:
            raise _damaged("the dynamic table counts more relocations than its table holds")


def _check_against_sections(tags: dict[int, int], sections: list[Section]) -> None:
    """Each table where the section headers say the linker put it, and each allocated
    section of a kind ld.so must be told of named by the dynamic table."""
    loaded = [s for s in sections if s.flags & SHF_ALLOC]
    addresses: dict[int, list[int]] = {}  # of the sections of each type
    for s in loaded:
        addresses.setdefault(s.type, []).append(s.addr)
    for tag, kind in ADDRESSES.items():
        if kind in addresses and tags.get(tag) not in addresses[kind]:
            raise _damaged(f"dynamic entry {tag:#x} is not where its section is")
    dynsym = [s for s in loaded if s.type == SHT_DYNSYM]
    if len(dynsym) == 1 and 0 < dynsym[0].link < len(sections):
        strtab = sections[dynsym[0].link]
        if (tags[DT_STRTAB], tags[DT_STRSZ]) != (strtab.addr, strtab.size):
            raise _damaged("the dynamic string table is not where its section is")
    covered: set[Section] = set()
    for tag, size_tag, kinds in TABLES:
        if not kinds:
            continue
        run = _run(loaded, kinds, tags.get(tag), tags.get(size_tag, 0))
        if run is None:
            raise _damaged(f"dynamic entry {tag:#x} is not made of whole sections of its kind")
        covered.update(run)
    listed = {k for _, _, ks in TABLES for k in ks}
    if any(s.type in listed and s.size and s not in covered for s in loaded):
        raise _damaged("a relocation or initialiser section is missing from the dynamic table")


def _run(
    sections: list[Section], kinds: tuple[int, ...], address: int | None, size: int
) -> list[Section] | None:
    """The sections of `kinds` that tile [address, address + size) end to end; None if they
    do not."""
    if address is None:
        return []
    by_address = {s.addr: s for s in sections if s.type in kinds and s.size}
    run = []
    while size > 0:
        s = by_address.get(address)
        if s is None or s.size > size:
            return None
        run.append(s)
        address, size = address + s.size, size - s.size
    return run


def _check_symbols(data: bytes, image: Image, tags: dict[int, int], strsz: int) -> int | None:
    """How many dynamic symbols there are (None where the section headers do not say),
    each checked: its name within the string table, a defined one within the segments
    (a function within an executable one)."""
    dynsym = [s for s in image.sections if s.type == SHT_DYNSYM]
    if len(dynsym) != 1:
        return None
    record = image.header.layout.symbol
    count = dynsym[0].size // record.size
    at = file_offset(image.loads, tags[DT_SYMTAB], count * record.size, "the symbol table")
    wide = image.header.layout.bits == 64
    loads = image.loads
    executable = [s for s in loads if s.flags & PF_X]
    tls = [s for s in image.segments if s.type == 7]  # PT_TLS
    for fields in record.iter_unpack(data[at : at + count * record.size]):
        if wide:
            name, info, _, shndx, value, _ = fields
        else:
            name, value, _, info, _, shndx = fields
        kind = info & 0xF
        if name >= strsz:
            raise _damaged("a symbol's name lies outside the string table")
        if shndx == 0 or shndx >= SHN_LORESERVE or kind not in (STT_OBJECT, STT_FUNC, STT_TLS):
            continue
        if kind == STT_TLS:  # an offset in the thread-local block
            inside = any(value < s.memsz for s in tls)
        else:
            within = executable if kind == STT_FUNC else loads
            inside = any(s.holds(value, 1) for s in within)
        if not inside:
            raise _damaged(f"a symbol's address {value:#x} lies outside its segment")
    return count


def _check_all_relocations(
    data: bytes, image: Image, tags: dict[int, int], symbols: int | None
) -> None:
    layout = image.header.layout
    textrel = DT_TEXTREL in tags or bool(tags.get(DT_FLAGS, 0) & DF_TEXTREL)
    targets = image.loads if textrel else [s for s in image.loads if s.flags & PF_W]
    plt = layout.rela if tags.get(DT_PLTREL) == DT_RELA else layout.rel
    for tag, size_tag, entry in ((DT_RELA, DT_RELASZ, layout.rela),
                                 (DT_REL, DT_RELSZ, layout.rel),
                                 (DT_JMPREL, DT_PLTRELSZ, plt)):  # fmt: skip
        size = tags.get(size_tag, 0)
        if tag in tags and size:
            at = file_offset(image.loads, tags[tag], size, "a relocation table")
            table = data[at : at + size - size % entry]
            _check_relocations(table, layout, entry, targets, symbols)
            kinds = RELOCATIONS.get(image.header.machine)
            if kinds is not None and not _relocation_kinds(table, layout, entry) <= kinds:
                raise _damaged("a relocation is of a kind ld.so does not know")


def _check_relocations(
    table: bytes, layout: Layout, entry: int, targets: list[Segment], symbols: int | None
) -> None:
    """Each relocation writes a word within a segment it may write, for a symbol that exists
    (`symbols`: how many there are, where known)."""
    words = memoryview(table).cast(layout.word)
    stride = entry // words.itemsize
    offsets, infos = words[0::stride], words[1::stride]
    if not offsets:
        return
    low, high = min(offsets), max(offsets) + words.itemsize
    if not any(s.holds(low, high - low) for s in targets):  # the usual case: one data segment
        for offset in offsets:
            if not any(s.holds(offset, words.itemsize) for s in targets):
                raise _damaged(f"a relocation writes at {offset:#x}, outside the segments it "
                               "may write")  # fmt: skip
    if symbols is not None and max(infos) >> layout.symbol_shift >= symbols:
        raise _damaged("a relocation names a symbol the library does not have")


def _relocation_kinds(table: bytes, layout: Layout, entry: int) -> set[int]:
    words = memoryview(table).cast(layout.word)
    mask = (1 << layout.symbol_shift) - 1
    return {info & mask for info in words[1 :: entry // words.itemsize]}
