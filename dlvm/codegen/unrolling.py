"""Which loops LLVM may unroll. A `dot` kernel is register-blocked and unrolled by construction
(dlvm.codegen.matmul): LLVM's unroller only multiplies its code (in the MLP of bench/cases.py,
240 complete unrolls of epilogue loops that doubled the optimisation time and ran no faster), so
each of its loops is marked `llvm.loop.unroll.disable`; so are a pointwise kernel's that reads a
permutation along its contiguous last axis (KernelGen.permuted_copy), whose short innermost loop
LLVM would otherwise unroll whole and vectorise the next loop out with gathers and scatters.
Other kernels keep LLVM's unrolling, which small constant loops (convolution taps) need."""

from __future__ import annotations

from llvmlite import ir


class _LoopID(ir.values.MDValue):
    """A distinct loop identifier `!{self, hints…}` (LLVM requires the self-reference)."""

    def descr(self, buf: list[str]) -> None:
        hints = ", ".join(h.get_reference() for h in self.operands)
        buf += (f"distinct !{{ {self.get_reference()}, {hints} }}", "\n")

    # Identity, not the operands (llvmlite's MDValue compares those): every loop has its own.
    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = object.__hash__


def disable_unrolling(fn: ir.Function) -> None:
    """Marks each loop of `fn` not to be unrolled. Loops are found by their back edges: our
    emitters append a loop's header before its body (dlvm.codegen.loops), so a branch to a
    block appended earlier closes a loop."""
    module = fn.module
    hint = module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.disable")])
    order = {block: i for i, block in enumerate(fn.blocks)}
    for i, block in enumerate(fn.blocks):
        term = block.terminator
        if isinstance(term, (ir.Branch, ir.ConditionalBranch)) and any(
            isinstance(t, ir.Block) and order.get(t, i + 1) <= i for t in term.operands
        ):
            term.set_metadata("llvm.loop", _LoopID(module, [hint], name=str(len(module.metadata))))
