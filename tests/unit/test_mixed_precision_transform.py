"""dlvm.transforms.mixed_precision on IR written out: which instructions move to bf16, where
the conversions go, and that the function still verifies, keeps its signature and, run by the
interpreter, computes what the f32 function computes within bf16's rounding."""

from __future__ import annotations

import numpy as np

from dlvm.interp import run_function
from dlvm.ir import parse_module
from dlvm.ir.printer import module_text
from dlvm.ir.verifier import verify
from dlvm.transforms.mixed_precision import to_mixed_precision

# A layer, a softmax-like normalisation through a small callee, a comparison and a loop whose
# carried value is a sum; a product with a constant; the result a scalar.
SOURCE = """module "m"
stage raw

func @scale: (<4 x 3 x f32>) -> <4 x 3 x f32> {
'entry(%v: <4 x 3 x f32>):
    %m = reduce %v: <4 x 3 x f32> by max init -inf: f32 along 1
    %c = shapeCast %m: <4 x f32> to 4 x 1
    %d = subtract %v: <4 x 3 x f32>, %c: <4 x 1 x f32>
    %e = exp %d: <4 x 3 x f32>
    return %e: <4 x 3 x f32>
}

func @f: (<4 x 2 x f32>, <2 x 3 x f32>) -> f32 {
'entry(%x: <4 x 2 x f32>, %w: <2 x 3 x f32>):
    %y = dot %x: <4 x 2 x f32>, %w: <2 x 3 x f32>
    %k = literal dense "0000803f000000400000404000008040000080400000a040": <3 x 2 x f32>
    %z = dot %y: <4 x 3 x f32>, %k: <3 x 2 x f32>
    %s = apply @scale(%y: <4 x 3 x f32>): (<4 x 3 x f32>) -> <4 x 3 x f32>
    %p = greaterThan %s: <4 x 3 x f32>, 0.5: f32
    %q = select %s: <4 x 3 x f32>, 0: f32 by %p: <4 x 3 x bool>
    %t = reduce %q: <4 x 3 x f32> by add init 0: f32 along 0, 1
    %u = reduce %z: <4 x 2 x f32> by add init 0: f32 along 0, 1
    %v = add %t: f32, %u: f32
    branch 'loop(%v: f32, 0: i64)
'loop(%acc: f32, %i: i64):
    %acc1 = multiply %acc: f32, 0.5: f32
    %i1 = add %i: i64, 1: i64
    %more = lessThan %i1: i64, 3: i64
    conditional %more: bool then 'loop(%acc1: f32, %i1: i64) else 'done(%acc1: f32)
'done(%r: f32):
    return %r: f32
}
"""


def transformed():
    module = parse_module(SOURCE)
    fn = module.function_named("f")
    assert to_mixed_precision(fn)
    assert verify(module) == []
    return module, fn


def test_products_and_what_follows_them_are_bf16():
    _, fn = transformed()
    by_name = {i.name: i for i in fn.instructions() if i.name}
    for name in ("y", "z", "d", "s", "q"):  # products; the inlined callee (exp: %s); select
        assert by_name[name].type.dtype.text == "bf16", name
    assert by_name["m"].type.dtype.text == "bf16"  # a maximum is exact in bf16
    assert by_name["p"].operands[0].type.dtype.text == "bf16"  # compared in bf16, bool result
    for name in ("t", "u", "v", "acc1"):  # sums, and what they feed, stay f32
        assert by_name[name].type.dtype.text == "f32", name
    assert [a.type.dtype.text for a in fn.blocks[1].arguments] == ["f32", "i64"]


def test_the_signature_and_the_callee_are_unchanged():
    module, fn = transformed()
    assert str(fn.type) == "(<4 x 2 x f32>, <2 x 3 x f32>) -> f32"
    assert "bf16" not in module_text(module).split("func @f")[0]  # @scale as it was


def test_each_value_is_converted_once_after_its_definition():
    _, fn = transformed()
    converts = [i for i in fn.instructions() if i.opcode == "convert"]
    sources = [(id(c.operands[0]), c.type.dtype) for c in converts]
    assert len(sources) == len(set(sources))
    entry = fn.blocks[0].instructions
    for c in converts:
        source = c.operands[0]
        if hasattr(source, "block") and source in entry:
            assert entry.index(c) == entry.index(source) + 1


def test_values_stay_within_bf16_rounding_of_f32():
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (4, 2)).astype(np.float32)
    w = rng.uniform(-1, 1, (2, 3)).astype(np.float32)
    want = float(run_function(parse_module(SOURCE), "f", [x, w]))
    module, _ = transformed()
    got = float(run_function(module, "f", [x, w]))
    assert got != want
    assert abs(got - want) <= 2**-6 * abs(want)


def test_a_function_without_products_is_left_alone():
    module = parse_module(SOURCE)
    assert not to_mixed_precision(module.function_named("scale"))
