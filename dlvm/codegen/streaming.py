"""The element loop of a kernel scheduled `stream 1` (dlvm.transforms.stream_schedule says which:
memory-bound pointwise kernels whose output is larger than the last-level cache, under
`--fast-math`): the output stored by aligned 32-byte vector stores marked `!nontemporal`
(`vmovntps`), which write whole lines past the caches instead of reading each line first.

LLVM's loop vectoriser keeps a scalar `!nontemporal` store scalar (its legality check asks the
scalar store for a vector's alignment), and computing into a buffer to copy it out measured
slower than computing as explicit vectors. So each row of the output's last axis (a thread's
share of a 1-D output) is: the elements up to the first line boundary of the output by plain
stores, then whole lines VECTOR bytes at a time, each lane's element computed by the kernel's
own element code (at indices j, j+1, …, which the SLP vectoriser turns into vector
instructions) and gathered into one vector stored non-temporally, then the rest by plain
stores. No line is written by both kinds (a plain store into a line that write-combining
holds in part costs more than it saves). Every element is computed by the same code as in the
plain loop, so the values are bitwise those of a build without it. 32-byte stores, not
64-byte ones: on Zen 5 a pass streamed by zmm stores measured slower than plain stores, by
ymm ones faster.

Non-temporal stores are weakly ordered: the body ends with an `sfence`, so that each thread's
share is in memory before the thread pool reports the kernel done. An output that is not
aligned to its element (a caller's odd buffer) gets plain stores only."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from dlvm.codegen.llvm_types import I8, I64, memory_type
from dlvm.codegen.loops import counted_loop, loop_nest, strided_loop
from dlvm.ir.types import TensorType

if TYPE_CHECKING:
    from dlvm.codegen.kernel import KernelGen

VECTOR = 32  # bytes of each non-temporal store (a ymm register)
LINE = 64  # bytes of a cache line: streamed only whole, never shared with a plain store


def streamed_loop(kg: KernelGen, out: ir.Value, begin: ir.Value, end: ir.Value) -> None:
    """The pointwise loop over rows begin..end of kg's root, stored as the module docstring
    says, then the sfence."""
    b = kg.b
    t = kg.root.type
    assert isinstance(t, TensorType)
    *outer, width = t.shape
    if outer:
        zero, last = ir.Constant(I64, 0), ir.Constant(I64, width)
        loop_nest(b, list(outer), lambda idx: _row(kg, out, t, idx, zero, last),
                  first=(begin, end))  # fmt: skip
    else:
        _row(kg, out, t, [], begin, end)
    b.call(_sfence(b.module), [])


def _row(
    kg: KernelGen, out: ir.Value, t: TensorType, prefix: list[ir.Value], lo: ir.Value,
    hi: ir.Value,
) -> None:  # fmt: skip
    """Elements lo..hi of the row `prefix` of out: plain, aligned vectors, plain."""
    b = kg.b
    size = t.dtype.size
    lanes = VECTOR // size
    start = b.ptrtoint(kg.address(out, [*prefix, lo], t), I64)
    count = b.sub(hi, lo)
    # Elements before the first line boundary (at most the row's), then whole lines.
    skew = b.and_(b.sub(ir.Constant(I64, 0), start), ir.Constant(I64, LINE - 1))
    lead = b.udiv(skew, ir.Constant(I64, size))
    lead = b.select(b.icmp_signed("<", lead, count), lead, count)
    aligned = b.icmp_unsigned("==", b.and_(start, ir.Constant(I64, size - 1)), ir.Constant(I64, 0))
    lines = b.udiv(b.sub(count, lead), ir.Constant(I64, LINE // size))
    vectors = b.select(aligned, b.mul(lines, ir.Constant(I64, LINE // VECTOR)), ir.Constant(I64, 0))
    first = b.add(lo, lead)
    stop = b.add(first, b.mul(vectors, ir.Constant(I64, lanes)))

    def plain(j: ir.Value) -> None:
        kg.memo.clear()
        kg.store(out, [*prefix, j], t, kg.elem(kg.root, [*prefix, j]))

    counted_loop(b, lo, first, plain, name="lead")
    hint = b.module.add_metadata([ir.Constant(ir.IntType(32), 1)])

    mem = memory_type(t.dtype)
    # A row of a 2-D or higher output: the loop steps the row-major offset, each lane's index
    # made from offset + k and registered with it (KernelGen.unravel's record), so that every
    # operand of the output's shape is read at offset + k. From i·C + (j + k), LLVM's
    # reassociation makes lane 0's address differently from the others', the SLP vectoriser no
    # longer sees them consecutive, and gathers them.
    row = kg.linear([*prefix, ir.Constant(I64, 0)], t.shape) if prefix else None

    def vector(p: ir.Value) -> None:
        lanes_v: ir.Value = ir.Constant(ir.VectorType(mem, lanes), ir.Undefined)
        address: ir.Value | None = None
        for k in range(lanes):
            kg.memo.clear()
            at = b.add(p, ir.Constant(I64, k), flags=["nsw"])
            idx = [*prefix, at if row is None else b.sub(at, row, flags=["nsw"])]
            if row is not None:
                kg.offsets[tuple(id(i) for i in idx)] = (at, t.shape, idx)
            x = kg.elem(kg.root, idx)
            x = b.zext(x, I8) if t.dtype.is_bool else x
            lanes_v = b.insert_element(lanes_v, x, ir.Constant(ir.IntType(32), k))
            if address is None:
                address = kg.address(out, idx, t)
        assert address is not None
        store = b.store(lanes_v, address, align=VECTOR)
        store.set_metadata("nontemporal", hint)

    # Stepping the index (or offset) itself: from v·lanes + k, LLVM makes `or disjoint`, which
    # also hides consecutive lanes from the SLP vectoriser.
    step = ir.Constant(I64, lanes)
    if row is None:
        strided_loop(b, first, stop, step, vector, name="vector")
    else:
        strided_loop(b, b.add(row, first), b.add(row, stop), step, vector, name="vector")
    counted_loop(b, stop, hi, plain, name="rest")


def _sfence(module: ir.Module) -> ir.Function:
    name = "llvm.x86.sse.sfence"
    found = module.globals.get(name)
    if isinstance(found, ir.Function):
        return found
    return ir.Function(module, ir.FunctionType(ir.VoidType(), []), name)
