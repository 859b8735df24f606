"""What an imported ONNX graph puts in a model (telc/onnx_use.py) as IR: a parameter's initial
value as a literal, and the graph's def as an `apply` of the graph's own IR function."""

from __future__ import annotations

import numpy as np

from dlvm.diagnostics import Diagnostic, DiagnosticError
from dlvm.ir.builder import tensor_literal
from dlvm.ir.types import TensorType, TupleType
from dlvm.ir.values import ElementKey, Function, fresh_name
from telc import ast
from telc.lower.context import Context, Scope
from telc.lower.tensor_ops import TensorOps
from telc.lower.values import POISON, TV, Elaborated


class ImportedLowerer:
    """Lowers `ast.Imported` nodes; remembers which IR function of each graph binding it has
    put in the module."""

    def __init__(self, cx: Context, ops: TensorOps) -> None:
        self.cx = cx
        self.ops = ops
        self.functions: dict[int, Function] = {}  # id of an import -> its function here

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
        fn = self.functions.get(id(imported))
        if fn is None:
            fn = imported.function
            taken = {f.name for f in cx.module.functions} | cx.reserved
            fn.name = fresh_name(graph.name + "_graph", taken)
            imported.module.functions.remove(fn)
            cx.module.add_function(fn)
            self.functions[id(imported)] = fn
        operands = [a.ir() for a in tvs] + [scope.params[n].ir() for n in graph.params]
        value = cx.emit("apply", [fn, *operands], e.span)
        ty = value.type
        assert isinstance(ty, TupleType)
        n = len(imported.outputs)
        for k, onnx_name in enumerate(imported.updates):
            buffer = graph.params[graph.onnx_params.index(onnx_name)]
            if buffer in cx.graph_updates:
                return cx.error(
                    e.span,
                    f"{e.what} is called more than once in training; each call would update "
                    f"buffer '{buffer}'",
                )
            new = cx.emit("extract", [value], e.span, keys=(ElementKey(index=n + k),))
            cx.graph_updates[buffer] = TV(new.type, new)
        if n == 1:
            one = cx.emit("extract", [value], e.span, keys=(ElementKey(index=0),))
            return TV(ty.elements[0], one)
        if n == len(ty.elements):
            return TV(ty, value)
        parts = [cx.emit("extract", [value], e.span, keys=(ElementKey(index=k),)) for k in range(n)]
        return self.ops.make_tuple([TV(v.type, v) for v in parts], e.span)
