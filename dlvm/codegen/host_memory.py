"""Memory instructions in host code (docs/ir.md, "Memory"; dlvm/interp/memory.py): allocations,
boxes and their reference counts, loads, stores, element pointers, copies, and `trap`.

Memory holds values in their layout (dlvm.codegen.layout), zeroed when allocated as the
interpreter's fresh memory is. `allocateStack` takes bytes from the arena, released when the
function returns; `allocateHeap` and boxes come from dlrt_alloc and dlrt_box_create (a box's
content is DLRT_BOX_HEADER bytes past its address). Null pointers, boxes and counts the
interpreter refuses fail the call with a status, as does a count whose bytes pass 2^63 - 1;
like C, the generated code does not check bounds, lifetimes or double frees of memory (the
interpreter does)."""

from __future__ import annotations

from llvmlite import ir

from dlvm.codegen.errors import CodegenError
from dlvm.codegen.host_values import (
    STATUS_INVALID_ARGUMENT,
    STATUS_OUT_OF_MEMORY,
    STATUS_TRAP,
    HostBase,
    nbytes,
    runtime_place,
)
from dlvm.codegen.layout import element_offsets
from dlvm.codegen.llvm_types import I1, I32, I64, PTR
from dlvm.ir.types import (
    ArrayType,
    BoxType,
    PointerType,
    StructType,
    TensorType,
    TupleType,
    Type,
    canonical,
)
from dlvm.ir.values import Instruction, Value

BOX_HEADER = 64  # DLRT_BOX_HEADER


def pointee(v: Value) -> Type:
    t = canonical(v.type)
    assert isinstance(t, PointerType | BoxType), t
    return t.pointee if isinstance(t, PointerType) else t.content


class MemoryOps(HostBase):
    def count(self, v: Value, what: str) -> ir.Value:
        """An i64 count operand, failing as the interpreter does when it is not positive (or,
        for a copy, negative)."""
        n = self.b.load(self.value(v), typ=I64)
        if what == "copy":
            bad = self.b.icmp_signed("<", n, ir.Constant(I64, 0))
            message = "negative copy count %lld"
        else:
            bad = self.b.icmp_signed("<=", n, ir.Constant(I64, 0))
            message = "heap allocation of %lld elements (must be positive)"
        self.fail_if(bad, STATUS_INVALID_ARGUMENT, message, n)
        return n

    def byte_count(self, n: ir.Value, t: Type, status: int, what: str) -> ir.Value:
        """The bytes of n (>= 0) values of type t, failing with status when they pass 2^63 - 1:
        a plain product would wrap to a small size (an allocation or copy far too short)."""
        size = nbytes(t)
        product = self.b.smul_with_overflow(n, ir.Constant(I64, size))
        message = f"{what} of %lld elements of {size} bytes each takes more than 2^63 - 1 bytes"
        self.fail_if(self.b.extract_value(product, 1), status, message, n)
        return self.b.extract_value(product, 0)

    def allocated(self, address: ir.Value) -> ir.Value:
        """address, after failing with DLRT_ERR_OUT_OF_MEMORY (the runtime's message) if null."""
        bad = self.b.icmp_unsigned("==", address, ir.Constant(PTR, None))
        fail = self.llfn.append_basic_block("alloc.failed")
        cont = self.llfn.append_basic_block("alloc.ok")
        self.b.cbranch(bad, fail, cont)
        self.b.position_at_end(fail)
        self.leave(ir.Constant(I32, STATUS_OUT_OF_MEMORY))
        self.b.position_at_end(cont)
        return address

    def address(self, v: Value, what: str = "pointer") -> ir.Value:
        return self.not_null(self.word(v), what)

    def i_allocateStack(self, inst: Instruction) -> None:
        size = ir.Constant(I64, nbytes(inst.attrs["type"]) * inst.attrs["count"])
        p = self.allocated(self.b.call(self.rt.arena_push, [self.arena, size]))
        self.zero(p, size)
        self.new_word(inst.type, inst, p)

    def i_allocateHeap(self, inst: Instruction) -> None:
        n = self.count(inst.operands[0], "allocation")
        size = self.byte_count(n, inst.attrs["type"], STATUS_OUT_OF_MEMORY, "heap allocation")
        p = self.allocated(self.b.call(self.rt.alloc, [size]))
        self.zero(p, size)
        self.new_word(inst.type, inst, p)

    def i_allocateBox(self, inst: Instruction) -> None:
        size = ir.Constant(I64, nbytes(inst.attrs["type"]))
        self.new_word(inst.type, inst, self.allocated(self.b.call(self.rt.box_create, [size])))

    def i_projectBox(self, inst: Instruction) -> None:
        box = self.address(inst.operands[0], "box")
        self.new_word(inst.type, inst, self.offset(box, BOX_HEADER))

    def i_retain(self, inst: Instruction) -> None:
        self.b.call(self.rt.box_retain, [self.address(inst.operands[0], "box")])

    def i_release(self, inst: Instruction) -> None:
        self.b.call(self.rt.box_release, [self.address(inst.operands[0], "box")])

    def i_deallocate(self, inst: Instruction) -> None:
        (v,) = inst.operands
        what = "box" if isinstance(canonical(v.type), BoxType) else "pointer"
        self.b.call(self.rt.free, [self.address(v, what)])

    def i_load(self, inst: Instruction) -> None:
        (p,) = inst.operands
        t = pointee(p)
        out = self.new_value(t, inst)
        self.copy_value(out, self.view(self.address(p), t), t)
        self.values[inst] = out

    def i_store(self, inst: Instruction) -> None:
        v, p = inst.operands
        t = pointee(p)
        self.copy_value(self.view(self.address(p), t), self.value(v), t)

    def i_elementPointer(self, inst: Instruction) -> None:
        """The first key steps over whole pointees (a GEP); the others index into one."""
        b = self.b
        p = inst.operands[0]
        t = pointee(p)
        first, *rest = inst.attrs["keys"]
        if first.field is not None:
            raise CodegenError(f"@{self.fn.name}: the first key of elementPointer is an index")
        off: ir.Value = b.mul(self.index(first, None), ir.Constant(I64, nbytes(t)))
        for key in rest:
            ct = canonical(t)
            if isinstance(ct, TupleType | StructType):
                i = key.index if isinstance(ct, TupleType) else ct.field_index(key.field or "")
                if i is None:
                    raise CodegenError(f"@{self.fn.name}: an element pointer needs a field")
                t = ct.elements[i] if isinstance(ct, TupleType) else ct.fields[i][1]
                step: ir.Value = ir.Constant(I64, element_offsets(ct)[i])
            elif isinstance(ct, ArrayType | TensorType):
                t = ct.element if isinstance(ct, ArrayType) else ct.with_shape(ct.shape[1:])
                step = b.mul(self.index(key, None), ir.Constant(I64, nbytes(t)))
            else:
                raise CodegenError(f"@{self.fn.name}: cannot index into {t} in memory")
            off = b.add(off, step)
        self.new_word(inst.type, inst, self.offset(self.address(p), off))

    def i_copy(self, inst: Instruction) -> None:
        """`copy from src to dst count n`: like memmove (the ranges may overlap)."""
        src, dst, count = inst.operands
        s = self.not_null(self.word(src), "source pointer")
        d = self.not_null(self.word(dst), "destination pointer")
        n = self.count(count, "copy")
        size = self.byte_count(n, pointee(src), STATUS_INVALID_ARGUMENT, "copy")
        self.b.call(self.rt.memmove, [d, s, size, ir.Constant(I1, 0)])

    def i_trap(self, inst: Instruction) -> None:
        """Ends the call with DLRT_ERR_TRAP and the interpreter's message."""
        where = f"{runtime_place(inst.loc)} " if inst.loc is not None else ""
        message = self.string(f"trap at {where}in @{self.fn.name}")
        self.leave(self.b.call(self.rt.error, [ir.Constant(I32, STATUS_TRAP), message]))
        # What follows in the block is unreachable but still lowered.
        self.b.position_at_end(self.llfn.append_basic_block("after.trap"))
