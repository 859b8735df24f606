"""Which operands packing walks down their columns (dlvm.codegen.panels.transposed): a
transpose, under pointwise instructions of one matrix and scalars, and not two transposes."""

from __future__ import annotations

from dlvm.codegen.panels import transposed
from dlvm.ir import parse_module

PROGRAM = """module "m"
stage optimizable

func @f: (<4 x 6 x f32>, <6 x 4 x f32>) -> <6 x 4 x f32> {
'entry(%x: <4 x 6 x f32>, %y: <6 x 4 x f32>):
    %t = transpose %x: <4 x 6 x f32>
    %s = multiply 0.5: f32, %t: <6 x 4 x f32>
    %n = negate %s: <6 x 4 x f32>
    %tt = transpose %t: <6 x 4 x f32>
    %ttt = transpose %tt: <4 x 6 x f32>
    %mixed = add %t: <6 x 4 x f32>, %y: <6 x 4 x f32>
    return %mixed: <6 x 4 x f32>
}
"""


def test_transposed_operands() -> None:
    fn = parse_module(PROGRAM, "m.dl").functions[0]
    values = {v.name: v for v in fn.blocks[0].instructions if v.name}
    assert transposed(values["t"]) and transposed(values["s"]) and transposed(values["n"])
    assert transposed(values["ttt"])
    assert not transposed(values["tt"])
    assert not transposed(values["mixed"])  # two matrices: neither order suits both
    assert not transposed(fn.arguments[0])
