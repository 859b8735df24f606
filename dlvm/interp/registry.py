"""The table from instruction name to its implementation, filled by the `@impl` decorator.

An implementation is called as `fn(frame, inst, args)`: the executing frame (for the interpreter,
the environment and nested values), the instruction, and its evaluated operands. It returns the
instruction's result value (terminators return a control transfer, see interpreter.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Impl = Callable[[Any, Any, list], Any]

IMPLS: dict[str, Impl] = {}


def impl(*names: str) -> Callable[[Impl], Impl]:
    """Registers the decorated function as the implementation of each named instruction."""

    def register(fn: Impl) -> Impl:
        for name in names:
            assert name not in IMPLS, f"two implementations of {name}"
            IMPLS[name] = fn
        return fn

    return register
