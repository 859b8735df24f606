"""The DLVM IR: types, values, instruction declarations, builder, parser, printer, verifier."""

from dlvm.ir.parser import parse_module
from dlvm.ir.printer import module_text

__all__ = ["module_text", "parse_module"]
