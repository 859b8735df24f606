"""A host function (not `[compute]`) as LLVM IR: calls of kernels and of other host functions,
tuples, control flow with block arguments, random numbers, the differentiation tape.

Convention (docs/c-abi.md section 5): `i32 dl_<fn>(ptr ctx, ptr arg…, ptr result…)`, tensors
and scalars passed as pointers to their data, tuple results flattened, a dlrt_status returned.
Each call takes one frame from the context's arena for the values it computes, released on
return; every tensor value the function computes has its own slot in the frame."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, TypeAlias

from llvmlite import ir

from dlvm.codegen import scalar as S
from dlvm.codegen.frame import ALIGN, FramePlan, storage_size
from dlvm.codegen.kernel import tensor_type
from dlvm.codegen.loops import counted_loop
from dlvm.codegen.scalar import I8, I32, I64, PTR, CodegenError
from dlvm.codegen.spec import host_symbol
from dlvm.ir.literals import AggregateLiteral, ScalarLiteral
from dlvm.ir.types import FunctionType, StackType, TensorType, TupleType, Type
from dlvm.ir.values import Argument, Block, Function, Instruction, LiteralValue, Successor, Value

STATUS_OUT_OF_MEMORY = 2


@dataclass
class Runtime:
    """The runtime functions generated code calls (declared once per LLVM module)."""

    arena_mark: ir.Function
    arena_reset: ir.Function
    arena_push: ir.Function
    parallel_for: ir.Function
    stack_create: ir.Function
    stack_destroy: ir.Function
    stack_push: ir.Function
    stack_pop: ir.Function
    memcpy: ir.Function
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
            stack_create=fn("dlrt_stack_create", PTR, []),
            stack_destroy=fn("dlrt_stack_destroy", void, [PTR]),
            stack_push=fn("dlrt_stack_push", I32, [PTR, PTR, I64]),
            stack_pop=fn("dlrt_stack_pop", I32, [PTR, PTR, I64]),
            memcpy=fn("llvm.memcpy.p0.p0.i64", void, [PTR, PTR, I64, ir.IntType(1)]),
            error=ir.Function(m, ir.FunctionType(I32, [I32, PTR], var_arg=True), "dlrt_error"),
        )


def nbytes(t: TensorType) -> int:
    return math.prod(t.shape) * t.dtype.size


def flat_types(t: Type) -> list[TensorType]:
    """The tensors of a (possibly nested) tuple type, in order: one pointer each."""
    if isinstance(t, TupleType):
        return [x for e in t.elements for x in flat_types(e)]
    if isinstance(t, TensorType):
        return [t]
    raise CodegenError(f"values of type {t} cannot be passed between compiled functions yet")


# A pointer, a stack handle's slot, or a list of HostValues (a tuple).
HostValue: TypeAlias = Any


def flatten(v: HostValue) -> list[ir.Value]:
    if isinstance(v, list):
        return [p for x in v for p in flatten(x)]
    return [v]


class HostGen:
    """Lowers one host function; `kernels` maps [compute] functions to their LLVM entries."""

    def __init__(
        self, module: ir.Module, fn: Function, rt: Runtime, kernels: dict[Function, ir.Function],
        hosts: dict[Function, ir.Function],
    ) -> None:  # fmt: skip
        self.module, self.fn, self.rt = module, fn, rt
        self.kernels, self.hosts = kernels, hosts
        self.llfn = hosts[fn]
        self.values: dict[Value, HostValue] = {}
        self.plan = FramePlan(fn)
        self.frame_size = self.plan.size  # temporaries go past the planned owners
        self.cursor: int | None = None
        self.globals = 0

    def emit(self) -> None:
        fn, llfn = self.fn, self.llfn
        n_args = len(fn.arguments)
        self.ctx = llfn.args[0]
        self.results = list(llfn.args[1 + n_args :])
        entry = llfn.append_basic_block("entry")
        self.b = b = ir.IRBuilder(entry)
        self.arena = b.load(self.ctx, typ=PTR)
        self.mark = b.call(self.rt.arena_mark, [self.arena])
        # The frame's size is known once every value has its slot: it is read from a constant
        # whose value is set at the end (LLVM folds the load).
        size = ir.GlobalVariable(self.module, I64, f"{llfn.name}.frame")
        size.global_constant = True
        size.linkage = "private"
        self.frame = b.call(self.rt.arena_push, [self.arena, b.load(size)])
        ok = llfn.append_basic_block("frame.ok")
        oom = llfn.append_basic_block("frame.oom")
        b.cbranch(b.icmp_unsigned("!=", self.frame, ir.Constant(PTR, None)), ok, oom)
        b.position_at_end(oom)
        b.ret(ir.Constant(I32, STATUS_OUT_OF_MEMORY))
        b.position_at_end(ok)
        for a, p in zip(fn.arguments, llfn.args[1 : 1 + n_args]):
            self.values[a] = self.arguments_value(a.type, [p])
        self.blocks = {blk: llfn.append_basic_block(f"b.{blk.name}") for blk in fn.blocks}
        for blk in fn.blocks[1:]:
            for a in blk.arguments:
                self.values[a] = self.new_value(a.type, a)
        b.branch(self.blocks[fn.blocks[0]])
        for blk in fn.blocks:
            b.position_at_end(self.blocks[blk])
            for inst in blk.instructions:
                self.instruction(inst)
        size.initializer = ir.Constant(I64, max(self.frame_size, ALIGN))

    # Values --------------------------------------------------------------------------------

    def arguments_value(self, t: Type, ptrs: list[ir.Value]) -> HostValue:
        if isinstance(t, TupleType):
            raise CodegenError(f"@{self.fn.name}: tuple arguments are not compiled yet")
        return ptrs[0]

    def slot(self, t: TensorType | StackType) -> ir.Value:
        """The next 64-byte-aligned slot: in the planned storage of the owner being laid out
        (`self.cursor`), else fresh bytes past the plan."""
        size = storage_size(t)
        if self.cursor is not None:
            off = self.cursor
            self.cursor += size
        else:
            off = self.frame_size
            self.frame_size += size
        return self.frame_offset(off)

    def frame_offset(self, off: int) -> ir.Value:
        # At the builder's position: the slot's first use is where its value is computed,
        # which dominates every later use (SSA).
        return self.b.gep(self.frame, [ir.Constant(I64, off)], source_etype=I8)

    def new_value(self, t: Type, owner: Value | None = None) -> HostValue:
        """Storage for a value of type t: the owner's planned place (dlvm.codegen.frame), or
        fresh bytes for a temporary."""
        saved = self.cursor
        self.cursor = self.plan.offset.get(owner) if owner is not None else None
        try:
            return self._layout(t)
        finally:
            self.cursor = saved

    def _layout(self, t: Type) -> HostValue:
        if isinstance(t, TupleType):
            return [self._layout(e) for e in t.elements]
        if isinstance(t, TensorType):
            return self.slot(t)
        if isinstance(t, StackType):
            return ("stack", self.slot(t))
        raise CodegenError(f"@{self.fn.name}: values of type {t} are not compiled yet")

    def value(self, v: Value) -> HostValue:
        if isinstance(v, LiteralValue):
            return self.literal(v)
        found = self.values.get(v)
        if found is None:
            raise CodegenError(f"@{self.fn.name}: a value is used before it is computed")
        return found

    def literal(self, lit: LiteralValue) -> HostValue:
        value = lit.literal
        if isinstance(value, AggregateLiteral) and value.kind == "tuple":
            return [self.value(item) for item in value.items]
        t = lit.type
        if isinstance(value, ScalarLiteral) and isinstance(t, TensorType) and not t.shape:
            mt = S.memory_type(t.dtype)
            c = S.constant(t.dtype, value.value)
            g = ir.GlobalVariable(self.module, mt, f"{self.llfn.name}.c{self.globals}")
            self.globals += 1
            g.initializer = ir.Constant(I8, c.constant) if t.dtype.is_bool else c
            g.global_constant = True
            g.linkage = "private"
            return g
        raise CodegenError(f"@{self.fn.name}: the literal {value} is not compiled in host code")

    # Instructions --------------------------------------------------------------------------

    def instruction(self, inst: Instruction) -> None:
        op = inst.opcode
        handler = getattr(self, "i_" + op, None)
        if handler is None:
            raise CodegenError(f"@{self.fn.name}: '{op}' is not compiled for the CPU yet")
        handler(inst)

    def i_literal(self, inst: Instruction) -> None:
        self.values[inst] = self.literal(inst.operands[0])  # type: ignore[arg-type]

    def i_apply(self, inst: Instruction) -> None:
        b = self.b
        callee = inst.operands[0]
        if not isinstance(callee, Function):
            raise CodegenError(f"@{self.fn.name}: calls through function values are not compiled")
        args = [p for v in inst.operands[1:] for p in flatten(self.value(v))]
        out = self.new_value(inst.type, inst)
        self.values[inst] = out
        outs = flatten(out)
        if callee.compute:
            arr = self.entry_alloca(PTR, len(args) + 1)
            for i, p in enumerate([*args, *outs]):
                b.store(p, b.gep(arr, [ir.Constant(I64, i)], source_etype=PTR))
            b.call(self.kernels[callee], [arr])
            return
        target = self.hosts.get(callee)
        if target is None:
            raise CodegenError(f"@{self.fn.name}: @{callee.name} has no body to compile")
        status = b.call(target, [self.ctx, *args, *outs])
        self.check(status)

    def check(self, status: ir.Value) -> None:
        b = self.b
        fail = self.llfn.append_basic_block("call.failed")
        cont = self.llfn.append_basic_block("call.ok")
        b.cbranch(b.icmp_signed("!=", status, ir.Constant(I32, 0)), fail, cont)
        b.position_at_end(fail)
        b.call(self.rt.arena_reset, [self.arena, self.mark])
        b.ret(status)
        b.position_at_end(cont)

    def entry_alloca(self, t: ir.Type, count: int = 1) -> ir.Value:
        b = self.b
        here = b.block
        b.position_at_start(self.llfn.entry_basic_block)
        slot = b.alloca(t, size=ir.Constant(I64, count))
        b.position_at_end(here)
        return slot

    def i_extract(self, inst: Instruction) -> None:
        src = inst.operands[0]
        v = self.value(src)
        keys = list(inst.attrs["keys"])
        while keys and isinstance(v, list):
            key = keys.pop(0)
            if key.index is None:
                raise CodegenError(f"@{self.fn.name}: a tuple element needs a constant index")
            v = v[key.index]
        if keys:  # then a tensor: the sub-tensor at the leading indices, copied
            part = tensor_type(inst)
            ptr = self.element_pointer(v, keys, self.element_source_type(inst, len(keys)))
            out = self.new_value(part, inst)
            self.copy(out, ptr, part)
            v = out
        self.values[inst] = v

    def i_insert(self, inst: Instruction) -> None:
        """`insert v to dest at k…`: a copy of dest with the sub-tensor at k… replaced."""
        v, dest = inst.operands
        if not isinstance(dest.type, TensorType):
            raise CodegenError(f"@{self.fn.name}: insert into a tuple is not compiled yet")
        dt = tensor_type(dest)
        out = self.new_value(dt, inst)
        self.values[inst] = out
        self.copy(out, self.value(dest), dt)
        part = tensor_type(v)
        self.copy(self.element_pointer(out, list(inst.attrs["keys"]), dt), self.value(v), part)

    def element_source_type(self, inst: Instruction, nkeys: int) -> TensorType:
        """The tensor an extract's remaining keys index (after any tuple keys)."""
        t = inst.operands[0].type
        keys = list(inst.attrs["keys"])
        while isinstance(t, TupleType):
            t = t.elements[keys.pop(0).index]
        assert isinstance(t, TensorType) and len(keys) == nkeys
        return t

    def element_pointer(self, base: ir.Value, keys: list, t: TensorType) -> ir.Value:
        """The address of t[k0, k1, …] (a sub-tensor), after checking every index."""
        b = self.b
        offset: ir.Value = ir.Constant(I64, 0)
        for d, key in enumerate(keys):
            if key.index is not None:
                i: ir.Value = ir.Constant(I64, key.index)
            elif key.value is not None:
                kt = tensor_type(key.value)
                raw = S.load_element(b, self.value(key.value), kt.dtype)
                i = b.sext(raw, I64) if kt.dtype.bits < 64 else raw
                self.check_index(i, t.shape[d])
            else:
                raise CodegenError(f"@{self.fn.name}: a field key indexes a struct, not a tensor")
            stride = math.prod(t.shape[d + 1 :]) * t.dtype.size
            offset = b.add(offset, b.mul(i, ir.Constant(I64, stride)))
        return b.gep(base, [offset], source_etype=I8)

    def check_index(self, i: ir.Value, n: int) -> None:
        b = self.b
        bad = b.icmp_unsigned(">=", i, ir.Constant(I64, n))
        fail = self.llfn.append_basic_block("index.bad")
        cont = self.llfn.append_basic_block("index.ok")
        b.cbranch(bad, fail, cont)
        b.position_at_end(fail)
        message = f"@{self.fn.name}: an index is out of range (size {n})"
        status = b.call(self.rt.error, [ir.Constant(I32, 1), self.string(message)])
        b.call(self.rt.arena_reset, [self.arena, self.mark])
        b.ret(status)
        b.position_at_end(cont)

    def string(self, text: str) -> ir.Value:
        data = bytearray(text.replace("%", "%%").encode()) + b"\0"
        ty = ir.ArrayType(I8, len(data))
        g = ir.GlobalVariable(self.module, ty, f"{self.llfn.name}.s{self.globals}")
        self.globals += 1
        g.initializer = ir.Constant(ty, data)
        g.global_constant = True
        g.linkage = "private"
        return g

    def i_random(self, inst: Instruction) -> None:
        """Uniform numbers in [lo, hi): element i is a hash of (a key drawn from the context's
        stream, i), so the result does not depend on how many threads run."""
        b = self.b
        t = tensor_type(inst)
        if not t.dtype.is_float:
            raise CodegenError(f"@{self.fn.name}: random integers are not compiled yet")
        out = self.new_value(t, inst)
        self.values[inst] = out
        lo_p, hi_p = (self.value(v) for v in inst.operands)
        lo = S.load_element(b, lo_p, t.dtype)
        hi = S.load_element(b, hi_p, t.dtype)
        # dl_context is { ptr arena; u64 seed; u64 counter }: three 8-byte words.
        seed_p = b.gep(self.ctx, [ir.Constant(I64, 1)], source_etype=I64)
        count_p = b.gep(self.ctx, [ir.Constant(I64, 2)], source_etype=I64)
        counter = b.load(count_p, typ=I64)
        b.store(b.add(counter, ir.Constant(I64, 1)), count_p)
        key = _mix(b, b.add(b.load(seed_p, typ=I64), b.mul(counter, ir.Constant(I64, _GOLDEN))))
        vt = S.value_type(t.dtype)
        bits = 24 if t.dtype.bits <= 32 else 53
        scale = ir.Constant(vt, 2.0**-bits)
        span = b.fsub(hi, lo)

        def fill(i: ir.Value) -> None:
            z = _mix(b, b.xor(key, b.mul(i, ir.Constant(I64, _ODD))))
            u = b.fmul(b.uitofp(b.lshr(z, ir.Constant(I64, 64 - bits)), vt), scale)
            x = b.fadd(lo, b.fmul(u, span))
            ptr = b.gep(out, [i], source_etype=S.memory_type(t.dtype))
            S.store_element(b, x, ptr, t.dtype)

        counted_loop(b, 0, math.prod(t.shape), fill, name="rand")

    # Control flow --------------------------------------------------------------------------

    def copy(self, dst: ir.Value, src: ir.Value, t: TensorType) -> None:
        self.b.call(self.rt.memcpy, [dst, src, ir.Constant(I64, nbytes(t)), ir.Constant(S.I1, 0)])

    def copy_value(self, dst: HostValue, src: HostValue, t: Type) -> None:
        if isinstance(t, StackType):
            handle = self.b.load(src[1], typ=PTR)  # type: ignore[index]
            self.b.store(handle, dst[1])  # type: ignore[index]
            return
        for d, s, tt in zip(flatten(dst), flatten(src), flat_types(t)):
            if d is not s:
                self.copy(d, s, tt)

    def i_return(self, inst: Instruction) -> None:
        b = self.b
        if inst.operands:
            v = self.value(inst.operands[0])
            for d, s, t in zip(self.results, flatten(v), flat_types(inst.operands[0].type)):
                self.copy(d, s, t)
        b.call(self.rt.arena_reset, [self.arena, self.mark])
        b.ret(ir.Constant(I32, 0))

    def jump(self, succ: Successor) -> None:
        """Copies the successor's arguments into its block's argument slots, through
        temporaries when one of them is itself an argument of that block (a swap)."""
        target: Block = succ.block
        pairs = list(zip(target.arguments, succ.args))
        hazard = any(isinstance(v, Argument) and v in target.arguments for _, v in pairs)
        sources = [self.value(v) for _, v in pairs]
        if hazard:
            temps = []
            for (a, _), src in zip(pairs, sources):
                tmp = self.new_value(a.type)
                self.copy_value(tmp, src, a.type)
                temps.append(tmp)
            sources = temps
        for (a, _), src in zip(pairs, sources):
            self.copy_value(self.values[a], src, a.type)
        self.b.branch(self.blocks[target])

    def i_branch(self, inst: Instruction) -> None:
        self.jump(inst.attrs["dest"])

    def i_conditional(self, inst: Instruction) -> None:
        b = self.b
        c = S.load_element(b, self.value(inst.operands[0]), tensor_type(inst.operands[0]).dtype)
        yes = self.llfn.append_basic_block("then")
        no = self.llfn.append_basic_block("else")
        b.cbranch(c, yes, no)
        b.position_at_end(yes)
        self.jump(inst.attrs["then"])
        b.position_at_end(no)
        self.jump(inst.attrs["else"])

    # The differentiation tape --------------------------------------------------------------

    def i_createStack(self, inst: Instruction) -> None:
        slot = self.new_value(inst.type, inst)
        handle = self.b.call(self.rt.stack_create, [])
        self.b.store(handle, slot[1])  # type: ignore[index]
        self.values[inst] = slot

    def _handle(self, v: Value) -> ir.Value:
        slot = self.value(v)
        return self.b.load(slot[1], typ=PTR)  # type: ignore[index]

    def i_destroyStack(self, inst: Instruction) -> None:
        self.b.call(self.rt.stack_destroy, [self._handle(inst.operands[0])])

    def i_push(self, inst: Instruction) -> None:
        v, stack = inst.operands
        handle = self._handle(stack)
        for p, t in zip(flatten(self.value(v)), flat_types(v.type)):
            self.check(self.b.call(self.rt.stack_push, [handle, p, ir.Constant(I64, nbytes(t))]))

    def i_pop(self, inst: Instruction) -> None:
        handle = self._handle(inst.operands[0])
        out = self.new_value(inst.type, inst)
        self.values[inst] = out
        pairs = list(zip(flatten(out), flat_types(inst.type)))
        for p, t in reversed(pairs):  # pushed first to last: popped last to first
            self.check(self.b.call(self.rt.stack_pop, [handle, p, ir.Constant(I64, nbytes(t))]))


_GOLDEN = 0x9E3779B97F4A7C15 - (1 << 64)
_ODD = 0xD1B54A32D192ED03 - (1 << 64)


def _mix(b: ir.IRBuilder, z: ir.Value) -> ir.Value:
    """SplitMix64's finaliser: a bijective 64-bit hash."""
    for shift, mul in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB)):
        z = b.mul(b.xor(z, b.lshr(z, ir.Constant(I64, shift))), ir.Constant(I64, mul - (1 << 64)))
    return b.xor(z, b.lshr(z, ir.Constant(I64, 31)))


def host_function(module: ir.Module, fn: Function) -> ir.Function:
    """The declaration of fn's compiled form, `i32 dl_<fn>(ptr ctx, ptr…)`."""
    ty = fn.type
    assert isinstance(ty, FunctionType)
    n = 1 + len(ty.arguments) + len(flat_types(ty.result))
    llfn = ir.Function(module, ir.FunctionType(I32, [PTR] * n), host_symbol(fn.name))
    llfn.visibility = "hidden"  # the glue's public functions are the library's only API
    return llfn
