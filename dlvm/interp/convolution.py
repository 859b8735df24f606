"""`convolve` with XLA semantics for any number of spatial dimensions.

Input `[batch, cin, spatial…]`, kernel `[cout, cin/groups, spatial…]`, output
`[batch, (cout/groups)*groups, spatial…]`. It is a cross-correlation (the kernel is not flipped):
the input is dilated by `leftDilation` (ld-1 zeros between elements), padded by `(lo, hi)` per
spatial dim, and the kernel taps are `rightDilation` apart; windows start every `strides`.
Group g reads input channels [g*cin_g, (g+1)*cin_g) and kernel rows [g*cout_g, (g+1)*cout_g).
"""

from __future__ import annotations

import numpy as np

from dlvm.interp.errors import InterpreterError
from dlvm.interp.objects import is_bf16
from dlvm.interp.registry import impl


def convolve(x, k, strides, padding, left_dilation, right_dilation, groups, dtype):
    """The reference convolution: one einsum per kernel tap (loops over offsets, not pixels).
    bf16 (which einsum does not take) is computed in f32 and rounded once at the end."""
    if is_bf16(np.dtype(dtype)):
        wide = convolve(
            x.astype(np.float32), k.astype(np.float32), strides, padding, left_dilation,
            right_dilation, groups, np.dtype(np.float32),
        )  # fmt: skip
        return wide.astype(dtype)
    if k.ndim != x.ndim:
        raise InterpreterError(f"kernel rank {k.ndim} differs from input rank {x.ndim}")
    if x.shape[1] // groups != k.shape[1]:
        raise InterpreterError(
            f"input channels {x.shape[1]} / groups {groups} must equal kernel channels {k.shape[1]}"
        )
    all_ = (slice(None), slice(None))
    if any(d > 1 for d in left_dilation):
        dilated_shape = x.shape[:2] + tuple(
            (size - 1) * d + 1 for size, d in zip(x.shape[2:], left_dilation)
        )
        dilated = np.zeros(dilated_shape, dtype=x.dtype)
        dilated[all_ + tuple(slice(None, None, d) for d in left_dilation)] = x
        x = dilated
    x = np.pad(x, ((0, 0), (0, 0)) + tuple(tuple(p) for p in padding))
    windows = [(size - 1) * d + 1 for size, d in zip(k.shape[2:], right_dilation)]
    out_spatial = tuple(
        0 if w > size else (size - w) // s + 1 for size, w, s in zip(x.shape[2:], windows, strides)
    )
    cin_g, cout_g = k.shape[1], k.shape[0] // groups
    out = np.zeros((x.shape[0], cout_g * groups) + out_spatial, dtype=dtype)
    if 0 in out_spatial:
        return out
    for g in range(groups):
        xg = x[:, g * cin_g : (g + 1) * cin_g]
        kg = k[g * cout_g : (g + 1) * cout_g]
        acc = out[:, g * cout_g : (g + 1) * cout_g]  # a view: accumulates into out
        for tap in np.ndindex(*k.shape[2:]):
            patch = xg[
                all_
                + tuple(
                    slice(t * r, t * r + (m - 1) * s + 1, s)
                    for t, r, m, s in zip(tap, right_dilation, out_spatial, strides)
                )
            ]
            acc += np.einsum("bc...,oc->bo...", patch, kg[all_ + tap]).astype(dtype)
    return out


@impl("convolve")
def _convolve(frame, inst, args):
    x, k = args
    n = x.ndim - 2
    a = inst.attrs
    return convolve(
        x,
        k,
        a.get("strides") or (1,) * n,
        a.get("padding") or ((0, 0),) * n,
        a.get("leftDilation") or (1,) * n,
        a.get("rightDilation") or (1,) * n,
        a.get("groups") or 1,
        frame.dtype(inst.type),
    )
