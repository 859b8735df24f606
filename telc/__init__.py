"""telc: the TEL compiler driver (TEL → DLVM IR → native library)."""

__version__ = "0.1.0"
