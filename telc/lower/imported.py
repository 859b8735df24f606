"""What an imported ONNX graph puts in a model (telc/onnx_use.py) as IR: a parameter's initial
value as a literal, and a call of the graph's def as a copy of the graph's own IR function."""

from __future__ import annotations

import numpy as np

from dlvm.diagnostics import Diagnostic, DiagnosticError
from dlvm.ir.builder import tensor_literal
from dlvm.ir.cloning import ValueMap, clone_instructions
from dlvm.ir.types import TensorType
from dlvm.ir.values import Function, Instruction, LiteralValue, Value, fresh_name
from telc import ast
from telc.lower.context import Context, Scope
from telc.lower.tensor_ops import TensorOps
from telc.lower.values import POISON, TV, Elaborated


class ImportedLowerer:
    """Lowers `ast.Imported` nodes."""

    def __init__(self, cx: Context, ops: TensorOps) -> None:
        self.cx = cx
        self.ops = ops

    def lower(self, e: ast.Imported, scope: Scope) -> Elaborated:
        if isinstance(e.value, np.ndarray):
            return self.initial_value(e, e.value, scope)
        return self.graph_call(e, scope)

    def initial_value(self, e: ast.Imported, array: np.ndarray, scope: Scope) -> Elaborated:
        declared = scope.values.get("<declared shape>")
        ty = declared.ty if isinstance(declared, TV) else None
        if not isinstance(ty, TensorType):
            return self.cx.error(e.span, f"internal error: no declared type for {e.what}")
        value = self.cx.emit("literal", [tensor_literal(array, ty)], e.span)
        return TV(ty, value)

    def graph_call(self, e: ast.Imported, scope: Scope) -> Elaborated:
        from telc.onnx_use import OnnxGraph

        graph = e.value
        assert isinstance(graph, OnnxGraph)
        cx = self.cx
        args = [scope.values.get(i.name) for i in graph.inputs]
        if not all(isinstance(a, TV) and isinstance(a.ty, TensorType) for a in args):
            return POISON  # an argument that failed, already reported
        tvs = [a for a in args if isinstance(a, TV)]
        missing = [n for n in graph.params if n not in scope.params]
        if missing:
            return cx.missing_parameter(e.span, graph.name, missing[0], scope)
        try:
            imported = graph.function([a.shape for a in tvs], scope.training)
        except DiagnosticError as err:
            notes = tuple(Diagnostic(d.message, None, "note", d.notes) for d in err.diagnostics)
            cx.diags.append(
                Diagnostic(f"cannot import {e.what} for these shapes", e.span.loc, notes=notes)
            )
            return POISON
        operands = [a.ir() for a in tvs] + [scope.params[n].ir() for n in graph.params]
        results = self.inline(imported.function, operands)
        n = len(imported.outputs)
        for k, onnx_name in enumerate(imported.updates):
            buffer = graph.params[graph.onnx_params.index(onnx_name)]
            if buffer in cx.graph_updates:
                return cx.error(
                    e.span,
                    f"{e.what} is called more than once in training; each call would update "
                    f"buffer '{buffer}'",
                )
            cx.graph_updates[buffer] = TV(results[n + k].type, results[n + k])
        if n == 1:
            return TV(results[0].type, results[0])
        return self.ops.make_tuple([TV(v.type, v) for v in results[:n]], e.span)

    def inline(self, fn: Function, operands: list[Value]) -> list[Value]:
        """Copies of the instructions of fn (one block, as the importer makes it) at the
        insertion point, reading `operands` for its arguments; the values it returns. Copied
        rather than applied, so that the optimisations see across the call and a graph that
        draws random numbers (Dropout in training) is differentiated with the very draws it
        computed its value with."""
        entry = fn.entry
        assert entry is not None and len(fn.blocks) == 1
        *body, ret = entry.instructions
        vmap = ValueMap(zip(entry.arguments, operands))
        b = self.cx.b
        assert b.block is not None
        taken = self.cx.fn.taken if self.cx.fn is not None else set()
        for copy in clone_instructions(body, vmap):
            if copy.name is not None:  # the graph's tensor names, unique in the caller too
                copy.name = fresh_name(copy.name, taken)
            if b.index is None:
                b.block.append(copy)
            else:
                b.block.insert(b.index, copy)
                b.index += 1
        returned = vmap(ret.operands[0])
        if isinstance(returned, Instruction) and returned.opcode == "literal":
            returned = returned.operands[0]  # the tuple, made by a `literal` (DCE drops it)
        assert isinstance(returned, LiteralValue)
        return list(returned.literal.elements())
