"""Sizes the code generator adds up or multiplies, which no longer wrap at 2^64: a frame past 2^62
bytes and static data past 1 GiB are located build errors; a frame bigger than memory fails each
call, and a heap allocation or copy whose bytes pass 2^63 - 1 at run time fails the call, with a
status instead of an allocation or copy cut short."""

from __future__ import annotations

import pytest
from irlib import ir_library

import dlvm
from dlvm.runtime import Status
from dlvm.tools import dlc

HUGE = 4611686018427387903  # MAX_TENSOR_BYTES: one such value is allowed, three at once are not

FRAME = f"""module "frame"
stage optimizable

func @f: (*<{HUGE} x i8>) -> <{HUGE} x i8> {{
'entry(%p: *<{HUGE} x i8>):
    %a = load %p: *<{HUGE} x i8>
    %b = load %p: *<{HUGE} x i8>
    %c = load %p: *<{HUGE} x i8>
    %s = add %a: <{HUGE} x i8>, %b: <{HUGE} x i8>
    %t = add %s: <{HUGE} x i8>, %c: <{HUGE} x i8>
    return %t: <{HUGE} x i8>
}}
"""

SOURCE = """module "sizes"
stage optimizable

func @heap: (i64) -> f32 {
'entry(%n: i64):
    %h = allocateHeap <4 x f32> count %n: i64
    %v = load %h: *<4 x f32>
    deallocate %h: *<4 x f32>
    %e = extract 3 from %v: <4 x f32>
    return %e: f32
}

func @copy: (i64) -> f32 {
'entry(%n: i64):
    %a = allocateHeap <4 x f32> count 1: i64
    %b = allocateHeap <4 x f32> count 1: i64
    copy from %a: *<4 x f32> to %b: *<4 x f32> count %n: i64
    %v = load %b: *<4 x f32>
    deallocate %a: *<4 x f32>
    deallocate %b: *<4 x f32>
    %e = extract 0 from %v: <4 x f32>
    return %e: f32
}

func @big_frame: (i64) -> f32 {
'entry(%i: i64):
    %r = random 1152921504606846975 from 0: f32 upto 1: f32
    %e = extract %i: i64 from %r: <1152921504606846975 x f32>
    return %e: f32
}
"""


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    with dlvm.load(ir_library(SOURCE, "sizes", tmp_path_factory.mktemp("sizes"))) as lib:
        yield lib


def cannot_build(tmp_path, capsys, text: str) -> str:
    """dlc's message for a module it must refuse to compile."""
    src = tmp_path / "m.dl"
    src.write_text(text)
    assert dlc.main([str(src), "--emit", "llvm", "-o", str(tmp_path / "m.ll")]) == 1
    err = capsys.readouterr().err
    assert "cannot build: " in err and "Traceback" not in err
    return err


def test_a_frame_past_2_62_bytes_is_a_located_build_error(tmp_path, capsys):
    """Three values of 2^62 - 1 bytes live at once: their sum wrapped to a negative frame size."""
    err = cannot_build(tmp_path, capsys, FRAME)
    total = 3 * (HUGE + 1)
    assert f"m.dl:4:6: in @f: the values it holds at once take {total} bytes of its frame" in err
    assert "more than the 2^62 a frame may take" in err


def test_a_frame_bigger_than_memory_fails_each_call(library):
    """A frame of 2^62 bytes builds; each call fails, as dlrt_arena_push cannot allocate it."""
    with pytest.raises(dlvm.LibraryError) as got:
        library.big_frame(0)
    assert got.value.status is Status.OUT_OF_MEMORY
    assert "dlrt_arena_push: cannot allocate 4611686018427387904 bytes" in got.value.message
    assert library.heap(1) == 0.0  # the model still works


# 2^60 + 1 elements of 16 bytes wrapped to 16 bytes; 2^59 to 2^63, a negative size.
@pytest.mark.parametrize("n", [2**60 + 1, 2**59, 2**62])
def test_a_heap_allocation_past_2_63_bytes_fails_out_of_memory(library, n):
    with pytest.raises(dlvm.LibraryError) as got:
        library.heap(n)
    assert got.value.status is Status.OUT_OF_MEMORY
    assert got.value.message == (
        f"sizes_heap: sizes.dl:6:5: in @heap, allocateHeap: heap allocation of {n} elements of "
        "16 bytes each takes more than 2^63 - 1 bytes"
    )
    assert library.heap(1) == 0.0


@pytest.mark.parametrize("n", [2**60 + 1, 2**59])
def test_a_copy_past_2_63_bytes_fails(library, n):
    with pytest.raises(dlvm.LibraryError) as got:
        library.copy(n)
    assert got.value.status is Status.INVALID_ARGUMENT
    assert got.value.message == (
        f"sizes_copy: sizes.dl:17:5: in @copy, copy: copy of {n} elements of 16 bytes each "
        "takes more than 2^63 - 1 bytes"
    )
    assert library.copy(1) == 0.0 and library.copy(0) == 0.0


STATIC = {
    "var": (
        f"var @g: <{HUGE} x i8>\n\nfunc @f: (i8) -> () {{\n'entry(%x: i8):\n"
        f"    %p = elementPointer @g: *<{HUGE} x i8> at 0, 5\n"
        "    store %x: i8 to %p: *i8\n    return\n}\n",
        f"m.dl:4:5: var @g: {HUGE} bytes",
    ),
    # Each under the limit, together over it.
    "vars": (
        "var @a: <629145600 x i8>\nvar @b: <629145600 x i8>\n\nfunc @f: (i8) -> () {\n"
        "'entry(%x: i8):\n    %p = elementPointer @a: *<629145600 x i8> at 0, 5\n"
        "    store %x: i8 to %p: *i8\n    %q = elementPointer @b: *<629145600 x i8> at 0, 5\n"
        "    store %x: i8 to %q: *i8\n    return\n}\n",
        "module m, all its globals and constants: 1258291",
    ),
    # Host code reads the bytes of `zero` from a constant.
    "zero": (
        "struct $Big {\n    #w: <268435457 x f32>\n    #b: f32\n}\n\n"
        "func @f: (f32, *$Big) -> () {\n'entry(%x: f32, %p: *$Big):\n"
        "    %b = literal {#w = zero: <268435457 x f32>, #b = %x: f32}: $Big\n"
        "    store %b: $Big to %p: *$Big\n    return\n}\n",
        "m.dl:11:5: in @f, literal: the constant zero: <268435457 x f32>: 1073741828 bytes",
    ),
}


@pytest.mark.parametrize("case", list(STATIC))
def test_static_data_past_1_gib_is_a_located_build_error(tmp_path, capsys, case):
    body, message = STATIC[case]
    err = cannot_build(tmp_path, capsys, f'module "m"\nstage optimizable\n\n{body}')
    assert message in err
    assert "more than the 2^30 (1 GiB) that a library's globals and constants may take" in err
