"""The pass registry, the pass manager's stage checks, verification and printing, and the
builder that passes use."""

import pytest

from dlvm.diagnostics import DiagnosticError
from dlvm.ir import module_text, parse_module
from dlvm.ir.builder import Builder, constant, new_function
from dlvm.ir.typerules import TypeRuleError
from dlvm.ir.types import F32, DataType, FunctionType, TensorType
from dlvm.ir.values import Module
from dlvm.transforms import ALIASES, PASSES, lookup_pass
from dlvm.transforms.pass_base import FunctionPass
from dlvm.transforms.pass_manager import PassBroke, PassManager

TEXT = """module "m"
stage raw

func @f: (f32) -> f32 {
'entry(%x: f32):
    %a = add %x: f32, 1: f32
    %b = add %x: f32, 1: f32
    %c = multiply %a: f32, %b: f32
    %unused = tanh %c: f32
    return %c: f32
}
"""


def test_passes_are_found_by_name_and_alias():
    assert lookup_pass("DCE") is lookup_pass("dead-code-elimination")
    assert lookup_pass("CSE").name == "common-subexpression-elimination"
    assert lookup_pass("nope") is None
    for name, cls in PASSES.items():
        assert cls.name == name and ALIASES[cls.alias] == name


@pytest.mark.parametrize(
    "name, alias, class_name",
    [
        ("cfg-canonicalization", "CFGCan", "CFGCanonicalization"),
        ("cfg-simplification", "CFGSimp", "CFGSimplification"),
        ("linear-algebra-fusion", "LAF", "LinearAlgebraFusion"),
        ("loop-invariant-code-motion", "LICM", "LoopInvariantCodeMotion"),
        ("matrix-multiplication-reordering", "MMR", "MatrixMultiplicationReordering"),
    ],
)
def test_documented_names_and_aliases(name: str, alias: str, class_name: str) -> None:
    """The names and aliases docs/ir.md gives, each bound to its pass class."""
    cls = lookup_pass(name)
    assert cls is not None and cls.__name__ == class_name
    assert lookup_pass(alias) is cls


def test_unknown_pass_is_a_diagnostic_with_a_suggestion():
    with pytest.raises(DiagnosticError) as e:
        PassManager.resolve(["CSE", "dead-code-elimnation"])
    assert "did you mean 'dead-code-elimination'" in str(e.value)


def test_pass_manager_reports_changes_and_prints_after():
    module = parse_module(TEXT)
    printed = []
    pm = PassManager(print_after=["CSE"], emit=printed.append)
    results = pm.run(module, PassManager.resolve(["CSE", "DCE", "DCE"]))
    assert [(c.alias, ch) for c, ch in results] == [("CSE", True), ("DCE", True), ("DCE", False)]
    assert len(printed) == 1 and printed[0].startswith("// IR after common-subexpression")
    text = module_text(module)
    assert "%c = multiply %a: f32, %a: f32" in text and "tanh" not in text


class _Breaker(FunctionPass):
    name = "test-breaker"
    alias = "BRK"
    stages = ("raw",)

    def run_on_function(self, fn):
        fn.blocks[0].instructions[-1].erase()  # drop the terminator: invalid IR
        return True


def test_pass_manager_verifies_after_each_pass():
    """A pass that breaks verified IR is the compiler's bug: not a DiagnosticError (a rejected
    input, exit status 1) but PassBroke, which the tools report as an internal error."""
    module = parse_module(TEXT)
    with pytest.raises(PassBroke) as e:
        PassManager().run(module, [_Breaker])
    assert "malformed IR after test-breaker (BRK)" in str(e.value)
    assert "does not end with a terminator" in str(e.value)


def test_pass_manager_refuses_a_pass_at_the_wrong_stage():
    module = parse_module(TEXT.replace("stage raw", "stage optimizable"))
    with pytest.raises(DiagnosticError) as e:
        PassManager().run(module, [_Breaker])
    assert "cannot run at stage optimizable" in str(e.value)


def test_builder_infers_types_and_rejects_ill_typed_instructions():
    m = Module("b")
    fn = m.add_function(new_function("g", FunctionType((F32,), F32), ["x"]))
    b = Builder(fn.entry)
    (x,) = fn.arguments
    y = b.exp(x)
    assert y.type == F32
    with pytest.raises(TypeRuleError, match="data types differ"):
        b.add(y, constant(1, TensorType((), DataType.I32)))
    with pytest.raises(TypeRuleError, match="no attribute"):
        b.reduce(y, constant(0, F32), bogus=1)
    b.build("return", [y])
    assert "%0.0 = exp %x: f32" in module_text(m)
