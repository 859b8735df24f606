"""The optimisation levels as pass pipelines, the one definition `dlopt -O` and `telc -O` share.

-O1 is the cheap clean-up; -O2 adds the linear-algebra and loop passes and repeats the whole
list while a round still changes something, up to a bound: one pass often enables another
(constant propagation folds a branch, CFG simplification merges the blocks, CSE then finds
equal values across them), and a bound keeps a pass pair that undo each other from looping.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Pipeline:
    """Passes run in order; the list repeats until a round changes nothing, `rounds` at most."""

    passes: tuple[str, ...]
    rounds: int
    summary: str


O1 = (
    "algebra-simplification",
    "constant-propagation",
    "common-subexpression-elimination",
    "dead-code-elimination",
    "cfg-simplification",
)

# CSE comes before reordering and fusion, which must see one product where the code computes
# the same one twice; LICM after CSE, so that each invariant is hoisted once; DCE last, to
# remove what the others left unused (the literals LBP no longer reads, intermediates).
O2 = (
    "algebra-simplification",
    "constant-propagation",
    "cfg-simplification",
    "common-subexpression-elimination",
    "matrix-multiplication-reordering",
    "linear-algebra-fusion",
    "literal-broadcasting-promotion",
    "loop-invariant-code-motion",
    "dead-code-elimination",
)

MAX_ROUNDS = 4

PIPELINES: dict[int, Pipeline] = {
    0: Pipeline((), 1, "no optimisation"),
    1: Pipeline(O1, 1, "AS, ConstProp, CSE, DCE, CFGSimp once"),
    2: Pipeline(O2, MAX_ROUNDS, f"-O1 plus MMR, LAF, LBP, LICM, to a fixpoint (<= {MAX_ROUNDS})"),
}
