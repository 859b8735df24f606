"""Special functions without SciPy: lgamma, digamma, erf and erfc, elementwise on arrays.

Each is computed in float64 from a scalar routine and cast back to the input's dtype.
"""

from __future__ import annotations

import math

import numpy as np


def _lgamma(x: float) -> float:
    """log|Γ(x)|; +inf at the poles (0, -1, -2, …) like SciPy's gammaln."""
    try:
        return math.lgamma(x)
    except (ValueError, OverflowError):
        return math.inf


def _digamma(x: float) -> float:
    """ψ(x) = d/dx log Γ(x), to about 1e-13 relative.

    Reflection ψ(x) = ψ(1−x) − π/tan(πx) for x < 1/2, the recurrence ψ(x) = ψ(x+1) − 1/x up to
    x ≥ 10, then the asymptotic series ln x − 1/(2x) − Σ B₂ₙ/(2n x²ⁿ). ψ(0) = −inf; ψ is nan at
    the negative integers (poles of both signs).
    """
    if math.isnan(x) or x == -math.inf:
        return math.nan
    if x == math.inf:
        return math.inf
    if x <= 0 and x == math.floor(x):
        return -math.inf if x == 0 else math.nan
    if x < 0.5:
        # tan has period π, so reduce πx first to keep the reflection accurate for large |x|.
        return _digamma(1.0 - x) - math.pi / math.tan(math.pi * (x - round(x)))
    result = 0.0
    while x < 10.0:
        result -= 1.0 / x
        x += 1.0
    f = 1.0 / (x * x)
    # −Σ B₂ₙ/(2n x²ⁿ) for n = 1…7, in Horner form in f = 1/x².
    coefficients = (-1 / 12, 1 / 120, -1 / 252, 1 / 240, -1 / 132, 691 / 32760, -1 / 12)
    series = 0.0
    for c in reversed(coefficients):
        series = f * (c + series)
    return result + math.log(x) - 0.5 / x + series


def _vectorized(scalar_fn):
    vec = np.vectorize(scalar_fn, otypes=[np.float64])

    def apply(x: np.ndarray) -> np.ndarray:
        return np.asarray(vec(np.asarray(x, dtype=np.float64)), dtype=x.dtype)

    apply.__doc__ = scalar_fn.__doc__
    return apply


lgamma = _vectorized(_lgamma)
digamma = _vectorized(_digamma)
erf = _vectorized(math.erf)
erfc = _vectorized(math.erfc)
