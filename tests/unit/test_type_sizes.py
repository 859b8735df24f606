"""How big a value of each IR type is (dlvm.ir.types.byte_size, the code generator's layout), the
limit every value is held to (MAX_TENSOR_BYTES), and literals checked against types far bigger
than memory without materialising them."""

import tracemalloc

import pytest

from dlvm.codegen.layout import layout
from dlvm.diagnostics import DiagnosticError
from dlvm.ir import parse_module
from dlvm.ir.types import (
    MAX_TENSOR_BYTES,
    ArrayType,
    DataType,
    TensorType,
    byte_size,
    size_problem,
)
from dlvm.ir.verifier import verify

HEADER = """module "m"
stage raw

struct $S {
    #a: i8
    #b: <3 x f64>
    #c: (i16, bool)
}

enum $E {
    ?none()
    ?some(i8, $S)
    ?other(<5 x i32>)
}

enum $List {
    ?nil()
    ?cons(f32, box{$List})
}
"""

TYPES = [
    "f32", "<2 x 3 x f16>", "<7 x bool>", "(i8, i64)", "((i8, i64), i8)", "[3 x (i8, i16)]",
    "$S", "[2 x $S]", "$E", "$List", "*f32", "box{$S}", "(f32) -> f32", "stack", "()",
    "(i8, (), [4 x i8], <3 x i16>)",
]  # fmt: skip


def _types(texts: list[str]):
    params = ", ".join(texts)
    module = parse_module(HEADER + f"[extern]\nfunc @f: ({params}) -> ()\n")
    return module.functions[0].type.arguments


def test_byte_size_is_the_code_generators_layout():
    for text, ty in zip(TYPES, _types(TYPES)):
        assert byte_size(ty) == layout(ty).size, text


def test_the_limit_is_2_to_the_62_minus_1():
    assert MAX_TENSOR_BYTES == 2**62 - 1
    # Two sizes within it add up, and one rounds up to any alignment, without overflowing int64.
    assert 2 * MAX_TENSOR_BYTES < 2**63 and -(-MAX_TENSOR_BYTES // 2**20) * 2**20 < 2**63
    (ok,) = _types([f"<{MAX_TENSOR_BYTES // 2} x i16>"])
    assert size_problem(ok) is None
    over = TensorType((2**60,), DataType.F32)
    array = ArrayType(2**61, ArrayType(2, TensorType((), DataType.I16)))
    assert "takes 4611686018427387904 bytes, more than the 2^62 - 1 allowed" in size_problem(over)
    assert "[2 x i16]] takes 9223372036854775808 bytes" in size_problem(array)


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
        ("[1: i8]", f"[{MAX_TENSOR_BYTES} x i8]"),
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
    items = ", ".join(f"{i % 128}: i8" for i in range(300))
    assert verify(parse_module(_literal_module(f"[{items}]", "[300 x i8]"))) == []


@pytest.mark.parametrize(
    "line",
    [
        "'entry(%a: <{big} x f32>):",  # a block argument: one token with its type
        "'entry():\n    %0.0 = literal 1: <{big} x f32>",
        "'entry():\n    %0.0 = literal 1: <2 x\n    {big} x f32>",
    ],
)
def test_a_dimension_of_more_digits_than_int_reads_is_a_located_error(line):
    text = f'module "m"\nstage raw\n\nfunc @f: () -> () {{\n{line}\n    return\n}}\n'
    with pytest.raises(DiagnosticError) as e:
        parse_module(text.replace("{big}", "9" * 5000), "m.dl")
    d = e.value.diagnostics[0]
    assert "has a number with too many digits" in d.message and d.loc is not None


def test_an_attribute_past_64_bits_is_a_located_error():
    """A convolution's padding of 4,300 digits made a result type too long to print."""
    padding = "9" * 4300
    text = (
        'module "m"\nstage raw\n\nfunc @f: (<1 x 1 x 3 x 3 x f32>, <1 x 1 x 3 x 3 x f32>) -> () {\n'
        "'entry(%x: <1 x 1 x 3 x 3 x f32>, %k: <1 x 1 x 3 x 3 x f32>):\n"
        "    %0.0 = convolve %x: <1 x 1 x 3 x 3 x f32> kernel %k: <1 x 1 x 3 x 3 x f32> "
        f"strides 1, 1 padding ({padding}, 0), (0, 0)\n    return\n}}\n"
    )
    with pytest.raises(DiagnosticError) as e:
        parse_module(text, "m.dl")
    d = e.value.diagnostics[0]
    assert "'999999999999…' is out of range: integers here must fit in 64 bits" in d.message
    assert d.loc is not None and d.loc.line_col[0] == 6
