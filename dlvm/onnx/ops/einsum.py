"""Einsum: each operand's repeated subscripts taken as a diagonal and its own summed subscripts
reduced, then the operands multiplied pairwise, left to right, as one batched `dot` each (the
shared subscripts kept are the batch, the shared ones dropped are contracted), and the result's
axes put in the output's order."""

from __future__ import annotations

import math
import string

import numpy as np

from dlvm.ir.compose import permute
from dlvm.ir.values import Value
from dlvm.onnx.context import Lowering, LoweringError
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops.common import reduce, reshape, tensor
from dlvm.onnx.ops.registry import HANDLERS
from dlvm.onnx.ops.shape import emitter

Term = tuple[Value, str]  # a tensor and the subscript of each of its axes


def parse(equation: str, ranks: list[int]) -> tuple[list[str], str]:
    """The subscripts of each operand and of the output, an ellipsis written out as subscripts
    of its own (upper-case letters from the end of the alphabet are free for it when the
    equation uses none of them)."""
    text = equation.replace(" ", "")
    left, arrow, right = text.partition("->")
    terms = left.split(",")
    if len(terms) != len(ranks):
        raise LoweringError(
            f"the equation '{equation}' has {len(terms)} operands, not {len(ranks)}"
        )
    free = [c for c in reversed(string.ascii_uppercase) if c not in text]
    widest = max((r - len(t.replace("...", "")) for t, r in zip(terms, ranks) if "..." in t),
                 default=0)  # fmt: skip
    spread = "".join(reversed(free[:widest]))
    subs = []
    for t, r in zip(terms, ranks):
        if "..." in t:
            n = r - len(t.replace("...", ""))
            t = t.replace("...", spread[widest - n :])
        if len(t) != r or not all(c.isalpha() for c in t):
            raise LoweringError(f"the subscripts '{t}' do not fit an operand of rank {r}")
        subs.append(t)
    if arrow:
        out = right.replace("...", spread)
    else:  # implicit: the ellipsis, then the subscripts used once, in alphabetical order
        once = sorted(
            c for c in set("".join(subs)) if "".join(subs).count(c) == 1 and c not in spread
        )
        out = spread + "".join(once)
    return subs, out


def _check(node: Node, facts: Facts) -> list[str]:
    return [] if isinstance(node.attr("equation"), str) else ["no equation"]


@HANDLERS.register("Einsum", since=12, check=_check)
def einsum(cx: Lowering, node: Node) -> None:
    values = [cx.value(n) for n in node.inputs]
    subs, out = parse(node.attr("equation"), [len(tensor(v).shape) for v in values])
    terms = [_alone(cx, v, s, _needed(out, subs, i)) for i, (v, s) in enumerate(zip(values, subs))]
    acc = terms[0]
    for i, term in enumerate(terms[1:], start=1):
        acc = _product(cx, acc, term, set(out) | set("".join(subs[i + 1 :])))
    v, s = _alone(cx, acc[0], acc[1], set(out))
    if sorted(s) != sorted(out):
        raise LoweringError(f"the output subscripts '{out}' are not those of the operands")
    if s != out:
        v = permute(emitter(cx), v, tuple(s.index(c) for c in out))
    cx.define(node.out(0), v)


def _needed(out: str, subs: list[str], i: int) -> set[str]:
    """The subscripts operand i must keep: the output's and the other operands'."""
    return set(out) | {c for j, s in enumerate(subs) if j != i for c in s}


def _alone(cx: Lowering, v: Value, sub: str, keep: set[str]) -> Term:
    """v with each repeated subscript taken as its diagonal and those not in `keep` summed."""
    while len(set(sub)) < len(sub):
        c = next(c for c in sub if sub.count(c) > 1)
        p, q = sub.index(c), sub.index(c, sub.index(c) + 1)
        v = _diagonal(cx, v, p, q)
        sub = sub[:q] + sub[q + 1 :]
    dropped = tuple(i for i, c in enumerate(sub) if c not in keep)
    if dropped:
        v = reduce(cx, v, "add", dropped, keep=False)
        sub = "".join(c for c in sub if c in keep)
    return v, sub


def _diagonal(cx: Lowering, v: Value, p: int, q: int) -> Value:
    """v's elements where the indices of axes p and q are equal, axis q dropped: v times the
    identity on those axes, summed along q."""
    t = tensor(v)
    n = t.shape[p]
    eye = np.eye(n, dtype=bool).reshape(tuple(n if d in (p, q) else 1 for d in range(len(t.shape))))
    zero = cx.scalar(0, t.dtype)
    masked = cx.emit("select", v, zero, cx.literal(eye))
    return reduce(cx, masked, "add", (q,), keep=False)


def _product(cx: Lowering, a: Term, b: Term, later: set[str]) -> Term:
    """The product of two terms, keeping the subscripts `later` needs: a batched dot of a as
    [batch, a's own, contracted] by b as [batch, contracted, b's own]."""
    (av, asub), (bv, bsub) = a, b
    shared = [c for c in asub if c in bsub]
    batch = [c for c in shared if c in later]
    summed = [c for c in shared if c not in later]
    mine = [c for c in asub if c not in shared]
    theirs = [c for c in bsub if c not in shared]
    sizes = {c: n for s, v in ((asub, av), (bsub, bv)) for c, n in zip(s, tensor(v).shape)}

    def arranged(v: Value, sub: str, order: list[str], shape: tuple[int, ...]) -> Value:
        if list(sub) != order:
            v = permute(emitter(cx), v, tuple(sub.index(c) for c in order))
        return reshape(cx, v, shape)

    nb, nm, nt, ns = (math.prod(sizes[c] for c in g) for g in (batch, mine, theirs, summed))
    x = arranged(av, asub, batch + mine + summed, (nb, nm, ns))
    y = arranged(bv, bsub, batch + summed + theirs, (nb, ns, nt))
    z = cx.emit("dot", x, y)
    z = reshape(cx, z, tuple(sizes[c] for c in batch + mine + theirs))
    return z, "".join(batch + mine + theirs)
