"""Strict layering (STYLE.md): only dlvm/codegen imports llvmlite, only dlvm/runtime.py and
dlvm/loader.py import ctypes, and telc reaches the IR through dlvm.ir only; and the code
generator's modules import each other without a cycle.

Each rule is a function over a map from module names to what they import: the tests apply it
to the real tree and to a small planted violation, which it must report."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def python_files(*parts: str):
    return sorted((ROOT.joinpath(*parts)).rglob("*.py"))


def test_only_codegen_imports_llvmlite():
    for path in python_files("dlvm"):
        if "codegen" in path.parts:
            continue
        bad = {n for n in imports(path) if n.split(".")[0] == "llvmlite"}
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_only_runtime_module_imports_ctypes():
    """The runtime's mirror and the library loader are the only Python that talks to C."""
    for path in python_files("dlvm"):
        if path.name in ("runtime.py", "loader.py") and path.parent.name == "dlvm":
            continue
        bad = {n for n in imports(path) if n.split(".")[0] == "ctypes"}
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_ir_does_not_depend_on_passes_or_tools():
    for path in python_files("dlvm", "ir"):
        bad = {
            n
            for n in imports(path)
            if n.startswith(("dlvm.transforms", "dlvm.tools", "dlvm.interp", "telc"))
        }
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_telc_uses_only_the_ir_layer():
    allowed = (
        "dlvm.ir",
        "dlvm.diagnostics",
        "dlvm.tools",
        "dlvm.transforms",
        "dlvm.interp",
        "dlvm.codegen",
        "dlvm.runtime",
        "dlvm",
    )
    for path in python_files("telc"):
        bad = {n for n in imports(path) if n.startswith("dlvm") and not n.startswith(allowed)}
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_telc_front_end_builds_ir_through_the_builder_only():
    """The parser, program loader and lowering see DLVM only as dlvm.ir (and diagnostics, and
    the compiler's cache for the parser's tables); passes and tools are for the driver and the
    CLI."""
    front = python_files("telc", "lower") + [ROOT / "telc" / n for n in ("syntax.py", "program.py")]
    for path in front:
        bad = {
            n
            for n in imports(path)
            if n.startswith("dlvm")
            and not n.startswith(("dlvm.ir", "dlvm.diagnostics", "dlvm.artifacts"))
        }
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


# The code generator's import graph --------------------------------------------------------------


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


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
