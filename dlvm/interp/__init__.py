"""The reference interpreter: the semantic oracle for DLVM IR (docs/ir.md)."""

from dlvm.interp.errors import InterpreterError
from dlvm.interp.interpreter import Interpreter, run_function
from dlvm.interp.objects import ADStack, Box, EnumValue, Pointer
from dlvm.interp.registry import IMPLS

__all__ = [
    "IMPLS",
    "ADStack",
    "Box",
    "EnumValue",
    "Interpreter",
    "InterpreterError",
    "Pointer",
    "run_function",
]
