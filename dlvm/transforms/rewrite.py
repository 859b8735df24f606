"""Rewrites that several passes end with: every use of some values replaced by others, and the
instructions they replace removed."""

from __future__ import annotations

from collections.abc import Mapping

from dlvm.ir.values import Function, Instruction, Value


def replace_uses(fn: Function, replacement: Mapping[Value, Value]) -> None:
    """Rewrites every use in fn of a key of `replacement` to its value."""
    if not replacement:
        return

    def forward(v: Value) -> Value:
        return replacement.get(v, v)

    for inst in fn.instructions():
        if any(v in replacement for v in inst.uses()):
            inst.map_values(forward)


def replace_and_remove(
    fn: Function, replacement: Mapping[Value, Value], dead: set[Instruction]
) -> None:
    """Removes the `dead` instructions from fn, then rewrites every use of a key of
    `replacement` to its value: in one sweep at the end, since a replaced value may itself be
    used by another rewrite's new instructions."""
    for block in fn.blocks:
        block.remove_all(dead)
    replace_uses(fn, replacement)
