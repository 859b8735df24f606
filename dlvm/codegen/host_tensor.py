"""Tensor instructions that stay in host code (dlvm/interp/tensor.py, reductions.py): random
numbers, the shape queries (constants of the operand's type), a bitCast no kernel computes,
and `reduce` by a function, which calls the compiled function once per element."""

from __future__ import annotations

import math

from llvmlite import ir

from dlvm.codegen.errors import CodegenError
from dlvm.codegen.host_values import STATUS_INVALID_ARGUMENT, HostBase, nbytes
from dlvm.codegen.kernel import tensor_type
from dlvm.codegen.llvm_types import I64, load_element, memory_type, store_element, value_type
from dlvm.codegen.loops import counted_loop, linear_index, loop_nest
from dlvm.ir.types import TensorType, TupleType, canonical
from dlvm.ir.values import Instruction

_GOLDEN = 0x9E3779B97F4A7C15 - (1 << 64)
_ODD = 0xD1B54A32D192ED03 - (1 << 64)
I128 = ir.IntType(128)


def mix(b: ir.IRBuilder, z: ir.Value) -> ir.Value:
    """SplitMix64's finaliser: a bijective 64-bit hash."""
    for shift, mul in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB)):
        z = b.mul(b.xor(z, b.lshr(z, ir.Constant(I64, shift))), ir.Constant(I64, mul - (1 << 64)))
    return b.xor(z, b.lshr(z, ir.Constant(I64, 31)))


class TensorOps(HostBase):
    # Random numbers ------------------------------------------------------------------------

    def i_random(self, inst: Instruction) -> None:
        """Uniform numbers in [lo, hi) (reals, or integers for an integer type): element i is a
        hash of (a key drawn from the context's stream, i), so the result does not depend on
        how many threads run. An empty range fails as in the interpreter."""
        b = self.b
        t = tensor_type(inst)
        out = self.new_value(t, inst)
        self.values[inst] = out
        lo_p, hi_p = (self.value(v) for v in inst.operands)
        lo = load_element(b, lo_p, t.dtype)
        hi = load_element(b, hi_p, t.dtype)
        # dl_context is { ptr arena; u64 seed; u64 counter }: three 8-byte words.
        seed_p = b.gep(self.ctx, [ir.Constant(I64, 1)], source_etype=I64)
        count_p = b.gep(self.ctx, [ir.Constant(I64, 2)], source_etype=I64)
        counter = b.load(count_p, typ=I64)
        b.store(b.add(counter, ir.Constant(I64, 1)), count_p)
        key = mix(b, b.add(b.load(seed_p, typ=I64), b.mul(counter, ir.Constant(I64, _GOLDEN))))
        draw = self._uniform_real(lo, hi, t) if t.dtype.is_float else self._uniform_int(lo, hi, t)
        mt = memory_type(t.dtype)

        def fill(i: ir.Value) -> None:
            z = mix(b, b.xor(key, b.mul(i, ir.Constant(I64, _ODD))))
            store_element(b, draw(z), b.gep(out, [i], source_etype=mt), t.dtype)

        counted_loop(b, 0, math.prod(t.shape), fill, name="rand")

    def _uniform_real(self, lo: ir.Value, hi: ir.Value, t: TensorType):
        b = self.b
        wide = [b.fpext(x, ir.DoubleType()) if t.dtype.bits < 64 else x for x in (lo, hi)]
        message = "random range [%g, %g) is empty"
        self.fail_if(b.fcmp_ordered("<", hi, lo), STATUS_INVALID_ARGUMENT, message, *wide)
        vt = value_type(t.dtype)
        bits = 24 if t.dtype.bits <= 32 else 53
        scale = ir.Constant(vt, 2.0**-bits)
        span = b.fsub(hi, lo)

        def draw(z: ir.Value) -> ir.Value:
            u = b.fmul(b.uitofp(b.lshr(z, ir.Constant(I64, 64 - bits)), vt), scale)
            return b.fadd(lo, b.fmul(u, span))

        return draw

    def _uniform_int(self, lo: ir.Value, hi: ir.Value, t: TensorType):
        """lo + ⌊z · (hi − lo) / 2⁶⁴⌋: every integer of the range, each with probability
        within 2⁻⁶⁴·(hi − lo) of uniform."""
        b = self.b
        wide = [b.sext(x, I64) if t.dtype.bits < 64 else x for x in (lo, hi)]
        message = "random range [%lld, %lld) is empty"
        self.fail_if(b.icmp_signed("<=", hi, lo), STATUS_INVALID_ARGUMENT, message, *wide)
        span = b.zext(b.sub(wide[1], wide[0]), I128)
        vt = value_type(t.dtype)

        def draw(z: ir.Value) -> ir.Value:
            high = b.lshr(b.mul(b.zext(z, I128), span), ir.Constant(I128, 64))
            r = b.add(wide[0], b.trunc(high, I64))
            return b.trunc(r, vt) if t.dtype.bits < 64 else r

        return draw

    # Queries and casts ---------------------------------------------------------------------

    def i_rank(self, inst: Instruction) -> None:
        self.values[inst] = self.constant(I64, ir.Constant(I64, tensor_type(inst.operands[0]).rank))

    def i_unitCount(self, inst: Instruction) -> None:
        count = tensor_type(inst.operands[0]).unit_count
        self.values[inst] = self.constant(I64, ir.Constant(I64, count))

    def i_shape(self, inst: Instruction) -> None:
        shape = tensor_type(inst.operands[0]).shape
        ty = ir.ArrayType(I64, len(shape))
        self.values[inst] = self.constant(ty, ir.Constant(ty, list(shape)))

    def i_bitCast(self, inst: Instruction) -> None:
        """The operand's bytes, read as the new type (kernels compute the bitCasts between
        element types of one size; this is the rest)."""
        (v,) = inst.operands
        src, dst = canonical(v.type), canonical(inst.type)
        tensors = isinstance(src, TensorType) and isinstance(dst, TensorType)
        if (tensors and nbytes(src) != nbytes(dst)) or isinstance(src, TupleType):
            raise CodegenError(f"@{self.fn.name}: bitCast from {v.type} to {inst.type} is not "
                               "compiled (the sizes differ)")  # fmt: skip
        self.values[inst] = self.value(v)

    # Reductions by a function --------------------------------------------------------------

    def i_reduce(self, inst: Instruction) -> None:
        """`reduce v by @f init v0 along dims`: out starts as v0 everywhere; then for each
        reduced index in row-major order and each output index, out = f(out, v) — the
        interpreter's order of calls."""
        b = self.b
        x, init = inst.operands
        comb = inst.attrs["comb"]
        if isinstance(comb, str):
            raise CodegenError(f"@{self.fn.name}: reduce by '{comb}' belongs in a kernel")
        xt, t = tensor_type(x), tensor_type(inst)
        dims = sorted(inst.attrs["dims"])
        kept = [d for d in range(len(xt.shape)) if d not in dims]
        out = self.new_value(t, inst)
        self.values[inst] = out
        mt, size = memory_type(t.dtype), t.dtype.size
        src, init_p = self.value(x), self.value(init)
        result = self.new_value(t.with_shape(()))

        def outputs(body) -> None:
            if t.shape:
                loop_nest(b, list(t.shape), body)
            else:
                body([])

        outputs(lambda o: self.copy(b.gep(out, [linear_index(b, o, t.shape)], source_etype=mt),
                                    init_p, size))  # fmt: skip

        def step(red: list[ir.Value]) -> None:
            def at(o: list[ir.Value]) -> None:
                full: list[ir.Value] = [ir.Constant(I64, 0)] * len(xt.shape)
                for d, i in zip(kept, o):
                    full[d] = i
                for d, i in zip(dims, red):
                    full[d] = i
                acc = b.gep(out, [linear_index(b, o, t.shape)], source_etype=mt)
                elem = b.gep(src, [linear_index(b, full, xt.shape)], source_etype=mt)
                self.check(self.invoke(comb, [acc, elem, result]))
                self.copy(acc, result, size)

            outputs(at)

        loop_nest(b, [xt.shape[d] for d in dims], step)
