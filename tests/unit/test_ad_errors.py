"""Every way the differentiation pass refuses a gradient is a located diagnostic
(DiagnosticError, message and line:column), never a crash; and what is not a refusal (a mask
or a branch condition that depends on the argument, a piecewise-constant operation, integer
or random values off the derivative's path) differentiates without one."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from gradcheck import gradient_check

from dlvm.diagnostics import Diagnostic, DiagnosticError
from dlvm.interp import run_function
from dlvm.ir import parse_module
from dlvm.ir.verifier import verify
from dlvm.tools import dlopt
from dlvm.transforms.differentiation import Differentiation

HEAD = 'module "t"\nstage raw\n\n'
PATH = "refused.dl"


def line_of(text: str, needle: str) -> int:
    """The 1-based line of the only line of text that contains needle."""
    lines = [i for i, line in enumerate(text.split("\n"), start=1) if needle in line]
    assert len(lines) == 1, (needle, lines)
    return lines[0]


def refusals(body: str) -> list[Diagnostic]:
    """The diagnostics of differentiating a module that verifies."""
    module = parse_module(HEAD + body, PATH)
    assert verify(module) == []
    with pytest.raises(DiagnosticError) as info:
        Differentiation().run(module)
    return info.value.diagnostics


def assert_located(d: Diagnostic, body: str, needle: str, column: int) -> None:
    assert d.loc is not None, d.message
    line = line_of(HEAD + body, needle)
    assert d.loc.line_col == (line, column), (d.render(), needle)
    rendered = d.render()
    assert rendered.startswith(f"{PATH}:{line}:{column}: error: {d.message}\n")


def differentiates(body: str) -> None:
    module = parse_module(HEAD + body, PATH)
    Differentiation().run(module)
    assert verify(module) == []


# One refusal each: (body, the needle on the reported line, its column, message) ------------

RANDOM = """
func @f: (f32) -> f32 {
'entry(%x: f32):
    %r = random scalar from 0: f32 upto %x: f32
    %y = multiply %r: f32, %x: f32
    return %y: f32
}

[gradient @f]
func @g: (f32) -> (f32)
"""

# An integer computed from x (by a select on a compare of x) that reaches the result through
# a call: the derivative would have to flow through it.
INTEGER_BY_SELECT = """
func @use: (i32, f32) -> f32 {
'entry(%n: i32, %a: f32):
    return %a: f32
}

func @f: (f32) -> f32 {
'entry(%x: f32):
    %c = greaterThan %x: f32, 0: f32
    %i = select 1: i32, 2: i32 by %c: bool
    %y = apply @use(%i: i32, %x: f32): (i32, f32) -> f32
    return %y: f32
}

[gradient @f]
func @g: (f32) -> (f32)
"""

INTEGER_BY_CALL = """
func @toint: (f32) -> i32 {
'entry(%a: f32):
    return 1: i32
}

func @use: (i32, f32) -> f32 {
'entry(%n: i32, %a: f32):
    return %a: f32
}

func @f: (f32) -> f32 {
'entry(%x: f32):
    %i = apply @toint(%x: f32): (f32) -> i32
    %y = apply @use(%i: i32, %x: f32): (i32, f32) -> f32
    return %y: f32
}

[gradient @f]
func @g: (f32) -> (f32)
"""

DIGAMMA = """
func @f: (<2 x f32>) -> <2 x f32> {
'entry(%x: <2 x f32>):
    %t = tanh %x: <2 x f32>
    %d = digamma %t: <2 x f32>
    return %d: <2 x f32>
}

[gradient @f]
func @g: (<2 x f32>) -> (<2 x f32>)
"""


def integer_division(op: str) -> str:
    return f"""
func @f: (f32, f32) -> f32 {{
'entry(%x: f32, %y: f32):
    %q = {op} %x: f32, %y: f32
    %r = multiply %q: f32, %x: f32
    return %r: f32
}}

[gradient @f]
func @g: (f32, f32) -> (f32, f32)
"""


COMB = """
func @comb: (f32, f32) -> f32 {
'entry(%a: f32, %b: f32):
    %s = add %a: f32, %b: f32
    return %s: f32
}
"""

REDUCE_BY_FUNCTION = (
    COMB
    + """
func @f: (<2 x 3 x f32>) -> <2 x f32> {
'entry(%x: <2 x 3 x f32>):
    %r = reduce %x: <2 x 3 x f32> by @comb: (f32, f32) -> f32 init 0: f32 along 1
    return %r: <2 x f32>
}

[gradient @f]
func @g: (<2 x 3 x f32>) -> (<2 x 3 x f32>)
"""
)

REDUCE_BY_SUBTRACT = """
func @f: (<3 x f32>) -> f32 {
'entry(%x: <3 x f32>):
    %r = reduce %x: <3 x f32> by subtract init 0: f32 along 0
    return %r: f32
}

[gradient @f]
func @g: (<3 x f32>) -> (<3 x f32>)
"""

SCAN_BY_MAX = """
func @f: (<3 x f32>) -> <3 x f32> {
'entry(%x: <3 x f32>):
    %s = sin %x: <3 x f32>
    %r = scan %s: <3 x f32> by max along 0
    return %r: <3 x f32>
}

[gradient @f]
func @g: (<3 x f32>) -> (<3 x f32>)
"""

SCAN_BY_FUNCTION = (
    COMB
    + """
func @f: (<3 x f32>) -> <3 x f32> {
'entry(%x: <3 x f32>):
    %r = scan %x: <3 x f32> by @comb: (f32, f32) -> f32 along 0
    return %r: <3 x f32>
}

[gradient @f]
func @g: (<3 x f32>) -> (<3 x f32>)
"""
)

# The init value is differentiated (it depends on %i), though the reduce is by add.
REDUCE_INIT = """
func @f: (<3 x f32>, f32) -> f32 {
'entry(%x: <3 x f32>, %i: f32):
    %j = multiply %i: f32, %i: f32
    %r = reduce %x: <3 x f32> by add init %j: f32 along 0
    return %r: f32
}

[gradient @f]
func @g: (<3 x f32>, f32) -> (<3 x f32>, f32)
"""

INDIRECT_CALL = """
func @f: (f32, (f32) -> f32) -> f32 {
'entry(%x: f32, %h: (f32) -> f32):
    %r = apply %h(%x: f32): (f32) -> f32
    return %r: f32
}

[gradient @f wrt 0]
func @g: (f32, (f32) -> f32) -> (f32)
"""

EXTERN = """
[extern]
func @f: (f32) -> f32

[gradient @f]
func @g: (f32) -> (f32)
"""

BIT_CAST = """
func @f: (f32) -> f32 {
'entry(%x: f32):
    %i = bitCast %x: f32 to i32
    %y = bitCast %i: i32 to f32
    return %y: f32
}

[gradient @f]
func @g: (f32) -> (f32)
"""

AGGREGATE_ARGUMENT = """
func @h: ((f32, f32)) -> f32 {
'entry(%t: (f32, f32)):
    %a = extract 0 from %t: (f32, f32)
    return %a: f32
}

func @f: (f32) -> f32 {
'entry(%x: f32):
    %t = literal (%x: f32, %x: f32): (f32, f32)
    %r = apply @h(%t: (f32, f32)): ((f32, f32)) -> f32
    return %r: f32
}

[gradient @f]
func @g: (f32) -> (f32)
"""

# The refusal comes from the callee's body, while generating @h_grad for the call.
RANDOM_IN_CALLEE = """
func @h: (f32) -> f32 {
'entry(%a: f32):
    %n = random scalar from 0: f32 upto %a: f32
    return %n: f32
}

func @f: (f32) -> f32 {
'entry(%x: f32):
    %y = apply @h(%x: f32): (f32) -> f32
    return %y: f32
}

[gradient @f]
func @g: (f32) -> (f32)
"""

REFUSALS = [
    pytest.param(
        RANDOM,
        "= random",
        5,
        "cannot differentiate through 'random': random numbers have no derivative "
        "(in the gradient of @f)",
        id="random",
    ),
    pytest.param(
        INTEGER_BY_SELECT,
        "%i = select",
        5,
        "the derivative would flow through %i of type i32; only float values have "
        "derivatives (in the gradient of @f)",
        id="integer-select",
    ),
    pytest.param(
        INTEGER_BY_CALL,
        "%i = apply",
        5,
        "the derivative would flow through %i of type i32; only float values have "
        "derivatives (in the gradient of @f)",
        id="integer-call",
    ),
    pytest.param(
        DIGAMMA,
        "= digamma",
        5,
        "cannot differentiate through 'digamma' (in the gradient of @f)",
        id="digamma",
    ),
    *[
        pytest.param(
            integer_division(op),
            f"= {op}",
            5,
            f"cannot differentiate through '{op}': integer-style division has no adjoint",
            id=op,
        )
        for op in ("modulo", "floorDivide", "truncateDivide")
    ],
    pytest.param(
        REDUCE_BY_FUNCTION,
        "= reduce",
        5,
        "reduce: cannot differentiate a reduce by a function; use add, multiply, max or min",
        id="reduce-by-function",
    ),
    pytest.param(
        REDUCE_BY_SUBTRACT,
        "= reduce",
        5,
        "reduce: cannot differentiate a reduce by 'subtract'",
        id="reduce-by-subtract",
    ),
    pytest.param(
        SCAN_BY_MAX,
        "= scan",
        5,
        "scan: cannot differentiate a scan by 'max'; only by add or multiply",
        id="scan-by-max",
    ),
    pytest.param(
        SCAN_BY_FUNCTION,
        "= scan",
        5,
        "scan: cannot differentiate a scan by a function; only by add or multiply",
        id="scan-by-function",
    ),
    pytest.param(
        REDUCE_INIT,
        "= reduce",
        5,
        "reduce: cannot differentiate with respect to a reduce's initial value",
        id="reduce-init",
    ),
    pytest.param(
        INDIRECT_CALL,
        "= apply",
        5,
        "apply: cannot differentiate an indirect call (through a function value)",
        id="indirect-call",
    ),
    pytest.param(
        EXTERN,
        "func @g",
        6,
        "cannot differentiate @f: it has no body",
        id="extern",
    ),
    pytest.param(
        BIT_CAST,
        "%y = bitCast",
        5,
        "cannot differentiate through 'bitCast' (in the gradient of @f)",
        id="bitCast",
    ),
    pytest.param(
        AGGREGATE_ARGUMENT,
        "= apply",
        5,
        "apply: cannot differentiate @h with respect to its aggregate argument 0 ((f32, f32))",
        id="aggregate-argument",
    ),
    pytest.param(
        RANDOM_IN_CALLEE,
        "= random",
        5,
        "cannot differentiate through 'random': random numbers have no derivative "
        "(in the gradient of @h)",
        id="random-in-callee",
    ),
]


@pytest.mark.parametrize("body, needle, column, message", REFUSALS)
def test_refusal_is_a_located_diagnostic(body, needle, column, message):
    diags = refusals(body)
    assert len(diags) == 1, [d.render() for d in diags]
    (d,) = diags
    assert message in d.message
    assert d.severity == "error"
    assert_located(d, body, needle, column)


def test_every_obstacle_of_a_function_is_reported_in_program_order():
    body = """
func @f: (f32) -> f32 {
'entry(%x: f32):
    %a = floorDivide %x: f32, 2: f32
    %b = digamma %x: f32
    %r = random scalar from 0: f32 upto %x: f32
    %c = add %a: f32, %b: f32
    %d = add %c: f32, %r: f32
    return %d: f32
}

[gradient @f]
func @g: (f32) -> (f32)
"""
    diags = refusals(body)
    assert [d.message.split(":")[0] for d in diags] == [
        "cannot differentiate through 'floorDivide'",
        "cannot differentiate through 'digamma' (in the gradient of @f)",
        "cannot differentiate through 'random'",
    ]
    for d, needle in zip(diags, ["= floorDivide", "= digamma", "= random"]):
        assert_located(d, body, needle, 5)


def test_a_call_to_an_extern_function_is_refused_with_a_location():
    body = """
[extern]
func @ext: (f32) -> f32

func @f: (f32) -> f32 {
'entry(%x: f32):
    %y = apply @ext(%x: f32): (f32) -> f32
    %z = sin %y: f32
    return %z: f32
}

[gradient @f]
func @g: (f32) -> (f32)
"""
    (d,) = refusals(body)
    assert d.message == "apply: cannot differentiate through @ext: it has no body"
    assert d.loc is not None
    assert d.loc.line_col == (line_of(HEAD + body, "= apply"), 5)  # at the call


def test_an_extern_callee_off_the_derivative_path_is_fine():
    differentiates(
        """
[extern]
func @ext: (f32) -> f32

func @f: (f32, f32) -> f32 {
'entry(%x: f32, %w: f32):
    %y = apply @ext(%w: f32): (f32) -> f32
    %z = multiply %y: f32, %x: f32
    return %z: f32
}

[gradient @f wrt 0]
func @g: (f32, f32) -> (f32)
"""
    )


NOISE = """
func @f: (f32, f32) -> f32 {
'entry(%x: f32, %s: f32):
    %r = random scalar from 1: f32 upto %s: f32
    %y = multiply %r: f32, %x: f32
    return %y: f32
}

[gradient @f wrt %s]
func @g: (f32, f32) -> (f32)
"""


def test_random_numbers_refuse_only_the_arguments_they_depend_on():
    # Noise that does not depend on x (a dropout mask, say) is a constant for d/dx.
    module = parse_module(HEAD + NOISE.replace("%s]", "0]"), PATH)
    Differentiation().run(module)
    assert verify(module) == []
    (dx,) = run_function(module, "g", [np.array(0.5), np.array(2.0)], float64=True)
    assert 1.0 <= float(dx) <= 2.0  # a fresh sample of the noise
    (d,) = refusals(NOISE.replace("%s]", "1]"))
    assert "cannot differentiate through 'random'" in d.message
    assert_located(d, NOISE, "= random", 5)


# Not refusals ------------------------------------------------------------------------------

RELU = """
func @f: (<2 x 3 x f32>) -> <2 x 3 x f32> {
'entry(%x: <2 x 3 x f32>):
    %m = greaterThan %x: <2 x 3 x f32>, 0: f32
    %r = select %x: <2 x 3 x f32>, 0: f32 by %m: <2 x 3 x bool>
    return %r: <2 x 3 x f32>
}
"""

BRANCH_ON_X = """
func @f: (f32, f32) -> f32 {
'entry(%x: f32, %y: f32):
    %c = greaterThan %x: f32, 0: f32
    conditional %c: bool then 'pos() else 'neg()
'pos():
    %s = sin %x: f32
    %t = multiply %s: f32, %y: f32
    return %t: f32
'neg():
    %u = multiply %x: f32, %x: f32
    return %u: f32
}
"""

# An integer trip count computed from x (by a select on a compare): x^4 for x > 0, else x^2.
TRIP_COUNT_FROM_X = """
func @f: (f32) -> f32 {
'entry(%x: f32):
    %c = greaterThan %x: f32, 0: f32
    %n = select 3: i64, 1: i64 by %c: bool
    branch 'loop(0: i64, %x: f32)
'loop(%k: i64, %acc: f32):
    %more = lessThan %k: i64, %n: i64
    conditional %more: bool then 'body() else 'done()
'body():
    %m = multiply %acc: f32, %x: f32
    %kn = add %k: i64, 1: i64
    branch 'loop(%kn: i64, %m: f32)
'done():
    return %acc: f32
}
"""


def test_relu_mask_depending_on_the_argument_is_not_an_error():
    x = np.array([[1.0, -2.0, 0.5], [-0.3, 2.0, -1.0]])
    (g,) = gradient_check(HEAD + RELU, [x])
    # With the default seed of ones the gradient is the mask itself.
    module = parse_module(
        HEAD + RELU + "\n[gradient @f]\nfunc @g: (<2 x 3 x f32>) -> (<2 x 3 x f32>)\n"
    )
    Differentiation().run(module)
    assert verify(module) == []
    (mask,) = run_function(module, "g", [x], float64=True)
    np.testing.assert_array_equal(mask, (x > 0).astype(np.float64))
    assert np.shape(g) == (2, 3)


@pytest.mark.parametrize("x", [0.7, -0.4], ids=["then", "else"])
def test_branch_condition_depending_on_the_argument_is_not_an_error(x):
    gradient_check(HEAD + BRANCH_ON_X, [np.array(x), np.array(1.3)])


@pytest.mark.parametrize("x, expected", [(0.7, 4 * 0.7**3), (-0.6, 2 * -0.6)])
def test_integer_trip_count_depending_on_the_argument_is_not_an_error(x, expected):
    gradient_check(HEAD + TRIP_COUNT_FROM_X, [np.array(x)])
    module = parse_module(HEAD + TRIP_COUNT_FROM_X + "\n[gradient @f]\nfunc @g: (f32) -> (f32)\n")
    Differentiation().run(module)
    assert verify(module) == []
    (g,) = run_function(module, "g", [np.array(x)], float64=True)
    assert float(g) == pytest.approx(expected)


@pytest.mark.parametrize("op", ["floor", "ceil", "round", "sign", "rint"])
def test_piecewise_constant_operation_gives_a_zero_gradient(op):
    text = (
        HEAD
        + f"""
func @f: (<3 x f32>) -> <3 x f32> {{
'entry(%x: <3 x f32>):
    %p = {op} %x: <3 x f32>
    %r = multiply %p: <3 x f32>, %x: <3 x f32>
    return %r: <3 x f32>
}}
"""
    )
    x = np.array([0.3, 1.7, -2.2])
    # d/dx (p(x)·x) = p(x): the piecewise-constant factor contributes nothing.
    module = parse_module(text + "\n[gradient @f wrt 0]\nfunc @g: (<3 x f32>) -> (<3 x f32>)\n")
    Differentiation().run(module)
    assert verify(module) == []
    (g,) = run_function(module, "g", [x], float64=True)
    (p,) = [run_function(parse_module(text), "f", [x], float64=True) / x]
    np.testing.assert_allclose(g, p)
    gradient_check(text, [x])


def test_a_round_trip_through_an_integer_gives_a_zero_gradient():
    """convert to i32 and back is a step function: d/dx (trunc(x)·x) = trunc(x)."""
    text = HEAD + "func @f: (f32) -> f32 {\n'entry(%x: f32):\n"
    text += "    %i = convert %x: f32 to i32\n    %y = convert %i: i32 to f32\n"
    text += "    %r = multiply %y: f32, %x: f32\n    return %r: f32\n}\n"
    gradient_check(text, [np.array(2.7)])  # against finite differences, seeded
    module = parse_module(text + "\n[gradient @f]\nfunc @g: (f32) -> (f32)\n")
    Differentiation().run(module)
    (g,) = run_function(module, "g", [np.array(2.7)], float64=True)
    assert float(g) == 2.0


def test_floor_alone_has_a_zero_gradient():
    text = HEAD + "func @f: (f32) -> f32 {\n'entry(%x: f32):\n"
    text += "    %p = floor %x: f32\n    return %p: f32\n}\n"
    (g,) = gradient_check(text, [np.array(1.25)])
    assert float(g) == 0.0


# Known bugs (expected failures until the compiler is fixed) --------------------------------

SELF_GRADIENT = """
[gradient @g from 0]
func @g: (f32) -> (f32)
"""

MUTUAL_GRADIENTS = """
[gradient @g2 from 0]
func @g1: (f32) -> (f32)

[gradient @g1 from 0]
func @g2: (f32) -> (f32)
"""


@pytest.mark.parametrize("body", [SELF_GRADIENT, MUTUAL_GRADIENTS], ids=["self", "mutual"])
def test_a_cycle_of_gradient_declarations_is_refused(body):
    module = parse_module(HEAD + body, PATH)
    with pytest.raises(DiagnosticError) as info:
        assert verify(module) == []  # type-correct: the pass finds the cycle
        Differentiation().run(module)
    assert all(d.loc is not None for d in info.value.diagnostics)
    assert "gradient declarations form a cycle through @g" in info.value.diagnostics[0].message


def test_refusals_of_several_declarations_are_all_reported():
    body = EXTERN.replace("@f", "@e").replace("@g", "@ge") + DIGAMMA
    diags = refusals(body)
    assert [d.loc.line_col for d in diags if d.loc is not None] == [
        (line_of(HEAD + body, "func @ge"), 6),
        (line_of(HEAD + body, "= digamma"), 5),
    ], [d.render() for d in diags]


def test_a_declared_type_through_an_alias_is_accepted_by_the_pass():
    text = (
        HEAD
        + """type $T = f32

func @f: (f32) -> f32 {
'entry(%a: f32):
    %0.0 = multiply %a: f32, %a: f32
    return %0.0: f32
}

[gradient @f]
func @g: ($T) -> ($T)
"""
    )
    module = parse_module(text, PATH)
    assert verify(module) == []
    Differentiation().run(module)
    assert verify(module) == []


# End to end through dlopt --------------------------------------------------------------------


def test_dlopt_reports_a_refused_gradient_on_stderr(tmp_path):
    path = tmp_path / "random.dl"
    path.write_text(HEAD + RANDOM)
    proc = subprocess.run(
        [sys.executable, "-m", "dlvm.tools.dlopt", str(path), "-p", "DCE"],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    line = line_of(HEAD + RANDOM, "= random")
    assert proc.stderr.startswith(
        f"{path}:{line}:5: error: cannot differentiate through 'random': "
        "random numbers have no derivative (in the gradient of @f)\n"
    ), proc.stderr
    assert "    %r = random scalar from 0: f32 upto %x: f32\n    ^" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout.startswith(f"Source file: {path}")
    assert "AD: " not in proc.stdout


def test_dlopt_main_reports_an_extern_gradient(tmp_path, capsys):
    path = tmp_path / "extern.dl"
    path.write_text(HEAD + EXTERN)
    assert dlopt.main([str(path), "--print-ir"]) == 1
    out, err = capsys.readouterr()
    line = line_of(HEAD + EXTERN, "func @g")
    assert f"{path}:{line}:6: error: cannot differentiate @f: it has no body" in err
    assert "Traceback" not in err
    assert "stage optimizable" not in out  # nothing printed for a refused module


def test_a_function_that_never_returns_is_refused():
    body = """
func @f: (f32) -> f32 {
'entry(%x: f32):
    branch 'spin(%x: f32)
'spin(%y: f32):
    branch 'spin(%y: f32)
}

[gradient @f]
func @g: (f32) -> (f32)
"""
    (d,) = refusals(body)
    assert d.message == "cannot differentiate @f: it never returns"
    assert d.loc is not None and d.loc.line_col[0] == line_of(HEAD + body, "func @g")
