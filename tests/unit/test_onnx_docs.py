"""docs/onnx.md's table of operators is the handler table: every op type with its opsets, and
nothing else; and the table holds one handler per op type and opset."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dlvm.onnx.ops.registry import HANDLERS, merged

DOC = Path(__file__).resolve().parents[2] / "docs" / "onnx.md"


def test_the_operator_table_lists_every_handler_with_its_opsets():
    text = DOC.read_text()
    table = text[text.index("## Supported operators") : text.index("## Limits")]
    listed: dict[str, list[tuple[int, int]]] = {}
    for op, lo, hi in re.findall(r"`([A-Za-z0-9.]+)` (\d+)–(\d+)", table):
        listed.setdefault(op, []).append((int(lo), int(hi)))
    expected = {op: merged(HANDLERS.ranges(op)) for op in HANDLERS.op_types()}
    assert listed == expected


def test_two_handlers_of_one_opset_are_refused():
    from dlvm.onnx.ops.registry import Table

    table = Table()
    table.register("Op", since=7, until=12)(lambda cx, node: None)
    table.register("Op", since=13)(lambda cx, node: None)  # the next opsets: fine
    with pytest.raises(ValueError, match="Op: a handler of opsets 10-28"):
        table.register("Op", since=10)(lambda cx, node: None)
