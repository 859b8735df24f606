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
from dataclasses import dataclass, field
from typing import Any

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
    _made: dict[tuple[object, ...], object] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

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
            made = import_model(self.data, given, self.name, training, os.path.basename(self.path))
            self._made[key] = made
        return made


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


def read_graph(path: str, data: bytes) -> tuple[OnnxGraph, Any]:
    """The graph of the ONNX file `path` (its bytes `data`) and its first import (a
    dlvm.onnx.Imported, with the dynamic dimensions at 1); DiagnosticError from the importer."""
    from dlvm.onnx import declared_inputs, import_model

    file = os.path.basename(path)
    stem = re.sub(r"\.onnx$", "", file)
    declared = declared_inputs(data, file)
    shapes = {n: tuple(d if isinstance(d, int) else 1 for d in dims) for n, dims, _ in declared}
    first = import_model(data, shapes, stem, False, file)
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
    )
    return graph, first


def load_graph(
    path: str, data: bytes, item: ast.UseDecl
) -> tuple[OnnxGraph, ast.Function, list[ast.Declaration]]:
    """The graph that `item` uses, its def and its parameters' declarations, all located at
    the `use`; DiagnosticError, located there too, when it cannot be imported."""
    try:
        graph, first = read_graph(path, data)
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
    """What `telc build model.onnx` adds to the graph: input shapes (`--shape`) and a train
    entry."""

    shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    training: Training | None = None


def model_source(path: str, data: bytes, options: OnnxOptions) -> str:
    """The TEL model that `telc build model.onnx` compiles (`--emit tel` prints it): the graph
    used, its inputs declared (their dynamic dimensions as dims set to 1, which `-D` changes,
    or the shapes given), its outputs as the model's outputs and, with `training`, the labels,
    the loss and the train entry. DiagnosticError when the graph cannot be imported or an
    input named in `shapes` is not one of its inputs."""
    graph, first = read_graph(path, data)
    file = os.path.basename(path)
    shapes = dict(options.shapes)
    training = options.training
    unknown = [n for n in shapes if n not in {i.onnx for i in graph.inputs}]
    if unknown:
        names = ", ".join(i.onnx for i in graph.inputs)
        raise DiagnosticError(
            [
                Diagnostic(
                    f"--shape {unknown[0]}: {file} has no input of that name; its inputs: {names}"
                )
            ]  # fmt: skip
        )
    dim_names = {d for i in graph.inputs for d in i.dims if isinstance(d, str)}
    taken = {graph.name, *graph.params, *dim_names}
    lines = [
        f"// {file} as a TEL model (`telc build {file} --emit tel` prints this).",
        f"module {graph.name}",
        f"use ./{file}",
    ]
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
