"""Fixed inputs (docs/onnx.md, "Fixed inputs"): graph inputs whose values the caller gives at
import (`import_model(…, values=…)`, `telc build --value`), as TensorRT's shape tensors or ONNX
Runtime's free dimension overrides are given at build time. Each becomes a constant of the
graph, so that folding and the handlers see it (a Reshape target, reduction axes, Pad's pads
that the model takes as inputs), and is no longer an argument of the function."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dlvm.diagnostics import Diagnostic, DiagnosticError
from dlvm.onnx.dtypes import NUMPY_TYPES, ir_type_of, onnx_type_name
from dlvm.onnx.reader import error


@dataclass
class ValuesNeeded(DiagnosticError):
    """An import that failed where, among its reasons, nodes need the values of graph inputs at
    import: `names` are those inputs, in the order first needed. Importing again with them
    fixed (`values=`) removes those reasons (others may remain)."""

    names: list[str] = field(default_factory=list)


def fix_values(model: Any, values: Mapping[str, Any], label: str) -> dict[str, np.ndarray]:
    """Makes each value an initializer of `model` in place of the graph input it names, and
    returns them as arrays of the inputs' element types. A name that is not a graph input, an
    element type or shape other than the input's, or an empty value is an error (all of them
    reported together)."""
    from onnx import numpy_helper

    graph = model.graph
    initialized = {t.name for t in graph.initializer}
    inputs = {v.name: v for v in graph.input if v.name not in initialized}
    diags: list[Diagnostic] = []
    fixed: dict[str, np.ndarray] = {}
    for name, value in values.items():
        declared = inputs.get(name)
        if declared is None:
            listed = ", ".join(f"'{n}'" for n in inputs) or "none"
            diags.append(
                error(f"{label}: the model has no input '{name}' to fix (its inputs: {listed})")
            )
            continue
        array = _checked(declared, value, label, diags)
        if array is not None:
            fixed[name] = array
    if diags:
        raise DiagnosticError(diags)
    kept = [v for v in graph.input if v.name not in fixed]
    del graph.input[:]
    graph.input.extend(kept)
    graph.initializer.extend(numpy_helper.from_array(a, n) for n, a in fixed.items())
    return fixed


def declared_dtype(elem_type: int) -> np.dtype | None:
    """The NumPy type of an input's ONNX element type, None where DLVM IR lacks it."""
    ir = ir_type_of(elem_type)
    return None if ir is None else np.dtype(NUMPY_TYPES[ir])


def _checked(declared: Any, value: Any, label: str, diags: list[Diagnostic]) -> np.ndarray | None:
    """The value as an array of the input's element type and a shape its declared one allows;
    None, with a diagnostic, where it is not one."""
    name = declared.name
    what = f"{label}: the value fixed for input '{name}'"
    tensor = declared.type.tensor_type if declared.type.HasField("tensor_type") else None
    dtype = declared_dtype(tensor.elem_type) if tensor is not None else None
    if tensor is None or dtype is None:
        kind = "not a tensor" if tensor is None else onnx_type_name(tensor.elem_type)
        diags.append(error(f"{what}: the input is {kind}, which DLVM IR does not have"))
        return None
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        if array.dtype != dtype:
            diags.append(
                error(
                    f"{what}: it is {array.dtype}, the input is {dtype}",
                    f"give it as an array of {dtype} (`.astype(np.{dtype})`)",
                )
            )
            return None
    else:  # Python numbers: exactly the input's element type
        try:
            given = np.asarray(value)
            array = given.astype(dtype)
        except (TypeError, ValueError) as e:
            diags.append(error(f"{what}: not an array of numbers ({e})"))
            return None
        if given.dtype.kind not in "biuf" or not _same(given, array):
            diags.append(error(f"{what}: {value!r} is not exactly of the input's type, {dtype}"))
            return None
    if array.size == 0:
        diags.append(
            error(f"{what}: it is empty ({list(array.shape)}); DLVM IR has no empty tensors")
        )
        return None
    problem = _shape_problem(tensor, array.shape)
    if problem is not None:
        diags.append(error(f"{what}: its shape {list(array.shape)} {problem}"))
        return None
    return np.array(array, order="C")  # a copy; ascontiguousarray would make a scalar 1-D


def _same(given: np.ndarray, converted: np.ndarray) -> bool:
    with np.errstate(invalid="ignore", over="ignore"):
        back = converted.astype(given.dtype)
    return bool(np.array_equal(back, given, equal_nan=given.dtype.kind == "f"))


def _shape_problem(tensor: Any, shape: tuple[int, ...]) -> str | None:
    if not tensor.HasField("shape"):
        return None
    dims = [
        d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
        for d in tensor.shape.dim
    ]
    shown = "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
    if len(dims) != len(shape) or any(d is not None and d != n for d, n in zip(dims, shape)):
        return f"is not the input's {shown}"
    return None
