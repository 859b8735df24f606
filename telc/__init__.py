"""telc: the TEL compiler driver (the frontend lands with the TEL issue)."""

__version__ = "0.1.0"
