"""Vectorisable f32 approximations of exp, tanh and log as straight-line LLVM IR (no calls, so
LLVM's loop vectoriser turns a kernel's loop into SIMD code).

Accuracy, measured against float64 NumPy over the whole f32 range
(tests/unit/test_codegen_approx.py):
- exp: ≤ 1 ulp for results ≥ 2^-126 (Cephes' expf: a range reduction by ln 2 in two parts and a
  degree-6 polynomial; 2^n applied as two factors so that n = 128 does not overflow the
  exponent); 0 below (subnormal results are flushed), +inf above 88.72283, NaN stays NaN.
- tanh: ≤ 1.5 ulp (Cephes' tanhf: an odd degree-11 polynomial for |x| < 0.625, else
  1 - 2/(e + 1) with e = exp(2|x|), |x| clamped to 10, where tanh rounds to 1; then the sign
  of x); NaN stays NaN. Both halves are computed for every lane, so they are kept short: e
  needs none of exp's range checks, (1 + y)·2^n is one multiply-add, and the polynomials use
  multiply-adds (fused where the CPU has them; the bound holds either way).
- log: ≤ 1 ulp (Cephes' logf: x = m · 2^e with m in [√½, √2), a degree-9 polynomial in m - 1,
  e · ln 2 added in two parts); subnormal inputs are scaled into range first; log(±0) = -inf,
  log(+inf) = +inf, negative inputs and NaN give NaN.
f64 and f16 use the math library (through LLVM intrinsics)."""

from __future__ import annotations

from llvmlite import ir

I32 = ir.IntType(32)
F32 = ir.FloatType()

_EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
             1.6666665459e-1, 5.0000001201e-1)  # fmt: skip
_TANH_POLY = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1,
              -3.33332819422e-1)  # fmt: skip
_LOG_POLY = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
             1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
             3.3333331174e-1)  # fmt: skip
_ROUND = 12582912.0  # 1.5·2^23: x + _ROUND − _ROUND is x rounded to an integer (|x| < 2^22)
EXP_HI = 88.72283
EXP_LO = -87.33654


def _c(v: float) -> ir.Constant:
    return ir.Constant(F32, v)


def f32_intrinsic(b: ir.IRBuilder, name: str, args: list[ir.Value]) -> ir.Value:
    """A call of the f32 LLVM intrinsic `llvm.NAME.f32` (declared once per module)."""
    fname = f"llvm.{name}.f32"
    fn = b.module.globals.get(fname) or ir.Function(
        b.module, ir.FunctionType(F32, [F32] * len(args)), fname
    )
    return b.call(fn, args)


def _horner(
    b: ir.IRBuilder, x: ir.Value, coefficients: tuple[float, ...], fused: bool = False
) -> ir.Value:
    """The polynomial at x, highest coefficient first; `fused`: with multiply-adds."""
    p: ir.Value = _c(coefficients[0])
    for k in coefficients[1:]:
        p = _fmuladd(b, p, x, _c(k)) if fused else b.fadd(b.fmul(p, x), _c(k))
    return p


def _fmuladd(b: ir.IRBuilder, x: ir.Value, y: ir.Value, z: ir.Value) -> ir.Value:
    """x·y + z, fused into one rounding where the target has FMA (llvm.fmuladd)."""
    return f32_intrinsic(b, "fmuladd", [x, y, z])


def _pow2(b: ir.IRBuilder, n: ir.Value) -> ir.Value:
    """2^n for an i32 n in [-63, 64], built from its exponent bits."""
    bits = b.shl(b.add(n, ir.Constant(I32, 127)), ir.Constant(I32, 23))
    return b.bitcast(bits, F32)


def exp_f32(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    lo, hi = _c(EXP_LO), _c(EXP_HI)
    xc = b.select(b.fcmp_ordered(">", x, hi), hi, b.select(b.fcmp_ordered("<", x, lo), lo, x))
    n = f32_intrinsic(b, "floor", [b.fadd(b.fmul(xc, _c(1.44269504088896341)), _c(0.5))])
    r = b.fsub(b.fsub(xc, b.fmul(n, _c(0.693359375))), b.fmul(n, _c(-2.12194440e-4)))
    p = _horner(b, r, _EXP_POLY)
    y = b.fadd(b.fadd(b.fmul(b.fmul(p, r), r), r), _c(1.0))
    ni = b.fptosi(b.select(b.fcmp_unordered("!=", n, n), _c(0.0), n), I32)
    half = b.ashr(ni, ir.Constant(I32, 1))
    y = b.fmul(b.fmul(y, _pow2(b, half)), _pow2(b, b.sub(ni, half)))
    y = b.select(b.fcmp_ordered(">", x, hi), _c(float("inf")), y)
    y = b.select(b.fcmp_ordered("<", x, lo), _c(0.0), y)
    return b.select(b.fcmp_unordered("!=", x, x), x, y)


def tanh_f32(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    a = f32_intrinsic(b, "fabs", [x])
    z = b.fmul(x, x)
    small = _fmuladd(b, b.fmul(_horner(b, z, _TANH_POLY, fused=True), z), x, x)
    big = b.fsub(_c(1.0), b.fdiv(_c(2.0), b.fadd(_exp_0_20(b, a), _c(1.0))))
    # Unordered: a NaN takes the polynomial, which keeps it.
    y = b.select(b.fcmp_unordered("<", a, _c(0.625)), small, big)
    return f32_intrinsic(b, "copysign", [y, x])  # tanh(-0) is -0


def _exp_0_20(b: ir.IRBuilder, a: ir.Value) -> ir.Value:
    """exp(2·min(a, 10)) for a ≥ 0 (NaN: 10), as exp_f32 computes it but without its range
    checks: n = round(2a / ln 2) is in [0, 29]."""
    a = b.select(b.fcmp_ordered("<", a, _c(10.0)), a, _c(10.0))
    t = b.fadd(a, a)
    # Adding 1.5·2^23 rounds to an integer, held in the low mantissa bits: 127 + n there,
    # shifted into the exponent field, is 2^n.
    shifted = _fmuladd(b, a, _c(2 * 1.44269504088896341), _c(_ROUND + 127))
    n = b.fsub(shifted, _c(_ROUND + 127))
    r = _fmuladd(b, n, _c(-0.693359375), t)
    r = _fmuladd(b, n, _c(2.12194440e-4), r)
    y = _fmuladd(b, b.fmul(r, r), _horner(b, r, _EXP_POLY, fused=True), r)  # e^r − 1
    scale = b.bitcast(b.shl(b.bitcast(shifted, I32), ir.Constant(I32, 23)), F32)
    return _fmuladd(b, y, scale, scale)


def log_f32(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    tiny = b.fcmp_ordered("<", x, _c(1.1754943508222875e-38))  # subnormal (or ≤ 0)
    xs = b.select(tiny, b.fmul(x, _c(8388608.0)), x)  # · 2^23 brings a subnormal into range
    bits = b.bitcast(xs, I32)
    e = b.sub(b.ashr(bits, ir.Constant(I32, 23)), ir.Constant(I32, 126))
    e = b.select(tiny, b.sub(e, ir.Constant(I32, 23)), e)
    # m in [0.5, 1): the mantissa with the exponent of 0.5
    m = b.bitcast(
        b.or_(b.and_(bits, ir.Constant(I32, 0x007FFFFF)), ir.Constant(I32, 0x3F000000)), F32
    )
    low = b.fcmp_ordered("<", m, _c(0.707106781186547524))
    e = b.select(low, b.sub(e, ir.Constant(I32, 1)), e)
    f = b.fsub(b.select(low, b.fadd(m, m), m), _c(1.0))  # m - 1 with m in [√½, √2)
    ef = b.sitofp(e, F32)
    z = b.fmul(f, f)
    y = b.fmul(b.fmul(_horner(b, f, _LOG_POLY), f), z)
    y = b.fadd(y, b.fmul(ef, _c(-2.12194440e-4)))
    y = b.fsub(y, b.fmul(z, _c(0.5)))
    y = b.fadd(b.fadd(f, y), b.fmul(ef, _c(0.693359375)))
    y = b.select(b.fcmp_ordered("==", x, _c(float("inf"))), x, y)
    y = b.select(b.fcmp_ordered("==", x, _c(0.0)), _c(float("-inf")), y)
    return b.select(b.fcmp_unordered("<", x, _c(0.0)), _c(float("nan")), y)
