"""linear-algebra-fusion (LAF): merges independent matrix products of one block that share an
operand into one product over concatenated operands, then cuts the result apart. The four gate
products of an LSTM, h·Ui, h·Uf, h·Uo and h·Ug, become one h·[Ui Uf Uo Ug].

A shared right operand W stacks the left operands: `concatenate A1, A2 along 0`, one `dot` with
W, and a `slice` of rows per product. A shared left operand x puts the right operands side by
side: `concatenate U1, U2 along 1`, one `dot`, and since `slice` only cuts the first dimension,
one `transpose` of the product, then a `slice` and a `transpose` back per product. That is the
cheapest legal split: the alternatives (transposing x and every Ui to make the columns rows,
or a reshape, which cannot select columns of a row-major matrix) move at least as much data, and
only the (small) product is transposed here, never the operands.

Only matrix dots (rank 2) of one reachable block are grouped, and only small ones (see
FUSE_LIMIT); sharing an operand gives them one data type, since a dot's operands have one. The
fused code goes right before the first dot of a group (its anchor), so a later dot joins only
when its other operand is already defined there; that also makes the members independent, since
a dot using another member's result cannot qualify. Each dot joins at most one group: the
anchors are taken in program order, and an anchor takes the larger of its two candidate groups
(the shared right operand's on a tie: its split needs no transposes). Each replaced dot's name
moves to the value that replaces it.

Equal products in a block (the same two operands) are merged into the first one before
grouping: fusion must not compute one product twice, and two equal members would otherwise
become one value and share an operand only after the run.

Nothing is left to fuse after a run. Every dot that could join an anchor did, counting a fused
dot as defined at its anchor, where the value replacing it goes (so a dot reading it may join a
later group in the same run). And a fused dot's other operand is the concatenation just before
it, so it can neither join an earlier anchor nor, as an anchor, find a member that the run which
made it did not take.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlvm.ir.builder import Builder
from dlvm.ir.dominance import DominatorTree, dominator_tree
from dlvm.ir.values import Block, Function, Instruction, Value
from dlvm.transforms.matrix_multiplication_reordering import is_matrix_dot, matrix_shape
from dlvm.transforms.pass_base import FunctionPass
from dlvm.transforms.rewrite import replace_and_remove

LEFT, RIGHT = 0, 1  # operand positions of a dot

# The largest product (in elements) worth fusing. Fusion saves a kernel per product, and costs
# the epilogue fusion each product had (bias and activation applied to its tiles in cache) and
# the concatenation. Measured on the LSTM sample compiled for the CPU: up to 2,048 elements per
# product (gates of 4 x 8, 16 x 32, 32 x 64) fused and separate products take the same time;
# above it fusion loses (64 x 128: 13% slower, 256 x 256: 27%). A target where one large
# product beats several small ones (a GPU, where each kernel launch costs) would raise it.
FUSE_LIMIT = 2048


class LinearAlgebraFusion(FunctionPass):
    name = "linear-algebra-fusion"
    alias = "LAF"
    summary = "merge dots sharing an operand into one dot over concatenated operands"

    def run_on_function(self, fn: Function) -> bool:
        return fuse_linear_algebra(fn)


@dataclass
class Group:
    """Dots of one block sharing the operand at position `side`, in program order."""

    side: int
    dots: list[Instruction]

    @property
    def shared(self) -> Value:
        return self.dots[0].operands[self.side]

    @property
    def others(self) -> list[Value]:
        return [d.operands[1 - self.side] for d in self.dots]


def find_groups(fn: Function) -> list[Group]:
    """The groups of two or more dots to fuse in fn's reachable blocks, in program order."""
    dom = dominator_tree(fn)
    groups: list[Group] = []
    for block in fn.blocks:
        if dom.cfg.reachable(block):  # dominance says nothing about unreachable code
            groups.extend(_block_groups(block, _Availability(block, dom)))
    return groups


class _Availability:
    """What is defined before each instruction of a block, counting a fused dot as defined at
    its group's anchor, where the value replacing it will be."""

    def __init__(self, block: Block, dom: DominatorTree) -> None:
        self.block = block
        self.dom = dom
        self.position = {inst: i for i, inst in enumerate(block.instructions)}

    def before(self, v: Value, inst: Instruction) -> bool:
        """v is available right before inst (an instruction of the block)."""
        if isinstance(v, Instruction) and v.block is self.block:
            return self.position[v] < self.position[inst]
        return self.dom.value_dominates(v, inst)

    def fuse(self, group: Group) -> None:
        """From now on, the group's dots count as defined at its anchor."""
        for d in group.dots:
            self.position[d] = self.position[group.dots[0]]


def _block_groups(block: Block, availability: _Availability) -> list[Group]:
    """Greedy grouping of block's matrix dots, anchors in program order."""
    dots = [inst for inst in block.instructions if is_matrix_dot(inst) and _small(inst)]
    sharing: dict[tuple[int, Value], list[Instruction]] = {}
    for d in dots:
        for side in (LEFT, RIGHT):
            sharing.setdefault((side, d.operands[side]), []).append(d)
    taken: set[Instruction] = set()
    groups = []
    for anchor in dots:
        if anchor in taken:
            continue
        candidates = []
        for side in (RIGHT, LEFT):  # max() keeps the first of equals: RIGHT wins ties
            later = sharing[side, anchor.operands[side]]
            members = [
                d
                for d in later[later.index(anchor) + 1 :]
                if d not in taken and availability.before(d.operands[1 - side], anchor)
            ]
            candidates.append(Group(side, [anchor, *members]))
        best = max(candidates, key=lambda g: len(g.dots))
        if len(best.dots) >= 2:
            groups.append(best)
            taken.update(best.dots)
            # Later anchors see the members where their replacements will be: a dot that reads
            # one may join a later group now, and not only in a second run.
            availability.fuse(best)
    return groups


def merge_equal_products(fn: Function) -> bool:
    """Replaces each matrix dot of a reachable block by an earlier equal one (the same operands)
    of the block; True if there was one."""
    dom = dominator_tree(fn)
    replaced: dict[Value, Value] = {}
    for block in fn.blocks:
        if not dom.cfg.reachable(block):
            continue
        first: dict[tuple[Value, Value], Instruction] = {}
        for inst in block.instructions:
            if replaced and any(v in replaced for v in inst.uses()):
                inst.map_values(lambda v: replaced.get(v, v))
            if is_matrix_dot(inst):
                key = (inst.operands[LEFT], inst.operands[RIGHT])
                if key in first:
                    replaced[inst] = first[key]
                else:
                    first[key] = inst
    if not replaced:
        return False
    replace_and_remove(fn, replaced, set(replaced))  # type: ignore[arg-type]
    return True


def _small(dot: Instruction) -> bool:
    rows, columns = matrix_shape(dot)
    return rows * columns <= FUSE_LIMIT


def fuse_linear_algebra(fn: Function) -> bool:
    """Fuses every group of fn, after merging equal products; True if anything changed."""
    merged = merge_equal_products(fn)
    replaced: dict[Value, Value] = {}
    dead: set[Instruction] = set()
    for group in find_groups(fn):
        for dot, piece in zip(group.dots, _emit(group)):
            piece.name, dot.name = dot.name, None
            replaced[dot] = piece
            dead.add(dot)
    if not dead:
        return merged
    # A group's operands may be dots of another group, replaced too.
    replace_and_remove(fn, replaced, dead)
    return True


def _emit(group: Group) -> list[Instruction]:
    """Builds the fused product before the group's anchor; returns the value replacing each dot."""
    b = Builder().before(group.dots[0])
    if group.side == RIGHT:
        stacked = b.build("concatenate", group.others, axis=0)
        product = b.build("dot", [stacked, group.shared])
        heights = [matrix_shape(v)[0] for v in group.others]
        return [b.build("slice", [product], lo=lo, hi=hi) for lo, hi in _ranges(heights)]
    side_by_side = b.build("concatenate", group.others, axis=1)
    product = b.build("dot", [group.shared, side_by_side])
    columns = b.build("transpose", [product])
    widths = [matrix_shape(v)[1] for v in group.others]
    return [
        b.build("transpose", [b.build("slice", [columns], lo=lo, hi=hi)])
        for lo, hi in _ranges(widths)
    ]


def _ranges(sizes: list[int]) -> list[tuple[int, int]]:
    """The closed index ranges [lo, hi] of consecutive parts of the given sizes."""
    out, lo = [], 0
    for n in sizes:
        out.append((lo, lo + n - 1))
        lo += n
    return out
