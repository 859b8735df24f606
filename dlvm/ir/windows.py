"""What a reduceWindow's padding mode means for one axis: how many windows fit (the type rule's
result shape) and how the axis is padded for them (the interpreter, the adjoint rule and the
code generator pad by it). One module, so that the two stay one definition."""

from __future__ import annotations


def window_count(n: int, d: int, s: int, mode: str) -> int:
    """The windows of size d and stride s along an axis of n elements: none keeps to the
    elements, half gives one window per stride step that starts inside (XLA/TensorFlow SAME),
    full gives every window that overlaps an element."""
    if mode == "none":
        return max((n - d) // s + 1, 0)
    if mode == "half":
        return (n - 1) // s + 1
    return (n + d - 2) // s + 1


def window_padding(n: int, d: int, s: int, out: int, mode: str) -> tuple[int, int]:
    """(low, high) padding of one axis that holds `out` windows: none pads nothing; half pads
    `(out-1)·s + d - n` in all, the smaller half low; full pads d-1 on both sides."""
    if mode == "none":
        return (0, 0)
    if mode == "half":
        total = max((out - 1) * s + d - n, 0)
        return (total // 2, total - total // 2)
    return (d - 1, d - 1)
