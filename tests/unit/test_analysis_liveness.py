"""Liveness across blocks and loops, and differentiability / activity analysis."""

from __future__ import annotations

import textwrap

from dlvm.analysis.differentiability import (
    activity,
    differentiable_arguments,
    is_differentiable_type,
)
from dlvm.analysis.liveness import liveness
from dlvm.ir import parse_module
from dlvm.ir.types import DATA_TYPES, TensorType, TupleType
from dlvm.ir.values import Block, Function, Value


def fn(text: str) -> Function:
    f = parse_module('module "t"\nstage raw\n\n' + textwrap.dedent(text)).function_named("f")
    assert f is not None
    return f


def bb(f: Function, name: str) -> Block:
    b = f.block_named(name)
    assert b is not None
    return b


def refs(values: list[Value]) -> list[str]:
    return [v.ref_text() for v in values]


LOOP = """
    func @f: (i32, i32) -> i32 {
    'entry(%n: i32, %step: i32):
        %k = multiply %step: i32, 2: i32
        branch 'header(0: i32, 0: i32)
    'header(%i: i32, %acc: i32):
        %c = lessThan %i: i32, %n: i32
        conditional %c: bool then 'body() else 'exit()
    'body():
        %j = add %i: i32, %k: i32
        %a = add %acc: i32, %i: i32
        branch 'header(%j: i32, %a: i32)
    'exit():
        return %acc: i32
    }
    """


def test_liveness_across_a_loop():
    f = fn(LOOP)
    lv = liveness(f)
    entry, header, body, exit_ = f.entry, bb(f, "header"), bb(f, "body"), bb(f, "exit")
    assert refs(lv.live_in(entry)) == []
    assert refs(lv.live_out(entry)) == ["%n", "%k"]  # %step dies in 'entry
    assert refs(lv.live_in(header)) == ["%n", "%k"]  # its own arguments are defined there
    assert refs(lv.live_out(header)) == ["%n", "%k", "%i", "%acc"]
    assert refs(lv.live_in(body)) == ["%n", "%k", "%i", "%acc"]
    # Successor arguments are used at the end of 'body; the header's arguments are not live.
    assert refs(lv.live_out(body)) == ["%n", "%k"]
    assert refs(lv.live_in(exit_)) == ["%acc"] and lv.live_out(exit_) == []
    i = header.arguments[0]
    assert lv.is_live_in(i, body) and lv.is_live_out(i, header) and not lv.is_live_in(i, header)


def test_live_after_instruction():
    f = fn(LOOP)
    lv = liveness(f)
    body = bb(f, "body")
    j, a, _ = body.instructions
    assert refs(lv.live_after(j)) == ["%n", "%k", "%i", "%acc", "%j"]
    assert refs(lv.live_after(a)) == ["%n", "%k", "%j", "%a"]
    assert refs(lv.live_after(body.terminator)) == ["%n", "%k"]


def test_liveness_diamond_with_unreachable_block():
    f = fn("""
        func @f: (bool, f32, f32) -> f32 {
        'entry(%c: bool, %x: f32, %y: f32):
            %s = add %x: f32, %y: f32
            conditional %c: bool then 'a() else 'b(%x: f32)
        'a():
            branch 'join(%y: f32)
        'b(%p: f32):
            branch 'join(%p: f32)
        'dead():
            branch 'join(%s: f32)
        'join(%r: f32):
            %t = multiply %r: f32, %s: f32
            return %t: f32
        }
        """)
    lv = liveness(f)
    assert refs(lv.live_out(f.entry)) == ["%y", "%s"]  # %x is used by the terminator only
    assert refs(lv.live_in(bb(f, "a"))) == ["%y", "%s"]
    assert refs(lv.live_in(bb(f, "b"))) == ["%s"]
    assert refs(lv.live_in(bb(f, "join"))) == ["%s"]
    assert refs(lv.live_in(bb(f, "dead"))) == ["%s"]  # unreachable blocks get sets too


def test_liveness_is_cached():
    f = fn(LOOP)
    lv = liveness(f)
    assert liveness(f) is lv
    f.entry.instructions[0].erase()
    lv2 = liveness(f)
    # Values not defined in the function (the erased %k) are not tracked.
    assert lv2 is not lv and refs(lv2.live_out(f.entry)) == ["%n"]


# Differentiability -----------------------------------------------------------------------------


def test_differentiable_types_and_arguments():
    f32, i32 = DATA_TYPES["f32"], DATA_TYPES["i32"]
    assert is_differentiable_type(TensorType((2, 3), f32))
    assert is_differentiable_type(TensorType((), f32))
    assert not is_differentiable_type(TensorType((2,), i32))
    assert not is_differentiable_type(TupleType((TensorType((2,), f32),)))
    f = fn("""
        func @f: (f32, i32, <2 x f64>, bool) -> f32 {
        'entry(%a: f32, %b: i32, %c: <2 x f64>, %d: bool):
            return %a: f32
        }
        """)
    assert differentiable_arguments(f) == [0, 2]


ACTIVE = """
    func @f: (f32, f32, f32) -> f32 {
    'entry(%x: f32, %y: f32, %z: f32):
        %a = multiply %x: f32, %x: f32
        %b = sin %y: f32
        %fl = floor %z: f32
        %c = lessThan %a: f32, %fl: f32
        %d = add %a: f32, %fl: f32
        conditional %c: bool then 'then(%d: f32) else 'else(%z: f32)
    'then(%p: f32):
        branch 'join(%p: f32)
    'else(%q: f32):
        %e = exp %q: f32
        branch 'join(%e: f32)
    'join(%r: f32):
        %s = add %r: f32, 1: f32
        return %s: f32
    }
    """


def test_activity_all_arguments():
    f = fn(ACTIVE)
    act = activity(f)
    names = {v.ref_text() for v in act.active}
    # floor is active: its derivative is zero, but it is one (unlike an integer path).
    assert names == {"%x", "%a", "%d", "%p", "%z", "%fl", "%q", "%e", "%r", "%s"}
    assert "%b" in {v.ref_text() for v in act.varied}  # varied but never reaches the result
    assert "%y" not in names
    assert act.obstacles == []
    assert "%c" not in names  # a branch condition carries no derivative
    assert refs(act.active_arguments()) == ["%x", "%z"]
    assert [i.name for i in act.active_instructions()] == ["a", "fl", "d", "e", "s"]


def test_activity_wrt_subset():
    f = fn(ACTIVE)
    act = activity(f, wrt=[0])
    assert refs(act.wrt) == ["%x"]
    assert {v.ref_text() for v in act.active} == {"%x", "%a", "%d", "%p", "%r", "%s"}
    assert refs(act.active_arguments(bb(f, "else"))) == []
    assert not act.is_active(f.arguments[2])


def test_activity_through_aggregate_successor_arguments():
    f = fn("""
        func @f: (f32, i32) -> f32 {
        'entry(%x: f32, %n: i32):
            branch 'next((%x: f32, %n: i32): (f32, i32))
        'next(%t: (f32, i32)):
            %y = extract 0 from %t: (f32, i32)
            return %y: f32
        }
        """)
    act = activity(f)
    assert {v.ref_text() for v in act.active} == {"%x", "%t", "%y"}
