"""Loop info: headers, latches, preheaders, exits, nesting and invariance."""

from __future__ import annotations

import textwrap

from dlvm.analysis.loops import LoopInfo, loop_info
from dlvm.ir import parse_module
from dlvm.ir.values import Block, Function, literal


def fn(text: str) -> Function:
    f = parse_module('module "t"\nstage raw\n\n' + textwrap.dedent(text)).function_named("f")
    assert f is not None
    return f


def names(blocks) -> list[str]:
    return [b.name for b in blocks]


def bb(f: Function, name: str) -> Block:
    b = f.block_named(name)
    assert b is not None
    return b


SIMPLE = """
    func @f: (i32) -> i32 {
    'entry(%n: i32):
        %k = add %n: i32, 1: i32
        branch 'header(0: i32)
    'header(%i: i32):
        %c = lessThan %i: i32, %n: i32
        conditional %c: bool then 'body() else 'exit()
    'body():
        %j = add %i: i32, %k: i32
        branch 'header(%j: i32)
    'exit():
        return %i: i32
    }
    """


def test_simple_loop():
    f = fn(SIMPLE)
    li = loop_info(f)
    assert len(li.loops) == 1 and li.top_level == li.loops
    lp = li.loops[0]
    header, body, exit_ = bb(f, "header"), bb(f, "body"), bb(f, "exit")
    assert lp.header is header and names(lp.blocks) == ["header", "body"]
    assert names(lp.latches) == ["body"] and lp.latch is body
    assert lp.preheader is f.entry and names(lp.entering_blocks) == ["entry"]
    assert names(lp.exiting_blocks) == ["header"] and names(lp.exits) == ["exit"]
    assert lp.exit_edges == [(header, exit_)]
    assert lp.has_dedicated_exits
    assert lp.depth == 1 and lp.parent is None and lp.subloops == []
    assert li.loop_for(body) is lp and li.loop_for(exit_) is None and li.loop_for(f.entry) is None
    assert li.depth(body) == 1 and li.depth(exit_) == 0
    assert li.is_header(header) and not li.is_header(body)
    assert body in lp and lp.contains(header) and exit_ not in lp
    assert list(li) == [lp]


def test_invariance():
    f = fn(SIMPLE)
    lp = loop_info(f).loops[0]
    n = f.arguments[0]
    k = f.entry.instructions[0]
    i = bb(f, "header").arguments[0]
    j = bb(f, "body").instructions[0]
    assert lp.is_invariant(n) and lp.is_invariant(k)
    assert not lp.is_invariant(i) and not lp.is_invariant(j)
    assert lp.is_invariant(literal(1, n.type)) and lp.is_invariant(f)


def test_no_preheader_when_entering_block_branches_elsewhere():
    f = fn("""
        func @f: (bool) -> () {
        'entry(%c: bool):
            conditional %c: bool then 'header() else 'exit()
        'header():
            conditional %c: bool then 'header() else 'exit()
        'exit():
            return
        }
        """)
    lp = loop_info(f).loops[0]
    assert names(lp.entering_blocks) == ["entry"] and lp.preheader is None
    assert lp.latch is bb(f, "header") and names(lp.blocks) == ["header"]  # a self-loop
    assert not lp.has_dedicated_exits  # 'exit is also entered from 'entry


def test_no_preheader_with_two_entering_blocks():
    f = fn("""
        func @f: (bool) -> () {
        'entry(%c: bool):
            conditional %c: bool then 'a() else 'b()
        'a():
            branch 'header()
        'b():
            branch 'header()
        'header():
            conditional %c: bool then 'header() else 'exit()
        'exit():
            return
        }
        """)
    lp = loop_info(f).loops[0]
    assert names(lp.entering_blocks) == ["a", "b"] and lp.preheader is None
    assert lp.has_dedicated_exits


def test_unreachable_predecessor_does_not_spoil_preheader():
    f = fn("""
        func @f: (bool) -> () {
        'entry(%c: bool):
            branch 'header()
        'header():
            conditional %c: bool then 'header() else 'exit()
        'dead():
            branch 'header()
        'exit():
            return
        }
        """)
    lp = loop_info(f).loops[0]
    assert lp.preheader is f.entry and "dead" not in names(lp.blocks)


def test_multiple_latches_and_exits():
    f = fn("""
        func @f: (bool, bool) -> i32 {
        'entry(%c: bool, %d: bool):
            branch 'header()
        'header():
            conditional %c: bool then 'a() else 'b()
        'a():
            conditional %d: bool then 'header() else 'out1()
        'b():
            conditional %d: bool then 'header() else 'out2()
        'out1():
            return 1: i32
        'out2():
            branch 'out1()
        }
        """)
    li = loop_info(f)
    assert len(li.loops) == 1
    lp = li.loops[0]
    assert set(names(lp.latches)) == {"a", "b"} and lp.latch is None
    assert set(names(lp.blocks)) == {"header", "a", "b"} and lp.blocks[0] is bb(f, "header")
    assert set(names(lp.exiting_blocks)) == {"a", "b"}
    assert set(names(lp.exits)) == {"out1", "out2"}
    assert not lp.has_dedicated_exits  # 'out1 is also reached from 'out2, outside the loop
    assert lp.preheader is f.entry


NESTED = """
    func @f: (bool, bool, bool) -> () {
    'entry(%c: bool, %d: bool, %e: bool):
        branch 'outer()
    'outer():
        branch 'inner1()
    'inner1():
        conditional %c: bool then 'inner1() else 'mid()
    'mid():
        branch 'inner2()
    'inner2():
        branch 'inner2_body()
    'inner2_body():
        conditional %d: bool then 'inner2() else 'latch()
    'latch():
        conditional %e: bool then 'outer() else 'exit()
    'exit():
        return
    }
    """


def test_nested_loops():
    f = fn(NESTED)
    li = loop_info(f)
    assert [lp.header.name for lp in li.loops] == ["outer", "inner1", "inner2"]
    outer, inner1, inner2 = li.loops
    assert li.top_level == [outer] and outer.subloops == [inner1, inner2]
    assert inner1.parent is outer and inner2.parent is outer
    assert inner1.depth == 2 and inner2.depth == 2 and outer.depth == 1
    assert names(outer.blocks) == ["outer", "inner1", "mid", "inner2", "inner2_body", "latch"]
    assert names(inner1.blocks) == ["inner1"]
    assert names(inner2.blocks) == ["inner2", "inner2_body"]
    assert li.loop_for(bb(f, "inner2_body")) is inner2
    assert li.loop_for(bb(f, "mid")) is outer and li.depth(bb(f, "mid")) == 1
    assert li.depth(bb(f, "inner1")) == 2
    assert inner1.preheader is bb(f, "outer") and inner2.preheader is bb(f, "mid")
    assert outer.preheader is f.entry and outer.latch is bb(f, "latch")
    assert names(inner1.exits) == ["mid"] and names(inner2.exits) == ["latch"]
    assert names(outer.exits) == ["exit"] and names(outer.exiting_blocks) == ["latch"]


def test_three_deep_nesting_found_inside_out():
    f = fn("""
        func @f: (bool) -> () {
        'entry(%c: bool):
            branch 'l1()
        'l1():
            branch 'l2()
        'l2():
            branch 'l3()
        'l3():
            conditional %c: bool then 'l3() else 'l2_latch()
        'l2_latch():
            conditional %c: bool then 'l2() else 'l1_latch()
        'l1_latch():
            conditional %c: bool then 'l1() else 'exit()
        'exit():
            return
        }
        """)
    li = loop_info(f)
    l1, l2, l3 = li.loops
    assert (l1.depth, l2.depth, l3.depth) == (1, 2, 3)
    assert l3.parent is l2 and l2.parent is l1 and l1.subloops == [l2]
    assert names(l2.blocks) == ["l2", "l3", "l2_latch"]
    assert li.loop_for(bb(f, "l3")) is l3 and li.loop_for(bb(f, "l1_latch")) is l1


def test_irreducible_cycle_is_not_a_loop():
    f = fn("""
        func @f: (bool) -> () {
        'entry(%c: bool):
            conditional %c: bool then 'a() else 'b()
        'a():
            conditional %c: bool then 'b() else 'exit()
        'b():
            conditional %c: bool then 'a() else 'exit()
        'exit():
            return
        }
        """)
    li = loop_info(f)
    assert li.loops == [] and li.loop_for(bb(f, "a")) is None


def test_unreachable_loop_is_ignored_and_straight_line_has_none():
    f = fn("""
        func @f: () -> () {
        'entry():
            return
        'dead():
            branch 'dead()
        }
        """)
    assert loop_info(f).loops == []
    assert LoopInfo(fn("func @f: () -> () {\n'entry():\n    return\n}\n")).top_level == []


def test_loop_info_cached_per_revision():
    f = fn(SIMPLE)
    li = loop_info(f)
    assert loop_info(f) is li
    f.add_block(Block("extra"))
    assert loop_info(f) is not li
