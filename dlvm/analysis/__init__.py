"""Analyses over DLVM functions (IR.md section 7), cached per function revision.

One module per concept: `cfg`, `dominance`, `postdominance`, `frontier`, `dataflow`, `loops`,
`liveness`, `differentiability` (per function, through `analysis`), `side_effects` (per
module, keyed on the revisions of all its functions) and `call_graph` (per module, built on
demand).
"""

from dlvm.analysis.manager import analysis, invalidate

__all__ = ["analysis", "invalidate"]
