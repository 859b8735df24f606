"""A TEL program: the root file and every module it uses (`use nn`, `use ./layers`), each with
its top-level names; `-D NAME=VALUE` overrides; unknown and ambiguous names with suggestions."""

from __future__ import annotations

import difflib
import functools
import os
import re
from dataclasses import dataclass, field

from dlvm.diagnostics import Diagnostic, DiagnosticError, Location, Source
from dlvm.ir.types import DataType
from dlvm.sources import Unreadable, read_bytes, read_source
from telc import ast
from telc.limits import MAX_USE_DEPTH, deep_stack, help_line
from telc.onnx_use import MAX_ONNX_BYTES, load_graph
from telc.syntax import parse
from telc.types import DTYPES

STDLIB = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "stdlib")


@dataclass(eq=False)
class Unit:
    """One `.tel` file and its top-level names."""

    path: str
    source: Source
    tree: ast.Module
    name: str
    dtype: DataType = DataType.F32
    uses: list[Unit] = field(default_factory=list)
    dims: dict[str, ast.DimDecl] = field(default_factory=dict)
    consts: dict[str, ast.ConstDecl] = field(default_factory=dict)
    functions: dict[str, ast.Function] = field(default_factory=dict)
    declarations: dict[str, ast.Declaration] = field(default_factory=dict)
    recurrent_of: dict[str, ast.Recurrent] = field(default_factory=dict)  # decl -> its block
    trains: list[ast.Train] = field(default_factory=list)
    updates: list[ast.Update] = field(default_factory=list)

    def own(self, name: str) -> object | None:
        """What `name` means at the top level of this file, before imports."""
        for table in (self.declarations, self.functions, self.dims, self.consts):
            if name in table:
                return table[name]  # type: ignore[no-any-return]
        return None


@dataclass
class Program:
    root: Unit
    units: list[Unit]  # the root first, then imports in the order they were first used
    defines: dict[str, int | float]


@deep_stack
def load(
    path: str,
    text: str,
    defines: dict[str, int | float] | None = None,
    values: dict[str, str] | None = None,
) -> Program:
    """Parses the root file and everything it uses; DiagnosticError with every problem. A
    module is loaded inside the `use` that names it, up to MAX_USE_DEPTH deep, on a deep stack
    (telc.limits). `values` (`--value NAME=TEXT`) fixes inputs of the ONNX models it uses."""
    loader = _Loader(values or {})
    root = loader.unit(path, text, None)
    if loader.diags:
        raise DiagnosticError(loader.diags)
    assert root is not None
    known = [n for u in loader.order for n in [*u.dims, *u.consts]]
    unknown = [
        Diagnostic(f"-D {name}: there is no dim or const named '{name}'{suggest(name, known)}")
        for name in defines or {}
        if name not in known
    ]
    unknown += [
        Diagnostic(
            f"--value {name}: no ONNX model the program uses has an input of that name"
            + (f" (their inputs: {', '.join(loader.onnx_inputs)})" if loader.onnx_inputs else "")
        )
        for name in values or {}
        if name not in loader.onnx_inputs
    ]
    if unknown:
        raise DiagnosticError(unknown)
    return Program(root, loader.order, dict(defines or {}))


class _Loader:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values  # --value: the inputs of ONNX models fixed at build time
        self.onnx_inputs: list[str] = []  # those of every ONNX model used, fixed or not
        self.diags: list[Diagnostic] = []
        self.by_path: dict[str, Unit] = {}
        self.loading: list[str] = []
        self.order: list[Unit] = []

    def error(self, message: str, span: ast.Span | None) -> None:
        self.diags.append(Diagnostic(message, span.loc if span else None))

    def unit(self, path: str, text: str, used_at: ast.UseDecl | None) -> Unit | None:
        key = os.path.abspath(path)
        if key in self.loading:
            cycle = " -> ".join(os.path.basename(p) for p in self.loading + [key])
            self.error(
                f"modules use each other in a cycle: {cycle}", used_at.span if used_at else None
            )
            return None
        if key in self.by_path:
            return self.by_path[key]
        if len(self.loading) >= MAX_USE_DEPTH:
            assert used_at is not None
            chain = " -> ".join(os.path.basename(p) for p in self.loading[:3])
            fix = "make the chain shorter: a module can `use` several side by side"
            self.diags.append(
                Diagnostic(
                    f"modules use each other more than {MAX_USE_DEPTH} deep ({chain} -> …)",
                    used_at.span.loc,
                    notes=(help_line(fix),),
                )
            )
            return None
        source = Source(path, text)
        try:
            tree = parse(source)
        except DiagnosticError as e:
            self.diags.extend(e.diagnostics)
            return None
        name = os.path.splitext(os.path.basename(path))[0]
        unit = Unit(path, source, tree, name)
        self.by_path[key] = unit
        self.order.append(unit)
        self.loading.append(key)
        self.collect(unit, is_root=used_at is None)
        self.loading.pop()
        return unit

    def collect(self, unit: Unit, is_root: bool) -> None:
        seen: dict[str, ast.Span] = {}
        seen_decl = False

        def define(name: str, span: ast.Span) -> bool:
            if name in seen:
                line = seen[name].loc.line_col[0]
                self.error(f"'{name}' is already defined on line {line}", span)
                return False
            seen[name] = span
            return True

        for item in unit.tree.items:
            if isinstance(item, ast.ModuleDecl):
                unit.name = item.name
            elif isinstance(item, ast.TypeDecl):
                dtype = DTYPES.get(item.dtype)
                if dtype is None:
                    hint = _hint(item.dtype, DTYPES)
                    self.error(f"unknown element type '{item.dtype}'{hint}", item.dtype_span)
                elif seen_decl:
                    self.error("'type' must come before the declarations it applies to", item.span)
                else:
                    unit.dtype = dtype
            elif isinstance(item, ast.UseDecl) and item.target.endswith(".onnx"):
                graph = self.use_onnx(unit, item, is_root)
                if graph is not None:
                    seen_decl = True
                    if define(graph[0].name, item.target_span):
                        unit.functions[graph[0].name] = graph[0]
                    for p in graph[1]:
                        if define(p.name, item.target_span):
                            unit.declarations[p.name] = p
            elif isinstance(item, ast.UseDecl):
                self.use(unit, item)
            elif isinstance(item, ast.DimDecl):
                if define(item.name, item.span):
                    unit.dims[item.name] = item
            elif isinstance(item, ast.ConstDecl):
                if define(item.name, item.span):
                    unit.consts[item.name] = item
            elif isinstance(item, ast.Function):
                if define(item.name, item.name_span):
                    unit.functions[item.name] = item
            elif isinstance(item, ast.Declaration | ast.Recurrent | ast.Train | ast.Update):
                seen_decl = True
                if not is_root:
                    self.error(
                        "only 'def', 'dim' and 'const' can be used from another module; "
                        "declarations belong in the model's own file",
                        item.span,
                    )
                    continue
                if isinstance(item, ast.Train):
                    unit.trains.append(item)
                    continue
                if isinstance(item, ast.Update):
                    unit.updates.append(item)
                    continue
                decls = item.declarations if isinstance(item, ast.Recurrent) else (item,)
                for d in decls:
                    if define(d.name, d.name_span):
                        unit.declarations[d.name] = d
                        if isinstance(item, ast.Recurrent):
                            unit.recurrent_of[d.name] = item

    def use_onnx(
        self, unit: Unit, item: ast.UseDecl, is_root: bool
    ) -> tuple[ast.Function, list[ast.Declaration]] | None:
        """`use ./model.onnx`: the graph's def and its parameters' declarations, for the model's
        own file to define (telc/onnx_use.py). The file becomes a unit of its own, with nothing
        in it, so that the program's files (and the build's key) include it."""
        if not is_root:
            self.error(
                "only the model's own file can use an ONNX model: its initializers become the "
                "model's parameters",
                item.span,
            )
            return None
        if not item.is_path:
            self.error(f"an ONNX model is used by its path: use ./{item.target}", item.span)
            return None
        path = os.path.normpath(os.path.join(os.path.dirname(unit.path), item.target))
        try:
            data = read_bytes(path, MAX_ONNX_BYTES, "an ONNX model")
        except Unreadable as e:
            self.error(f"cannot read '{item.target}': {path}: {e.reason}", item.target_span)
            return None
        try:
            graph, fn, decls = load_graph(path, data, item, self.values)
        except DiagnosticError as e:
            self.diags.extend(e.diagnostics)
            return None
        self.onnx_inputs += [*(i.onnx for i in graph.inputs), *graph.fixed]
        key = os.path.abspath(path)
        if key not in self.by_path:
            empty = ast.Module(item.span, ())
            used = Unit(path, Source(path, graph.key_text), empty, graph.name)
            self.by_path[key] = used
            self.order.append(used)
        return fn, decls

    def use(self, unit: Unit, item: ast.UseDecl) -> None:
        if item.is_path:
            base = os.path.dirname(unit.path)
            path = os.path.normpath(os.path.join(base, item.target))
            if not path.endswith(".tel"):
                path += ".tel"
        else:
            path = os.path.join(STDLIB, item.target + ".tel")
        try:
            text = read_source(path)
        except Unreadable as e:
            if e.diagnostic is not None:  # not UTF-8: where, in the file used
                self.diags.append(e.diagnostic)
            elif item.is_path:
                self.error(f"cannot read '{item.target}': {path}: {e.reason}", item.target_span)
            elif os.path.exists(path):
                self.error(f"cannot read the standard module '{item.target}': {path}: "
                           f"{e.reason}", item.target_span)  # fmt: skip
            else:
                names = sorted(n[:-4] for n in os.listdir(STDLIB) if n.endswith(".tel"))
                hint = _hint(item.target, names)
                self.error(f"no standard module named '{item.target}'{hint}", item.target_span)
            return
        used = self.unit(path, text, item)
        if used is not None and used not in unit.uses:
            unit.uses.append(used)


def stdlib_help(name: str) -> list[str]:
    """The `help:` line for a name that only a standard module `use`d nowhere defines."""
    home = stdlib_home(name)
    if home is None:
        return []
    return [f"  help: '{name}' is in the standard module '{home}': add `use {home}`"]


def stdlib_home(name: str) -> str | None:
    """The standard module that defines `name` (a function, a dim or a const), if one does
    (for "use nn" hints)."""
    for module, names in _stdlib_index().items():
        if name in names:
            return module
    return None


@functools.cache
def _stdlib_index() -> dict[str, frozenset[str]]:
    index = {}
    for file in sorted(os.listdir(STDLIB)):
        if file.endswith(".tel"):
            with open(os.path.join(STDLIB, file), encoding="utf-8") as f:
                text = f.read()
            names = re.findall(
                r"^(?:(?:export\s+)?def|dim|const)\s+([A-Za-z_][A-Za-z0-9_]*)", text, re.M
            )
            index[file[:-4]] = frozenset(names)
    return index


def _hint(name: str, candidates) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


def suggest(name: str, candidates) -> str:
    """`; did you mean 'x'?` for the closest candidate, or nothing."""
    return _hint(name, candidates)


def located(message: str, span: ast.Span) -> Diagnostic:
    return Diagnostic(message, Location(span.source, span.start, max(1, span.end - span.start)))
