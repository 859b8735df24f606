"""Layering (docs/architecture.md), as rules over a map from each module of dlvm/ and telc/ to the
names it imports. Every rule is a function the tests apply to the real tree, which must satisfy it,
and to a small planted violation, which it must report: a rule that cannot fail tests nothing.

What each layer may import (a module may always import its own layer):

- dlvm.diagnostics, dlvm.artifacts, dlvm.c_compiler, dlvm.elf, dlvm.elf_dynamic,
  dlvm.library_check: nothing of the project (everything builds on them; the C compiler's
  command is read one way by the runtime's build, the code generator's link and telc's build
  cache key; a library's digest is written by the code generator and the caches, and checked
  by the loader).
- dlvm.sources (reading an input file): dlvm.diagnostics.
- dlvm.ir: dlvm.diagnostics. The CFG, dominance and the analysis cache are IR modules, since
  the verifier needs dominance.
- dlvm.analysis, dlvm.interp: dlvm.ir, dlvm.diagnostics.
- dlvm.transforms: those and dlvm.analysis, and dlvm.interp: constant folding and propagation
  evaluate instructions with the interpreter's own implementations, so that folding computes
  exactly what running computes.
- dlvm.codegen: dlvm.ir, dlvm.analysis, dlvm.transforms (building runs compute generation and
  scheduling; kernels read the shapes they made), dlvm.diagnostics, dlvm.c_compiler,
  dlvm.library_check (a library's digest), and
  dlvm.runtime: building a library compiles the C runtime through it
  (dlvm.runtime.build_runtime) and links it in.
- dlvm.runtime (the C runtime's build and ctypes mirror): dlvm.artifacts, dlvm.diagnostics,
  dlvm.c_compiler;
  dlvm.loader: dlvm.runtime, dlvm.diagnostics, dlvm.library_check.
- dlvm.nnkit: dlvm.ir, dlvm.diagnostics, dlvm.artifacts, dlvm.transforms, dlvm.codegen, and
  dlvm.loader, dlvm.runtime and dlvm.library_check to load and call what it compiled.
- dlvm.tools (dlopt, dlc): dlvm.ir, dlvm.diagnostics, dlvm.sources, dlvm.transforms,
  dlvm.interp (`dlopt --run`), dlvm.codegen (dlc), and the package's `__version__`.
- dlvm.onnx (the ONNX importer): dlvm.ir, dlvm.diagnostics and dlvm.sources; what it makes is
  IR, which the driver builds like any other.
- dlvm.distributed (data-parallel training of a loaded model): dlvm.loader, and dlvm.runtime for
  the status a library's error carries.
- dlvm (the package facade): dlvm.loader and dlvm.nnkit, whose names it re-exports for users.
- telc's front end (telc.ast, telc.types, telc.syntax, telc.syntax_tree, telc.limits,
  telc.program, telc.onnx_use, telc.lower): dlvm.ir, dlvm.diagnostics, dlvm.sources (the files
  a program `use`s are read as every source is), dlvm.artifacts (the parser's tables are cached
  there) and dlvm.onnx (an ONNX model a program `use`s).
- telc's driver (telc.driver, telc.library, telc.build, telc.cache, telc.progress): the front
  end, dlvm.ir, dlvm.diagnostics, dlvm.artifacts, dlvm.sources, dlvm.transforms, dlvm.codegen,
  dlvm.c_compiler, dlvm.library_check.
- telc's command line (telc.cli, telc.demo, telc.run): all of telc, dlvm.diagnostics,
  dlvm.sources, dlvm.codegen (GPU names, build results), dlvm.loader (telc run and the demo
  call what they built), and dlvm.tools.driver: telc is one of the command-line tools, with
  their exit statuses and diagnostics reporting.

And across layers: only dlvm.codegen imports llvmlite; only dlvm.runtime and dlvm.loader
import ctypes; only dlvm.distributed.mpi imports mpi4py (an optional extra); no module imports
the `dlvm` package facade or a name it re-exports (it is the users' entry, and NNKit, which it
re-exports, importing it made a cycle); every module belongs to a layer. The code generator's
modules import each other without a cycle."""

from __future__ import annotations

import ast
import pathlib
from dataclasses import dataclass

import pytest

import dlvm

ROOT = pathlib.Path(__file__).resolve().parents[2]


def python_files(*parts: str) -> list[pathlib.Path]:
    return sorted((ROOT.joinpath(*parts)).rglob("*.py"))


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_imports(path: pathlib.Path) -> set[str]:
    """Every name a module imports anywhere, under `if TYPE_CHECKING:` too (a dependency for
    the types is still one). `from m import n` is recorded as `m.n`."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def project_imports() -> dict[str, set[str]]:
    return {module_name(p): all_imports(p) for p in python_files("dlvm") + python_files("telc")}


def within(name: str, prefix: str) -> bool:
    """Whether `name` is `prefix` or inside it: dlvm.ir.types is within dlvm.ir, not dlvm.i."""
    return name == prefix or name.startswith(prefix + ".")


# The rules ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layer:
    name: str
    modules: tuple[str, ...]  # module names, each with what is inside it ("dlvm" alone: exact)
    may_import: tuple[str, ...]  # of the project, besides the layer itself

    def holds(self, module: str) -> bool:
        return any(
            module == m if m in ("dlvm", "telc") else within(module, m) for m in self.modules
        )


FRONT_END = (
    "telc",
    "telc.ast",
    "telc.types",
    "telc.syntax",
    "telc.syntax_tree",
    "telc.limits",
    "telc.program",
    "telc.onnx_use",
    "telc.onnx_values",
    "telc.npy",
    "telc.lower",
)
DRIVER = ("telc.driver", "telc.library", "telc.build", "telc.cache", "telc.progress")
LAYERS = [
    Layer(
        "diagnostics",
        (
            "dlvm.diagnostics",
            "dlvm.artifacts",
            "dlvm.c_compiler",
            "dlvm.elf",
            "dlvm.elf_dynamic",
            "dlvm.library_check",
        ),
        (),
    ),
    Layer("sources", ("dlvm.sources",), ("dlvm.diagnostics",)),
    Layer("ir", ("dlvm.ir",), ("dlvm.diagnostics",)),
    Layer("analysis", ("dlvm.analysis",), ("dlvm.ir", "dlvm.diagnostics")),
    Layer("interp", ("dlvm.interp",), ("dlvm.ir", "dlvm.diagnostics")),
    Layer(
        "transforms",
        ("dlvm.transforms",),
        ("dlvm.ir", "dlvm.diagnostics", "dlvm.analysis", "dlvm.interp"),
    ),
    Layer(
        "codegen",
        ("dlvm.codegen",),
        (
            "dlvm.ir",
            "dlvm.diagnostics",
            "dlvm.analysis",
            "dlvm.transforms",
            "dlvm.runtime",
            "dlvm.c_compiler",
            "dlvm.library_check",
        ),
    ),
    Layer("runtime", ("dlvm.runtime",), ("dlvm.artifacts", "dlvm.diagnostics", "dlvm.c_compiler")),
    Layer("loader", ("dlvm.loader",), ("dlvm.runtime", "dlvm.diagnostics", "dlvm.library_check")),
    Layer(
        "nnkit",
        ("dlvm.nnkit",),
        (
            "dlvm.ir",
            "dlvm.diagnostics",
            "dlvm.artifacts",
            "dlvm.transforms",
            "dlvm.codegen",
            "dlvm.loader",
            "dlvm.runtime",
            "dlvm.library_check",
        ),
    ),
    Layer(
        "tools",
        ("dlvm.tools",),
        (
            "dlvm.ir",
            "dlvm.diagnostics",
            "dlvm.sources",
            "dlvm.transforms",
            "dlvm.interp",
            "dlvm.codegen",
            "dlvm.__version__",
        ),
    ),
    Layer("onnx", ("dlvm.onnx",), ("dlvm.ir", "dlvm.diagnostics", "dlvm.sources")),
    Layer("distributed", ("dlvm.distributed",), ("dlvm.loader", "dlvm.runtime")),
    Layer("facade", ("dlvm",), ("dlvm.loader", "dlvm.nnkit")),
    Layer(
        "telc front end",
        FRONT_END,
        ("dlvm.ir", "dlvm.diagnostics", "dlvm.sources", "dlvm.artifacts", "dlvm.onnx"),
    ),
    Layer(
        "telc driver",
        DRIVER,
        (
            *FRONT_END,
            "dlvm.ir",
            "dlvm.diagnostics",
            "dlvm.artifacts",
            "dlvm.sources",
            "dlvm.transforms",
            "dlvm.codegen",
            "dlvm.c_compiler",
            "dlvm.library_check",
        ),
    ),
    Layer(
        "telc command line",
        ("telc.cli", "telc.demo", "telc.run"),
        (
            *FRONT_END,
            *DRIVER,
            "dlvm.diagnostics",
            "dlvm.sources",
            "dlvm.codegen",
            "dlvm.loader",
            "dlvm.tools.driver",
        ),
    ),
]
# Imports outside the project that only some layers may make.
RESTRICTED = {
    "llvmlite": ("dlvm.codegen",),
    "ctypes": ("dlvm.runtime", "dlvm.loader"),
    "mpi4py": ("dlvm.distributed.mpi",),
}
FACADE_NAMES = frozenset(dlvm.__all__)


def layer_of(module: str) -> Layer | None:
    found = [layer for layer in LAYERS if layer.holds(module)]
    assert len(found) <= 1, f"{module} is in layers {[layer.name for layer in found]}"
    return found[0] if found else None


def modules_without_a_layer(imports: dict[str, set[str]]) -> list[str]:
    return sorted(m for m in imports if layer_of(m) is None)


def layer_violations(imports: dict[str, set[str]]) -> list[str]:
    """`module imports name` for each import of the project its layer may not make."""
    out = []
    for module, names in sorted(imports.items()):
        layer = layer_of(module)
        if layer is None:
            continue
        for name in sorted(names):
            if name.split(".")[0] not in ("dlvm", "telc") or layer.holds(name):
                continue
            if not any(within(name, allowed) for allowed in layer.may_import):
                out.append(f"{module} ({layer.name}) imports {name}")
    return out


def restricted_violations(imports: dict[str, set[str]]) -> list[str]:
    """`module imports name` for each llvmlite, ctypes or mpi4py import outside the modules
    allowed."""
    out = []
    for module, names in sorted(imports.items()):
        for name in sorted(names):
            allowed = RESTRICTED.get(name.split(".")[0])
            if allowed is not None and not any(within(module, a) for a in allowed):
                out.append(f"{module} imports {name}")
    return out


def facade_violations(imports: dict[str, set[str]]) -> list[str]:
    """`module imports name` for each import of the package facade `dlvm` or of a name it
    re-exports (`dlvm.load`, `dlvm.stage`…), rather than of the module that owns it."""
    return [
        f"{module} imports {name}"
        for module, names in sorted(imports.items())
        for name in sorted(names)
        if name == "dlvm" or (name.startswith("dlvm.") and name[5:] in FACADE_NAMES)
    ]


RULES = [layer_violations, restricted_violations, facade_violations]


# The real tree -----------------------------------------------------------------------------------


def test_every_module_belongs_to_a_layer():
    imports = project_imports()
    assert {"dlvm.ir.verifier", "telc.build", "dlvm.nnkit.jit", "dlvm"} <= set(imports)
    assert modules_without_a_layer(imports) == []


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_the_tree_keeps_the_rule(rule):
    assert rule(project_imports()) == []


# Planted violations ------------------------------------------------------------------------------


@pytest.mark.parametrize("layer", LAYERS, ids=lambda layer: layer.name)
def test_each_layer_reports_planted_imports_of_every_layer_it_may_not_import(layer):
    """A real module of the layer made to import a module of each other layer: exactly those
    its entry does not allow are reported, so every entry of LAYERS is in force."""
    module = next(m for m in sorted(project_imports()) if layer.holds(m))
    others = [other.modules[-1] for other in LAYERS if other is not layer]
    planted = {module: {f"{target}.planted" for target in others}}
    forbidden = [t for t in others if not any(within(t, allowed) for allowed in layer.may_import)]
    assert forbidden, f"{layer.name} may import everything: no rule to enforce"
    expected = sorted(f"{module} ({layer.name}) imports {t}.planted" for t in forbidden)
    assert layer_violations(planted) == expected


@pytest.mark.parametrize(
    "module, name",
    [
        ("dlvm.ir.verifier", "dlvm.analysis.dominance.dominator_tree"),  # as it was
        ("telc.build", "dlvm.tools.driver.read_text"),  # as it was
        ("dlvm.codegen.kernel", "dlvm.interp.reductions.window_padding"),  # as it was
        ("telc.lower.core", "dlvm.transforms.pass_manager.PassManager"),
        ("telc.syntax", "dlvm.codegen.spec"),
        ("telc.program", "telc.driver.optimize"),  # the front end does not reach up
        ("dlvm.analysis.loops", "dlvm.transforms.rewrite"),
        ("dlvm.interp.tensor", "dlvm.analysis.liveness"),
        ("dlvm.ir.values", "telc.ast"),
        ("dlvm.transforms.cfg_edits", "dlvm.codegen.loops"),
        ("dlvm.codegen.kernel", "dlvm.loader.load"),
        ("dlvm.tools.dlc", "dlvm.nnkit.stage"),
        ("telc.driver", "dlvm.tools.driver.report"),
        ("telc.cli", "dlvm.tools.dlopt.main"),
        ("dlvm.sources", "dlvm.ir.parser"),
        ("dlvm.diagnostics", "dlvm.ir.values"),
    ],
)
def test_a_planted_layer_violation_is_reported(module, name):
    assert layer_violations({module: {name}}) != []


def test_what_a_layer_may_import_is_not_reported():
    allowed = {
        "dlvm.ir.verifier": {"dlvm.ir.dominance.dominator_tree", "dlvm.diagnostics.Location"},
        "dlvm.transforms.constant_folding": {"dlvm.interp.IMPLS"},
        "dlvm.codegen.build": {"dlvm.runtime.build_runtime", "dlvm.transforms.pass_manager"},
        "telc.build": {"dlvm.sources.read_text", "telc.driver.optimize"},
        "telc.cli": {"dlvm.tools.driver.report", "telc.build"},
        "dlvm.tools.dlc": {"dlvm.__version__"},
        "telc.lower.core": {"dlvm.ir.builder.Builder", "numpy", "telc.ast"},
    }
    assert layer_violations(allowed) == []


def test_a_planted_module_outside_every_layer_is_reported():
    assert modules_without_a_layer({"dlvm.ir.types": set(), "dlvm.newlayer.x": set()}) == [
        "dlvm.newlayer.x"
    ]


@pytest.mark.parametrize(
    "module, name",
    [
        ("dlvm.ir.types", "llvmlite.ir"),
        ("dlvm.transforms.compute_scheduling", "llvmlite.binding"),
        ("telc.driver", "llvmlite"),
        ("dlvm.nnkit.jit", "ctypes.CDLL"),
        ("dlvm.codegen.build", "ctypes"),
        ("telc.run", "ctypes"),
        ("dlvm.distributed.parallel", "mpi4py.MPI"),
    ],
)
def test_a_planted_llvmlite_or_ctypes_import_is_reported(module, name):
    assert restricted_violations({module: {name}}) == [f"{module} imports {name}"]
    allowed = {
        "dlvm.codegen.kernel": {"llvmlite.ir"},
        "dlvm.loader": {"ctypes.c_void_p"},
        "dlvm.distributed.mpi": {"mpi4py.MPI"},
    }
    assert restricted_violations(allowed) == []


@pytest.mark.parametrize("name", ["dlvm", "dlvm.load", "dlvm.stage", "dlvm.LibraryError"])
def test_a_planted_import_of_the_facade_is_reported(name):
    """NNKit reached dlvm.load through the facade, which re-exports NNKit: a cycle."""
    assert facade_violations({"dlvm.nnkit.jit": {name}}) == [f"dlvm.nnkit.jit imports {name}"]
    owners = {"dlvm.nnkit.jit": {"dlvm.loader.load", "dlvm.artifacts", "dlvm.__version__"}}
    assert facade_violations(owners) == []


# The code generator's import graph --------------------------------------------------------------


def run_time_imports(path: pathlib.Path) -> set[str]:
    """Every name a module imports when it runs, at its top or inside a function (an import
    deferred into a function hides a cycle, it does not remove one); not those under
    `if TYPE_CHECKING:`, which never run. `from m import n` is recorded as `m.n`."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and ast.unparse(child.test).endswith("TYPE_CHECKING"):
                for other in child.orelse:
                    visit_node(other)
                continue
            visit_node(child)

    def visit_node(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.update(f"{node.module}.{a.name}" for a in node.names)
        visit(node)

    visit(ast.parse(path.read_text(), str(path)))
    return found


def import_graph(package: str) -> dict[str, set[str]]:
    """The modules of `package` and, for each, the modules of `package` it imports."""
    modules = {module_name(p): p for p in python_files(*package.split("."))}

    def owner(name: str) -> str | None:  # `m.n` is module m.n, or name n of module m
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    return {
        m: {o for n in run_time_imports(p) if (o := owner(n)) is not None and o != m}
        for m, p in modules.items()
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of the graph as the modules along it (the first repeated at the end), or None."""
    state: dict[str, str] = {}  # "open" while on the current path, then "done"
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = "open"
        path.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == "open":
                return path[path.index(n) :] + [n]
            if n not in state and (cycle := visit(n)) is not None:
                return cycle
        path.pop()
        state[m] = "done"
        return None

    for m in sorted(graph):
        if m not in state and (cycle := visit(m)) is not None:
            return cycle
    return None


def test_the_code_generator_imports_without_a_cycle():
    """Kernels, NVPTX primitives and the CUDA module are layered: cuda.py assembles the
    kernels (cuda_kernel.py and the cuda_*.py it picks from), which build on nvptx.py."""
    graph = import_graph("dlvm.codegen")
    assert "dlvm.codegen.cuda" in graph and graph["dlvm.codegen.nvptx"]
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_a_planted_import_cycle_is_found():
    """What the CUDA generator had before nvptx.py: the primitives in cuda.py, which imports the
    kernel generators, which import the primitives."""
    graph = import_graph("dlvm.codegen")
    graph["dlvm.codegen.nvptx"].add("dlvm.codegen.cuda")
    cycle = find_cycle(graph)
    assert cycle is not None and cycle[0] == cycle[-1]
    assert {"dlvm.codegen.cuda", "dlvm.codegen.nvptx", "dlvm.codegen.cuda_kernel"} <= set(cycle)
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]
