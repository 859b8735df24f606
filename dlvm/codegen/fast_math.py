"""The f32 exp, tanh and log of `telc build --fast-math` (a kernel scheduled `fastmath 1`):
shorter straight-line approximations than dlvm.codegen.approx's, with every step a multiply-add
where one fits, no per-element branch and no table, so that a kernel's loop vectorises into
fewer instructions. The bounds below are measured against float64 over dense sweeps
(tests/unit/test_fast_math.py) and documented in docs/ir.md, "Fast math".

- exp: x clamped to [-104, 89] (a NaN passes through), n = round(x / ln 2) by adding 1.5·2^23,
  r = x - n·ln 2 in two multiply-adds, e^r = 1 + r + r²·p(r) with p of degree 3 (fitted to the
  relative error by bench/fit_fast_math.py; Cephes' accurate one has 5), and 2^n applied as
  two factors so that n in [-150, 128] needs no range check: above 88.72 the product overflows
  to +inf, below -87.34 it rounds into the subnormals and to 0 as the exact result does.
- tanh: x·P(x²)/Q(x²), P of degree 4 and Q of degree 3 (fitted to the relative error on
  [0, 8.3] by bench/fit_fast_math.py): one division, no exp, 8 multiplies and multiply-adds. x² is
  clamped where x·P/Q has passed 1 (x = 7.9935), so beyond it x·P/Q grows with |x| (to ±inf for
  huge x), and the result is clamped to [-1, 1]: ±1 exactly there, never past it. tanh(±0) = ±0,
  NaN stays NaN (ordered comparisons).
- log: x = m · 2^e with m in [√½, √2) from the bits (subnormal inputs scaled first), then
  f - f²/2 + f³·p(f) for f = m - 1 with p of degree 5 (fitted to the relative error, where the
  accurate log's has degree 9); log(±0) = -inf, log(+inf) = +inf, x < 0 and NaN give NaN."""

from __future__ import annotations

from llvmlite import ir

from dlvm.codegen.approx import F32, I32, f32_intrinsic

_ROUND = 12582912.0  # 1.5·2^23: added, rounds to an integer held in the low mantissa bits
_LOG2E = 1.44269504088896341
_LN2_HI, _LN2_LO = 0.693359375, -2.12194440e-4
# (e^r - 1 - r)/r² ≈ p(r) on |r| ≤ ln 2 / 2, degree 3, fitted to e^r's relative error
# (bench/fit_fast_math.py): 1.1e-7 in exact arithmetic, 1.8e-7 for exp evaluated in f32.
_EXP_POLY = (0.008312487974762917, 0.041890308260917664, 0.16667115688323975, 0.499992311000824)
_EXP_CLAMP = (-104.0, 89.0)
# tanh(x)/x ≈ P(x²)/Q(x²), P of degree 4 and Q of degree 3 with a leading 1, fitted to the
# relative error on [0, 8.3] (bench/fit_fast_math.py). x·P/Q rises above 1 (by 2 ulp) at x = 7.9935:
# x² is clamped to that point's square, past which x·P/Q grows with x and is clamped to ±1.
_TANH_Z_CLAMP = 63.89604568481445
_TANH_NUM = (-2.9959257517475635e-05, 0.036022357642650604, 13.808797836303711,
             656.1493530273438, 5172.185546875)  # fmt: skip
_TANH_DEN = (1.0, 117.59933471679688, 2380.199951171875, 5172.18701171875)
_LOG_POLY = (-0.1007217988371849, 0.15988348424434662, -0.17154543101787567,
             0.19928044080734253, -0.24982571601867676, 0.3333420753479004)  # fmt: skip


def _c(v: float) -> ir.Constant:
    return ir.Constant(F32, v)


def _i(v: int) -> ir.Constant:
    return ir.Constant(I32, v)


def _fma(b: ir.IRBuilder, x: ir.Value, y: ir.Value, z: ir.Value) -> ir.Value:
    """x·y + z, one rounding where the target has FMA (llvm.fmuladd)."""
    return f32_intrinsic(b, "fmuladd", [x, y, z])


def _horner(b: ir.IRBuilder, x: ir.Value, coefficients: tuple[float, ...]) -> ir.Value:
    """The polynomial at x, highest coefficient first, in multiply-adds."""
    p: ir.Value = _c(coefficients[0])
    for k in coefficients[1:]:
        p = _fma(b, p, x, _c(k))
    return p


def _clamp(b: ir.IRBuilder, x: ir.Value, lo: float, hi: float) -> ir.Value:
    """x within [lo, hi]; ordered comparisons, so a NaN stays NaN (minnum would drop it)."""
    x = b.select(b.fcmp_ordered(">", x, _c(hi)), _c(hi), x)
    return b.select(b.fcmp_ordered("<", x, _c(lo)), _c(lo), x)


def _exponent(b: ir.IRBuilder, n: ir.Value) -> ir.Value:
    """2^n for an i32 n in [-126, 127], from its exponent bits."""
    return b.bitcast(b.shl(b.add(n, _i(127)), _i(23)), F32)


def exp_f32(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    xc = _clamp(b, x, *_EXP_CLAMP)
    shifted = _fma(b, xc, _c(_LOG2E), _c(_ROUND))
    n = b.fsub(shifted, _c(_ROUND))
    r = _fma(b, n, _c(-_LN2_HI), xc)
    r = _fma(b, n, _c(-_LN2_LO), r)
    em1 = _fma(b, b.fmul(r, r), _horner(b, r, _EXP_POLY), r)  # e^r - 1
    y = b.fadd(em1, _c(1.0))
    # n in [-150, 128] from the low bits (a NaN's garbage is multiplied into NaN anyway).
    ni = b.sub(b.bitcast(shifted, I32), b.bitcast(_c(_ROUND), I32))
    half = b.ashr(ni, _i(1))
    return b.fmul(b.fmul(y, _exponent(b, half)), _exponent(b, b.sub(ni, half)))


def tanh_f32(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    z = b.fmul(x, x)
    z = b.select(b.fcmp_ordered(">", z, _c(_TANH_Z_CLAMP)), _c(_TANH_Z_CLAMP), z)
    # Q's leading coefficient is 1: its first Horner step is an addition, not a multiply-add.
    y = b.fdiv(b.fmul(x, _horner(b, z, _TANH_NUM)), _horner(b, z, _TANH_DEN))
    return _clamp(b, y, -1.0, 1.0)


def log_f32(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    tiny = b.fcmp_ordered("<", x, _c(1.1754943508222875e-38))  # subnormal (or ≤ 0)
    xs = b.select(tiny, b.fmul(x, _c(8388608.0)), x)  # · 2^23 brings a subnormal into range
    # m in [√½, √2): subtracting the bits of √½ moves the exponent boundary there.
    bits = b.sub(b.bitcast(xs, I32), _i(0x3F3504F3))
    e = b.ashr(bits, _i(23))
    m = b.bitcast(b.add(b.and_(bits, _i(0x007FFFFF)), _i(0x3F3504F3)), F32)
    e = b.select(tiny, b.sub(e, _i(23)), e)
    f = b.fsub(m, _c(1.0))
    ef = b.sitofp(e, F32)
    z = b.fmul(f, f)
    y = b.fmul(b.fmul(_horner(b, f, _LOG_POLY), f), z)  # f³·p(f)
    y = _fma(b, z, _c(-0.5), y)
    y = _fma(b, ef, _c(_LN2_LO), y)
    y = b.fadd(f, y)
    y = _fma(b, ef, _c(_LN2_HI), y)
    y = b.select(b.fcmp_ordered("==", x, _c(float("inf"))), x, y)
    y = b.select(b.fcmp_ordered("==", x, _c(0.0)), _c(float("-inf")), y)
    return b.select(b.fcmp_unordered("<", x, _c(0.0)), _c(float("nan")), y)
