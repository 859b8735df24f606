"""IR-to-IR passes, one per file, registered here by whole-word name and DLVM alias."""

from __future__ import annotations

import difflib

from dlvm.transforms.algebra_simplification import AlgebraSimplification
from dlvm.transforms.cfg_canonicalization import CFGCanonicalization
from dlvm.transforms.cfg_simplification import CFGSimplification
from dlvm.transforms.checkpointing import Checkpointing
from dlvm.transforms.common_subexpression_elimination import CommonSubexpressionElimination
from dlvm.transforms.compute_generation import ComputeGeneration
from dlvm.transforms.compute_scheduling import ComputeScheduling
from dlvm.transforms.constant_propagation import ConstantPropagation
from dlvm.transforms.dead_code_elimination import DeadCodeElimination
from dlvm.transforms.differentiation import Differentiation
from dlvm.transforms.function_inlining import FunctionInlining
from dlvm.transforms.linear_algebra_fusion import LinearAlgebraFusion
from dlvm.transforms.literal_broadcasting_promotion import LiteralBroadcastingPromotion
from dlvm.transforms.loop_invariant_code_motion import LoopInvariantCodeMotion
from dlvm.transforms.matrix_multiplication_reordering import MatrixMultiplicationReordering
from dlvm.transforms.pass_base import FunctionPass, Pass

PASSES: dict[str, type[Pass]] = {
    p.name: p
    for p in (
        Differentiation,
        CommonSubexpressionElimination,
        DeadCodeElimination,
        FunctionInlining,
        AlgebraSimplification,
        ConstantPropagation,
        LiteralBroadcastingPromotion,
        MatrixMultiplicationReordering,
        LinearAlgebraFusion,
        CFGCanonicalization,
        CFGSimplification,
        LoopInvariantCodeMotion,
        Checkpointing,
        ComputeGeneration,
        ComputeScheduling,
    )
}
ALIASES: dict[str, str] = {p.alias: p.name for p in PASSES.values()}


def lookup_pass(name: str) -> type[Pass] | None:
    """A pass by whole-word name (`dead-code-elimination`) or alias (`DCE`)."""
    return PASSES.get(ALIASES.get(name, name))


def suggest_pass(name: str) -> str:
    pool = [*PASSES, *ALIASES]
    close = difflib.get_close_matches(name, pool, n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


__all__ = ["ALIASES", "PASSES", "FunctionPass", "Pass", "lookup_pass", "suggest_pass"]
