"""Memory planning of host frames (dlvm/codegen/frame.py): values whose lifetimes do not
overlap share bytes, a value never shares with one live at its definition or read by the
instruction that defines it, and values carried around a loop keep their storage."""

from __future__ import annotations

from dlvm.codegen.frame import FramePlan, storage_size
from dlvm.ir import parse_module
from dlvm.transforms.compute_generation import ComputeGeneration

CHAIN = """module "chain"
stage optimizable

func @f: (<1024 x f32>) -> <1024 x f32> {
'entry(%x: <1024 x f32>):
    %a = exp %x: <1024 x f32>
    %a2 = add %a: <1024 x f32>, %a: <1024 x f32>
    %b = tanh %a2: <1024 x f32>
    %b2 = add %b: <1024 x f32>, %b: <1024 x f32>
    %c = sin %b2: <1024 x f32>
    %c2 = add %c: <1024 x f32>, %c: <1024 x f32>
    return %c2: <1024 x f32>
}
"""

LOOP = """module "loop"
stage optimizable

func @f: (<256 x f32>, i64) -> <256 x f32> {
'entry(%x: <256 x f32>, %n: i64):
    branch 'head(%x: <256 x f32>, 0: i64)
'head(%h: <256 x f32>, %i: i64):
    %more = lessThan %i: i64, %n: i64
    conditional %more: bool then 'body() else 'done()
'body():
    %t = tanh %h: <256 x f32>
    %u = add %t: <256 x f32>, %h: <256 x f32>
    %j = add %i: i64, 1: i64
    branch 'head(%u: <256 x f32>, %j: i64)
'done():
    return %h: <256 x f32>
}
"""


def plan_of(text: str) -> FramePlan:
    module = parse_module(text, "m.dl")
    ComputeGeneration().run(module)
    return FramePlan(module.function_named("f"))


def overlap(plan: FramePlan, a, b) -> bool:
    sa, sb = storage_size(a.type), storage_size(b.type)
    oa, ob = plan.offset[a], plan.offset[b]
    return oa < ob + sb and ob < oa + sa


def test_a_chain_of_kernels_reuses_storage():
    plan = plan_of(CHAIN)
    values = plan.order
    assert len(values) == 4  # exp, add+tanh, add+sin, add: one kernel call each
    assert plan.size == 2 * 4096  # two buffers take turns, not four
    for v in values:  # no value shares with one it reads
        for u in v.operands[1:]:
            if u in plan.offset:
                assert not overlap(plan, v, u)


def test_values_carried_around_a_loop_keep_their_storage():
    plan = plan_of(LOOP)
    live_together = [
        (a, b) for a in plan.order for b in plan.order if a is not b and b in plan.interferes[a]
    ]
    assert live_together
    for a, b in live_together:
        assert not overlap(plan, a, b), (a, b)
    h = plan.fn.blocks[1].arguments[0]
    u = next(v for v in plan.order if getattr(v, "name", None) == "u")
    assert u in plan.interferes[h]  # %u is written to %h's successor slot while %h is read
