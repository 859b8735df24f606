"""Loop nests in LLVM IR: counted loops with an i64 induction variable, the shape every kernel is
made of. LLVM's loop vectoriser recognises them (canonical induction, a single latch)."""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from dlvm.codegen.llvm_types import I64


def counted_loop(
    b: ir.IRBuilder, lo: ir.Value | int, hi: ir.Value | int, body: Callable[[ir.Value], None],
    name: str = "i",
) -> None:  # fmt: skip
    """for (i = lo; i < hi; ++i) body(i); the builder ends after the loop."""
    lo_v = ir.Constant(I64, lo) if isinstance(lo, int) else lo
    hi_v = ir.Constant(I64, hi) if isinstance(hi, int) else hi
    _loop(b, lo_v, hi_v, ir.Constant(I64, 1), body, name, counted=True)


def strided_loop(
    b: ir.IRBuilder, first: ir.Value, end: ir.Value, step: ir.Value,
    body: Callable[[ir.Value], None], name: str = "i",
) -> None:  # fmt: skip
    """for (i = first; i < end; i += step) body(i), unsigned: a GPU thread's share of a range
    (first its thread index, step the number of threads)."""
    _loop(b, first, end, step, body, name, counted=False)


def _loop(
    b: ir.IRBuilder, lo: ir.Value, hi: ir.Value, step: ir.Value,
    body: Callable[[ir.Value], None], name: str, counted: bool,
) -> None:  # fmt: skip
    """The loop both of those are: a counted one is signed, steps by 1 without overflow (what
    LLVM's vectoriser recognises), a strided one unsigned."""
    fn = b.function
    pre = b.block
    head = fn.append_basic_block(f"{name}.head")
    inner = fn.append_basic_block(f"{name}.body")
    done = fn.append_basic_block(f"{name}.done")
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64, name=name)
    i.add_incoming(lo, pre)
    test = b.icmp_signed("<", i, hi) if counted else b.icmp_unsigned("<", i, hi)
    b.cbranch(test, inner, done)
    b.position_at_end(inner)
    body(i)
    if counted:
        nxt = b.add(i, step, name=f"{name}.next", flags=["nsw"])
    else:
        nxt = b.add(i, step)
    i.add_incoming(nxt, b.block)
    b.branch(head)
    b.position_at_end(done)


def loop_nest(
    b: ir.IRBuilder, extents: list[int], body: Callable[[list[ir.Value]], None],
    first: tuple[ir.Value, ir.Value] | None = None,
) -> None:  # fmt: skip
    """Nested loops over extents (outermost first); `first` overrides the outermost range
    (a thread's share of a parallel loop)."""

    def level(d: int, idx: list[ir.Value]) -> None:
        if d == len(extents):
            body(idx)
            return
        lo, hi = first if d == 0 and first is not None else (0, extents[d])
        counted_loop(b, lo, hi, lambda i: level(d + 1, [*idx, i]), name=f"i{d}")

    level(0, [])


def linear_index(b: ir.IRBuilder, idx: list[ir.Value], shape: tuple[int, ...]) -> ir.Value:
    """Row-major offset of idx in a tensor of this shape (an axis of size 1, whose index is 0,
    adds nothing)."""
    strides, stride = [], 1
    for n in reversed(shape):
        strides.append(0 if n == 1 else stride)
        stride *= n
    return strided_offset(b, idx, tuple(reversed(strides)))


def strided_offset(b: ir.IRBuilder, idx: list[ir.Value], strides: tuple[int, ...]) -> ir.Value:
    """Σ idx·stride, the offset of an element of a strided view (an axis of stride 0 skipped)."""
    off: ir.Value = ir.Constant(I64, 0)
    for i, s in reversed(list(zip(idx, strides))):
        if s != 0:
            term = i if s == 1 else b.mul(i, ir.Constant(I64, s), flags=["nsw"])
            off = (
                term
                if isinstance(off, ir.Constant) and off.constant == 0
                else b.add(off, term, flags=["nsw"])
            )
    return off


def unravel(b: ir.IRBuilder, offset: ir.Value, shape: tuple[int, ...]) -> list[ir.Value]:
    """The row-major index of an offset (the inverse of linear_index)."""
    out: list[ir.Value] = []
    rest = offset
    for d in range(len(shape) - 1, -1, -1):
        n = shape[d]
        if n == 1:
            out.append(ir.Constant(I64, 0))
            continue
        if d == 0:
            out.append(rest)
            continue
        out.append(b.urem(rest, ir.Constant(I64, n)))
        rest = b.udiv(rest, ir.Constant(I64, n))
    return list(reversed(out))
