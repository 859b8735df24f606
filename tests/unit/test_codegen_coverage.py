"""Every instruction of dlvm/ir/ops.py is compiled for the CPU and its value checked against the
interpreter: by a case of test_codegen_ops (kernels, and the host code between them), or, for
an instruction that only host code computes, by an entry of test_codegen_memory that runs it.
An instruction with neither is listed below with the reason, and what it does then is tested
here. A new instruction fails this test until it has its case."""

from __future__ import annotations

import pytest
import test_codegen_memory
import test_codegen_ops

from dlvm.analysis.call_graph import referenced_functions
from dlvm.codegen.build import schedule
from dlvm.codegen.errors import CodegenError
from dlvm.codegen.llgen import llvm_module
from dlvm.ir import parse_module
from dlvm.ir.ops import OPS
from dlvm.ir.values import Function, Module

# Instructions computed only by host code, never in a kernel: control flow, calls of function
# values, aggregates, memory, stacks and trap. test_codegen_memory runs each against the
# interpreter (trap and the run-time errors by their messages).
HOST_CODE = {
    "branch": "control flow",
    "conditional": "control flow",
    "branchEnum": "control flow on an enum's case",
    "extract": "reads an element of a tuple, struct, enum case or tensor in host code",
    "insert": "builds an aggregate in host code",
    "allocateStack": "memory",
    "allocateHeap": "memory",
    "allocateBox": "memory (reference-counted)",
    "projectBox": "memory (reference-counted)",
    "retain": "memory (reference-counted)",
    "release": "memory (reference-counted)",
    "deallocate": "memory",
    "load": "memory",
    "store": "memory",
    "elementPointer": "memory",
    "copy": "memory",
    "createStack": "the AD tape",
    "push": "the AD tape",
    "pop": "the AD tape",
    "destroyStack": "the AD tape",
    "trap": "stops the entry with the interpreter's message",
}
# Instructions the code generator does not compile: building one is a CodegenError that says
# so (tested below), where the interpreter computes it.
NOT_COMPILED = {"digamma": "no LLVM lowering yet (the interpreter's is a loop of series)"}


def opcodes(module: Module, roots: list[str] | None = None) -> set[str]:
    """The instructions of the functions of `roots` and every function they refer to (all
    functions when roots is None)."""
    by_name = {f.name: f for f in module.functions}
    todo = list(module.functions) if roots is None else [by_name[r] for r in roots]
    seen: set[Function] = set()
    while todo:
        fn = todo.pop()
        if fn not in seen:
            seen.add(fn)
            todo += referenced_functions(fn)
    return {inst.opcode for fn in seen for inst in fn.instructions()}


@pytest.fixture(scope="module")
def compiled_cases() -> set[str]:
    """test_codegen_ops: every function is a case checked against the interpreter (the
    random_* helpers by the distribution of what they draw)."""
    return opcodes(parse_module(test_codegen_ops.module_text(), "ops.dl"))


@pytest.fixture(scope="module")
def host_code_cases() -> set[str]:
    """test_codegen_memory: the entries its tests run, and what they call."""
    module = parse_module(test_codegen_memory.SOURCE, "memory.dl")
    entries = sorted({name.split("-")[0] for name in test_codegen_memory.CASES} | {"checked"})
    return opcodes(module, entries)


def test_the_lists_name_instructions_once():
    assert set(HOST_CODE) <= set(OPS) and set(NOT_COMPILED) <= set(OPS)
    assert not set(HOST_CODE) & set(NOT_COMPILED)
    assert not any(OPS[name].elementwise for name in HOST_CODE)  # those are kernel work


@pytest.mark.parametrize("name", sorted(OPS))
def test_instruction_has_a_compiled_case(name, compiled_cases, host_code_cases):
    if name in NOT_COMPILED:
        assert name not in compiled_cases | host_code_cases, f"{name} is compiled now"
    elif name in HOST_CODE:
        assert name in host_code_cases, f"no entry of test_codegen_memory runs '{name}'"
    else:
        assert name in compiled_cases, f"no case of test_codegen_ops compiles '{name}'"


@pytest.mark.parametrize("name", sorted(NOT_COMPILED))
def test_an_instruction_not_compiled_is_a_clear_error(name):
    text = f"""module "m"
stage optimizable

func @f: (<3 x f32>) -> <3 x f32> {{
'entry(%a: <3 x f32>):
    %r = {name} %a: <3 x f32>
    return %r: <3 x f32>
}}
"""
    module = schedule(parse_module(text, "m.dl"), cpu="x86-64")
    with pytest.raises(CodegenError, match=f"{name} is not compiled"):
        llvm_module(module)


def test_a_missing_case_fails(compiled_cases, host_code_cases):
    """What the coverage test sees without the cases test_codegen_ops gained for it."""
    without = compiled_cases - {"erfc", "lgamma", "rint", "equal", "or"}
    with pytest.raises(AssertionError, match="no case of test_codegen_ops compiles 'erfc'"):
        test_instruction_has_a_compiled_case("erfc", without, host_code_cases)
    with pytest.raises(AssertionError, match="no entry of test_codegen_memory runs 'trap'"):
        test_instruction_has_a_compiled_case("trap", compiled_cases, host_code_cases - {"trap"})
