"""Adjoint rules of the windowed instructions, `convolve` and `reduceWindow` (see adjoints.py)."""

from __future__ import annotations

from typing import Any

from dlvm.ir.values import Instruction, Value


def convolve(e: Any, inst: Instruction, d: Value) -> list[tuple[Value, Value]]:
    from dlvm.ir.adjoints import AdjointError

    raise AdjointError("convolve's adjoint is being written")


def reduce_window(e: Any, inst: Instruction, d: Value) -> list[tuple[Value, Value]]:
    from dlvm.ir.adjoints import AdjointError

    raise AdjointError("reduceWindow's adjoint is being written")
