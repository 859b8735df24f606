"""One element of an elementwise instruction as LLVM IR: the table from DLVM operation names to
llvmlite builder calls, with the interpreter's semantics (dlvm/interp/elementwise.py).

Values in registers: floats as half/float/double, integers as iN, bools as i1 (stored as i8).
f32 exp, tanh and log are inline approximations (dlvm.codegen.approx, ≤ 1.5 ulp) that vectorise;
the other transcendental functions call LLVM intrinsics where LLVM has one and the C math
library otherwise (glibc: ≤ 1 ulp for most, a few ulp for some)."""

from __future__ import annotations

from llvmlite import ir

from dlvm.codegen import approx
from dlvm.diagnostics import BuildFailure
from dlvm.ir.types import DataType

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()

_FLOAT_TYPES = {16: ir.HalfType(), 32: ir.FloatType(), 64: ir.DoubleType()}


class CodegenError(BuildFailure):
    """A construct the code generator cannot compile; the message says which and where."""


def value_type(dt: DataType) -> ir.Type:
    """The register type of one element."""
    if dt.is_bool:
        return I1
    if dt.is_float:
        return _FLOAT_TYPES[dt.bits]
    return ir.IntType(dt.bits)


def memory_type(dt: DataType) -> ir.Type:
    """The in-memory type of one element (bools are bytes)."""
    return I8 if dt.is_bool else value_type(dt)


def load_element(b: ir.IRBuilder, ptr: ir.Value, dt: DataType) -> ir.Value:
    v = b.load(ptr, typ=memory_type(dt))
    return b.trunc(v, I1) if dt.is_bool else v


def store_element(b: ir.IRBuilder, v: ir.Value, ptr: ir.Value, dt: DataType) -> None:
    b.store(b.zext(v, I8) if dt.is_bool else v, ptr)


def constant(dt: DataType, value: int | float | bool) -> ir.Constant:
    if dt.is_bool:
        return ir.Constant(I1, int(bool(value)))
    if dt.is_float:
        return ir.Constant(value_type(dt), float(value))
    return ir.Constant(value_type(dt), int(value))


# Intrinsics LLVM lowers itself (vectorisable); the rest come from libm by name.
_INTRINSIC = {
    "sqrt": "llvm.sqrt",
    "exp": "llvm.exp",
    "log": "llvm.log",
    "sin": "llvm.sin",
    "cos": "llvm.cos",
    "tan": "llvm.tan",
    "asin": "llvm.asin",
    "acos": "llvm.acos",
    "atan": "llvm.atan",
    "sinh": "llvm.sinh",
    "cosh": "llvm.cosh",
    "tanh": "llvm.tanh",
    "floor": "llvm.floor",
    "ceil": "llvm.ceil",
    "round": "llvm.round",
    "rint": "llvm.rint",
    "fabs": "llvm.fabs",
    "copysign": "llvm.copysign",
    "minimum": "llvm.minimum",
    "maximum": "llvm.maximum",
    "pow": "llvm.pow",
}
_LIBM = {"erf": "erf", "erfc": "erfc", "lgamma": "lgamma"}
# In a GPU module (nvptx64), the operations the NVPTX back end cannot lower itself call
# libdevice, NVIDIA's math library as LLVM bitcode, linked in by dlvm.codegen.cuda:
# `__nv_expf` for f32, `__nv_exp` for f64 (f16 is computed in f32).
_LIBDEVICE = frozenset(
    ["exp", "log", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "pow",
     "erf", "erfc", "lgamma", "round"]
)  # fmt: skip
_APPROX = {"exp": approx.exp_f32, "tanh": approx.tanh_f32, "log": approx.log_f32}


def _suffix(t: ir.Type) -> str:
    return {"half": "f16", "float": "f32", "double": "f64"}[str(t)]


def call_math(b: ir.IRBuilder, name: str, args: list[ir.Value]) -> ir.Value:
    """An intrinsic (`llvm.exp.f32`) or, without one, the libm function for the type; in a
    GPU module, libdevice's where NVPTX has no instruction."""
    module = b.module
    t = args[0].type
    if name in _LIBDEVICE and module.triple.startswith("nvptx"):
        if str(t) == "half":
            wide = [b.fpext(a, ir.FloatType()) for a in args]
            return b.fptrunc(call_math(b, name, wide), t)
        fname = f"__nv_{name}" + ("f" if str(t) == "float" else "")
    elif name in _INTRINSIC:
        fname = f"{_INTRINSIC[name]}.{_suffix(t)}"
    elif name in _LIBM:
        if str(t) == "half":  # libm has no half functions: compute in float
            wide = [b.fpext(a, ir.FloatType()) for a in args]
            return b.fptrunc(call_math(b, name, wide), t)
        fname = _LIBM[name] + ("f" if str(t) == "float" else "")
    else:
        raise CodegenError(f"no math function '{name}'")
    fn = module.globals.get(fname)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(t, [a.type for a in args]), fname)
    return b.call(fn, args)


def unary(b: ir.IRBuilder, op: str, x: ir.Value, dt: DataType) -> ir.Value:
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
    if op == "digamma":
        raise CodegenError("digamma is not compiled yet (the interpreter has it)")
    if dt is DataType.F32 and op in _APPROX:  # vectorisable, ≤ 1.5 ulp
        return _APPROX[op](b, x)
    return call_math(b, op, [x])


def binary(b: ir.IRBuilder, op: str, x: ir.Value, y: ir.Value, dt: DataType) -> ir.Value:
    if dt.is_bool:
        if op in ("and", "min", "multiply"):
            return b.and_(x, y)
        if op in ("or", "max", "add"):
            return b.or_(x, y)
        raise CodegenError(f"'{op}' of bool values")
    if dt.is_float:
        table = {"add": b.fadd, "subtract": b.fsub, "multiply": b.fmul, "divide": b.fdiv}
        if op in table:
            return table[op](x, y)
        if op in ("min", "max"):  # NaN-propagating, like NumPy's minimum/maximum
            return call_math(b, "minimum" if op == "min" else "maximum", [x, y])
        if op == "truncateDivide":
            return _ftrunc(b, b.fdiv(x, y))
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
    raise CodegenError(f"'{op}' of integer values")


def _ftrunc(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    fname = f"llvm.trunc.{_suffix(x.type)}"
    fn = b.module.globals.get(fname) or ir.Function(
        b.module, ir.FunctionType(x.type, [x.type]), fname
    )
    return b.call(fn, [x])


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
            return b.uitofp(x, to)
        return b.zext(x, to)
    if src.is_float and dst.is_float:
        return b.fpext(x, to) if dst.bits > src.bits else b.fptrunc(x, to)
    if src.is_int and dst.is_int:
        return b.sext(x, to) if dst.bits > src.bits else b.trunc(x, to)
    raise CodegenError(f"cast from {src} to {dst}")
