"""Side-effect analysis: instruction flags, propagation through calls, recursion and caching."""

from __future__ import annotations

import textwrap

from dlvm.analysis import invalidate
from dlvm.analysis.side_effects import (
    ALL_EFFECTS,
    NO_EFFECTS,
    Effects,
    function_effects,
    instruction_effects,
    is_pure,
    may_merge,
    may_remove,
    side_effects,
)
from dlvm.ir import parse_module
from dlvm.ir.ops import lookup
from dlvm.ir.types import VOID
from dlvm.ir.values import Function, Instruction, Module


def parse(text: str) -> Module:
    return parse_module('module "t"\nstage raw\n\n' + textwrap.dedent(text))


def get(m: Module, name: str) -> Function:
    f = m.function_named(name)
    assert f is not None
    return f


def named(f: Function, name: str) -> Instruction:
    for i in f.instructions():
        if i.name == name:
            return i
    raise KeyError(name)


EFFECTS = """
    var @g: f32

    func @pure: (f32) -> f32 {
    'entry(%x: f32):
        %y = tanh %x: f32
        return %y: f32
    }

    func @writer: (f32) -> () {
    'entry(%x: f32):
        store %x: f32 to @g: *f32
        return
    }

    func @reader: () -> f32 {
    'entry():
        %v = load @g: *f32
        return %v: f32
    }

    func @trapper: (bool) -> () {
    'entry(%c: bool):
        conditional %c: bool then 'bad() else 'ok()
    'bad():
        trap
        return
    'ok():
        return
    }

    func @dice: () -> <2 x f32> {
    'entry():
        %r = random 2 from 0: f32 upto 1: f32
        return %r: <2 x f32>
    }

    func @caller: (f32) -> f32 {
    'entry(%x: f32):
        %a = apply @pure(%x: f32): (f32) -> f32
        apply @writer(%a: f32): (f32) -> ()
        return %a: f32
    }

    func @top: (f32) -> f32 {
    'entry(%x: f32):
        %a = apply @caller(%x: f32): (f32) -> f32
        return %a: f32
    }
    """


def test_function_flags_from_declarations():
    m = parse(EFFECTS)
    se = side_effects(m)
    assert se.function_effects(get(m, "pure")) == NO_EFFECTS
    assert se.function_effects(get(m, "writer")) == Effects(writes=True)
    assert se.function_effects(get(m, "reader")) == Effects(reads=True)
    assert se.function_effects(get(m, "trapper")) == Effects(traps=True)
    assert se.function_effects(get(m, "dice")) == Effects(nondet=True)


def test_effects_propagate_through_calls():
    m = parse(EFFECTS)
    assert function_effects(get(m, "caller")) == Effects(writes=True)
    assert function_effects(get(m, "top")) == Effects(writes=True)
    caller = get(m, "caller")
    assert instruction_effects(named(caller, "a")) == NO_EFFECTS
    assert instruction_effects(caller.entry.instructions[1]) == Effects(writes=True)


def test_instruction_helpers():
    m = parse(EFFECTS)
    y = named(get(m, "pure"), "y")
    v = named(get(m, "reader"), "v")
    r = named(get(m, "dice"), "r")
    store = get(m, "writer").entry.instructions[0]
    trap = get(m, "trapper").block_named("bad").instructions[0]
    ret = get(m, "pure").entry.terminator
    call_pure = named(get(m, "caller"), "a")
    call_writer = get(m, "caller").entry.instructions[1]
    assert trap.opcode == "trap" and store.opcode == "store" and ret is not None
    assert is_pure(y) and may_remove(y) and may_merge(y)
    assert not is_pure(v) and may_remove(v) and not may_merge(v)  # reads: unused loads go
    assert not is_pure(r) and may_remove(r) and not may_merge(r)  # nondet: never merged
    assert not may_remove(store) and not may_merge(store)
    assert not may_remove(trap) and not is_pure(trap)
    assert not may_remove(ret) and not is_pure(ret) and not may_merge(ret)
    assert is_pure(call_pure) and may_remove(call_pure) and may_merge(call_pure)
    assert not may_remove(call_writer)


def test_direct_recursion_terminates():
    m = parse("""
        var @g: f32

        func @rec: (f32) -> f32 {
        'entry(%x: f32):
            %y = apply @rec(%x: f32): (f32) -> f32
            return %y: f32
        }

        func @recw: (f32) -> f32 {
        'entry(%x: f32):
            store %x: f32 to @g: *f32
            %y = apply @recw(%x: f32): (f32) -> f32
            return %y: f32
        }
        """)
    assert function_effects(get(m, "rec")) == NO_EFFECTS
    assert function_effects(get(m, "recw")) == Effects(writes=True)
    assert not may_remove(named(get(m, "recw"), "y"))


def test_mutual_recursion_reaches_fixpoint():
    m = parse("""
        func @even: (i32) -> bool {
        'entry(%n: i32):
            %z = equal %n: i32, 0: i32
            conditional %z: bool then 'yes() else 'no()
        'yes():
            return true: bool
        'no():
            %m = subtract %n: i32, 1: i32
            %r = apply @odd(%m: i32): (i32) -> bool
            return %r: bool
        }

        func @odd: (i32) -> bool {
        'entry(%n: i32):
            %z = lessThan %n: i32, 0: i32
            conditional %z: bool then 'bad() else 'go()
        'bad():
            trap
            return false: bool
        'go():
            %m = subtract %n: i32, 1: i32
            %r = apply @even(%m: i32): (i32) -> bool
            %q = apply @third(%m: i32): (i32) -> bool
            return %r: bool
        }

        func @third: (i32) -> bool {
        'entry(%n: i32):
            %v = random scalar from 0: f32 upto 1: f32
            %r = apply @even(%n: i32): (i32) -> bool
            return %r: bool
        }

        func @outside: (i32) -> bool {
        'entry(%n: i32):
            %z = equal %n: i32, 0: i32
            return %z: bool
        }
        """)
    both = Effects(traps=True, nondet=True)
    for name in ("even", "odd", "third"):
        assert function_effects(get(m, name)) == both
    assert function_effects(get(m, "outside")) == NO_EFFECTS


def test_extern_has_every_effect():
    m = parse("""
        [extern]
        func @ext: (f32) -> f32

        func @user: (f32) -> f32 {
        'entry(%x: f32):
            %y = apply @ext(%x: f32): (f32) -> f32
            return %y: f32
        }
        """)
    assert function_effects(get(m, "ext")) == ALL_EFFECTS
    assert function_effects(get(m, "user")) == ALL_EFFECTS
    assert not may_remove(named(get(m, "user"), "y"))


def test_gradient_declaration_has_its_primals_effects():
    m = parse("""
        var @g: f32

        func @f: (f32) -> f32 {
        'entry(%x: f32):
            %y = sin %x: f32
            return %y: f32
        }

        [gradient @f]
        func @df: (f32) -> (f32)

        func @h: (f32) -> f32 {
        'entry(%x: f32):
            store %x: f32 to @g: *f32
            return %x: f32
        }

        [gradient @h]
        func @dh: (f32) -> (f32)

        func @user: (f32) -> (f32) {
        'entry(%x: f32):
            %d = apply @df(%x: f32): (f32) -> (f32)
            return %d: (f32)
        }
        """)
    assert function_effects(get(m, "df")) == NO_EFFECTS
    assert function_effects(get(m, "dh")) == Effects(writes=True)
    assert may_remove(named(get(m, "user"), "d"))


def test_indirect_call_and_combinator():
    m = parse("""
        func @f: ((f32) -> f32, f32, <4 x f32>) -> f32 {
        'entry(%fp: (f32) -> f32, %x: f32, %v: <4 x f32>):
            %y = apply %fp(%x: f32): (f32) -> f32
            %s = reduce %v: <4 x f32> by @checked: (f32, f32) -> f32 init 0: f32 along 0
            %t = reduce %v: <4 x f32> by add init 0: f32 along 0
            return %y: f32
        }

        func @checked: (f32, f32) -> f32 {
        'entry(%a: f32, %b: f32):
            %c = lessThan %a: f32, 0: f32
            conditional %c: bool then 'bad() else 'ok()
        'bad():
            trap
            return %a: f32
        'ok():
            %r = add %a: f32, %b: f32
            return %r: f32
        }
        """)
    f = get(m, "f")
    assert instruction_effects(named(f, "y")) == ALL_EFFECTS
    assert instruction_effects(named(f, "s")) == Effects(traps=True)
    assert instruction_effects(named(f, "t")) == NO_EFFECTS
    assert function_effects(f) == ALL_EFFECTS


def test_detached_instructions_and_functions():
    m = parse(EFFECTS)
    pure = get(m, "pure")
    x = pure.arguments[0]
    call = Instruction(lookup("apply"), [pure, x], {}, x.type)
    assert instruction_effects(call) == ALL_EFFECTS  # no module to resolve the callee in
    neg = Instruction(lookup("negate"), [x], {}, x.type)
    assert is_pure(neg)
    m.remove_function(pure)
    assert function_effects(pure) == ALL_EFFECTS
    assert function_effects(get(m, "caller")) == ALL_EFFECTS  # its callee left the module


def test_cache_per_module_and_recompute_after_edit():
    m = parse(EFFECTS)
    se = side_effects(m)
    assert side_effects(m) is se
    pure = get(m, "pure")
    pure.entry.insert(0, Instruction(lookup("trap"), [], {}, VOID))
    se2 = side_effects(m)
    assert se2 is not se
    assert se2.function_effects(pure) == Effects(traps=True)
    assert se2.function_effects(get(m, "top")) == Effects(writes=True, traps=True)
    assert side_effects(m) is se2
    invalidate(get(m, "dice"))
    assert side_effects(m) is not se2


def test_effects_union():
    assert Effects(writes=True) | Effects(traps=True) == Effects(writes=True, traps=True)
    assert NO_EFFECTS.pure and not Effects(reads=True).pure
