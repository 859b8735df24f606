"""Strided views: a chain of `transpose` and `shapeCast` instructions over a tensor in memory
whose elements can be addressed in place, element [i₀, i₁, …] at Σ iₐ·strideₐ of the tensor
the chain starts from. Compute generation fuses such a chain into the `convolve` that reads it
(a kernel's gradient exchanges batch and channels this way) only when the code generator can
then read the operand where it lies, which is when this module finds its strides; a kernel
reads any chain it computes this way where it can (dlvm.codegen.kernel: a multi-head
attention's split into heads), an instruction's element by the index base_axis_terms gives.

Each axis of a view is a list of modes (size, stride), most significant first: a transpose
reverses the axes, a change of shape regroups the modes (splitting one whose size the new axis
does not take whole). Intermediate views may merge axes that are not next to each other in
memory (several modes in one axis); the chain is strided when every axis of its last view is
one mode again."""

from __future__ import annotations

from collections.abc import Callable

from dlvm.ir.types import TensorType, canonical
from dlvm.ir.values import Instruction, Value

Mode = tuple[int, int]  # (size, stride)
Layout = list[list[Mode]]  # an axis: its modes, most significant first

STRIDED_VIEWS = {"transpose", "shapeCast"}


def view_strides(
    v: Value, within: Callable[[Instruction], bool] = lambda _: True
) -> tuple[Value, tuple[int, ...]] | None:
    """The tensor that the chain of transposes and changes of shape ending at v starts from
    (the first value that is not such an instruction, or one that `within` refuses) and v's
    strides over it in elements; None when v cannot be addressed so. v itself is (v, its
    contiguous strides)."""
    chain: list[Instruction] = []
    base = v
    while isinstance(base, Instruction) and base.opcode in STRIDED_VIEWS and within(base):
        chain.append(base)
        base = base.operands[0]
    layout: Layout | None = _contiguous(_shape(base))
    for inst in reversed(chain):
        assert layout is not None
        if inst.opcode == "transpose":
            layout = layout[::-1]
        else:
            layout = _regrouped(layout, _shape(inst))
            if layout is None:
                return None
    assert layout is not None
    strides = _strides(layout)
    return None if strides is None else (base, strides)


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides of a tensor of this shape."""
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return tuple(reversed(out))


def _shape(v: Value) -> tuple[int, ...]:
    t = canonical(v.type)
    assert isinstance(t, TensorType), v.type
    return t.shape


def _contiguous(shape: tuple[int, ...]) -> Layout:
    return [[(n, s)] if n != 1 else [] for n, s in zip(shape, contiguous_strides(shape))]


def _regrouped(layout: Layout, shape: tuple[int, ...]) -> Layout | None:
    """The modes of every axis, in order, regrouped into axes of `shape`; None when an axis
    would take part of a mode whose size it does not divide (or the reverse)."""
    modes = [m for axis in layout for m in axis if m[0] != 1]
    out: Layout = []
    for size in shape:
        axis: list[Mode] = []
        need = size
        while need > 1:
            if not modes:
                return None
            n, stride = modes[0]
            if need % n == 0:  # the whole mode
                axis.append(modes.pop(0))
                need //= n
            elif n % need == 0:  # its most significant part
                axis.append((need, stride * (n // need)))
                modes[0] = (n // need, stride)
                need = 1
            else:
                return None
        out.append(axis)
    return None if modes else out


def _strides(layout: Layout) -> tuple[int, ...] | None:
    """Each axis's stride (0 for an axis of size 1), or None when an axis is several modes
    that do not merge (one stride cannot address it)."""
    out = []
    for axis in layout:
        merged: list[Mode] = []
        for n, s in axis:
            if merged and merged[-1][1] == n * s:
                merged[-1] = (merged[-1][0] * n, s)
            else:
                merged.append((n, s))
        if len(merged) > 1:
            return None
        out.append(merged[0][1] if merged else 0)
    return tuple(out)


Term = tuple[int, int]  # (axis of the view, multiplier)


def base_axis_terms(
    base_shape: tuple[int, ...], shape: tuple[int, ...], strides: tuple[int, ...]
) -> list[list[Term]] | None:
    """How a view of `shape` with these strides over a tensor of `base_shape` (view_strides)
    indexes it axis by axis: for each axis of the base, the terms whose Σ index[axis]·multiplier
    is its index there, so that an element of the base is found without dividing its offset.
    None when an axis of the view steps across two axes of the base (a change of shape that
    merged them); its offset must then be unravelled."""
    base_strides = contiguous_strides(base_shape)
    out: list[list[Term]] = [[] for _ in base_shape]
    for k, (n, s) in enumerate(zip(shape, strides)):
        if n == 1:
            continue
        a = next(
            (a for a, (m, cs) in enumerate(zip(base_shape, base_strides)) if cs <= s < cs * m),
            None,
        )
        if a is None or s % base_strides[a] or s * n > base_strides[a] * base_shape[a]:
            return None
        out[a].append((k, s // base_strides[a]))
    return out
