"""dlvm.codegen.unrolling: a dot kernel's loops tell LLVM not to unroll them; other kernels' do
not, and the module stays valid LLVM IR."""

from __future__ import annotations

import re

import llvmlite.binding as llvm

from dlvm.codegen.build import schedule
from dlvm.codegen.llgen import compile_object, llvm_module
from telc.driver import compile_text, optimize

MODEL = """module m
use nn
x: in[8 x 16]
W: param[16 x 32] = glorot()
y: out[8 x 32] = relu(x . W) * 2.0 + x . W
"""


def scheduled():
    compiled = compile_text("m.tel", MODEL)
    optimize(compiled.module)
    return schedule(compiled.module)


def bodies(text: str) -> dict[str, str]:
    """Each kernel body's text by symbol."""
    found = re.finditer(r'^define internal void @"(k\.[^"]*\.body)"\(.*?^}', text, re.M | re.S)
    return {m.group(1): m.group(0) for m in found}


def test_only_dot_kernels_forbid_unrolling():
    module = scheduled()
    dots = {
        f"k.{f.name}.body"
        for f in module.functions
        if f.compute and any(i.opcode == "dot" for b in f.blocks for i in b.instructions)
    }
    text = str(llvm_module(module))
    kernels = bodies(text)
    assert dots and set(kernels) - dots, "a dot kernel and another one"
    for name, body in kernels.items():
        latches = re.findall(r"^\s+br .*!llvm\.loop (!\d+)", body, re.M)
        assert bool(latches) == (name in dots), name
        for loop_id in latches:  # each loop its own distinct identifier, naming the hint
            hint = re.search(rf"^{loop_id} = distinct !{{ {loop_id}, (!\d+) }}", text, re.M)
            assert hint and f'{hint.group(1)} = !{{ !"llvm.loop.unroll.disable" }}' in text
    llvm.parse_assembly(text).verify()


def test_the_module_still_compiles():
    assert compile_object(scheduled())[0][:4] == b"\x7fELF"
