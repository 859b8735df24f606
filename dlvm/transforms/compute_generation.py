"""compute-generation (CG): groups each function's tensor work into kernels (docs/ir.md, "Stages")
and outlines every kernel into a `[compute]` function called with `apply`; sets stage compute.

A kernel has one root, the value it writes to memory, and pointwise instructions computed on
the fly at the index being written. A pointwise instruction (elementwise, compare, select,
cast, a bitCast between element types of one size, shape-only, tensor literal) joins its
consumer's kernel when that consumer is its only user, sits in the same block, and reads it at
most once per element written: a pointwise instruction, or the reduced operand of a `reduce`.
`convolve`, `scan` and `reduceWindow` are roots whose operands are in memory, but for a
`convolve`'s operand that is a strided view (dlvm.ir.strided: transposes and changes of shape,
a kernel's gradient exchanging batch and channels), which the code generator reads in place;
everything else (calls, tuples, control flow, random numbers, stacks, dense literals: one
constant of the host however many kernels read it, and none in a GPU module) stays in the host
function.

A matrix `dot` takes a prologue and an epilogue. Its right operand may be any pointwise
instruction (the kernel packs it strip by strip); its left operand only a transpose or a pad or
squeeze of shape, whose elements cost nothing but addressing, since each is read once per strip
of columns. And a product (a matrix `dot` or a `convolve`, PRODUCTS) whose only user is an
elementwise chain of its own shape and type (bias, activation, a residual, the derivative of
one) is computed inside that chain's kernel, which applies the chain to each tile of the
product as soon as the tile is done (a convolution computed one element at a time, to each
element). The chain may end in f32 after a bf16 matrix product (a `dataTypeCast` to f32 and
what follows: `--precision bf16`'s weight gradient and its update): the kernel then keeps the
product's sums, rounded to bf16 as the IR says, in the f32 root's buffer.

Then a pointwise kernel whose result only other kernels read, not through a `dot`'s operands,
is computed inside each of them instead of written to memory when that is cheaper: always
when a single kernel reads it (several of that kernel's instructions do), but a kernel of
expensive arithmetic (EXPENSIVE) only if that kernel computes each element once; and one read
by k kernels when it has no expensive arithmetic and m·(k − 1) ≤ k + 1, m being the number of
inputs as large as it, which each kernel after the first reads once more, against the write
and k reads that writing the result to memory costs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from dlvm.ir.builder import create
from dlvm.ir.literals import DenseLiteral
from dlvm.ir.ops import UNARY_FLOAT, lookup
from dlvm.ir.strided import STRIDED_VIEWS, view_strides
from dlvm.ir.types import DataType, FunctionType, TensorType, canonical
from dlvm.ir.values import (
    Argument,
    Block,
    Function,
    Instruction,
    LiteralValue,
    Module,
    Value,
    fresh_name,
)
from dlvm.transforms.pass_base import Pass

# Pointwise besides the elementwise instructions (OpDef.elementwise).
POINTWISE_OPS = {
    "dataTypeCast",
    "convert",
    "bitCast",
    "transpose",
    "reverse",
    "concatenate",
    "slice",
    "padShape",
    "squeezeShape",
    "shapeCast",
    "literal",
}
ROOT_ONLY = {"dot", "convolve", "scan", "reduceWindow", "gather", "scatterAdd"}
ADDRESS_ONLY = {"transpose", "padShape", "squeezeShape"}
# Instructions whose elements are their operand's, moved: fused, they cost only addressing.
VIEWS = {"transpose", "slice", "padShape", "squeezeShape", "shapeCast", "reverse"}
# Arithmetic worth more than the memory traffic recomputing it saves: the float functions
# (exp, tanh, log, sqrt, …: polynomial approximations or math-library calls) and power.
EXPENSIVE = {*UNARY_FLOAT, "power"}
# The instructions that take an elementwise epilogue (a `dot` only when it is a matrix product:
# _is_product); a kernel holds at most one.
PRODUCTS = {"dot", "convolve"}


def is_pointwise(inst: Instruction) -> bool:
    """Computable element by element from its operands' elements at known indices."""
    if not isinstance(inst.type, TensorType):
        return False
    if inst.opcode == "literal":
        lit = inst.operands[0]
        dense = isinstance(lit, LiteralValue) and isinstance(lit.literal, DenseLiteral)
        return isinstance(lit, LiteralValue) and not dense and not any(True for _ in inst.uses())
    if inst.opcode == "bitCast":  # element for element when the element sizes agree
        src, t = canonical(inst.operands[0].type), inst.type
        return (
            isinstance(src, TensorType)
            and src.dtype.size == t.dtype.size
            and src.unit_count == t.unit_count
        )
    return inst.op.elementwise or inst.opcode in POINTWISE_OPS


def is_kernel(inst: Instruction) -> bool:
    """Whether the instruction belongs in a kernel rather than in the host function."""
    if is_pointwise(inst) or inst.opcode in ROOT_ONLY:
        return True
    return inst.opcode == "reduce" and isinstance(inst.attrs["comb"], str)


def fusable_into(user: Instruction, operand_index: int) -> bool:
    """Whether a pointwise operand can be computed inside `user`'s kernel: `user` reads it
    once per element it writes, or it is a matrix product's or a convolution's operand (a
    prologue; a convolution's only a strided view, which _inlined makes sure of)."""
    if is_pointwise(user):
        return True
    if user.opcode == "dot":
        return _is_matrix_product(user)
    if user.opcode == "convolve":  # a strided view only (_keep_strided_view)
        return True
    return user.opcode == "reduce" and operand_index == 0 and is_kernel(user)


def _is_matrix_product(dot: Instruction) -> bool:
    t = dot.type
    return isinstance(t, TensorType) and bool(t.shape) and not t.dtype.is_bool


def _is_product(inst: Instruction) -> bool:
    """Whether inst may take an epilogue: a matrix product or a convolution."""
    return inst.opcode == "convolve" or (inst.opcode == "dot" and _is_matrix_product(inst))


def kernel_core(fn: Function) -> Instruction:
    """The instruction that shapes a [compute] function's loop nest: its `dot` or `convolve`
    if it has one (the root is then that product's epilogue), otherwise its root."""
    entry = fn.blocks[0]
    product = next((inst for inst in entry.instructions if inst.opcode in PRODUCTS), None)
    if product is not None:
        return product
    root = fn.blocks[-1].instructions[-1].operands[0]
    assert isinstance(root, Instruction)
    return root


class ComputeGeneration(Pass):
    name = "compute-generation"
    alias = "CG"
    summary = "groups tensor work into [compute] kernels called with apply; sets stage compute"
    stages = ("optimizable", "compute")

    def run(self, module: Module) -> bool:
        changed = False
        names = _KernelNames({f.name for f in module.functions})
        for fn in list(module.functions):
            if fn.blocks and not fn.is_declaration and not fn.compute:
                changed |= _outline_kernels(fn, module, names)
        changed |= module.stage != "compute"
        module.stage = "compute"
        return changed


class _KernelNames:
    """fresh_name's names for kernels, each found without trying again every suffix an
    earlier kernel took (which made outlining n kernels take n² tries)."""

    def __init__(self, taken: set[str]) -> None:
        self.taken = taken
        self.next: dict[str, int] = {}  # below it, every `base_i` is taken

    def fresh(self, base: str) -> str:
        if base not in self.taken:
            return fresh_name(base, self.taken)
        i = self.next.get(base, 0)
        while f"{base}_{i}" in self.taken:
            i += 1
        self.next[base] = i + 1
        return fresh_name(f"{base}_{i}", self.taken)


def _use_counts(fn: Function) -> Counter[Value]:
    counts: Counter[Value] = Counter()
    for inst in fn.instructions():
        counts.update(inst.uses())
    return counts


def _readers(fn: Function) -> dict[Value, list[Instruction]]:
    """The instructions of fn that read each value, each once."""
    out: dict[Value, list[Instruction]] = {}
    for inst in fn.instructions():
        for v in set(inst.uses()):
            out.setdefault(v, []).append(inst)
    return out


def _outline_kernels(fn: Function, module: Module, names: _KernelNames) -> bool:
    _copy_views(fn)
    counts = _use_counts(fn)
    readers = _readers(fn)
    changed = False
    index = module.functions.index(fn) + 1
    for block in fn.blocks:
        inlined = _inlined(block, counts)
        order = {inst: i for i, inst in enumerate(block.instructions)}
        roots: set[Instruction] = set()
        for inst in list(block.instructions):
            if is_kernel(inst) and inst not in inlined:
                kernel = _outline(inst, inlined, names.fresh(f"{fn.name}_k"), order, readers)
                module.add_function(kernel, index)
                index += 1
                roots.add(inst)
        # Only now: an instruction recomputed in several kernels is copied into each. The
        # roots, each replaced by its call, go in the same sweep.
        block.remove_all(inlined | roots)
        changed |= bool(roots)
    return changed


def _copy_views(fn: Function) -> None:
    """Gives each pointwise user of a view (a transpose, slice or change of shape) read by
    several of them a copy of its own, so that the view fuses into every one of them as
    addressing instead of being written to memory first. Users come before operands, so a
    chain of views is copied whole: a column block of a product, `transpose(slice(transpose
    P))` as linear-algebra fusion makes it, becomes reads of P in place."""
    for block in fn.blocks:
        users: dict[Instruction, list[Instruction]] = {}
        for inst in block.instructions:
            for v in inst.uses():
                if isinstance(v, Instruction):
                    users.setdefault(v, []).append(inst)
        for inst in reversed(list(block.instructions)):
            readers = users.get(inst, [])
            if inst.opcode not in VIEWS or len(readers) < 2 or not _all_fuse(inst, readers):
                continue
            for reader in readers[1:]:
                copy = create(inst.op, list(inst.operands), **inst.attrs)
                block.insert(block.instructions.index(reader), copy)
                reader.map_values(_swap(inst, copy))
                for v in copy.operands:
                    if isinstance(v, Instruction) and v.block is block:
                        users[v].append(copy)


def _swap(old: Value, new: Value) -> Callable[[Value], Value]:
    return lambda v: new if v is old else v


def _all_fuse(view: Instruction, readers: list[Instruction]) -> bool:
    """Whether every reader is a pointwise instruction of the view's block reading it once."""
    return all(
        r.block is view.block and is_pointwise(r) and r.operands.count(view) == 1 for r in readers
    ) and len(set(readers)) == len(readers)


def _inlined(block: Block, counts: Counter[Value]) -> set[Instruction]:
    """The instructions of the block computed inside their only user's kernel: pointwise
    ones, and matrix products inside their epilogue."""
    out: set[Instruction] = set()
    for user in block.instructions:
        if not is_kernel(user):
            continue
        for i, v in enumerate(user.operands):
            if (
                isinstance(v, Instruction)
                and v.block is block
                and is_pointwise(v)
                and counts[v] == 1
                and fusable_into(user, i)
            ):
                out.add(v)
    for inst in block.instructions:
        if inst.opcode == "dot" and inst.operands[0] in out:
            _keep_cheap_prologue(inst.operands[0], out)  # type: ignore[arg-type]
        if inst.opcode == "convolve":
            for v in inst.operands:
                if v in out:
                    _keep_strided_view(v, out)  # type: ignore[arg-type]
    out |= _epilogue_products(block, counts, out)
    out |= _recomputed(block, counts, out)
    return out


def _keep_cheap_prologue(operand: Instruction, inlined: set[Instruction]) -> None:
    """A dot's left operand stays fused only when it is addressing over values in memory."""
    tree, cheap = [operand], True
    while tree:
        inst = tree.pop()
        cheap &= inst.opcode in ADDRESS_ONLY
        tree += [v for v in inst.operands if isinstance(v, Instruction) and v in inlined]
    if not cheap:
        inlined.discard(operand)


def _keep_strided_view(operand: Instruction, inlined: set[Instruction]) -> None:
    """A convolution's operand stays fused only when it is a chain of views with a transpose
    that the code generator reads in place (dlvm.ir.strided): batch and channels exchanged for
    a kernel's gradient, instead of a copy of the whole tensor written first. What the chain
    views, if it was to be computed inside it, becomes a kernel of its own."""
    chain: list[Instruction] = []
    v: Value = operand
    while isinstance(v, Instruction) and v in inlined and v.opcode in STRIDED_VIEWS:
        chain.append(v)
        v = v.operands[0]
    members = set(chain)
    if any(i.opcode == "transpose" for i in chain) and (
        view_strides(operand, within=members.__contains__) is not None
    ):
        if isinstance(v, Instruction):
            inlined.discard(v)
    else:
        inlined.discard(operand)


def _epilogue_products(
    block: Block, counts: Counter[Value], inlined: set[Instruction]
) -> set[Instruction]:
    """The products (matrix products, convolutions) whose only user starts an elementwise chain
    of their own shape, ending at a kernel root of their type (one product per root)."""
    user_of: dict[Value, Instruction] = {}
    for inst in block.instructions:
        for v in inst.operands:
            user_of[v] = inst
    out: set[Instruction] = set()
    roots: set[Instruction] = set()
    for product in block.instructions:
        if not _is_product(product) or counts[product] != 1:
            continue
        assert isinstance(product.type, TensorType)
        shape = product.type.shape
        cur: Instruction = product
        while (user := user_of.get(cur)) is not None and _elementwise_of_shape(user, shape):
            if user not in inlined:
                if _holds(product, user) and user not in roots:
                    roots.add(user)
                    out.add(product)
                break
            cur = user
    return out


def _holds(product: Instruction, root: Instruction) -> bool:
    """Whether `root`, the end of an elementwise chain of `product`'s shape, may be its
    kernel's root: it has the product's type, or it is f32 after a bf16 matrix product (a
    mixed-precision weight gradient and its update: the kernel keeps the product's bf16-rounded
    sums in the root's f32 buffer, widening exactly, before the chain reads them back)."""
    if root.type == product.type:
        return True
    pt, rt = product.type, root.type
    return (
        product.opcode == "dot"
        and isinstance(pt, TensorType)
        and isinstance(rt, TensorType)
        and pt.dtype is DataType.BF16
        and rt.dtype is DataType.F32
    )


def _elementwise_of_shape(inst: Instruction, shape: tuple[int, ...]) -> bool:
    t = inst.type
    if not isinstance(t, TensorType) or t.shape != shape:
        return False
    return inst.op.elementwise or inst.opcode in ("dataTypeCast", "convert")


def _recomputed(
    block: Block, counts: Counter[Value], inlined: set[Instruction]
) -> set[Instruction]:
    """The pointwise kernel roots better computed inside each kernel that reads them than
    written to memory (the rule of the module's docstring), decided latest first so that each
    sees the final kernels of its readers."""
    readers: dict[Value, list[tuple[Instruction, int]]] = {}
    for inst in block.instructions:
        for i, v in enumerate(inst.operands):
            readers.setdefault(v, []).append((inst, i))
    # homes: the roots whose kernels compute each instruction; members: the converse.
    homes: dict[Instruction, set[Instruction]] = {}
    members: dict[Instruction, set[Instruction]] = {}
    for inst in reversed(block.instructions):
        if is_kernel(inst):
            is_root = inst not in inlined
            homes[inst] = {inst} if is_root else set().union(*(homes[u] for u, _ in readers[inst]))
            for h in homes[inst]:
                members.setdefault(h, set()).add(inst)
    prologues = _prologues(block, inlined)
    out: set[Instruction] = set()
    for root in reversed(block.instructions):
        if root in inlined or root not in members or not is_pointwise(root):
            continue
        uses = readers.get(root, [])
        if not uses or len(uses) != counts[root]:
            continue  # read by the host, or inside a literal
        if not all(u in homes and u not in prologues and fusable_into(u, i) for u, i in uses):
            continue  # a dot reads its operands many times each
        kernel = members[root]
        into: set[Instruction] = set().union(*(homes[u] for u, _ in uses))
        if not _worth_recomputing(root, kernel, into, readers):
            continue
        for v in members.pop(root):
            homes[v] = (homes[v] - {root}) | into
            for h in into:
                members[h].add(v)
        out.add(root)
    return out


def _prologues(block: Block, inlined: set[Instruction]) -> set[Instruction]:
    """The products (dots, convolutions) of the block and the instructions inlined into their
    operands."""
    out: set[Instruction] = set()
    tree = [inst for inst in block.instructions if inst.opcode in PRODUCTS]
    while tree:
        inst = tree.pop()
        out.add(inst)
        tree += [v for v in inst.operands if isinstance(v, Instruction) and v in inlined]
    return out


def _worth_recomputing(
    root: Instruction,
    kernel: set[Instruction],
    into: set[Instruction],
    readers: dict[Value, list[tuple[Instruction, int]]],
) -> bool:
    """The cost rule of `_recomputed` for a root whose kernel is `kernel`, read by the kernels
    of the roots `into`."""
    if any(v.opcode in PRODUCTS for v in kernel):
        return False
    if any(v.opcode in EXPENSIVE for v in kernel):
        return len(into) == 1 and _computed_once(root, next(iter(into)), readers)
    return _large_inputs(root, kernel) * (len(into) - 1) <= len(into) + 1


def _computed_once(
    v: Instruction, home: Instruction, readers: dict[Value, list[tuple[Instruction, int]]]
) -> bool:
    """Whether the kernel of root `home` computes each element of v once: every path from v
    to the root runs through elementwise instructions of v's shape, or ends in the root as the
    operand it reduces. Depth first on a stack of its own (a fused chain may be thousands of
    instructions long), each instruction's readers in order from where it left off."""
    known: dict[Instruction, bool] = {}
    stack: list[tuple[Instruction, int]] = [(v, 0)]
    while stack:
        w, k = stack.pop()
        assert isinstance(w.type, TensorType)
        uses, verdict = readers[w], True
        while k < len(uses) and verdict:
            u, i = uses[k]
            if u is home and u.opcode == "reduce" and i == 0:
                k += 1
            elif not _elementwise_of_shape(u, w.type.shape):
                verdict = False
            elif u is home or known.get(u):
                k += 1
            elif u in known:
                verdict = False
            else:
                break  # u first
        if verdict and k < len(uses):
            stack += [(w, k), (uses[k][0], 0)]
        else:
            known[w] = verdict
    return known[v]


def _large_inputs(root: Instruction, kernel: set[Instruction]) -> int:
    """How many tensors a kernel reads from memory that have as many elements as its root
    (smaller ones, broadcast, stay in cache)."""
    assert isinstance(root.type, TensorType)
    size = root.type.unit_count
    inputs = {
        v
        for inst in kernel
        for v in inst.operands
        if not isinstance(v, LiteralValue | Function) and v not in kernel
    }
    return sum(isinstance(v.type, TensorType) and v.type.unit_count >= size for v in inputs)


def _outline(
    root: Instruction,
    inlined: set[Instruction],
    name: str,
    order: dict[Instruction, int],
    readers: dict[Value, list[Instruction]],
) -> Function:
    """Copies root and the instructions inlined into it to a new [compute] function, and puts
    `apply @name(inputs…)` before root, read instead of it (the caller removes root); `order`
    is the position of each instruction of root's block, `readers` those of each value, which
    this keeps up to date."""
    members: list[Instruction] = []
    seen: set[Instruction] = set()
    inputs: dict[Value, None] = {}  # in the order first read
    # Depth first from the root, operands in order, on a stack of its own (a fused chain may
    # be thousands of instructions long): each instruction after the operands it computes.
    stack = [(root, iter(root.operands))]
    while stack:
        inst, pending = stack[-1]
        for v in pending:
            if isinstance(v, Instruction) and v in inlined:
                if v not in seen:  # read twice in the kernel, computed once
                    stack.append((v, iter(v.operands)))
                    break
            elif not isinstance(v, LiteralValue | Function):
                inputs.setdefault(v)
        else:
            stack.pop()
            members.append(inst)
            seen.add(inst)
    block = root.block
    assert block is not None
    members.sort(key=order.__getitem__)
    kernel = Function(name, FunctionType(tuple(v.type for v in inputs), root.type))
    kernel.compute = True
    names = {m.name for m in members if m.name is not None}
    args = [Argument(fresh_name(_arg_name(v, i), names), v.type) for i, v in enumerate(inputs)]
    entry = Block("entry", args)
    kernel.add_block(entry)
    mapping: dict[Value, Value] = dict(zip(inputs, args))
    for inst in members:
        operands = [mapping.get(v, v) for v in inst.operands]
        copy = Instruction(inst.op, operands, dict(inst.attrs), inst.type, inst.name, inst.loc)
        entry.append(copy)
        mapping[inst] = copy
    ret = lookup("return")
    assert ret is not None
    entry.append(create(ret, [mapping[root]]))
    call = create(lookup("apply"), [kernel, *inputs])  # type: ignore[arg-type]
    call.name = root.name
    call.loc = root.loc
    block.insert(block.instructions.index(root), call)
    for v in inputs:
        readers.setdefault(v, []).append(call)
    moved = readers.pop(root, [])
    for inst in moved:
        inst.map_values(lambda v: call if v is root else v)
    readers[call] = moved
    return kernel


def _arg_name(v: Value, i: int) -> str:
    name = getattr(v, "name", None)
    return name if isinstance(name, str) else f"in{i}"
