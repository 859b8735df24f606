"""`use ./model.onnx`: an ONNX graph as a def of the model whose file uses it, and the graph's
initializers as that model's parameters and buffers (docs/onnx.md).

The graph is imported (dlvm.onnx) once as the program is loaded, with its dynamic dimensions
at 1, to learn its parameters, which do not depend on them; its def takes the graph's inputs
with those dimensions as dimension variables, and each binding of them (and training, for a
graph with batch normalisation or dropout) imports it again with those shapes."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dlvm.diagnostics import Diagnostic, DiagnosticError
from dlvm.ir.types import TensorType
from telc import ast

# The largest ONNX file read: protobuf's own limit on one message.
MAX_ONNX_BYTES = 2 * 1024 * 1024 * 1024 - 1

# The grammar's keywords (a name the user could not write) and the flag every model has.
_RESERVED = frozenset(
    (
        *("and", "as", "const", "def", "dim", "else", "export", "false", "for", "if", "in"),
        *("init", "let", "minimizing", "module", "not", "or", "recurrent", "return", "then"),
        *("train", "true", "type", "use", "using", "var", "training"),
    )
)


@dataclass(frozen=True)
class GraphInput:
    """One of the graph's inputs: its ONNX name, its TEL name (the def's parameter) and its
    declared shape, a dynamic dimension being a name (the def's dimension variable)."""

    onnx: str
    name: str
    dims: tuple[int | str, ...]
    dtype: str


@dataclass
class OnnxGraph:
    """An imported graph and what the model that uses it sees of it."""

    path: str
    data: bytes
    name: str  # the def's name: the file's stem as a TEL name
    inputs: list[GraphInput]
    params: list[str]  # the TEL names of its parameters, in the IR function's argument order
    onnx_params: list[str]  # the same, as the graph names them
    outputs: list[str]  # the graph's outputs, as it names them
    trains_differently: bool  # batch normalisation or dropout: another function in training
    # The graph inputs fixed at build time (`--value`), which `inputs` does not list.
    fixed: dict[str, np.ndarray] = field(default_factory=dict)
    _made: dict[tuple[object, ...], object] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def key_text(self) -> str:
        """What the build's key holds of the graph: its digest and each fixed input's value."""
        lines = [f"onnx sha256 {self.digest}"]
        for n, v in sorted(self.fixed.items()):
            value = hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()
            lines.append(f"value {n!r} {v.dtype}{list(v.shape)} sha256 {value}")
        return "\n".join(lines) + "\n"

    def function(self, shapes: list[tuple[int, ...]], training: bool):  # -> dlvm.onnx.Imported
        """The graph imported for inputs of these shapes (DiagnosticError if it cannot be),
        once per binding: its IR function is never changed, each call copying it
        (telc/lower/imported.py)."""
        from dlvm.onnx import import_model

        training = training and self.trains_differently
        key = (tuple(shapes), training)
        made = self._made.get(key)
        if made is None:
            given = {i.onnx: s for i, s in zip(self.inputs, shapes)}
            made = import_model(
                self.data, given, self.name, training, os.path.basename(self.path), self.fixed
            )
            self._made[key] = made
        return made


def _unknown_shapes(file: str, graph: OnnxGraph, shapes: dict[str, Any]) -> list[Diagnostic]:
    """A diagnostic for each `--shape` that names no input of the graph, or one `--value`
    fixes."""
    found = []
    for n in shapes:
        if n in graph.fixed:
            found.append(Diagnostic(f"--shape {n}: --value fixes input '{n}', and so its shape"))
        elif n not in {i.onnx for i in graph.inputs}:
            listed = ", ".join(i.onnx for i in graph.inputs) or "none"
            found.append(
                Diagnostic(f"--shape {n}: {file} has no input of that name; its inputs: {listed}")
            )
    return found


def _value_text(value: np.ndarray) -> str:
    """A fixed input's value as the TEL wrapper's comment shows it: its numbers, cut short."""
    items = value.ravel().tolist()
    shown = ", ".join(str(x).lower() if isinstance(x, bool) else str(x) for x in items[:8])
    shape = " x ".join(map(str, value.shape))
    return f"{value.dtype}[{shape}] {{{shown}{', …' if len(items) > 8 else ''}}}"


def tel_name(raw: str, taken: set[str]) -> str:
    """A TEL name for an ONNX one, the same every time: characters other than letters, digits
    and `_` become `_` (`conv1.weight` is `conv1_weight`, as docs/pytorch.md maps a state
    dict), a leading digit or a keyword gets a `_` in front, and a name already taken gets
    `_2`, `_3`… The name is added to taken."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", raw) or "_"
    if name[0].isdigit() or name in _RESERVED:
        name = "_" + name
    base, i = name, 2
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    taken.add(name)
    return name


def read_graph(
    path: str, data: bytes, values: Mapping[str, str] | None = None, strict: bool = False
) -> tuple[OnnxGraph, Any]:
    """The graph of the ONNX file `path` (its bytes `data`) and its first import (a
    dlvm.onnx.Imported, with the dynamic dimensions at 1); `values` gives the text of
    `--value NAME=TEXT` options, of which those naming the graph's inputs fix them (`strict`:
    a name that is none of them is an error; else the caller checks). DiagnosticError from the
    importer or a value."""
    from dlvm.onnx import declared_inputs, import_model
    from telc.onnx_values import parse_value

    file = os.path.basename(path)
    stem = re.sub(r"\.onnx$", "", file)
    every = declared_inputs(data, file)
    fixed: dict[str, np.ndarray] = {}
    problems: list[Diagnostic] = []
    for n, dims, dtype in every:
        if values and n in values:
            try:
                fixed[n] = parse_value(n, values[n], dims, dtype)
            except DiagnosticError as e:
                problems += e.diagnostics
    if strict:
        listed = ", ".join(n for n, _, _ in every) or "none"
        problems += [
            Diagnostic(f"--value {n}: {file} has no input of that name; its inputs: {listed}")
            for n in values or {}
            if n not in {d[0] for d in every}
        ]
    if problems:
        raise DiagnosticError(problems)
    declared = [d for d in every if d[0] not in fixed]
    shapes = {n: tuple(d if isinstance(d, int) else 1 for d in dims) for n, dims, _ in declared}
    first = import_model(data, shapes, stem, False, file, fixed)
    taken: set[str] = set()
    name = tel_name(stem, taken)
    dim_names: dict[str, str] = {}
    inputs = []
    for onnx_name, dims, dtype in declared:
        tel_dims: list[int | str] = []
        for k, d in enumerate(dims):
            if isinstance(d, int):
                tel_dims.append(d)
                continue
            key = d or f"{onnx_name}:{k}"  # an unnamed dynamic dimension is its own
            if key not in dim_names:
                dim_names[key] = tel_name(d or f"{onnx_name}_dim{k}", taken)
            tel_dims.append(dim_names[key])
        inputs.append(GraphInput(onnx_name, tel_name(onnx_name, taken), tuple(tel_dims), dtype))
    params_taken: set[str] = set()
    params = [tel_name(p.name, params_taken) for p in first.params]
    graph = OnnxGraph(
        path,
        data,
        name,
        inputs,
        params,
        [p.name for p in first.params],
        [o for o, _ in first.outputs],
        first.trains_differently,
        fixed,
    )
    return graph, first


def load_graph(
    path: str, data: bytes, item: ast.UseDecl, values: Mapping[str, str] | None = None
) -> tuple[OnnxGraph, ast.Function, list[ast.Declaration]]:
    """The graph that `item` uses, with the inputs `values` names fixed (read_graph), its def
    and its parameters' declarations, all located at the `use`; DiagnosticError, located there
    too, when it cannot be imported."""
    try:
        graph, first = read_graph(path, data, values)
    except DiagnosticError as e:
        raise DiagnosticError([_at_use(item, e.diagnostics)]) from None
    span = item.span
    decls = []
    for name, p in zip(graph.params, first.params):
        role = "buffer" if p.kind == "buffer" else "param"
        value = ast.Imported(span, f"{p.name} of {item.target}", p.value)
        decls.append(
            ast.Declaration(span, name, role, _written(span, p.type), None, value, span, span)
        )
    reads = tuple(ast.Name(span, n) for n in graph.params)
    if graph.trains_differently:
        reads += (ast.Name(span, "training"),)
    body = ast.Imported(span, f"the graph of {item.target}", graph, reads)
    parameters = tuple(
        ast.Parameter(span, i.name, _written(span, i.dims, i.dtype), None) for i in graph.inputs
    )
    fn = ast.Function(span, graph.name, parameters, None, body, False, span)
    return graph, fn, decls


def _written(span: ast.Span, shape_or_type, dtype: str | None = None) -> ast.TensorType:
    """The written type `dtype[d x d …]` of a TensorType, or of dims and a dtype name."""
    if isinstance(shape_or_type, TensorType):
        dims: tuple[int | str, ...] = shape_or_type.shape
        dtype = shape_or_type.dtype.text
    else:
        dims = shape_or_type
    shape = ast.Shape(span, tuple(ast.Dim(span, d) for d in dims))
    return ast.TensorType(span, dtype, shape)


def _at_use(item: ast.UseDecl, found: list[Diagnostic]) -> Diagnostic:
    """The importer's diagnostics as notes of one error at the `use` (they name the node, not
    a place in a text)."""
    notes = tuple(Diagnostic(d.message, None, "note", d.notes) for d in found)
    return Diagnostic(f"cannot import '{item.target}'", item.target_span.loc, notes=notes)


@dataclass(frozen=True)
class Training:
    """`telc build model.onnx --train-loss LOSS --labels NAME:SHAPE[:DTYPE] --optimizer OPT`:
    the train entry added to an imported graph. LOSS is a def of `nn` taking the graph's first
    output and the labels; OPT an optimiser of `optim` with its arguments (`adam(rate: 1e-3)`)."""

    loss: str
    labels: str
    labels_shape: tuple[int, ...]
    labels_dtype: str | None = None
    optimizer: str = "adam()"


@dataclass(frozen=True)
class OnnxOptions:
    """What `telc build model.onnx` adds to the graph: input shapes (`--shape`), a train entry,
    and the text of inputs fixed at build time (`--value NAME=TEXT`, which a TEL model's
    `use ./model.onnx` takes too)."""

    shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    training: Training | None = None
    values: tuple[tuple[str, str], ...] = ()


def model_source(path: str, data: bytes, options: OnnxOptions) -> str:
    """The TEL model that `telc build model.onnx` compiles (`--emit tel` prints it): the graph
    used, its inputs declared (their dynamic dimensions as dims set to 1, which `-D` changes,
    or the shapes given), its outputs as the model's outputs and, with `training`, the labels,
    the loss and the train entry; the inputs `values` fixes are not inputs of the model.
    DiagnosticError when the graph cannot be imported, a value does not fit its input, or an
    input named in `shapes` or `values` is not one of the graph's."""
    values = dict(options.values)
    graph, first = read_graph(path, data, values, strict=True)
    file = os.path.basename(path)
    shapes = dict(options.shapes)
    training = options.training
    unknown = _unknown_shapes(file, graph, shapes)
    if unknown:
        raise DiagnosticError(unknown)
    dim_names = {d for i in graph.inputs for d in i.dims if isinstance(d, str)}
    taken = {graph.name, *graph.params, *dim_names}
    lines = [
        f"// {file} as a TEL model (`telc build {file} --emit tel` prints this).",
        f"module {graph.name}",
        f"use ./{file}",
    ]
    if graph.fixed:
        fixed = ", ".join(f"{n} = {_value_text(v)}" for n, v in graph.fixed.items())
        lines.insert(1, f"// Inputs fixed at build time (--value): {fixed}.")
    if training is not None:
        lines += ["use nn", "use optim"]
    dims: list[str] = []
    for i in graph.inputs:
        if i.onnx not in shapes:
            dims += [d for d in i.dims if isinstance(d, str) and d not in dims]
    lines += [f"dim {d} = 1  // a dynamic dimension of the graph: -D {d}=… sets it" for d in dims]
    args = []
    for i in graph.inputs:
        name = tel_name(i.onnx, taken)
        args.append(name)
        dims_of = shapes.get(i.onnx, i.dims)
        lines.append(f"{name}: in {i.dtype}[{' x '.join(map(str, dims_of))}]")
    call = f"{graph.name}({', '.join(args)})"
    outputs = [tel_name(o, taken) for o in graph.outputs]
    if len(outputs) == 1:
        lines.append(f"{outputs[0]}: out = {call}")
    else:
        every = tel_name(f"{graph.name}_outputs", taken)
        lines.append(f"{every}: hidden = {call}")
        lines += [f"{o}: out = {every}[{k}]" for k, o in enumerate(outputs)]
    if training is not None:
        labels = tel_name(training.labels, taken)
        dtype = training.labels_dtype or ""
        shape = " x ".join(map(str, training.labels_shape))
        loss = tel_name("loss", taken)
        # The loss has the element type of the output it is computed from (f64 for a graph
        # exported in float64), written where it is not TEL's default, f32.
        loss_type = first.outputs[0][1].dtype.text
        loss_type = "" if loss_type == "f32" else f" {loss_type}"
        lines += [
            f"{labels}: in {dtype}[{shape}]" if dtype else f"{labels}: in[{shape}]",
            f"{loss}: out{loss_type}[] = {training.loss}({outputs[0]}, {labels})",
            f"train minimizing {loss} using {training.optimizer}",
        ]
    return "\n".join(lines) + "\n"
