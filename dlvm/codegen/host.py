"""A host function (not `[compute]`) as LLVM IR: calls of kernels and of other host functions
(named or through function values), control flow with block arguments, the differentiation
tape; aggregates (host_aggregates), memory (host_memory) and the tensor work no kernel does
(host_tensor) are mixed in. How values are held: dlvm.codegen.host_values.

Convention (docs/c-abi.md section 5): `i32 dl_<fn>(ptr ctx, ptr arg…, ptr result…)`, every
value passed as a pointer to its bytes, tuple arguments and results flattened, a dlrt_status
returned. Each call takes one frame from the context's arena for the values it computes,
released on return."""

from __future__ import annotations

from llvmlite import ir

from dlvm.codegen.errors import CodegenError
from dlvm.codegen.frame import ALIGN, MAX_FRAME_BYTES
from dlvm.codegen.gather import check_ids, ids_operand
from dlvm.codegen.host_aggregates import AggregateOps
from dlvm.codegen.host_memory import MemoryOps
from dlvm.codegen.host_tensor import TensorOps
from dlvm.codegen.host_values import (
    STATUS_INVALID_ARGUMENT,
    STATUS_OUT_OF_MEMORY,
    HostValue,
    Runtime,
    flat_types,
    flatten,
    host_function,
    nbytes,
)
from dlvm.codegen.kernel import constant_array, tensor_type
from dlvm.codegen.layout import enum_case
from dlvm.codegen.llvm_types import I32, I64, PTR, load_element
from dlvm.ir.types import EnumType, FunctionType, canonical
from dlvm.ir.values import Block, Function, Instruction, LiteralValue, Successor, Value

__all__ = ["HostGen", "Runtime", "host_function"]


class HostGen(AggregateOps, MemoryOps, TensorOps):
    """Lowers one host function; `kernels` maps [compute] functions to their LLVM entries."""

    def emit(self) -> None:
        fn, llfn = self.fn, self.llfn
        ty = fn.type
        assert isinstance(ty, FunctionType)
        n_args = sum(len(flat_types(a)) for a in ty.arguments)
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
        params = iter(llfn.args[1 : 1 + n_args])
        for a in fn.arguments:
            self.values[a] = self.unflatten(a.type, params)
        self.blocks = {blk: llfn.append_basic_block(f"b.{blk.name}") for blk in fn.blocks}
        for blk in fn.blocks[1:]:
            for a in blk.arguments:
                self.values[a] = self.new_value(a.type, a)
        b.branch(self.blocks[fn.blocks[0]])
        for blk in fn.blocks:
            b.position_at_end(self.blocks[blk])
            for inst in blk.instructions:
                self.instruction(inst)
        size.initializer = ir.Constant(I64, self.checked_frame_size())

    def checked_frame_size(self) -> int:
        """The frame's bytes: the planned values and the temporaries past them, which may add up
        to more than any one value. Past MAX_FRAME_BYTES it is a build error; below, a frame
        bigger than memory fails each call with DLRT_ERR_OUT_OF_MEMORY (dlrt_arena_push)."""
        size = max(self.frame_size, ALIGN)
        if size > MAX_FRAME_BYTES:
            loc = f"{self.fn.loc}: " if self.fn.loc is not None else ""
            raise CodegenError(
                f"{loc}in @{self.fn.name}: the values it holds at once take {size} bytes of its "
                "frame, more than the 2^62 a frame may take"
            )
        return size

    def instruction(self, inst: Instruction) -> None:
        op = inst.opcode
        handler = getattr(self, "i_" + op, None)
        if handler is None:
            raise CodegenError(f"@{self.fn.name}: '{op}' is not compiled for the CPU yet")
        self.current = inst
        handler(inst)

    # Calls ---------------------------------------------------------------------------------

    def i_apply(self, inst: Instruction) -> None:
        b = self.b
        callee = inst.operands[0]
        args = [p for v in inst.operands[1:] for p in flatten(self.value(v))]
        out = self.new_value(inst.type, inst)
        self.values[inst] = out
        outs = flatten(out)
        if isinstance(callee, Function) and callee.compute:
            indexed = ids_operand(callee)
            if indexed is not None:
                gather, ids = indexed
                if isinstance(ids, LiteralValue):
                    check_ids(self, gather, [int(i) for i in constant_array(ids)])
                else:
                    check_ids(self, gather, args[callee.arguments.index(ids)])  # type: ignore[arg-type]
            arr = self.entry_alloca(PTR, len(args) + 1)
            for i, p in enumerate([*args, *outs]):
                b.store(p, b.gep(arr, [ir.Constant(I64, i)], source_etype=PTR))
            b.call(self.kernels[callee], [arr])
            return
        if not isinstance(canonical(callee.type), FunctionType):
            raise CodegenError(f"@{self.fn.name}: calls through pointers are not compiled")
        self.check(self.invoke(callee, [*args, *outs]))

    # Control flow --------------------------------------------------------------------------

    def i_return(self, inst: Instruction) -> None:
        """Copies the value into the caller's result buffers, but for the parts computed there
        (dlvm.codegen.frame)."""
        if inst.operands:
            self.copy_value(self.results, self.value(inst.operands[0]), inst.operands[0].type)
        self.leave(ir.Constant(I32, 0))

    def jump(
        self, succ: Successor, sources: list[HostValue] | None = None, read: Value | None = None
    ) -> None:
        """Copies the successor's arguments (or `sources`, parts of `read`) into its block's
        argument slots, through temporaries when one of them lives in the storage of an
        argument of that block (a swap)."""
        target: Block = succ.block
        args = target.arguments
        reads = succ.args if read is None else [read]
        hazard = any(self.plan.owners(v) & set(args) for v in reads)
        if sources is None:
            sources = [self.value(v) for v in succ.args]
        if hazard:
            temps = []
            for a, src in zip(args, sources):
                tmp = self.new_value(a.type)
                self.copy_value(tmp, src, a.type)
                temps.append(tmp)
            sources = temps
        for a, src in zip(args, sources):
            self.copy_value(self.values[a], src, a.type)
        self.b.branch(self.blocks[target])

    def i_branch(self, inst: Instruction) -> None:
        self.jump(inst.attrs["dest"])

    def i_conditional(self, inst: Instruction) -> None:
        b = self.b
        c = load_element(b, self.value(inst.operands[0]), tensor_type(inst.operands[0]).dtype)
        yes = self.llfn.append_basic_block("then")
        no = self.llfn.append_basic_block("else")
        b.cbranch(c, yes, no)
        b.position_at_end(yes)
        self.jump(inst.attrs["then"])
        b.position_at_end(no)
        self.jump(inst.attrs["else"])

    def i_branchEnum(self, inst: Instruction) -> None:
        """Switches on the tag; a case's block receives the case's values. A case the
        instruction does not list fails as the interpreter does."""
        b = self.b
        (v,) = inst.operands
        t = canonical(v.type)
        assert isinstance(t, EnumType)
        base = self.value(v)
        tag = b.load(base, typ=I64)
        invalid = self.llfn.append_basic_block("enum.invalid")
        switch = b.switch(tag, invalid)
        targets = dict(inst.attrs["cases"])
        for case, _ in t.cases:
            number, payload = enum_case(t, case)
            here = self.llfn.append_basic_block(f"enum.{case}")
            switch.add_case(ir.Constant(I64, number), here)
            b.position_at_end(here)
            if case in targets:
                values = [self.view(self.offset(base, off), pt) for off, pt in payload]
                self.jump(Successor(targets[case], []), values, v)
            else:
                self.fail(STATUS_INVALID_ARGUMENT, f"branchEnum has no case for ?{case}")
        b.position_at_end(invalid)  # no value has another tag
        b.unreachable()

    # The differentiation tape --------------------------------------------------------------

    def i_createStack(self, inst: Instruction) -> None:
        self.new_word(inst.type, inst, self.b.call(self.rt.stack_create, []))

    def i_destroyStack(self, inst: Instruction) -> None:
        self.b.call(self.rt.stack_destroy, [self.word(inst.operands[0])])

    def i_push(self, inst: Instruction) -> None:
        v, stack = inst.operands
        handle = self.word(stack)
        for p, t in zip(flatten(self.value(v)), flat_types(v.type)):
            self.check(self.b.call(self.rt.stack_push, [handle, p, ir.Constant(I64, nbytes(t))]))

    def i_pop(self, inst: Instruction) -> None:
        handle = self.word(inst.operands[0])
        out = self.new_value(inst.type, inst)
        self.values[inst] = out
        pairs = list(zip(flatten(out), flat_types(inst.type)))
        for p, t in reversed(pairs):  # pushed first to last: popped last to first
            self.check(self.b.call(self.rt.stack_pop, [handle, p, ir.Constant(I64, nbytes(t))]))
