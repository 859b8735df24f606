"""docs/onnx.md's table of operators is the handler table: every op type with its opsets, and
nothing else."""

from __future__ import annotations

import re
from pathlib import Path

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
