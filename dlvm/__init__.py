"""DLVM: a linear-algebra SSA IR with automatic differentiation, optimisations and LLVM
code generation."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from dlvm.loader import LibraryError, Model, load
    from dlvm.nnkit import Tensor, cond, function, gradient, loop, stage

_LOADER = ("LibraryError", "Model", "load")
_NNKIT = ("Tensor", "cond", "function", "gradient", "loop", "stage")
__all__ = [
    "LibraryError",
    "Model",
    "Tensor",
    "cond",
    "function",
    "gradient",
    "load",
    "loop",
    "stage",
]


def __getattr__(name: str) -> Any:
    # The loader (ctypes and NumPy) and NNKit are imported on first use, so `import dlvm.ir`
    # stays free of both (docs/architecture.md, "Layering").
    if name in _LOADER:
        from dlvm import loader

        return getattr(loader, name)
    if name in _NNKIT:
        from dlvm import nnkit

        return getattr(nnkit, name)
    raise AttributeError(f"module 'dlvm' has no attribute '{name}'")
