"""The table of operator handlers: each op type with the opsets a handler accepts, the check
that finds what it cannot lower before anything is lowered, and the lowering itself."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from dlvm.onnx.context import Lowering
from dlvm.onnx.graph import Facts, Node

Lower = Callable[[Lowering, Node], None]
Check = Callable[[Node, Facts], list[str]]

# The newest opset the table has been checked against: onnx 1.23's, where the operators handled
# here changed after opset 20 only in the element types they allow. A model of a newer opset is
# refused, since an operator may have changed there.
NEWEST_OPSET = 28


@dataclass(frozen=True)
class Handler:
    """Lowers `op_type` for models of opset `since` to `until` (both inclusive)."""

    op_type: str
    since: int
    until: int
    lower: Lower
    check: Check | None

    def accepts(self, opset: int) -> bool:
        return self.since <= opset <= self.until


class Table:
    """Handlers by op type; several per type where an opset changed the operator."""

    def __init__(self) -> None:
        self._by_op: dict[str, list[Handler]] = {}
        self._refused: dict[str, str] = {}  # op types no handler will lower, with why

    def register(
        self,
        op_types: str | Iterable[str],
        since: int = 7,
        until: int = NEWEST_OPSET,
        check: Check | None = None,
    ) -> Callable[[Lower], Lower]:
        names = [op_types] if isinstance(op_types, str) else list(op_types)

        def add(lower: Lower) -> Lower:
            for name in names:
                self._by_op.setdefault(name, []).append(Handler(name, since, until, lower, check))
            return lower

        return add

    def refuse(self, op_types: Iterable[str], why: str) -> None:
        """Says why `op_types` have no handler (instead of a bare "not supported")."""
        self._refused.update(dict.fromkeys(op_types, why))

    def refusal(self, op_type: str) -> str | None:
        return self._refused.get(op_type)

    def find(self, op_type: str, opset: int) -> Handler | None:
        for h in self._by_op.get(op_type, ()):
            if h.accepts(opset):
                return h
        return None

    def ranges(self, op_type: str) -> list[tuple[int, int]]:
        return sorted((h.since, h.until) for h in self._by_op.get(op_type, ()))

    def op_types(self) -> list[str]:
        return sorted(self._by_op)


HANDLERS = Table()

HANDLERS.refuse(
    ("Unique", "NonZero", "NonMaxSuppression"),
    "the shape of its output depends on the values of its input, and DLVM IR's shapes are static",
)


def merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Opset ranges with adjacent and overlapping ones joined: (7, 12), (13, 28) is (7, 28)."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def opset_text(ranges: list[tuple[int, int]]) -> str:
    """`7 to 28`, or `1 to 9, 11 to 28`: the ranges merged, for messages."""
    return ", ".join(f"{lo} to {hi}" for lo, hi in merged(ranges))
