"""`gather` and `scatterAdd` (docs/ir.md, "Indexing"): their kernels, and the check of their ids
that the host function makes before it calls one.

A kernel never reads or writes outside a tensor: it clamps each id into the axis. The ids are
checked in the host function, which ends the call with DLRT_ERR_INVALID_ARGUMENT and
`gather: id 7 out of range [0, 5)` at the first id outside the axis; a device plan leaves such
an entry to the CPU (dlvm.codegen.device_plan), where that check runs.

On the CPU, `gather` copies rows: for each position of the ids (and of the dimensions before
the axis) it reads the id once and copies the contiguous row after it, a loop LLVM turns into a
memcpy or vectorises. `scatterAdd` copies its base, then adds each update row to the row its id
names, in the order of the ids (as NumPy's `add.at` does: a repeated id accumulates); threads
split the dimensions before the axis. On a GPU, each thread of `scatterAdd` owns one column of
the result (a position before and after the axis) and adds along it in the same order, so no two
threads write one element and the sums are the CPU's."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from llvmlite import ir

from dlvm.codegen.elementwise import binary
from dlvm.codegen.host_values import STATUS_INVALID_ARGUMENT
from dlvm.codegen.llvm_types import I64, load_element, memory_type, store_element
from dlvm.codegen.loops import counted_loop, loop_nest, unravel
from dlvm.ir.types import TensorType, canonical
from dlvm.ir.values import Argument, Function, Instruction, Value

if TYPE_CHECKING:
    from dlvm.codegen.host_values import HostBase
    from dlvm.codegen.kernel import KernelGen

INDEXED = frozenset({"gather", "scatterAdd"})
Index = list[ir.Value]


def _tensor(v: Value) -> TensorType:
    t = canonical(v.type)
    assert isinstance(t, TensorType)
    return t


def axis_size(inst: Instruction) -> int:
    """How many rows the ids index: the table's (gather) or the base's (scatterAdd) axis."""
    indexed = inst.operands[0] if inst.opcode == "gather" else inst.operands[2]
    return _tensor(indexed).shape[inst.attrs["axis"]]


def widen(b: ir.IRBuilder, i: ir.Value, bits: int) -> ir.Value:
    """An id as i64 (ids are signed)."""
    return b.sext(i, I64) if bits < 64 else i


def clamped_id(kg: KernelGen, inst: Instruction, pos: Index) -> ir.Value:
    """The id at pos, clamped into the axis so that no access leaves the tensor (the host
    function has already refused an id outside it)."""
    b = kg.b
    ids = inst.operands[1]
    i = widen(b, kg.elem(ids, pos), _tensor(ids).dtype.bits)
    inside = b.icmp_unsigned("<", i, ir.Constant(I64, axis_size(inst)))
    return b.select(inside, i, ir.Constant(I64, 0))


def gather_element(kg: KernelGen, inst: Instruction, idx: Index) -> ir.Value:
    """The element of `gather` at idx: the table's at the id that idx's positions of the ids
    name."""
    axis, k = inst.attrs["axis"], len(_tensor(inst.operands[1]).shape)
    i = clamped_id(kg, inst, idx[axis : axis + k])
    return kg.elem(inst.operands[0], [*idx[:axis], i, *idx[axis + k :]])


def copies_rows(kg: KernelGen) -> bool:
    """Whether the CPU kernel of a gather root copies rows: its table is in memory and the
    rows have a position to split among threads."""
    root = kg.root
    axis, k = root.attrs["axis"], len(_tensor(root.operands[1]).shape)
    return not kg.flat and isinstance(root.operands[0], Argument) and axis + k > 0


def gather_rows(kg: KernelGen, out: ir.Value, begin: ir.Value, end: ir.Value) -> None:
    """Each row of the result, the table's row at its id: positions begin..end of the
    result's first dimension."""
    b, root = kg.b, kg.root
    table, t = root.operands[0], _tensor(root)
    axis, k = root.attrs["axis"], len(_tensor(root.operands[1]).shape)
    lead = list(t.shape[: axis + k])
    width = math.prod(t.shape[axis + k :])
    zeros = [ir.Constant(I64, 0)] * (len(t.shape) - axis - k)
    mt = memory_type(t.dtype)

    def row(idx: Index) -> None:
        kg.memo.clear()
        i = clamped_id(kg, root, idx[axis:])
        src = kg.address(kg.ptrs[table], [*idx[:axis], i, *zeros], _tensor(table))
        dst = kg.address(out, [*idx, *zeros], t)

        def copy(j: ir.Value) -> None:
            x = b.load(b.gep(src, [j], source_etype=mt), typ=mt)
            b.store(x, b.gep(dst, [j], source_etype=mt))

        counted_loop(b, 0, width, copy, name="row")

    loop_nest(b, lead, row, first=(begin, end))


def scatter_extent(kg: KernelGen) -> int:
    """The trip count the body splits: columns on a GPU, else the result's first dimension
    when it comes before the axis."""
    t, axis = _tensor(kg.root), kg.root.attrs["axis"]
    if kg.flat:
        return math.prod(t.shape) // t.shape[axis] if t.shape[axis] else 0
    return t.shape[0] if axis > 0 else 1


def scatter_add(kg: KernelGen, out: ir.Value, begin: ir.Value, end: ir.Value) -> None:
    """The base, then each update added at its id: for the positions begin..end of the
    dimensions before the axis (CPU), or of the columns (GPU)."""
    b, root = kg.b, kg.root
    t, axis = _tensor(root), root.attrs["axis"]
    if kg.flat:
        columns = t.shape[:axis] + t.shape[axis + 1 :]

        def column(c: ir.Value) -> None:
            pos = unravel(b, c, columns)
            _scatter_rows(kg, out, pos[:axis], lambda body: body(pos[axis:]))

        counted_loop(b, begin, end, column, name="column")
        return

    def each_tail(body: Callable[[Index], None]) -> None:
        loop_nest(b, list(t.shape[axis + 1 :]), body)

    if axis == 0:
        _scatter_rows(kg, out, [], each_tail)
    else:
        loop_nest(b, list(t.shape[:axis]), lambda lead: _scatter_rows(kg, out, lead, each_tail),
                  first=(begin, end))  # fmt: skip


def _scatter_rows(
    kg: KernelGen, out: ir.Value, lead: Index, each_tail: Callable[[Callable[[Index], None]], None]
) -> None:
    """At the positions `lead` before the axis: the base's rows, then each update row added to
    the row its id names; each_tail(body) runs body over the positions after the axis."""
    b, root = kg.b, kg.root
    updates, ids, base = root.operands
    t = _tensor(root)

    def init(j: ir.Value) -> None:
        def put(tail: Index) -> None:
            kg.memo.clear()
            kg.store(out, [*lead, j, *tail], t, kg.elem(base, [*lead, j, *tail]))

        each_tail(put)

    counted_loop(b, 0, t.shape[root.attrs["axis"]], init, name="base")

    def update(u: Index) -> None:
        kg.memo.clear()
        i = clamped_id(kg, root, u)

        def add(tail: Index) -> None:
            p = kg.address(out, [*lead, i, *tail], t)
            x = kg.elem(updates, [*lead, *u, *tail])
            store_element(b, binary(b, "add", load_element(b, p, t.dtype), x, t.dtype), p, t.dtype)

        each_tail(add)

    loop_nest(b, list(_tensor(ids).shape), update)


def ids_operand(kernel: Function) -> tuple[Instruction, Value] | None:
    """The gather or scatterAdd a [compute] function computes and its ids (an argument of the
    kernel or a literal), or None."""
    for inst in kernel.blocks[0].instructions:
        if inst.opcode in INDEXED:
            return inst, inst.operands[1]
    return None


def check_ids(host: HostBase, inst: Instruction, ids: ir.Value | list[int]) -> None:
    """Ends the host function's call with DLRT_ERR_INVALID_ARGUMENT at the first id outside
    the axis: ids are the address of the ids in memory, or a literal's values."""
    b, n = host.b, axis_size(inst)
    t = _tensor(inst.operands[1])
    message = f"id %lld out of range [0, {n}) along axis {inst.attrs['axis']}"
    saved, host.current = host.current, inst  # the message names gather, not the kernel's call
    if isinstance(ids, list):
        bad = [i for i in ids if not 0 <= i < n]
        if bad:
            host.fail(STATUS_INVALID_ARGUMENT, message, ir.Constant(I64, bad[0]))
            # What follows is unreachable but still lowered.
            b.position_at_end(host.llfn.append_basic_block("after.ids"))
    else:
        mt, base = memory_type(t.dtype), ids

        def check(j: ir.Value) -> None:
            i = widen(b, load_element(b, b.gep(base, [j], source_etype=mt), t.dtype), t.dtype.bits)
            host.fail_if(b.icmp_unsigned(">=", i, ir.Constant(I64, n)), STATUS_INVALID_ARGUMENT,
                         message, i)  # fmt: skip

        counted_loop(b, 0, t.unit_count, check, name="ids")
    host.current = saved
