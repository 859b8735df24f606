"""matrix-multiplication-reordering (MMR): re-associates chains of matrix products by the optimal
matrix-chain order (the classic O(n³) dynamic programme), so that (A·B)·C becomes A·(B·C) when
that takes fewer multiply-adds.

A chain is a tree of rank-2 `dot`s whose inner dots each have a single use, as an operand of the
next dot of the tree; its leaves are the other operands, left to right. (A dot's type rule makes
both operands and the result share one data type, so a whole chain has one.) Inner dots may sit
in other blocks than the chain's root, which they dominate, but only in blocks of the root's
innermost loop: re-associating must never move a product into a loop body, nor out of one.

A chain is rewritten only when the optimal order takes strictly fewer multiply-adds than the
present one, so an optimal chain is left as it is and a second run changes nothing. The new dots
go at the root's position in post-order (left subtree first); the root's name moves to the new
root, and the old dots go with their names. Vector and batched dots are left alone, and so are
chains of more than MAX_DOTS dots, whose cubic search would cost more than it saves.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeAlias, TypeGuard

from dlvm.analysis.dataflow import data_flow
from dlvm.analysis.loops import Loop, loop_info
from dlvm.ir.builder import Builder
from dlvm.ir.dominance import dominator_tree
from dlvm.ir.types import as_tensor
from dlvm.ir.values import Function, Instruction, Value
from dlvm.transforms.pass_base import FunctionPass
from dlvm.transforms.rewrite import replace_and_remove

MAX_DOTS = 64  # the longest chain searched: 64³/6 split trials, a few milliseconds

# A parenthesization: the index of a leaf, or the product of two parenthesizations.
Tree: TypeAlias = "int | tuple[Tree, Tree]"


class MatrixMultiplicationReordering(FunctionPass):
    name = "matrix-multiplication-reordering"
    alias = "MMR"
    summary = "re-associate chains of dots by the optimal matrix-chain order"

    def run_on_function(self, fn: Function) -> bool:
        return reorder_matrix_chains(fn)


def _is_matrix(value: Value) -> bool:
    t = as_tensor(value.type)
    return t is not None and t.rank == 2


def is_matrix_dot(value: Value) -> TypeGuard[Instruction]:
    """A `dot` of two matrices (not of vectors, not batched)."""
    return (
        isinstance(value, Instruction)
        and value.opcode == "dot"
        and all(_is_matrix(v) for v in value.operands)
    )


def matrix_shape(value: Value) -> tuple[int, int]:
    """(rows, columns) of a value of rank-2 tensor type."""
    t = as_tensor(value.type)
    assert t is not None and t.rank == 2, f"{value} is not a matrix"
    return t.shape[0], t.shape[1]


def multiply_adds(fn: Function) -> int:
    """The multiply-adds of fn's matrix dots, each counted once as written (m·k·n for m×k by
    k×n): the static cost this pass minimises."""
    total = 0
    for inst in fn.instructions():
        if is_matrix_dot(inst):
            (m, k), (_, n) = matrix_shape(inst.operands[0]), matrix_shape(inst.operands[1])
            total += m * k * n
    return total


def optimal_order(dims: Sequence[int]) -> tuple[Tree, int]:
    """The cheapest parenthesization of the chain whose i-th matrix is dims[i] × dims[i+1], and
    its multiply-adds. Ties go to the leftmost split, so the answer is deterministic."""
    n = len(dims) - 1
    cost = [[0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for length in range(2, n + 1):
        for i in range(n - length + 1):
            j = i + length - 1
            best: int | None = None
            for k in range(i, j):
                c = cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1]
                if best is None or c < best:  # strictly less: the leftmost split wins a tie
                    best, split[i][j] = c, k
            assert best is not None
            cost[i][j] = best

    def tree(i: int, j: int) -> Tree:
        if i == j:
            return i
        k = split[i][j]
        return (tree(i, k), tree(k + 1, j))

    return tree(0, n - 1), cost[0][n - 1]


def order_cost(tree: Tree, dims: Sequence[int]) -> int:
    """The multiply-adds of computing the chain of `dims` in the order of `tree`."""

    def walk(t: Tree) -> tuple[int, int, int]:  # first leaf, last leaf, multiply-adds
        if isinstance(t, int):
            return t, t, 0
        (i, k, left), (_, j, right) = walk(t[0]), walk(t[1])
        return i, j, left + right + dims[i] * dims[k + 1] * dims[j + 1]

    return walk(tree)[2]


@dataclass
class Chain:
    """A tree of matrix products: its root, every dot of it, its leaves and its present shape."""

    root: Instruction
    dots: list[Instruction]
    leaves: list[Value]
    tree: Tree

    def dims(self) -> list[int]:
        """[rows of leaf 0, columns of leaf 0, columns of leaf 1, …]."""
        shapes = [matrix_shape(v) for v in self.leaves]
        return [shapes[0][0]] + [s[1] for s in shapes]


def find_chains(fn: Function) -> list[Chain]:
    """The chains of fn's reachable blocks with at most MAX_DOTS dots, in program order of their
    roots (chains of one dot included)."""
    flow, loops = data_flow(fn), loop_info(fn)
    reachable = dominator_tree(fn).cfg.reachable

    def inner(v: Value) -> bool:
        """v is a matrix dot whose one use is as an operand of a matrix dot of its loop."""
        if not is_matrix_dot(v) or flow.use_count(v) != 1:
            return False
        [user] = flow.users(v)
        return is_matrix_dot(user) and loop_of(user) is loop_of(v)

    def loop_of(inst: Instruction) -> Loop | None:
        assert inst.block is not None
        return loops.loop_for(inst.block)

    chains = []
    for block in fn.blocks:
        if not reachable(block):
            continue  # no dominance there: unreachable code may even hold cycles
        for inst in block.instructions:
            if is_matrix_dot(inst) and not inner(inst):
                chain = _grow(inst, inner)
                if chain is not None:
                    chains.append(chain)
    return chains


def _grow(root: Instruction, inner: Callable[[Value], bool]) -> Chain | None:
    """The chain below root, or None when it has more than MAX_DOTS dots."""
    dots: list[Instruction] = []
    leaves: list[Value] = []
    too_long = False

    def visit(d: Instruction) -> Tree:
        dots.append(d)
        return (operand(d.operands[0]), operand(d.operands[1]))

    def operand(v: Value) -> Tree:
        nonlocal too_long
        if isinstance(v, Instruction) and inner(v):
            if len(dots) < MAX_DOTS:
                return visit(v)
            too_long = True  # stop descending: the recursion stays MAX_DOTS deep
        leaves.append(v)
        return len(leaves) - 1

    tree = visit(root)
    return None if too_long else Chain(root, dots, leaves, tree)


def reorder_matrix_chains(fn: Function) -> bool:
    """Rewrites every chain of fn whose optimal order is strictly cheaper; True if any was."""
    replaced: dict[Value, Value] = {}
    dead: set[Instruction] = set()
    for chain in find_chains(fn):
        dims = chain.dims()
        order, cost = optimal_order(dims)
        if cost < order_cost(chain.tree, dims):
            replaced[chain.root] = _emit(chain, order)
            dead.update(chain.dots)
    if not replaced:
        return False
    # A chain's leaf may be the root of another chain, rewritten too.
    replace_and_remove(fn, replaced, dead)
    return True


def _emit(chain: Chain, order: Tree) -> Instruction:
    """Builds the products of `order` at the root's position and gives the new root its name."""
    b = Builder().before(chain.root)

    def build(t: Tree) -> Value:
        if isinstance(t, int):
            return chain.leaves[t]
        left, right = build(t[0]), build(t[1])
        return b.build("dot", [left, right])

    new = build(order)
    assert isinstance(new, Instruction)  # a chain has at least two leaves
    new.name, chain.root.name = chain.root.name, None
    return new
