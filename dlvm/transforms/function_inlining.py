"""function-inlining (Inline): replaces `apply @f(args…)` by a copy of f's body, so that later
passes (compute generation above all) see the callee's instructions next to the caller's.

A direct call is inlined when its callee is a definition in the module that is not recursive (in the
call graph, dlvm.analysis.call_graph), is not a `[compute]` kernel, makes no call through a function
value, consists of one block ending in `return`, and either has at most MAX_INSTRUCTIONS
instructions once its own calls are inlined or is called from one place only (a gradient called by
its training step: the copy replaces the call, so nothing grows). An `extract` from a tuple the
inlined body built (`literal (…)`) becomes the element itself, so that tuple-returning callees leave
no tuple traffic behind. Multi-block callees are left alone: inlining them would mean splitting the
caller's block at the call. Functions are visited bottom-up (callees first) and each call site once,
so every call left after a run is one of a callee that fails the conditions above, and a second run
changes nothing. Callees stay in the module: whether a function is an entry point is decided
elsewhere, and dead-function removal is not this pass's business.
"""

from __future__ import annotations

from collections.abc import Callable

from dlvm.analysis.call_graph import CallGraph
from dlvm.ir.cloning import ValueMap, clone_instructions
from dlvm.ir.literals import AggregateLiteral
from dlvm.ir.values import Function, Instruction, LiteralValue, Module, Value, fresh_name
from dlvm.transforms.pass_base import Pass

MAX_INSTRUCTIONS = 64  # the callee's, its `return` included: the size of a stdlib activation


class FunctionInlining(Pass):
    name = "function-inlining"
    alias = "Inline"
    summary = "inline calls of small single-block non-recursive functions"
    # Not at raw (gradient declarations have no body yet) nor after compute generation.
    stages = ("optimizable",)

    def run(self, module: Module) -> bool:
        graph = CallGraph(module)
        sites = _call_sites(module)
        # Bottom-up, a callee is final by the time its callers are visited: decide once.
        decided: dict[Function, bool] = {}

        def may_inline(callee: Function) -> bool:
            if callee not in decided:
                decided[callee] = inlinable(callee, graph, sites.get(callee, 0))
            return decided[callee]

        changed = False
        for component in graph.components:
            for fn in component:
                if fn.blocks and not fn.is_declaration and not fn.compute:
                    changed |= inline_calls(fn, may_inline)
        return changed


def _call_sites(module: Module) -> dict[Function, int]:
    """How many places name each function (calls, combinators, values passed on)."""
    out: dict[Function, int] = {}
    for fn in module.functions:
        for inst in fn.instructions():
            for v in inst.uses():
                if isinstance(v, Function):
                    out[v] = out.get(v, 0) + 1
    return out


def inlinable(callee: Function, graph: CallGraph, sites: int = 0) -> bool:
    """Whether calls of callee may be replaced by its body (`sites`: how many places name it)."""
    if callee.is_declaration or callee.compute or len(callee.blocks) != 1:
        return False
    insts = callee.blocks[0].instructions
    if not insts or insts[-1].opcode != "return":
        return False
    if len(insts) > MAX_INSTRUCTIONS and sites != 1:
        return False
    if any(i.opcode == "apply" and not isinstance(i.operands[0], Function) for i in insts):
        return False  # substituting a function argument could create a new direct call
    return not graph.is_recursive(callee)


def inline_calls(fn: Function, may_inline: Callable[[Function], bool]) -> bool:
    """Inlines into fn each `apply @g` whose callee passes `may_inline(g)`; True if any was."""
    taken = {a.name for b in fn.blocks for a in b.arguments}
    taken |= {i.name for i in fn.instructions() if i.name is not None}
    replaced: dict[Value, Value] = {}
    changed = False
    for block in fn.blocks:
        for call in list(block.instructions):
            callee = call.operands[0] if call.opcode == "apply" else None
            if isinstance(callee, Function) and callee.module is fn.module and may_inline(callee):
                result = _inline(call, callee, taken)
                changed = True
                if result is not None:
                    replaced[call] = result
    if not changed:
        return False

    def forward(v: Value) -> Value:
        while v in replaced:  # a call's result may itself be another inlined call's
            v = replaced[v]
        return v

    for inst in fn.instructions():
        if any(v in replaced for v in inst.uses()):
            inst.map_values(forward)
    _forward_extracts(fn)
    return True


def _forward_extracts(fn: Function) -> None:
    """`%e = extract k from %t` where %t is `literal (a0, a1, …)` (a tuple built by an inlined
    body): uses of %e read a_k itself, and the extract goes (the tuple too, once unused)."""
    for block in fn.blocks:
        for inst in list(block.instructions):
            if inst.opcode != "extract" or len(inst.attrs.get("keys", ())) != 1:
                continue
            tup, key = inst.operands[0], inst.attrs["keys"][0]
            if not (isinstance(tup, Instruction) and tup.opcode == "literal"):
                continue
            lit = tup.operands[0]
            if not (isinstance(lit, LiteralValue) and isinstance(lit.literal, AggregateLiteral)):
                continue
            if lit.literal.kind != "tuple" or key.index is None:
                continue
            element = lit.literal.items[key.index]
            if isinstance(element, LiteralValue):
                continue  # keep the extract: a literal element is not a value of its own
            _replace_uses(fn, inst, element)
            block.remove(inst)


def _replace_uses(fn: Function, old: Value, new: Value) -> None:
    for user in fn.instructions():
        if any(v is old for v in user.uses()):
            user.map_values(lambda v: new if v is old else v)


def _inline(call: Instruction, callee: Function, taken: set[str]) -> Value | None:
    """Puts a copy of callee's body in place of call; returns the value that stands for the
    call's result (what the copy returns), or None when the call returns nothing."""
    body = callee.blocks[0]
    vmap = ValueMap(zip(body.arguments, call.operands[1:]))
    copies = clone_instructions(body.instructions[:-1], vmap)
    returned = body.instructions[-1].operands
    result = vmap(returned[0]) if returned and not call.is_void else None
    for copy in copies:
        if copy is result and call.name is not None:
            copy.name = call.name  # the name the source gave the result; the call goes
        elif copy.name is not None:
            copy.name = fresh_name(copy.name, taken)
    block = call.block
    assert block is not None
    at = block.instructions.index(call)
    block.remove(call)
    for k, copy in enumerate(copies):
        block.insert(at + k, copy)
    return result
