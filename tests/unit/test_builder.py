"""The builder's constructors for what is not an instruction: literals, functions, blocks and
gradient declarations; what they build prints, parses back and verifies."""

import pytest

from dlvm.ir import module_text, parse_module
from dlvm.ir.builder import (
    Builder,
    add_block,
    constant,
    gradient_declaration,
    new_function,
    tuple_literal,
)
from dlvm.ir.typerules import TypeRuleError
from dlvm.ir.types import DataType, FunctionType, TensorType, TupleType
from dlvm.ir.values import Module, Successor
from dlvm.ir.verifier import verify

F32 = TensorType((), DataType.F32)
I64 = TensorType((), DataType.I64)
VEC = TensorType((2,), DataType.F32)


def test_functions_blocks_and_literals_print_parse_and_verify():
    m = Module("built")
    f = m.add_function(new_function("f", FunctionType((F32, VEC), F32), ["x", "v"]))
    x = f.arguments[0]
    join = add_block(f, "join", [("y", F32)])
    assert f.blocks == [f.entry, join] and join.function is f
    assert [(a.name, a.type) for a in join.arguments] == [("y", F32)]
    b = Builder(f.entry)
    b.branch(dest=Successor(join, [b.multiply(x, constant(2.0, F32))]))
    b.at_end(join).build("return", [join.arguments[0]])
    pair_type = TupleType((F32, VEC))
    p = m.add_function(new_function("pair", FunctionType((F32, VEC), pair_type), ["a", "b"]))
    pair = tuple_literal(p.arguments)
    assert pair.type == pair_type
    pb = Builder(p.entry)
    pb.build("return", [pb.literal(pair)])
    g = m.add_function(gradient_declaration("f_grad", f, (0,), seedable=True))
    assert g.is_declaration and g.gradient is not None and g.gradient.of is f
    assert g.type == FunctionType((F32, VEC, F32), TupleType((F32,)))
    text = module_text(m)
    assert "[gradient @f wrt 0 seedable]" in text
    assert "literal (%a: f32, %b: <2 x f32>)" in text
    assert not verify(m)
    assert module_text(parse_module(text)) == text


def test_a_gradient_of_what_cannot_be_differentiated_is_a_type_rule_error():
    m = Module("m")
    f = m.add_function(new_function("count", FunctionType((I64,), I64), ["n"]))
    with pytest.raises(TypeRuleError):
        gradient_declaration("count_grad", f, (0,))
