"""function-inlining on every sample (samples/*.tel, optimised as telc does): each entry point
computes the same results on the interpreter before and after, the module verifies, prints and
parses back to the same text, and a second run changes nothing; plus the pass's registration,
stages and call graph. The cases one by one are in tests/filecheck/transforms/."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from telhelp import sample_names, sample_path

from dlvm.analysis.call_graph import CallGraph
from dlvm.diagnostics import DiagnosticError
from dlvm.interp import run_function
from dlvm.interp.objects import NP_DTYPES
from dlvm.ir import module_text, parse_module
from dlvm.ir.types import TensorType, TupleType, Type
from dlvm.ir.values import Module
from dlvm.ir.verifier import verify
from dlvm.transforms import lookup_pass
from dlvm.transforms.function_inlining import FunctionInlining
from dlvm.transforms.pass_manager import PassManager
from telc.driver import Compiled, compile_text


def random_argument(ty: Type, rng: np.random.Generator) -> object:
    """A value of type ty: floats in [0.1, 1) (logs and divisions stay finite), 0/1 integers
    and booleans, tuples element by element."""
    if isinstance(ty, TupleType):
        return tuple(random_argument(t, rng) for t in ty.elements)
    assert isinstance(ty, TensorType), f"no random value of type {ty}"
    if ty.dtype.is_float:
        return rng.uniform(0.1, 1.0, size=ty.shape)
    if ty.dtype.is_int:
        return rng.integers(0, 2, size=ty.shape).astype(NP_DTYPES[ty.dtype])
    return rng.integers(0, 2, size=ty.shape).astype(bool)


def assert_same(before: Any, after: Any, where: str) -> None:
    if isinstance(before, (tuple, list)):
        assert isinstance(after, (tuple, list)) and len(after) == len(before), where
        for i, (b, a) in enumerate(zip(before, after)):
            assert_same(b, a, f"{where}[{i}]")
        return
    np.testing.assert_allclose(after, before, rtol=1e-12, atol=1e-12, err_msg=where)


def run_entries(module: Module, names: list[str], inputs: dict[str, list]) -> dict[str, object]:
    return {n: run_function(module, n, inputs[n], float64=True, seed=3) for n in names}


def inline(module: Module) -> bool:
    [(_, changed)] = PassManager().run(module, [FunctionInlining])  # verifies after the pass
    return changed


def calls(module: Module) -> int:
    return sum(i.opcode == "apply" for f in module.functions for i in f.instructions())


def differentiated(sample: str) -> Compiled:
    """samples/SAMPLE.tel lowered and differentiated, before the optimisations (which inline)."""
    with open(sample_path(sample), encoding="utf-8") as f:
        compiled = compile_text(sample_path(sample), f.read())
    PassManager().run(compiled.module, PassManager.resolve(["differentiation"]))
    return compiled


@pytest.mark.parametrize("sample", sample_names())
def test_inlining_keeps_every_entry_point_s_results(sample):
    compiled = differentiated(sample)
    module = compiled.module
    names = [e.name for e in compiled.interface.entries]
    rng = np.random.default_rng(0)
    inputs = {}
    for n in names:
        fn = module.function_named(n)
        assert fn is not None
        inputs[n] = [random_argument(t, rng) for t in fn.type.arguments]
    before = run_entries(module, names, inputs)
    calls_before = calls(module)

    changed = inline(module)

    assert changed and calls(module) < calls_before
    assert not verify(module)
    text = module_text(module)
    assert module_text(parse_module(text)) == text
    after = run_entries(module, names, inputs)
    for n in names:
        assert_same(before[n], after[n], f"{sample}: @{n}")
    assert not inline(module), "a second run found more to inline"
    assert module_text(module) == text


def test_the_samples_lose_their_standard_library_calls():
    module = differentiated("digits").module
    assert inline(module)
    infer = module.function_named("infer")
    assert infer is not None
    assert not any(i.opcode == "apply" for i in infer.instructions())
    assert module.function_named("relu_32x128_f32") is not None  # callees are kept


def test_registered_by_name_and_alias_at_the_optimizable_stage_only():
    assert lookup_pass("function-inlining") is FunctionInlining
    assert lookup_pass("Inline") is FunctionInlining
    for stage in ("raw", "compute", "schedule"):
        module = parse_module(f'module "m"\nstage {stage}\n')
        with pytest.raises(DiagnosticError, match="cannot run at stage"):
            PassManager().run(module, [FunctionInlining])


CYCLES = """module "m"
stage optimizable

func @a: (f32) -> f32 {
'entry(%x: f32):
    %0.0 = apply @b(%x: f32): (f32) -> f32
    %0.1 = apply @c(%0.0: f32): (f32) -> f32
    return %0.1: f32
}

func @b: (f32) -> f32 {
'entry(%x: f32):
    %0.0 = apply @a(%x: f32): (f32) -> f32
    return %0.0: f32
}

func @c: (f32) -> f32 {
'entry(%x: f32):
    %0.0 = apply @d(@c: (f32) -> f32, %x: f32): ((f32) -> f32, f32) -> f32
    return %0.0: f32
}

func @d: ((f32) -> f32, f32) -> f32 {
'entry(%f: (f32) -> f32, %x: f32):
    %0.0 = negate %x: f32
    return %0.0: f32
}
"""


def test_call_graph_components_come_bottom_up():
    module = parse_module(CYCLES)
    graph = CallGraph(module)
    a, b, c, d = module.functions
    assert [sorted(f.name for f in comp) for comp in graph.components] == [["d"], ["c"], ["a", "b"]]
    assert graph.is_recursive(a) and graph.is_recursive(b)
    assert graph.is_recursive(c)  # it passes itself on as a value: counted as a call
    assert not graph.is_recursive(d)
    assert graph.component(a) == graph.component(b) > graph.component(c) > graph.component(d)


NAMED = """module "m"
stage optimizable

func @leaf: (f32) -> f32 {
'entry(%x: f32):
    %y = tanh %x: f32
    return %y: f32
}

func @main: (f32) -> f32 {
'entry(%y: f32):
    %0.0 = apply @leaf(%y: f32): (f32) -> f32
    return %0.0: f32
}
"""


def test_copies_keep_the_callee_s_source_locations():
    module = parse_module(NAMED, "named.dl")
    leaf, main = module.functions
    original = leaf.blocks[0].instructions[0]
    assert inline(module)
    copy_ = main.blocks[0].instructions[0]
    assert copy_ is not original and copy_.opcode == "tanh" and copy_.name == "y_0"
    assert copy_.loc is not None and original.loc is not None
    assert (copy_.loc.source, copy_.loc.offset) == (original.loc.source, original.loc.offset)
