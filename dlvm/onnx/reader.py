"""Reading an ONNX model (docs/onnx.md, "Reading a model"): the `onnx` package imported when
first needed, the model read from a path, bytes or a ModelProto and checked, its inputs' shapes
fixed, and its shapes inferred. Every failure is a DiagnosticError naming the model, never a
traceback."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from dlvm.diagnostics import Diagnostic, DiagnosticError
from dlvm.onnx.dtypes import ir_type_of, onnx_type_name

INSTALL_HELP = "pip install 'telc[onnx]'"


def help_line(text: str) -> Diagnostic:
    """A `help:` line under a diagnostic, saying how to fix it."""
    return Diagnostic(f"  help: {text}", None, "detail")


def error(message: str, fix: str | None = None) -> Diagnostic:
    return Diagnostic(message, None, notes=(help_line(fix),) if fix else ())


def require_onnx() -> ModuleType:
    """The `onnx` package, an optional extra of telc: a DiagnosticError saying how to install
    it where it is missing."""
    try:
        import onnx
    except ImportError:
        raise DiagnosticError(
            [error("the ONNX importer needs the onnx package", INSTALL_HELP)]
        ) from None
    return onnx


def label_of(source: Any) -> str:
    """How messages name the model: its path, or `<onnx model>` for bytes and ModelProtos."""
    return str(source) if isinstance(source, (str, Path)) else "<onnx model>"


def load(onnx: ModuleType, source: Any, label: str) -> Any:
    """The ModelProto of a path, bytes or ModelProto, checked by onnx.checker."""
    if isinstance(source, (str, Path)):
        path = os.fspath(source)
        why = _unreadable(path)
        if why is not None:
            raise DiagnosticError([error(f"{label}: {why}")])
        try:
            model = onnx.load(path)
        except Exception as e:  # protobuf's and onnx's own errors, whatever their class
            raise DiagnosticError([_not_a_model(label, e)]) from None
    elif isinstance(source, (bytes, bytearray, memoryview)):
        try:
            model = onnx.load_model_from_string(bytes(source))
        except Exception as e:
            raise DiagnosticError([_not_a_model(label, e)]) from None
    elif isinstance(source, onnx.ModelProto):
        model = onnx.ModelProto()
        model.CopyFrom(source)  # the caller's model is never changed
    else:
        raise TypeError(f"import_model takes a path, bytes or an onnx.ModelProto, not {source!r}")
    if not model.HasField("graph"):
        raise DiagnosticError([error(f"{label}: not an ONNX model (it has no graph)")])
    try:
        onnx.checker.check_model(model)
    except Exception as e:
        raise DiagnosticError([error(f"{label}: invalid ONNX model: {_first_line(e)}")]) from None
    return model


def _unreadable(path: str) -> str | None:
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return "no such file"
    except OSError as e:
        return e.strerror or str(e)
    if stat.S_ISDIR(info.st_mode):
        return "is a directory"
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file"
    return None


def _not_a_model(label: str, e: Exception) -> Diagnostic:
    return error(f"{label}: not an ONNX model (cannot parse it: {_first_line(e)})")


def _first_line(e: Exception) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0]


@dataclass(frozen=True)
class GraphInput:
    """A graph input that is not an initializer, with its fixed shape."""

    name: str
    elem_type: int
    shape: tuple[int, ...]


def fix_input_shapes(
    model: Any, shapes: dict[str, tuple[int, ...]], label: str
) -> list[GraphInput]:
    """Sets the dims of each input (not an initializer) from `shapes`, or keeps the model's; a
    dynamic dim without a given shape, a shape that contradicts the model's, a name that is not
    an input, or an element type the IR lacks is an error (all of them reported together)."""
    graph = model.graph
    initialized = {t.name for t in graph.initializer}
    inputs = [v for v in graph.input if v.name not in initialized]
    diags: list[Diagnostic] = []
    known = {v.name for v in inputs}
    for name in shapes:
        if name not in known:
            listed = ", ".join(f"'{n}'" for n in sorted(known)) or "none"
            diags.append(error(f"{label}: the model has no input '{name}' (its inputs: {listed})"))
    fixed: list[GraphInput] = []
    for v in inputs:
        tensor = v.type.tensor_type if v.type.HasField("tensor_type") else None
        if tensor is None:
            diags.append(error(f"{label}: input '{v.name}' is not a tensor"))
            continue
        if ir_type_of(tensor.elem_type) is None:
            diags.append(
                error(
                    f"{label}: input '{v.name}' has element type "
                    f"{onnx_type_name(tensor.elem_type)}, which DLVM IR does not have"
                )
            )
        dims = [_dim_text(d) for d in tensor.shape.dim] if tensor.HasField("shape") else None
        given = shapes.get(v.name)
        if given is not None:
            given = tuple(int(n) for n in given)
            problem = _contradiction(dims, given)
            if problem is not None or any(n <= 0 for n in given):
                why = problem or "every dimension must be positive"
                diags.append(
                    error(f"{label}: the shape {_shape_text(given)} for input '{v.name}': {why}")
                )
                continue
            shape = given
        elif dims is None or any(not d.isdigit() for d in dims):
            shown = "of unknown rank" if dims is None else "[" + ", ".join(dims) + "]"
            example = (
                "1x3x224x224"
                if dims is None
                else "x".join(d if d.isdigit() else "1" for d in dims) or "1"
            )
            diags.append(
                error(
                    f"{label}: input '{v.name}' has dynamic dimensions {shown}: give its shape",
                    f"--shape {v.name}={example}",
                )
            )
            continue
        else:
            shape = tuple(int(d) for d in dims)
            if any(n <= 0 for n in shape):
                diags.append(
                    error(f"{label}: input '{v.name}' has an empty dimension {_shape_text(shape)}")
                )
                continue
        del tensor.shape.dim[:]
        for n in shape:
            tensor.shape.dim.add().dim_value = n
        fixed.append(GraphInput(v.name, tensor.elem_type, shape))
    if diags:
        raise DiagnosticError(diags)
    return fixed


def _dim_text(d: Any) -> str:
    if d.HasField("dim_value") and d.dim_value > 0:
        return str(d.dim_value)
    if d.HasField("dim_param") and d.dim_param:
        return d.dim_param
    return "?"


def _contradiction(dims: list[str] | None, given: tuple[int, ...]) -> str | None:
    if dims is None:
        return None
    if len(dims) != len(given):
        return f"the model's input has rank {len(dims)} ([{', '.join(dims)}])"
    for i, (d, n) in enumerate(zip(dims, given)):
        if d.isdigit() and int(d) != n:
            return f"dimension {i} is {d} in the model"
    return None


def _shape_text(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape)) if shape else "scalar"


def infer_shapes(onnx: ModuleType, model: Any, label: str) -> tuple[Any, str | None]:
    """The model with its shapes inferred (strictly, with data propagation, so that shapes
    computed by Shape, Gather and Concat are known), and the strict inference's complaint when
    only the lenient one succeeded (an operator without a schema, such as one of another domain,
    stops strict inference; the importer reports such nodes itself)."""
    try:
        return onnx.shape_inference.infer_shapes(
            model, check_type=True, strict_mode=True, data_prop=True
        ), None
    except Exception as strict:
        complaint = _first_line(strict)
    try:
        return onnx.shape_inference.infer_shapes(model, data_prop=True), complaint
    except Exception as e:
        raise DiagnosticError(
            [error(f"{label}: shape inference failed: {_first_line(e)}")]
        ) from None


def static_shape(value_info: Any) -> tuple[int, ...] | None:
    """The static shape of a ValueInfoProto's tensor type, None where a dim or the rank is
    unknown."""
    if not value_info.type.HasField("tensor_type"):
        return None
    tensor = value_info.type.tensor_type
    if not tensor.HasField("shape"):
        return None
    dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim)
    return None if any(n < 0 for n in dims) else dims
