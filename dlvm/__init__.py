"""DLVM: a linear-algebra SSA IR with automatic differentiation, optimisations and LLVM
code generation."""

__version__ = "0.1.0"
