"""How a host function holds its values: every value is the address of its bytes (dlvm.codegen.
layout) in the function's frame, in constants, in the caller's memory or in memory a pointer
addresses; a tuple is the list of its elements' values. Also what every lowering needs: copies,
literals and constants, element addresses, run-time checks that end the call with a status.

A pointer, box, function value or stack handle is the address of an 8-byte cell holding it, so
block arguments, calls, tuples and memory treat every type alike: a copy is a memcpy."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeAlias

from llvmlite import ir

from dlvm.codegen.errors import CodegenError
from dlvm.codegen.frame import ALIGN, FramePlan, builds, storage_size
from dlvm.codegen.layout import element_offsets, enum_case, layout
from dlvm.codegen.llvm_types import (
    I1,
    I8,
    I32,
    I64,
    PTR,
    byte_array,
    constant,
    load_element,
    memory_type,
)
from dlvm.codegen.spec import host_symbol
from dlvm.codegen.static_data import check_static
from dlvm.diagnostics import Location
from dlvm.ir.literals import (
    AggregateLiteral,
    DenseLiteral,
    EnumLiteral,
    ScalarLiteral,
    StructLiteral,
)
from dlvm.ir.types import (
    ArrayType,
    FunctionType,
    StructType,
    TensorType,
    TupleType,
    Type,
    canonical,
)
from dlvm.ir.values import ElementKey, Function, GlobalVariable, Instruction, LiteralValue, Value

# dlrt_status codes (runtime/include/dlrt.h).
STATUS_INVALID_ARGUMENT = 1
STATUS_OUT_OF_MEMORY = 2
STATUS_TRAP = 7


@dataclass
class Runtime:
    """The runtime functions generated code calls (declared once per LLVM module)."""

    arena_mark: ir.Function
    arena_reset: ir.Function
    arena_push: ir.Function
    parallel_for: ir.Function
    parallel_split: ir.Function
    stack_create: ir.Function
    stack_destroy: ir.Function
    stack_push: ir.Function
    stack_pop: ir.Function
    alloc: ir.Function
    free: ir.Function
    box_create: ir.Function
    box_retain: ir.Function
    box_release: ir.Function
    memcpy: ir.Function
    memmove: ir.Function
    memset: ir.Function
    error: ir.Function

    @classmethod
    def declare(cls, m: ir.Module) -> Runtime:
        def fn(name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
            return ir.Function(m, ir.FunctionType(ret, args), name)

        void = ir.VoidType()
        return cls(
            arena_mark=fn("dlrt_arena_mark", I64, [PTR]),
            arena_reset=fn("dlrt_arena_reset", void, [PTR, I64]),
            arena_push=fn("dlrt_arena_push", PTR, [PTR, I64]),
            parallel_for=fn("dlrt_parallel_for", void, [I64, I64, PTR, PTR]),
            parallel_split=fn("dlrt_parallel_split", void, [I64, I64, I64, PTR, PTR]),
            stack_create=fn("dlrt_stack_create", PTR, []),
            stack_destroy=fn("dlrt_stack_destroy", void, [PTR]),
            stack_push=fn("dlrt_stack_push", I32, [PTR, PTR, I64]),
            stack_pop=fn("dlrt_stack_pop", I32, [PTR, PTR, I64]),
            alloc=fn("dlrt_alloc", PTR, [I64]),
            free=fn("dlrt_free", void, [PTR]),
            box_create=fn("dlrt_box_create", PTR, [I64]),
            box_retain=fn("dlrt_box_retain", void, [PTR]),
            box_release=fn("dlrt_box_release", void, [PTR]),
            memcpy=fn("llvm.memcpy.p0.p0.i64", void, [PTR, PTR, I64, I1]),
            memmove=fn("llvm.memmove.p0.p0.i64", void, [PTR, PTR, I64, I1]),
            memset=fn("llvm.memset.p0.i64", void, [PTR, I8, I64, I1]),
            error=ir.Function(m, ir.FunctionType(I32, [I32, PTR], var_arg=True), "dlrt_error"),
        )


def runtime_place(loc: Location) -> str:
    """`model.tel:12:5`: where a library's run-time error happened, by the source's file name
    alone, so that a library's bytes never depend on the directory it was built from."""
    line, col = loc.line_col
    return f"{os.path.basename(loc.source.name)}:{line}:{col}"


def nbytes(t: Type) -> int:
    """Bytes of a value of type t in memory."""
    return layout(t).size


def flat_types(t: Type) -> list[Type]:
    """The non-tuple types of a (possibly nested) tuple type, in order: one pointer each when
    passed to or returned from a compiled function."""
    t = canonical(t)
    if isinstance(t, TupleType):
        return [x for e in t.elements for x in flat_types(e)]
    return [t]


# The address of a value's bytes, or a list of HostValues (a tuple).
HostValue: TypeAlias = Any


def flatten(v: HostValue) -> list[ir.Value]:
    if isinstance(v, list):
        return [p for x in v for p in flatten(x)]
    return [v]


class HostBase:
    """The state of one host function being lowered and the helpers every lowering uses."""

    def __init__(
        self, module: ir.Module, fn: Function, rt: Runtime, kernels: dict[Function, ir.Function],
        hosts: dict[Function, ir.Function],
    ) -> None:  # fmt: skip
        self.module, self.fn, self.rt = module, fn, rt
        self.kernels, self.hosts = kernels, hosts
        self.llfn = hosts[fn]
        self.values: dict[Value, HostValue] = {}
        self.plan = FramePlan(fn)
        self.results: list[ir.Value] = []  # the caller's result pointers, flattened
        self.frame_size = self.plan.size  # temporaries go past the planned owners
        self.cursor: int | None = None
        self.globals = 0
        self.current: Instruction | None = None  # being lowered
        self.b: ir.IRBuilder
        self.ctx: ir.Value
        self.arena: ir.Value
        self.mark: ir.Value
        self.frame: ir.Value

    # Storage -------------------------------------------------------------------------------

    def slot(self, t: Type) -> ir.Value:
        """The next 64-byte-aligned slot: in the planned storage of the owner being laid out
        (`self.cursor`), else fresh bytes past the plan."""
        size = storage_size(t)
        if self.cursor is not None:
            off = self.cursor
            self.cursor += size
        else:
            off = self.frame_size
            self.frame_size += size
        # At the builder's position: the slot's first use is where its value is computed,
        # which dominates every later use (SSA).
        return self.b.gep(self.frame, [ir.Constant(I64, off)], source_etype=I8)

    def new_value(self, t: Type, owner: Value | None = None) -> HostValue:
        """Storage for a value of type t: the owner's planned place (dlvm.codegen.frame): in
        the frame or the caller's result buffers; or fresh bytes for a temporary."""
        first = self.plan.returned.get(owner) if owner is not None else None
        if first is not None:
            return self.unflatten(t, iter(self.results[first:]))
        saved = self.cursor
        self.cursor = self.plan.offset.get(owner) if owner is not None else None
        try:
            return self._layout(t)
        finally:
            self.cursor = saved

    def _layout(self, t: Type) -> HostValue:
        ct = canonical(t)
        if isinstance(ct, TupleType):
            return [self._layout(e) for e in ct.elements]
        return self.slot(ct)

    def unflatten(self, t: Type, ptrs: Iterator[ir.Value]) -> HostValue:
        """The value of type t passed as the next pointers of ptrs (one per tuple element)."""
        ct = canonical(t)
        if isinstance(ct, TupleType):
            return [self.unflatten(e, ptrs) for e in ct.elements]
        return next(ptrs)

    def view(self, ptr: ir.Value, t: Type) -> HostValue:
        """The value of type t whose bytes are at ptr (a tuple's elements at their offsets)."""
        ct = canonical(t)
        if not isinstance(ct, TupleType):
            return ptr
        return [
            self.view(self.offset(ptr, off), e) for off, e in zip(element_offsets(ct), ct.elements)
        ]

    def offset(self, ptr: ir.Value, off: int | ir.Value) -> ir.Value:
        if isinstance(off, int):
            if off == 0:
                return ptr
            off = ir.Constant(I64, off)
        return self.b.gep(ptr, [off], source_etype=I8)

    def copy(self, dst: ir.Value, src: ir.Value, size: int | ir.Value) -> None:
        n = ir.Constant(I64, size) if isinstance(size, int) else size
        self.b.call(self.rt.memcpy, [dst, src, n, ir.Constant(I1, 0)])

    def copy_value(self, dst: HostValue, src: HostValue, t: Type) -> None:
        for d, s, tt in zip(flatten(dst), flatten(src), flat_types(t)):
            if d is not s:
                self.copy(d, s, nbytes(tt))

    def zero(self, ptr: ir.Value, size: int | ir.Value) -> None:
        n = ir.Constant(I64, size) if isinstance(size, int) else size
        self.b.call(self.rt.memset, [ptr, ir.Constant(I8, 0), n, ir.Constant(I1, 0)])

    def word(self, v: Value) -> ir.Value:
        """The address (or handle) a pointer, box, function or stack value holds."""
        return self.b.load(self.value(v), typ=PTR)

    def new_word(self, t: Type, owner: Value, word: ir.Value) -> None:
        """Defines owner, of a pointer-like type t, as a cell holding word."""
        cell = self.new_value(t, owner)
        self.b.store(word, cell)
        self.values[owner] = cell

    # Values --------------------------------------------------------------------------------

    def value(self, v: Value) -> HostValue:
        if isinstance(v, LiteralValue):
            return self.literal(v)
        if isinstance(v, Function):
            return self.constant_cell(self.function_address(v))
        if isinstance(v, GlobalVariable):
            return self.constant_cell(self.global_storage(v))
        found = self.values.get(v)
        if found is None:
            raise CodegenError(f"@{self.fn.name}: a value is used before it is computed")
        return found

    def function_address(self, f: Function) -> ir.Function:
        target = self.hosts.get(f)
        if target is None:
            what = "a [compute] function" if f.compute else "a function without a body"
            raise CodegenError(f"@{self.fn.name}: @{f.name} is {what}, not a compiled value")
        return target

    def global_storage(self, g: GlobalVariable) -> ir.GlobalVariable:
        """The bytes of `var @g` (zero at load time; one copy per library)."""
        name = f"dl.var.{g.name}"
        found = self.module.globals.get(name)
        if found is None:
            loc = f"{g.loc}: " if g.loc is not None else ""
            check_static(nbytes(g.value_type), f"{loc}var @{g.name}")
            ty = ir.ArrayType(I8, max(nbytes(g.value_type), 1))
            found = ir.GlobalVariable(self.module, ty, name)
            found.initializer = ir.Constant(ty, None)
            found.linkage = "internal"
            found.align = ALIGN
        return found  # type: ignore[no-any-return]

    def constant_cell(self, address: ir.GlobalValue) -> ir.GlobalVariable:
        """A constant 8-byte cell holding a symbol's address (a function or global as a value)."""
        key = f"{address.name}.addr"
        found = self.module.globals.get(key)
        if found is None:
            found = ir.GlobalVariable(self.module, PTR, key)
            found.initializer = address
            found.global_constant = True
            found.linkage = "private"
        return found  # type: ignore[no-any-return]

    def constant(self, ty: ir.Type, value: ir.Constant | None) -> ir.GlobalVariable:
        """A private constant (value None: zero bytes), 64-byte aligned."""
        g = ir.GlobalVariable(self.module, ty, f"{self.llfn.name}.c{self.globals}")
        self.globals += 1
        g.initializer = ir.Constant(ty, None) if value is None else value
        g.global_constant = True
        g.linkage = "private"
        g.align = ALIGN
        return g

    def literal(self, lit: LiteralValue, owner: Value | None = None) -> HostValue:
        """A literal's value: a constant for a scalar (splat), a dense tensor (its bytes) or
        `zero`/`undefined`/`null`, its elements' values for a tuple, built in storage (owner's,
        else a temporary) for the other aggregates."""
        value, t = lit.literal, canonical(lit.type)
        if isinstance(value, AggregateLiteral) and value.kind == "tuple":
            return [self.value(item) for item in value.items]
        if isinstance(value, DenseLiteral):
            n = len(value.data)
            check_static(n, f"{self.where()}: a dense literal {lit.type}")
            return self.constant(ir.ArrayType(I8, n), byte_array(value.data))
        if isinstance(value, ScalarLiteral):
            assert isinstance(t, TensorType)
            mt = memory_type(t.dtype)
            c = constant(t.dtype, value.value)
            one = ir.Constant(I8, c.constant) if t.dtype.is_bool else c
            if not t.shape:
                return self.constant(mt, one)
            check_static(nbytes(t), f"{self.where()}: the constant {lit.use_text()}")
            n = math.prod(t.shape)
            return self.constant(ir.ArrayType(mt, n), ir.Constant(ir.ArrayType(mt, n), [one] * n))
        if not builds(lit):  # zero, undefined, null: zero bytes
            check_static(nbytes(t), f"{self.where()}: the constant {lit.use_text()}")
            return self.view(self.constant(ir.ArrayType(I8, max(nbytes(t), 1)), None), t)
        out = self.new_value(t, owner)
        self.build(value, out, t)
        return out

    def build(self, value: Any, out: ir.Value, t: Type) -> None:
        """Writes an aggregate literal's bytes at out."""
        if isinstance(value, StructLiteral):
            assert isinstance(t, StructType)
            offsets = element_offsets(t)
            for name, item in value.fields:
                index = t.field_index(name)
                assert index is not None
                self.put(out, offsets[index], item)
        elif isinstance(value, EnumLiteral):
            self.zero(out, nbytes(t))
            tag, payload = enum_case(t, value.case)
            self.b.store(ir.Constant(I64, tag), out)
            for (off, _), item in zip(payload, value.items):
                self.put(out, off, item)
        else:  # a tensor's rows or an array's elements, one after another
            assert isinstance(value, AggregateLiteral)
            step = nbytes(value.items[0].type) if value.items else 0
            for i, item in enumerate(value.items):
                self.put(out, i * step, item)

    def put(self, base: ir.Value, off: int, item: Value) -> None:
        self.copy_value(self.view(self.offset(base, off), item.type), self.value(item), item.type)

    # Element addresses ---------------------------------------------------------------------

    def element(self, v: HostValue, t: Type, keys: list[ElementKey]) -> tuple[HostValue, Type]:
        """The value at keys inside v (of type t) and its type: a tuple's element, or the
        address of a struct's field, an array's element or a tensor's row, after checking
        every index read at run time."""
        for key in keys:
            ct = canonical(t)
            if isinstance(ct, TupleType):
                assert key.index is not None
                v, t = v[key.index], ct.elements[key.index]
            elif isinstance(ct, StructType):
                index = ct.field_index(key.field or "")
                if index is None:
                    raise CodegenError(f"@{self.fn.name}: struct {t} needs a #field key")
                t = ct.fields[index][1]
                v = self.view(self.offset(v, element_offsets(ct)[index]), t)
            elif isinstance(ct, ArrayType | TensorType):
                if isinstance(ct, ArrayType):
                    t, count, what = ct.element, ct.count, "array"
                else:
                    t, count, what = ct.with_shape(ct.shape[1:]), ct.shape[0], "tensor dimension 0"
                step = self.b.mul(self.index(key, (count, what)), ir.Constant(I64, nbytes(t)))
                v = self.view(self.offset(v, step), t)
            else:
                raise CodegenError(f"@{self.fn.name}: cannot index a value of type {t}")
        return v, t

    def index(self, key: ElementKey, bound: tuple[int, str] | None) -> ir.Value:
        """A key's index as i64: a constant, or a value read now (checked against the size of
        the `bound` (size, what) if given)."""
        if key.index is not None:
            return ir.Constant(I64, key.index)
        if key.value is None:
            raise CodegenError(f"@{self.fn.name}: a field key indexes a struct only")
        kt = canonical(key.value.type)
        assert isinstance(kt, TensorType)
        raw = load_element(self.b, self.value(key.value), kt.dtype)
        i = self.b.sext(raw, I64) if kt.dtype.bits < 64 else raw
        if bound is not None:
            self.check_index(i, *bound)
        return i

    def invoke(self, callee: Value, ptrs: list[ir.Value]) -> ir.Value:
        """Calls a host function, named or a function value (an indirect call), with the
        context and ptrs; returns its status."""
        if isinstance(callee, Function):
            return self.b.call(self.function_address(callee), [self.ctx, *ptrs])
        # Loaded as a pointer to the function type, which llvmlite reads the call's type from
        # (it prints as an opaque `ptr`).
        fnty = ir.FunctionType(I32, [PTR] * (1 + len(ptrs)))
        address = self.b.load(self.value(callee), typ=ir.PointerType(fnty))
        return self.b.call(self.not_null(address, "function value"), [self.ctx, *ptrs])

    # Failing -------------------------------------------------------------------------------

    def check(self, status: ir.Value) -> None:
        """Returns status from this function when it is not DLRT_OK."""
        b = self.b
        fail = self.llfn.append_basic_block("call.failed")
        cont = self.llfn.append_basic_block("call.ok")
        b.cbranch(b.icmp_signed("!=", status, ir.Constant(I32, 0)), fail, cont)
        b.position_at_end(fail)
        self.leave(status)
        b.position_at_end(cont)

    def leave(self, status: ir.Value) -> None:
        """Releases the frame and returns status."""
        self.b.call(self.rt.arena_reset, [self.arena, self.mark])
        self.b.ret(status)

    def where(self) -> str:
        """The instruction being lowered as the interpreter names it in an error:
        `file:line:col: in @fn, opcode`."""
        inst = self.current
        if inst is None:
            return f"in @{self.fn.name}"
        loc = f"{runtime_place(inst.loc)}: " if inst.loc is not None else ""
        return f"{loc}in @{self.fn.name}, {inst.opcode}"

    def fail_if(self, bad: ir.Value, status: int, message: str, *args: ir.Value) -> None:
        """When bad holds, fails as `fail` does."""
        fail = self.llfn.append_basic_block("check.failed")
        cont = self.llfn.append_basic_block("check.ok")
        self.b.cbranch(bad, fail, cont)
        self.b.position_at_end(fail)
        self.fail(status, message, *args)
        self.b.position_at_end(cont)

    def fail(self, status: int, message: str, *args: ir.Value) -> None:
        """Sets the last error to `where: message` (message a printf format of args) and
        returns status (the builder is left in the finished block)."""
        text = self.where().replace("%", "%%") + ": " + message
        code = ir.Constant(I32, status)
        self.leave(self.b.call(self.rt.error, [code, self.string(text, escape=False), *args]))

    def check_index(self, i: ir.Value, n: int, what: str) -> None:
        bad = self.b.icmp_unsigned(">=", i, ir.Constant(I64, n))
        message = f"index %lld is out of bounds for {what} of size {n}"
        self.fail_if(bad, STATUS_INVALID_ARGUMENT, message, i)

    def not_null(self, address: ir.Value, what: str) -> ir.Value:
        """address, after failing (as the interpreter does) when it is null."""
        bad = self.b.icmp_unsigned("==", address, ir.Constant(PTR, None))
        self.fail_if(bad, STATUS_INVALID_ARGUMENT, f"null {what}")
        return address

    def string(self, text: str, escape: bool = True) -> ir.Value:
        """A C string constant; `escape` doubles each `%` (for use as a printf format)."""
        if escape:
            text = text.replace("%", "%%")
        data = bytearray(text.encode()) + b"\0"
        ty = ir.ArrayType(I8, len(data))
        g = ir.GlobalVariable(self.module, ty, f"{self.llfn.name}.s{self.globals}")
        self.globals += 1
        g.initializer = ir.Constant(ty, data)
        g.global_constant = True
        g.linkage = "private"
        return g

    def entry_alloca(self, t: ir.Type, count: int = 1) -> ir.Value:
        b = self.b
        here = b.block
        b.position_at_start(self.llfn.entry_basic_block)
        slot = b.alloca(t, size=ir.Constant(I64, count))
        b.position_at_end(here)
        return slot


def host_function(module: ir.Module, fn: Function) -> ir.Function:
    """The declaration of fn's compiled form, `i32 dl_<fn>(ptr ctx, ptr…)`: a pointer per
    non-tuple argument and result (tuples flattened)."""
    ty = fn.type
    assert isinstance(ty, FunctionType)
    n = 1 + sum(len(flat_types(a)) for a in ty.arguments) + len(flat_types(ty.result))
    llfn = ir.Function(module, ir.FunctionType(I32, [PTR] * n), host_symbol(fn.name))
    llfn.visibility = "hidden"  # the glue's public functions are the library's only API
    return llfn
