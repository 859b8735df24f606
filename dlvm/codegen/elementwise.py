"""One element of an elementwise instruction as LLVM IR: the table from DLVM operation names to
llvmlite builder calls, with the interpreter's semantics (dlvm/interp/elementwise.py).

f32 exp, tanh and log are inline approximations (dlvm.codegen.approx, ≤ 1.5 ulp) that vectorise,
or with `fast` (a kernel scheduled `fastmath 1`) dlvm.codegen.fast_math's shorter ones; the
other transcendental functions call what dlvm.codegen.math_functions picks for the type.
bf16 is computed in f32 and rounded once to bf16 (to nearest even, as the interpreter's
ml_dtypes): exact for + - × ÷ and √, whose f32 results have more than twice bf16's digits."""

from __future__ import annotations

from llvmlite import ir

from dlvm.codegen import approx, fast_math
from dlvm.codegen.errors import CodegenError
from dlvm.codegen.llvm_types import I32, narrow, value_type
from dlvm.codegen.math_functions import call_math, truncate
from dlvm.ir.types import DataType

_APPROX = {"exp": approx.exp_f32, "tanh": approx.tanh_f32, "log": approx.log_f32}
_FAST = {"exp": fast_math.exp_f32, "tanh": fast_math.tanh_f32, "log": fast_math.log_f32}


def _in_f32(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return b.fpext(x, ir.FloatType())


def _bits_in_f32(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """A bf16 widened to f32 by its bits (the same value). For comparisons: LLVM narrows a
    comparison of two fpext'ed values to one of bfloat, which its x86-64 back end takes one
    element at a time (a relu's gradient mask, fused into a bf16 product's epilogue)."""
    bits = b.zext(b.bitcast(x, ir.IntType(16)), I32)
    return b.bitcast(b.shl(bits, ir.Constant(I32, 16)), ir.FloatType())


def unary(b: ir.IRBuilder, op: str, x: ir.Value, dt: DataType, fast: bool = False) -> ir.Value:
    if dt is DataType.BF16:
        return b.fptrunc(unary(b, op, _in_f32(b, x), DataType.F32, fast), x.type)
    if op == "negate":
        return b.fneg(x) if dt.is_float else b.neg(x)
    if op == "square":
        return b.fmul(x, x) if dt.is_float else b.mul(x, x)
    if op == "sign":
        if dt.is_float:  # NaN stays NaN; ±0 stays ±0
            zero = ir.Constant(x.type, 0.0)
            one = call_math(b, "copysign", [ir.Constant(x.type, 1.0), x])
            is_zero_or_nan = b.fcmp_unordered("==", x, zero)
            return b.select(is_zero_or_nan, x, one)
        pos = b.zext(b.icmp_signed(">", x, ir.Constant(x.type, 0)), x.type)
        neg = b.zext(b.icmp_signed("<", x, ir.Constant(x.type, 0)), x.type)
        return b.sub(pos, neg)
    if op in ("round", "rint", "ceil", "floor") and not dt.is_float:
        return x
    if op == "rsqrt":
        return b.fdiv(ir.Constant(x.type, 1.0), call_math(b, "sqrt", [x]))
    if op == "softplus":
        return _softplus(b, x, dt)
    if op == "digamma":
        raise CodegenError("digamma is not compiled yet (the interpreter has it)")
    if fast and dt is DataType.F32 and op in _FAST:  # --fast-math: docs/ir.md, "Fast math"
        return _FAST[op](b, x)
    if dt is DataType.F32 and op in _APPROX:  # vectorisable, ≤ 1.5 ulp
        return _APPROX[op](b, x)
    return call_math(b, op, [x])


def _softplus(b: ir.IRBuilder, x: ir.Value, dt: DataType) -> ir.Value:
    """log(1 + e^x) as max(x, 0) + log1p(e^-|x|), the interpreter's formula: e^-|x| ≤ 1 never
    overflows and log1p keeps the tail for x ≪ 0. exp is the math library's, not the inline
    approximation, which flushes the subnormal results of x < -87 that this tail returns; f16
    is computed in f32."""
    if dt is DataType.F16:
        wide = b.fpext(x, ir.FloatType())
        return b.fptrunc(_softplus(b, wide, DataType.F32), x.type)
    tail = call_math(b, "log1p", [call_math(b, "exp", [b.fneg(call_math(b, "fabs", [x]))])])
    return b.fadd(call_math(b, "maximum", [x, ir.Constant(x.type, 0.0)]), tail)


def binary(b: ir.IRBuilder, op: str, x: ir.Value, y: ir.Value, dt: DataType) -> ir.Value:
    if dt is DataType.BF16:
        return b.fptrunc(binary(b, op, _in_f32(b, x), _in_f32(b, y), DataType.F32), x.type)
    if dt.is_bool:
        if op in ("and", "min", "multiply"):
            return b.and_(x, y)
        if op in ("or", "max", "add"):
            return b.or_(x, y)
        if op == "xor":
            return b.xor(x, y)
        raise CodegenError(f"'{op}' of bool values")
    if dt.is_float:
        table = {"add": b.fadd, "subtract": b.fsub, "multiply": b.fmul, "divide": b.fdiv}
        if op in table:
            return table[op](x, y)
        if op in ("min", "max"):  # NaN-propagating, like NumPy's minimum/maximum
            return call_math(b, "minimum" if op == "min" else "maximum", [x, y])
        if op == "truncateDivide":
            return truncate(b, b.fdiv(x, y))
        if op == "floorDivide":
            return call_math(b, "floor", [b.fdiv(x, y)])
        if op == "modulo":
            return b.frem(x, y)
        if op == "power":
            return call_math(b, "pow", [x, y])
        raise CodegenError(f"'{op}' of float values")
    table = {"add": b.add, "subtract": b.sub, "multiply": b.mul}
    if op in table:
        return table[op](x, y)
    if op in ("min", "max"):
        return b.select(b.icmp_signed("<" if op == "min" else ">", x, y), x, y)
    if op in ("divide", "truncateDivide", "floorDivide", "modulo"):
        return _int_division(b, op, x, y)
    if op == "power":
        return _int_power(b, x, y)
    if op in _BITWISE:
        return getattr(b, _BITWISE[op])(x, y)
    if op in ("shiftLeft", "shiftRight"):
        return _shift(b, op, x, y)
    raise CodegenError(f"'{op}' of integer values")


_BITWISE = {"and": "and_", "or": "or_", "xor": "xor"}


def _shift(b: ir.IRBuilder, op: str, x: ir.Value, y: ir.Value) -> ir.Value:
    """The interpreter's shifts: an amount outside [0, bits), which LLVM leaves undefined
    (poison), gives 0 to the left and bits - 1 to the right (the sign)."""
    bits = ir.Constant(x.type, x.type.width)
    inside = b.icmp_unsigned("<", y, bits)  # a negative amount is a large unsigned one
    if op == "shiftLeft":
        return b.select(
            inside, b.shl(x, b.select(inside, y, ir.Constant(x.type, 0))), ir.Constant(x.type, 0)
        )
    return b.ashr(x, b.select(inside, y, ir.Constant(x.type, x.type.width - 1)))


def _int_division(b: ir.IRBuilder, op: str, x: ir.Value, y: ir.Value) -> ir.Value:
    """C division and remainder; a zero divisor gives 0 instead of a trap (the interpreter
    reports it; compiled code must not kill the host process). floorDivide rounds down."""
    zero = ir.Constant(x.type, 0)
    one = ir.Constant(x.type, 1)
    is_zero = b.icmp_signed("==", y, zero)
    safe = b.select(is_zero, one, y)
    if op == "modulo":
        r = b.srem(x, safe)
    else:
        r = b.sdiv(x, safe)
        if op == "floorDivide":
            rem = b.srem(x, safe)
            inexact = b.icmp_signed("!=", rem, zero)
            signs = b.icmp_signed("<", b.xor(x, safe), zero)
            r = b.sub(r, b.zext(b.and_(inexact, signs), x.type))
    return b.select(is_zero, zero, r)


def _int_power(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """x ** y by squaring (y < 0 gives 0, where the interpreter reports an error)."""
    fn_name = f"dl.ipow.{x.type}"
    module = b.module
    fn = module.globals.get(fn_name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(x.type, [x.type, x.type]), fn_name)
        fn.linkage = "internal"
        fb = ir.IRBuilder(fn.append_basic_block("entry"))
        base, exp = fn.args
        loop = fn.append_basic_block("loop")
        done = fn.append_basic_block("done")
        start = fb.block
        fb.branch(loop)
        fb.position_at_end(loop)
        acc = fb.phi(x.type)
        bb = fb.phi(x.type)
        e = fb.phi(x.type)
        zero, one = ir.Constant(x.type, 0), ir.Constant(x.type, 1)
        odd = fb.icmp_signed("!=", fb.and_(e, one), zero)
        acc2 = fb.select(odd, fb.mul(acc, bb), acc)
        e2 = fb.ashr(e, one)
        bb2 = fb.mul(bb, bb)
        more = fb.icmp_signed(">", e2, zero)
        acc.add_incoming(one, start)
        bb.add_incoming(base, start)
        e.add_incoming(exp, start)
        acc.add_incoming(acc2, loop)
        bb.add_incoming(bb2, loop)
        e.add_incoming(e2, loop)
        fb.cbranch(more, loop, done)
        fb.position_at_end(done)
        neg = fb.icmp_signed("<", exp, zero)
        fb.ret(fb.select(neg, zero, acc2))
    return b.call(fn, [x, y])


_ORDERED = {
    "lessThan": "<",
    "lessThanOrEqual": "<=",
    "greaterThan": ">",
    "greaterThanOrEqual": ">=",
    "equal": "==",
    "notEqual": "!=",
}


def compare(b: ir.IRBuilder, op: str, x: ir.Value, y: ir.Value, dt: DataType) -> ir.Value:
    cmp = _ORDERED[op]
    if dt is DataType.BF16:
        x, y = _bits_in_f32(b, x), _bits_in_f32(b, y)
    if dt.is_float:
        # NumPy: every comparison with NaN is false except !=, which is true.
        return b.fcmp_unordered(cmp, x, y) if op == "notEqual" else b.fcmp_ordered(cmp, x, y)
    if dt.is_bool:
        return b.icmp_unsigned(cmp, x, y)
    return b.icmp_signed(cmp, x, y)


def cast(b: ir.IRBuilder, x: ir.Value, src: DataType, dst: DataType) -> ir.Value:
    """dataTypeCast: widen or narrow within floats, widen integers, bool to anything."""
    to = value_type(dst)
    if src is dst:
        return x
    if src.is_bool:
        if dst.is_float:
            if dst is DataType.BF16:  # 0 or 1, exact in f32
                return b.fptrunc(b.uitofp(x, ir.FloatType()), to)
            return b.uitofp(x, to)
        return b.zext(x, to)
    if src.is_float and dst.is_float:
        if dst.bits == src.bits:  # f16 and bf16: through f32, which holds either exactly
            return b.fptrunc(b.fpext(x, ir.FloatType()), to)
        return b.fpext(x, to) if dst.bits > src.bits else narrow(b, x, to)
    if src.is_int and dst.is_int:
        return b.sext(x, to) if dst.bits > src.bits else b.trunc(x, to)
    raise CodegenError(f"cast from {src} to {dst}")


def convert(b: ir.IRBuilder, x: ir.Value, src: DataType, dst: DataType) -> ir.Value:
    """convert: any data type to any other, as the interpreter does (docs/ir.md, "Elementwise")."""
    to = value_type(dst)
    if src is dst:
        return x
    if dst.is_bool:  # != 0; NaN is not zero, so true (unordered)
        if src.is_float:
            return b.fcmp_unordered("!=", x, ir.Constant(x.type, 0.0))
        return b.icmp_signed("!=", x, ir.Constant(x.type, 0))
    if src.is_bool or src.base is dst.base:
        if src.is_int and dst.is_int and dst.bits < src.bits:
            return b.trunc(x, to)  # wraps, as NumPy and C do
        return cast(b, x, src, dst)
    if src.is_int:  # to a float: rounds to nearest, ties to even (bf16: through f32, as ml_dtypes)
        if dst is DataType.BF16:
            return b.fptrunc(b.sitofp(x, ir.FloatType()), to)
        return b.sitofp(x, to)
    return _float_to_int(b, x, to)


def _float_to_int(b: ir.IRBuilder, x: ir.Value, to: ir.Type) -> ir.Value:
    """Toward zero, saturated at the integer's range, NaN to 0: `llvm.fptosi.sat`, which
    both x86-64 and NVPTX lower. f16 and bf16 go through f32 (exact) first. To an integer of
    fewer than 32 bits, whose bounds a float holds exactly, x is clamped to them (NaN to 0)
    and converted by a plain fptosi through i32, the same value: x86 converts that a vector
    at a time, and `llvm.fptosi.sat` a lane at a time."""
    if str(x.type) in ("half", "bfloat"):
        x = b.fpext(x, ir.FloatType())
    assert isinstance(to, ir.IntType)
    if to.width >= 32:
        return _fptosi_sat(b, x, to)
    low = ir.Constant(x.type, float(-(1 << (to.width - 1))))
    high = ir.Constant(x.type, float((1 << (to.width - 1)) - 1))
    x = b.select(b.fcmp_unordered("uno", x, x), ir.Constant(x.type, 0.0), x)
    x = b.select(b.fcmp_ordered("<", x, low), low, x)
    x = b.select(b.fcmp_ordered(">", x, high), high, x)
    return b.trunc(b.fptosi(x, I32), to)


def _fptosi_sat(b: ir.IRBuilder, x: ir.Value, to: ir.IntType) -> ir.Value:
    suffix = "f32" if str(x.type) == "float" else "f64"
    fname = f"llvm.fptosi.sat.i{to.width}.{suffix}"
    fn = b.module.globals.get(fname) or ir.Function(b.module, ir.FunctionType(to, [x.type]), fname)
    return b.call(fn, [x])
