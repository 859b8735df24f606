"""How the coefficients of `--fast-math`'s f32 tanh and exp (dlvm/codegen/fast_math.py) were
fitted, and their error, as a script to rerun.

tanh: tanh(x)/x ≈ P(x²)/Q(x²) on [0, END], P of degree 4 and Q of degree 3, minimising the
largest relative error by Loeb's iteration (linearised weighted least squares, Lawson's weights)
in float64. The coefficients are rounded to f32 with Q's leading one kept (its first Horner step
is then an addition). The clamp is the x in [END - 1.5, END] where x·P/Q, evaluated in f32 with
multiply-adds, is largest: it is above 1 there, so clamping x² to its square and the result to
[-1, 1] saturates to exactly ±1. Printed with the largest relative error over a dense f32 sweep,
evaluated as the kernel does (simulated: each multiply-add rounded once).

exp: e^r ≈ 1 + r + r²·p(r) for |r| ≤ ln 2 / 2 (the reduced argument), p of degree 3, minimising
the largest relative error of e^r by Lawson's iteration (the problem is linear in p)."""

from __future__ import annotations

import argparse

import numpy as np

P_DEGREE, Q_DEGREE = 4, 3
EXP_DEGREE = 3


def fit(end: float, iterations: int = 120) -> tuple[float, np.ndarray, np.ndarray]:
    """The best (largest relative error, P, Q) seen, coefficients lowest degree first, Q's
    constant term 1. Fitted in t = x²/end² so that the least-squares system is well scaled."""
    x = np.unique(np.concatenate([np.linspace(0, end, 60_000), np.geomspace(1e-4, end, 6_000)]))
    scale = end * end
    t = x * x / scale
    safe = np.where(x > 0, x, 1.0)
    f = np.where(x > 0, np.tanh(x) / safe, 1.0)
    powers_p = t[:, None] ** np.arange(P_DEGREE + 1)
    powers_q = t[:, None] ** np.arange(1, Q_DEGREE + 1)
    system = np.hstack([powers_p, -(f[:, None] * powers_q)])
    q_previous = np.ones_like(t)
    weights = np.full_like(t, 1 / len(t))
    best: tuple[float, np.ndarray, np.ndarray] | None = None
    for _ in range(iterations):
        row_scale = np.sqrt(weights) / (f * q_previous)
        solution, *_ = np.linalg.lstsq(system * row_scale[:, None], f * row_scale, rcond=None)
        p = solution[: P_DEGREE + 1]
        q = np.concatenate([[1.0], solution[P_DEGREE + 1 :]])
        q_previous = np.polyval(q[::-1], t)
        error = np.polyval(p[::-1], t) / q_previous / f - 1
        worst = float(np.abs(error).max())
        if best is None or worst < best[0]:
            best = (worst, p / scale ** np.arange(len(p)), q / scale ** np.arange(len(q)))
        weights = weights * np.abs(error) + 1e-300
        weights /= weights.sum()
    assert best is not None
    return best


def fit_exp(iterations: int = 300) -> tuple[float, np.ndarray]:
    """The best (largest relative error of e^r, p) seen, p's coefficients highest degree first."""
    # A little wider than ln 2 / 2: n = round(x / ln 2) is computed in f32.
    half = np.log(2) / 2 * 1.0005
    r = np.linspace(-half, half, 200_001)
    e = np.exp(r)
    system = r[:, None] ** (2 + np.arange(EXP_DEGREE + 1)) / e[:, None]
    target = (np.expm1(r) - r) / e
    weights = np.full_like(r, 1 / len(r))
    best: tuple[float, np.ndarray] | None = None
    for _ in range(iterations):
        row_scale = np.sqrt(weights)
        p, *_ = np.linalg.lstsq(system * row_scale[:, None], target * row_scale, rcond=None)
        error = system @ p - target
        worst = float(np.abs(error).max())
        if best is None or worst < best[0]:
            best = (worst, p[::-1])
        weights = weights * np.abs(error) + 1e-300
        weights /= weights.sum()
    assert best is not None
    return best


def f32(v: np.ndarray | float) -> np.ndarray:
    """v rounded to f32 (held in float64, where the products of two f32 values are exact)."""
    return np.asarray(v, np.float64).astype(np.float32).astype(np.float64)


def kernel_tanh(x: np.ndarray, p: np.ndarray, q: np.ndarray, z_clamp: float) -> np.ndarray:
    """x·P(z)/Q(z) as fast_math.tanh_f32 computes it in f32, before the clamp to [-1, 1]:
    z = min(x·x, z_clamp), Horner in multiply-adds (p, q highest coefficient first)."""
    x = f32(x)
    z = np.minimum(f32(x * x), z_clamp)
    num = np.full_like(z, p[0])
    for k in p[1:]:
        num = f32(num * z + k)
    den = np.full_like(z, q[0])
    for k in q[1:]:
        den = f32(den * z + k)
    return f32(f32(x * num) / den)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--end", type=float, default=8.3, help="tanh's fitted interval's end")
    args = parser.parse_args()
    exact_error, p, q = fit(args.end)
    # Highest degree first, Q's leading coefficient 1, rounded to f32.
    p32, q32 = f32(p[::-1] / q[-1]), f32(q[::-1] / q[-1])
    near_end = f32(np.linspace(args.end - 1.5, args.end, 3001))
    with np.errstate(over="ignore"):
        raw = kernel_tanh(near_end, p32, q32, np.inf)
    top = near_end[np.argmax(raw)]
    z_clamp = float(f32(top * top))
    x = np.concatenate([np.linspace(-12, 12, 2_000_001), np.geomspace(1e-30, 1e-3, 100_000)])
    x = f32(x[x != 0])
    got = np.clip(kernel_tanh(x, p32, q32, z_clamp), -1, 1)
    print(f"tanh fitted on [0, {args.end}]: {exact_error:.2e} relative in exact arithmetic")
    print(f"x·P/Q is largest at x = {top:.4f}: 1 + {raw.max() - 1:.2e}; z clamp {z_clamp!r}")
    print(f"in f32: {np.abs(got / np.tanh(x) - 1).max():.2e} relative")
    print("_TANH_NUM =", tuple(float(v) for v in p32))
    print("_TANH_DEN =", tuple(float(v) for v in q32))
    exp_error, p_exp = fit_exp()
    print(f"exp: {exp_error:.2e} relative in exact arithmetic")
    print("_EXP_POLY =", tuple(float(v) for v in f32(p_exp)))


if __name__ == "__main__":
    main()
