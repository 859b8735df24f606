"""The limit on a library's static data, the bytes of its globals and constants (`var`s, and what
host code reads `zero`, `undefined` and splat literals from): checked as each is made, and for
the whole LLVM module once every function is generated.

llgen compiles for x86-64's default code model, the small one, in which code reaches each global
through a signed 32-bit offset from itself: a library's code and data must all lie within 2 GiB,
or linking fails ("relocation truncated to fit"), and an object file holds every byte of a
constant. Half of that reach is the data's; the rest is left to the code, the glue and the
runtime."""

from __future__ import annotations

from llvmlite import ir

from dlvm.codegen.errors import CodegenError

MAX_STATIC_BYTES = 1 << 30
_LIMIT = "the 2^30 (1 GiB) that a library's globals and constants may take"


def check_static(size: int, what: str) -> None:
    """Refuses static data of `size` bytes past MAX_STATIC_BYTES; `what` names it (located)."""
    if size > MAX_STATIC_BYTES:
        raise CodegenError(f"{what}: {size} bytes, more than {_LIMIT}")


def check_module(m: ir.Module) -> None:
    """Refuses a module whose globals together pass MAX_STATIC_BYTES."""
    total = sum(
        data_bytes(g.value_type) for g in m.global_values if isinstance(g, ir.GlobalVariable)
    )
    check_static(total, f"module {m.name}, all its globals and constants")


def data_bytes(t: ir.Type) -> int:
    """The bytes of a value of LLVM type t in memory, padding not counted."""
    if isinstance(t, ir.ArrayType):
        return t.count * data_bytes(t.element)
    if isinstance(t, ir.BaseStructType) and t.elements is not None:
        return sum(data_bytes(e) for e in t.elements)
    if isinstance(t, ir.IntType):
        return -(-t.width // 8)
    if isinstance(t, ir.HalfType):
        return 2
    if isinstance(t, ir.FloatType):
        return 4
    return 8  # a double or a pointer
