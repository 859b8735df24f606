"""The code generator's error: a construct it cannot compile, raised by every module of
dlvm/codegen and reported by the drivers like any other build failure."""

from __future__ import annotations

from dlvm.diagnostics import BuildFailure


class CodegenError(BuildFailure):
    """A construct the code generator cannot compile; the message says which and where."""
