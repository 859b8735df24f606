"""Literals checked against types far bigger than memory without materialising them."""

import tracemalloc

import pytest

from dlvm.diagnostics import DiagnosticError
from dlvm.ir import parse_module
from dlvm.ir.verifier import verify


def _literal_module(literal: str, ty: str) -> str:
    return f"""module "m"
stage raw

func @f: () -> {ty} {{
'entry():
    %0.0 = literal {literal}: {ty}
    return %0.0: {ty}
}}
"""


@pytest.mark.parametrize(
    ("literal", "ty"),
    [
        ("<1: f32>", "<300000000 x f32>"),
        ("<<1: f32>: <1 x f32>>", "<100000000 x 1 x f32>"),
        ("[1: i8]", f"[{2**62 - 1} x i8]"),
    ],
)
def test_a_literal_is_checked_without_listing_what_its_type_declares(literal, ty):
    tracemalloc.start()
    try:
        with pytest.raises(DiagnosticError) as e:
            parse_module(_literal_module(literal, ty), "m.dl")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "literal: literal has 1 element" in e.value.diagnostics[0].message
    assert peak < 10_000_000  # a list of the declared elements took 2.4 GB


def test_a_literal_of_the_declared_size_verifies():
    items = ", ".join(f"{i}: i8" for i in range(300))
    assert verify(parse_module(_literal_module(f"[{items}]", "[300 x i8]"))) == []
