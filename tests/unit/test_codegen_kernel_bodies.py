"""Kernel bodies stay functions of their own (dlvm/codegen/llgen.py): a serial kernel's entry,
inlined into the host function, calls its body, whose loops LLVM still vectorises. Inlined
into the host, the exp of a softmax over rows of 16 was left scalar (340 against 46 us)."""

from __future__ import annotations

import re

from dlvm.codegen.build import schedule
from dlvm.codegen.llgen import compile_object
from dlvm.ir.parser import parse_module

SOFTMAX = """module "softmax"
stage raw

func @f: (<8 x 4 x 16 x 16 x f32>) -> <8 x 4 x 16 x 16 x f32> {
'entry(%x: <8 x 4 x 16 x 16 x f32>):
    %m = reduce %x: <8 x 4 x 16 x 16 x f32> by max init -inf: f32 along 3
    %a = shapeCast %m: <8 x 4 x 16 x f32> to 8 x 4 x 16 x 1
    %b = subtract %x: <8 x 4 x 16 x 16 x f32>, %a: <8 x 4 x 16 x 1 x f32>
    %c = exp %b: <8 x 4 x 16 x 16 x f32>
    %s = reduce %c: <8 x 4 x 16 x 16 x f32> by add init 0: f32 along 3
    %t = shapeCast %s: <8 x 4 x 16 x f32> to 8 x 4 x 16 x 1
    %d = divide %c: <8 x 4 x 16 x 16 x f32>, %t: <8 x 4 x 16 x 1 x f32>
    return %d: <8 x 4 x 16 x 16 x f32>
}
"""
LOG2E = "0x3FF7154760000000"  # exp's x · log2(e), as LLVM prints the f32 constant


def test_a_serial_kernels_exp_is_vectorised_in_a_body_of_its_own():
    _, text = compile_object(schedule(parse_module(SOFTMAX)), cpu="x86-64-v3")
    bodies = dict(re.findall(r'^define [^@]*@"?(k\.[^"(]*\.body)"?\((.*?)^}', text, re.M | re.S))
    exps = [name for name, body in bodies.items() if LOG2E in body]
    assert len(exps) == 1, sorted(bodies)
    assert re.search(rf"fmul[^\n]*<8 x float>[^\n]*{LOG2E}", bodies[exps[0]])
    host = re.search(r'^define [^@]*@"?dl_f"?\(.*?^}', text, re.M | re.S)
    assert host and LOG2E not in host.group(0)
