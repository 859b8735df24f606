"""Every instruction declaration round-trips: parse → print → parse → print is stable and the
module verifies."""

import pytest
from ir_examples import EXAMPLES, module_for

from dlvm.ir import module_text, parse_module
from dlvm.ir.ops import OPS
from dlvm.ir.verifier import verify


def test_every_instruction_has_an_example():
    assert sorted(EXAMPLES) == sorted(OPS)


@pytest.mark.parametrize("opname", sorted(OPS))
def test_instruction_round_trips(opname):
    text = module_for(opname)
    module = parse_module(text, f"{opname}.dl")
    assert verify(module) == []
    printed = module_text(module)
    assert f"{opname}" in printed
    again = module_text(parse_module(printed))
    assert again == printed


def test_sample_module_prints_byte_for_byte():
    with open("samples/ir/inference.dl") as f:
        text = f.read()
    printed = module_text(parse_module(text))
    # The only differences from the hand-written file are comments and the wrapped signature.
    assert printed.startswith('module "mnist"\nstage raw\n\nstruct $Classifier {\n')
    assert "[gradient @inference wrt 1, 2 keeping 0 seedable]\nfunc @inference_grad: " in printed
    assert module_text(parse_module(printed)) == printed


def test_a_line_may_wrap_after_a_results_equals_sign():
    # `%y =` is a single token; the line still wraps after its `=` like after any other.
    text = (
        'module "w"\nstage raw\n\nfunc @f: (f32) -> f32 {\n'
        "'entry(%x: f32):\n    %y =\n        add %x: f32, %x: f32\n"
        "    %0.1 =  // a comment between\n        multiply %y: f32, %y: f32\n"
        "    return %0.1: f32\n}\n"
    )
    printed = module_text(parse_module(text))
    assert "    %y = add %x: f32, %x: f32\n    %0.1 = multiply %y: f32, %y: f32\n" in printed


def test_fresh_names_follow_the_base_then_numbered_rule():
    from dlvm.ir.values import fresh_name

    taken = {"seed", "seed_0"}
    assert fresh_name("seed", taken) == "seed_1"
    assert fresh_name("tape", taken) == "tape"
    assert {"seed_1", "tape"} <= taken
