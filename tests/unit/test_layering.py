"""Strict layering (STYLE.md): only dlvm/codegen imports llvmlite, only dlvm/runtime.py and
dlvm/loader.py import ctypes, and telc reaches the IR through dlvm.ir only."""

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
