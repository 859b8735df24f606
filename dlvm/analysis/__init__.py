"""Analyses over DLVM functions (docs/architecture.md), cached per function revision.

One module per concept: `postdominance`, `frontier`, `dataflow`, `loops`, `liveness`,
`differentiability` (per function, through `analysis`), `side_effects` (per module, keyed on
the revisions of all its functions) and `call_graph` (per module, built on demand). The CFG,
dominance and the cache itself are the IR's (`dlvm.ir.cfg`, `dlvm.ir.dominance`,
`dlvm.ir.analysis_cache`), as in MLIR: the verifier needs dominance, and the IR layer imports
nothing above it.
"""

from dlvm.ir.analysis_cache import analysis, invalidate

__all__ = ["analysis", "invalidate"]
