"""CFG, dominance, post-dominance, frontiers, data flow and the analysis cache."""

from __future__ import annotations

import textwrap

from dlvm.analysis import analysis, invalidate
from dlvm.analysis.dataflow import DataFlow, data_flow
from dlvm.analysis.frontier import dominance_frontier, post_dominance_frontier
from dlvm.analysis.postdominance import post_dominator_tree
from dlvm.ir import parse_module
from dlvm.ir.cfg import CFG
from dlvm.ir.dominance import dominator_tree
from dlvm.ir.ops import lookup
from dlvm.ir.values import Block, Function, Instruction, Module


def parse(text: str) -> Module:
    return parse_module('module "t"\nstage raw\n\n' + textwrap.dedent(text))


def fn(text: str, name: str = "f") -> Function:
    f = parse(text).function_named(name)
    assert f is not None
    return f


def names(blocks) -> list[str]:
    return [b.name for b in blocks]


def bb(f: Function, name: str):
    b = f.block_named(name)
    assert b is not None
    return b


def value(f: Function, name: str):
    for b in f.blocks:
        for a in b.arguments:
            if a.name == name:
                return a
        for i in b.instructions:
            if i.name == name:
                return i
    raise KeyError(name)


DIAMOND = """
    func @f: (bool, f32) -> f32 {
    'entry(%c: bool, %x: f32):
        conditional %c: bool then 'a() else 'b()
    'a():
        %y = add %x: f32, 1: f32
        branch 'join(%y: f32)
    'b():
        branch 'join(%x: f32)
    'join(%r: f32):
        return %r: f32
    }
    """

TWO_RETURNS = """
    func @f: (bool, f32) -> f32 {
    'entry(%c: bool, %x: f32):
        conditional %c: bool then 'a() else 'b()
    'a():
        return %x: f32
    'b():
        %y = negate %x: f32
        branch 'c()
    'c():
        return %y: f32
    }
    """

ENUM = """
    enum $E {
        ?a(f32)
        ?b()
    }

    func @f: ($E) -> f32 {
    'entry(%e: $E):
        branchEnum %e: $E case ?a 'ba case ?b 'bb
    'ba(%v: f32):
        branch 'join(%v: f32)
    'bb():
        branch 'join(0: f32)
    'join(%r: f32):
        return %r: f32
    }
    """

UNREACHABLE = """
    func @f: (f32) -> f32 {
    'entry(%x: f32):
        branch 'exit()
    'dead():
        branch 'exit()
    'exit():
        return %x: f32
    }
    """

LOOP = """
    func @f: (i32) -> i32 {
    'entry(%n: i32):
        branch 'header(0: i32)
    'header(%i: i32):
        %c = lessThan %i: i32, %n: i32
        conditional %c: bool then 'body() else 'exit()
    'body():
        %j = add %i: i32, 1: i32
        branch 'header(%j: i32)
    'exit():
        return %i: i32
    }
    """

INFINITE = """
    func @f: (bool) -> () {
    'entry(%c: bool):
        conditional %c: bool then 'spin() else 'out()
    'spin():
        branch 'spin()
    'out():
        return
    }
    """


# CFG -------------------------------------------------------------------------------------------


def test_cfg_diamond():
    f = fn(DIAMOND)
    g = CFG(f)
    assert names(g.successors[bb(f, "entry")]) == ["a", "b"]
    assert names(g.predecessors[bb(f, "join")]) == ["a", "b"]
    assert g.rpo[0] is f.entry and g.rpo[-1] is bb(f, "join")
    assert names(g.exits()) == ["join"]


def test_cfg_branch_enum_edges_are_edges():
    f = fn(ENUM)
    g = CFG(f)
    assert names(g.successors[f.entry]) == ["ba", "bb"]
    assert names(g.predecessors[bb(f, "join")]) == ["ba", "bb"]
    assert all(g.reachable(b) for b in f.blocks)
    assert dominator_tree(f).immediate_dominator(bb(f, "join")) is f.entry


def test_cfg_unreachable_block():
    f = fn(UNREACHABLE)
    g = CFG(f)
    assert not g.reachable(bb(f, "dead"))
    assert names(g.predecessors[bb(f, "exit")]) == ["entry", "dead"]
    assert names(g.rpo) == ["entry", "exit"]


# Dominance -------------------------------------------------------------------------------------


def test_dominators_diamond():
    f = fn(DIAMOND)
    dt = dominator_tree(f)
    entry, a, join = f.entry, bb(f, "a"), bb(f, "join")
    assert dt.immediate_dominator(join) is entry
    assert dt.immediate_dominator(entry) is None
    assert dt.dominates(entry, join) and not dt.dominates(a, join)
    assert dt.properly_dominates(entry, a) and not dt.properly_dominates(a, a)
    assert set(names(dt.children[entry])) == {"a", "b", "join"}


def test_dominators_ignore_unreachable():
    f = fn(UNREACHABLE)
    dt = dominator_tree(f)
    dead, exit_ = bb(f, "dead"), bb(f, "exit")
    assert dt.immediate_dominator(exit_) is f.entry
    assert not dt.dominates(dead, exit_) and not dt.dominates(f.entry, dead)


def test_value_dominance():
    f = fn(DIAMOND)
    dt = dominator_tree(f)
    y = value(f, "y")
    ret = bb(f, "join").terminator
    assert dt.value_dominates(value(f, "x"), ret)
    assert not dt.value_dominates(y, ret)
    assert dt.value_dominates(y, bb(f, "a").terminator)


# Post-dominance --------------------------------------------------------------------------------


def test_post_dominators_diamond():
    f = fn(DIAMOND)
    pdt = post_dominator_tree(f)
    entry, a, b, join = f.entry, bb(f, "a"), bb(f, "b"), bb(f, "join")
    assert pdt.ipdom(entry) is join and pdt.ipdom(a) is join
    assert pdt.ipdom(join) is None
    assert pdt.post_dominates(join, entry) and pdt.post_dominates(join, join)
    assert not pdt.post_dominates(a, entry)
    assert pdt.properly_post_dominates(join, b) and not pdt.properly_post_dominates(join, join)
    assert names(pdt.roots) == ["join"]
    assert pdt.nearest_common_post_dominator(a, b) is join


def test_post_dominators_multiple_returns():
    f = fn(TWO_RETURNS)
    pdt = post_dominator_tree(f)
    entry, a, b, c = f.entry, bb(f, "a"), bb(f, "b"), bb(f, "c")
    assert pdt.ipdom(entry) is None  # only the virtual exit post-dominates a two-way split
    assert pdt.ipdom(b) is c and pdt.ipdom(a) is None and pdt.ipdom(c) is None
    assert set(names(pdt.roots)) == {"a", "c", "entry"}
    assert names(pdt.children[c]) == ["b"] and pdt.children[a] == []
    assert pdt.post_dominates(c, b) and not pdt.post_dominates(c, entry)
    assert not pdt.post_dominates(a, entry)
    assert pdt.nearest_common_post_dominator(a, b) is None
    assert pdt.nearest_common_post_dominator(b, c) is c


def test_post_dominators_loop_and_unreachable():
    f = fn(LOOP)
    pdt = post_dominator_tree(f)
    header, body, exit_ = bb(f, "header"), bb(f, "body"), bb(f, "exit")
    assert pdt.ipdom(f.entry) is header and pdt.ipdom(body) is header
    assert pdt.ipdom(header) is exit_
    g = fn(UNREACHABLE)
    dead = bb(g, "dead")
    assert post_dominator_tree(g).ipdom(dead) is bb(g, "exit")  # reaches the exit all the same


def test_post_dominators_infinite_loop_left_out():
    f = fn(INFINITE)
    pdt = post_dominator_tree(f)
    spin, out = bb(f, "spin"), bb(f, "out")
    assert not pdt.contains(spin) and pdt.contains(out)
    assert pdt.ipdom(spin) is None
    assert not pdt.post_dominates(out, spin) and not pdt.post_dominates(spin, spin)
    assert pdt.ipdom(f.entry) is out  # the only path to an exit goes through 'out


def test_post_dominators_no_exit():
    f = fn("""
        func @f: () -> () {
        'entry():
            branch 'entry()
        }
        """)
    pdt = post_dominator_tree(f)
    assert pdt.roots == [] and not pdt.contains(f.entry)


# Frontiers -------------------------------------------------------------------------------------


def test_dominance_frontier_diamond_and_loop():
    f = fn(DIAMOND)
    df = dominance_frontier(f)
    assert names(df.frontier(bb(f, "a"))) == ["join"]
    assert names(df.frontier(bb(f, "b"))) == ["join"]
    assert df.frontier(f.entry) == [] and df.frontier(bb(f, "join")) == []
    g = fn(LOOP)
    dfl = dominance_frontier(g)
    assert names(dfl.frontier(bb(g, "body"))) == ["header"]
    assert names(dfl.frontier(bb(g, "header"))) == ["header"]
    assert dfl.frontier(g.entry) == []


def test_dominance_frontier_entry_back_edge():
    f = fn("""
        func @f: () -> () {
        'entry():
            branch 'a()
        'a():
            branch 'entry()
        }
        """)
    df = dominance_frontier(f)
    assert names(df.frontier(bb(f, "a"))) == ["entry"]
    assert names(df.frontier(f.entry)) == ["entry"]


def test_post_dominance_frontier_is_control_dependence():
    f = fn(DIAMOND)
    pdf = post_dominance_frontier(f)
    assert names(pdf.frontier(bb(f, "a"))) == ["entry"]
    assert names(pdf.frontier(bb(f, "b"))) == ["entry"]
    assert pdf.frontier(bb(f, "join")) == [] and pdf.frontier(f.entry) == []
    g = fn(TWO_RETURNS)
    pdfg = post_dominance_frontier(g)
    assert names(pdfg.frontier(bb(g, "c"))) == ["entry"]
    assert names(pdfg.frontier(bb(g, "a"))) == ["entry"]
    h = fn(LOOP)
    pdfh = post_dominance_frontier(h)
    assert names(pdfh.frontier(bb(h, "body"))) == ["header"]
    assert names(pdfh.frontier(bb(h, "header"))) == ["header"]


# Data flow -------------------------------------------------------------------------------------


USES = """
    func @f: (f32, <4 x f32>, i64) -> f32 {
    'entry(%x: f32, %v: <4 x f32>, %i: i64):
        %a = add %x: f32, %x: f32
        %t = literal (%a: f32, %x: f32): (f32, f32)
        %e = extract %i: i64 from %v: <4 x f32>
        %s = reduce %v: <4 x f32> by @plus: (f32, f32) -> f32 init 0: f32 along 0
        %c = lessThan %a: f32, %e: f32
        conditional %c: bool then 'yes(%a: f32) else 'no()
    'yes(%r: f32):
        return %r: f32
    'no():
        %m = multiply %s: f32, %a: f32
        return %m: f32
    }

    func @plus: (f32, f32) -> f32 {
    'entry(%p: f32, %q: f32):
        %z = add %p: f32, %q: f32
        return %z: f32
    }
    """


def test_dataflow_users_in_program_order():
    m = parse(USES)
    f = m.function_named("f")
    df = data_flow(f)
    a = value(f, "a")
    assert [u.name for u in df.users(a)] == ["t", "c", None, "m"]
    assert df.users(a)[2].opcode == "conditional"  # successor arguments are uses
    assert [u.name for u in df.users(value(f, "x"))] == ["a", "t"]  # nested literal elements
    assert [u.name for u in df.users(value(f, "i"))] == ["e"]  # value element keys
    assert [u.name for u in df.users(m.function_named("plus"))] == ["s"]  # combinators
    assert df.users(value(f, "t")) == [] and not df.has_users(value(f, "t"))
    assert df.has_users(a)


def test_dataflow_use_count_and_predecessors():
    f = parse(USES).function_named("f")
    df = data_flow(f)
    x, a, e, c = value(f, "x"), value(f, "a"), value(f, "e"), value(f, "c")
    assert df.use_count(x) == 3 and len(df.users(x)) == 2
    assert df.use_count(a) == 4
    assert df.predecessors(c) == [a, e]
    assert df.predecessors(a) == []
    assert df.predecessors(value(f, "m")) == [value(f, "s"), a]


def test_dataflow_transitive_users():
    f = parse(USES).function_named("f")
    df = data_flow(f)
    got = [u.name or u.opcode for u in df.transitive_users(value(f, "e"))]
    assert got == ["c", "conditional"]
    got = [u.name or u.opcode for u in df.transitive_users([value(f, "s")])]
    assert got == ["m", "return"]


def test_dataflow_result_is_a_copy():
    f = parse(USES).function_named("f")
    df = data_flow(f)
    df.users(value(f, "a")).clear()
    assert df.has_users(value(f, "a"))


# Cache -----------------------------------------------------------------------------------------


def test_cache_returns_same_object_until_an_edit():
    f = parse(USES).function_named("f")
    first = data_flow(f)
    assert data_flow(f) is first and analysis(DataFlow, f) is first
    x = value(f, "x")
    extra = Instruction(lookup("negate"), [x], {}, x.type, name="n")
    f.entry.insert(0, extra)
    second = data_flow(f)
    assert second is not first
    assert second.users(x)[0] is extra and extra not in first.users(x)
    assert data_flow(f) is second


def test_cache_invalidate_and_dependent_analyses():
    f = fn(DIAMOND)
    pdt = post_dominator_tree(f)
    dt = dominator_tree(f)
    assert post_dominator_tree(f) is pdt
    invalidate(f)
    assert post_dominator_tree(f) is not pdt and dominator_tree(f) is not dt
    pdt2 = post_dominator_tree(f)
    f.add_block(Block("extra"))
    pdt3 = post_dominator_tree(f)
    assert pdt3 is not pdt2 and pdt3.contains(bb(f, "extra"))
    invalidate()
    assert dominance_frontier(f) is dominance_frontier(f)
