"""DLVM: a linear-algebra SSA IR with automatic differentiation, optimisations and LLVM
code generation."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from dlvm.loader import LibraryError, Model, load

__all__ = ["LibraryError", "Model", "load"]


def __getattr__(name: str) -> Any:
    # The loader (ctypes and NumPy) is imported on first use, so `import dlvm.ir` stays free of
    # both (STYLE.md layering).
    if name in __all__:
        from dlvm import loader

        return getattr(loader, name)
    raise AttributeError(f"module 'dlvm' has no attribute '{name}'")
