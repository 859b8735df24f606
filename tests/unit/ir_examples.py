"""One valid example per instruction, used by the round-trip, interpreter and property tests.

Each entry is (argument declarations, instruction text, return type); the instruction is the
result `%r` unless the opcode produces no value.
"""

from dlvm.ir.ops import BINARY, COMPARE, UNARY_FLOAT, UNARY_NUMERIC

M = "<2 x 3 x f32>"
PRELUDE = """struct $S {
    #a: f32
    #b: <2 x f32>
}

enum $E {
    ?some(f32)
    ?none()
}

var @g: f32

func @comb: (f32, f32) -> f32 {
'entry(%p: f32, %q: f32):
    %0.0 = add %p: f32, %q: f32
    return %0.0: f32
}
"""

EXAMPLES: dict[str, str] = {}
for _op in UNARY_FLOAT + UNARY_NUMERIC:
    EXAMPLES[_op] = f"%r = {_op} %m: {M}"
for _op in BINARY:
    EXAMPLES[_op] = f"%r = {_op} %m: {M}, %row: <1 x 3 x f32>"
for _op in COMPARE:
    EXAMPLES[_op] = f"%r = {_op} %m: {M}, 0.5: f32"
EXAMPLES.update(
    {
        "and": "%r = and %flags: <2 x 3 x bool>, true: bool",
        "or": "%r = or %flags: <2 x 3 x bool>, %flags: <2 x 3 x bool>",
        "not": "%r = not %flags: <2 x 3 x bool>",
        "xor": "%r = xor %bits: <2 x 3 x i32>, 5: i32",
        "shiftLeft": "%r = shiftLeft %bits: <2 x 3 x i32>, 3: i32",
        "shiftRight": "%r = shiftRight %bits: <2 x 3 x i32>, %bits: <2 x 3 x i32>",
        "literal": "%r = literal <1: f32, 2.5: f32>: <2 x f32>",
        "select": f"%r = select %m: {M}, 0: f32 by %flags: <2 x 3 x bool>",
        "dataTypeCast": f"%r = dataTypeCast %m: {M} to f64",
        "convert": f"%r = convert %m: {M} to i32",
        "bitCast": f"%r = bitCast %m: {M} to <2 x 3 x i32>",
        "dot": f"%r = dot %m: {M}, %k: <3 x 4 x f32>",
        "transpose": f"%r = transpose %m: {M}",
        "reverse": f"%r = reverse %m: {M} along 0, 1",
        "concatenate": f"%r = concatenate %m: {M}, %m: {M} along 1",
        "slice": f"%r = slice %m: {M} from 1 upto 1",
        "reduce": f"%r = reduce %m: {M} by add init 0: f32 along 1",
        "scan": f"%r = scan %m: {M} by @comb: (f32, f32) -> f32 along 0",
        "reduceWindow": f"%r = reduceWindow %m: {M} by max init -1: f32 dims 1, 2 strides 1, 1 "
        "padding half",
        "convolve": "%r = convolve %img: <1 x 2 x 5 x 5 x f32> kernel %ker: <4 x 1 x 3 x 3 x f32> "
        "strides 2, 1 padding (1, 1), (0, 2) leftDilation 1, 2 rightDilation 2, 1 groups 2",
        "gather": f"%r = gather %m: {M} at %ids: <2 x i64> along 1",
        "scatterAdd": f"%r = scatterAdd %m: {M} at %ids: <2 x i64> into %m: {M} along 0",
        "padShape": f"%r = padShape %m: {M} at 2",
        "squeezeShape": "%r = squeezeShape %row: <1 x 3 x f32> at 0",
        "shapeCast": f"%r = shapeCast %m: {M} to 3 x 2",
        "random": "%r = random 2 x 2 from 0: f32 upto 1: f32",
        "rank": f"%r = rank of %m: {M}",
        "shape": f"%r = shape of %m: {M}",
        "unitCount": f"%r = unitCount of %m: {M}",
        "extract": "%r = extract #b, 1 from %s: $S",
        "insert": "%r = insert 1: f32 to %s: $S at #a",
        "apply": "%r = apply @comb(1: f32, 2: f32): (f32, f32) -> f32",
        "branch": "branch 'next(1: f32)",
        "conditional": "conditional true: bool then 'next(1: f32) else 'next(2: f32)",
        "branchEnum": "branchEnum %e: $E case ?some 'next case ?none 'other",
        "return": "return",
        "createStack": "%r = createStack",
        "destroyStack": "destroyStack %r0: stack",
        "push": "push 1: f32 to %r0: stack",
        "pop": "%r = pop f32 from %r0: stack",
        "allocateStack": "%r = allocateStack f32 count 4",
        "allocateHeap": "%r = allocateHeap <2 x f32> count %n: i64",
        "allocateBox": "%r = allocateBox f32",
        "projectBox": "%r = projectBox %r0: box{f32}",
        "retain": "retain %r0: box{f32}",
        "release": "release %r0: box{f32}",
        "deallocate": "deallocate %r0: box{f32}",
        "load": "%r = load @g: *f32",
        "store": "store 1: f32 to @g: *f32",
        "elementPointer": "%r = elementPointer %p: *$S at 0, #b",
        "copy": "copy from @g: *f32 to @g: *f32 count 1: i64",
        "trap": "trap",
    }
)

# Instructions that need a value made first, named %r0.
SETUP = {
    "destroyStack": "%r0 = createStack",
    "push": "%r0 = createStack",
    "pop": "%r0 = createStack",
    "projectBox": "%r0 = allocateBox f32",
    "retain": "%r0 = allocateBox f32",
    "release": "%r0 = allocateBox f32",
    "deallocate": "%r0 = allocateBox f32",
}

ARGS = (
    f"%m: {M}, %row: <1 x 3 x f32>, %k: <3 x 4 x f32>, %flags: <2 x 3 x bool>, "
    "%img: <1 x 2 x 5 x 5 x f32>, %ker: <4 x 1 x 3 x 3 x f32>, %s: $S, %e: $E, %n: i64, "
    "%p: *$S, %ids: <2 x i64>, %bits: <2 x 3 x i32>"
)
ARG_TYPES = (
    f"({M}, <1 x 3 x f32>, <3 x 4 x f32>, <2 x 3 x bool>, <1 x 2 x 5 x 5 x f32>, "
    "<4 x 1 x 3 x 3 x f32>, $S, $E, i64, *$S, <2 x i64>, <2 x 3 x i32>)"
)


def module_for(opname: str) -> str:
    """A module whose function @test contains the example of `opname`."""
    body = EXAMPLES[opname]
    setup = SETUP.get(opname, "")
    lines = [f"    {setup}"] if setup else []
    lines.append(f"    {body}")
    terminator_ops = {"branch", "conditional", "branchEnum", "return"}
    if opname not in terminator_ops:
        lines.append("    return")
    tail = ""
    if opname in {"branch", "conditional", "branchEnum"}:
        tail = "'next(%v: f32):\n    return\n'other():\n    return\n"
    return (
        'module "example"\nstage raw\n\n' + PRELUDE + f"\nfunc @test: {ARG_TYPES} -> () {{\n"
        f"'entry({ARGS}):\n" + "\n".join(lines) + "\n" + tail + "}\n"
    )
