"""What `telc` says about wrong TEL programs (docs/tel.md, "Diagnostics"): every error has a clear
message and points at the offending place (line and column); a file with several independent errors
reports them all; shape errors show both shapes and the values of their named dimensions; nothing
makes `telc` print a traceback.

Each case is a whole program and the diagnostics it must produce, no more and no fewer: (line,
column, text) where text (or every text of a tuple) is part of the message."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner

from dlvm.diagnostics import Diagnostic, DiagnosticError
from telc.cli import cli
from telc.driver import compile_text

Expected = tuple[int, int, str | tuple[str, ...]]


def tel(text: str) -> str:
    """A program written indented in this file, as it is in its own file."""
    return textwrap.dedent(text).lstrip("\n")


def diagnostics_of(text: str) -> list[Diagnostic]:
    with pytest.raises(DiagnosticError) as info:
        compile_text("model.tel", text)
    return info.value.diagnostics


def check(text: str, expected: list[Expected]) -> None:
    diags = diagnostics_of(text)
    rendered = "\n".join(d.render() for d in diags)
    found = [(d.loc.line_col if d.loc else None, d.message) for d in diags]
    for line, col, wanted in expected:
        parts = (wanted,) if isinstance(wanted, str) else wanted
        hits = [m for where, m in found if where == (line, col) and all(p in m for p in parts)]
        assert hits, f"no diagnostic at {line}:{col} containing {parts!r}; got:\n{rendered}"
    assert len(diags) == len(expected), f"expected {len(expected)} diagnostics, got:\n{rendered}"


def case(name: str, text: str, *expected: Expected):
    return pytest.param(tel(text), list(expected), id=name)


# Syntax ---------------------------------------------------------------------------------------

SYNTAX = [
    case(
        "missing-operand-at-end-of-line",
        """
        dim B = 4
        x: in[B x 3]
        y: out[B x 3] = x +
        """,
        (3, 20, "expected an expression after '+', found the end of the line"),
    ),
    case(
        "operator-without-left-operand",
        """
        x: in[2 x 3]
        z: out[2 x 3] = * x
        """,
        (2, 17, "expected an expression after '=', found '*'"),
    ),
    case(
        "two-operators-in-a-row",
        """
        x: in[2 x 3]
        y: out = x +* 2.0
        """,
        (2, 13, "expected an expression after '+', found '*'"),
    ),
    case(
        "unclosed-call-parenthesis",
        """
        x: in[2 x 3]
        y: out[2 x 3] = exp(x
        z: out[2 x 3] = x
        """,
        (2, 20, "'(' is never closed"),
    ),
    case(
        "unclosed-index-bracket",
        """
        x: in[2 x 3]
        y: out[2 x 3] = x[0
        z: out = x
        """,
        (2, 18, "'[' is never closed"),
    ),
    case(
        "unclosed-parenthesis-at-end-of-line",
        """
        x: in[2 x 3]
        y: out[2 x 3] = x * (x + 1.0
        """,
        (2, 29, "expected ')'"),
    ),
    case(
        "unclosed-shape",
        """
        x: in[2 x 3]
        y: out[2 x 3 = x
        """,
        (2, 14, "expected ']'"),
    ),
    case(
        "stray-closing-parenthesis",
        """
        x: in[2 x 3]
        y: out = x )
        """,
        (2, 12, "found ')'"),
    ),
    case(
        "declaration-without-colon",
        """
        x in[2 x 3]
        """,
        (1, 3, "expected ':' or '<-', found 'in'"),
    ),
    case(
        "declaration-without-role",
        """
        x: [2 x 3]
        """,
        (1, 4, "expected a name after ':', found '['"),
    ),
    case(
        "declaration-with-unknown-role",
        """
        x: input[2 x 3]
        """,
        (1, 4, "unknown role 'input'"),
    ),
    case(
        "declaration-without-equals",
        """
        x: in[2 x 3]
        y: out[2 x 3] exp(x)
        """,
        (2, 15, ("expected '='", "found 'exp'")),
    ),
    case(
        "dim-without-equals",
        """
        dim B 32
        """,
        (1, 7, "expected '=', found '32'"),
    ),
    case(
        "junk-character-dollar",
        """
        x: in[2 x 3]
        y: out[2 x 3] = x $ 2
        """,
        (2, 19, "unexpected character '$'"),
    ),
    case(
        "junk-character-hash",
        """
        x: in[2 x 3]
        y: out = x # 2
        """,
        (2, 12, "unexpected character '#'"),
    ),
    case(
        "junk-character-unicode",
        """
        x: in[2 x 3]
        y: out = x ÷ 2.0
        """,
        (2, 12, "unexpected character '÷'"),
    ),
    case(
        "unclosed-parameter-list",
        """
        def f(a: [3] -> [3] = a
        """,
        (1, 14, ("expected ')'", "found '->'")),
    ),
    case(
        "let-without-equals",
        """
        x: in[3]
        def f(a: [3]) -> [3] {
            let b a
            return b
        }
        """,
        (3, 11, ("expected ':' or '='", "found 'a'")),
    ),
    case(
        "missing-operand-before-next-statement",
        """
        x: in[3]
        def f(a: [3]) -> [3] {
            let b = a *
            return b
        }
        y: out = f(x)
        """,
        (3, 16, "expected an expression after '*'"),
    ),
    case(
        "missing-operand-before-closing-brace",
        """
        def f(a: [3]) -> [3] {
            return a +
        }
        """,
        (2, 15, "expected an expression after '+'"),
    ),
    case(
        "unclosed-parenthesis-in-a-block",
        """
        x: in[3]
        def f(a: [3]) -> [3] {
            let b = (a + 1.0
            return b
        }
        y: out = f(x)
        """,
        (3, 13, "'(' is never closed"),
    ),
    case(
        "several-syntax-errors",
        """
        x: in[3]
        def f(a: [3]) -> [3] {
            let b a
            return b
        }
        y: out = x +
        z: out = x )
        w: out = x $ x
        """,
        (3, 11, "expected ':' or '='"),
        (6, 13, "expected an expression after '+'"),
        (7, 12, "found ')'"),
        (8, 12, "unexpected character '$'"),
    ),
]

# Names ----------------------------------------------------------------------------------------

NAMES = [
    case(
        "unknown-name-did-you-mean",
        """
        x: in[2 x 3]
        y: out[2 x 3] = exp(xx)
        """,
        (2, 21, "unknown name 'xx'; did you mean 'x'?"),
    ),
    case(
        "unknown-local-did-you-mean",
        """
        x: in[3]
        def f(a: [3]) -> [3] {
            let scaled = a * 2.0
            return scaledd
        }
        y: out = f(x)
        """,
        (4, 12, "unknown name 'scaledd'; did you mean 'scaled'?"),
    ),
    case(
        "unknown-function-did-you-mean",
        """
        x: in[2 x 3]
        y: out[2 x 3] = expp(x)
        """,
        (2, 17, "unknown function 'expp'; did you mean 'exp'?"),
    ),
    case(
        "stdlib-function-without-use",
        """
        x: in[2 x 3]
        y: out = softmax(x)
        """,
        (2, 10, "unknown function 'softmax'"),  # its help: line: tests/filecheck/tel/habits.tel
    ),
    case(
        "built-in-named-without-call",
        """
        x: in[3]
        y: out = sum
        """,
        (2, 10, "'sum' is a built-in function; call it"),
    ),
    case(
        "value-called-as-function",
        """
        x: in[3]
        y: out = x(1)
        """,
        (2, 10, "f32[3] is not a function"),
    ),
    case(
        "unknown-element-type",
        """
        x: in float33[2 x 3]
        """,
        (1, 7, "unknown element type 'float33'; did you mean 'float32'?"),
    ),
    case(
        "unknown-element-type-in-cast",
        """
        x: in[3]
        y: out = cast(x, f65)
        """,
        (2, 18, "unknown element type 'f65'; did you mean 'f64'?"),
    ),
    case(
        "unknown-module-element-type",
        """
        type float33
        x: in[3]
        """,
        (1, 6, "unknown element type 'float33'; did you mean 'float32'?"),
    ),
    case(
        "unknown-dim-did-you-mean",
        """
        dim B = 4
        x: in[Bb x 3]
        """,
        (2, 7, "unknown dimension 'Bb'; did you mean 'B'?"),
    ),
    case(
        "undeclared-dim",
        """
        x: in[B x 3]
        """,
        (1, 7, "unknown dimension 'B'"),
    ),
    case(
        "dim-not-positive",
        """
        dim B = 0
        x: in[B x 3]
        """,
        (1, 9, "dim B must be a positive integer, found 0"),
    ),
    case(
        "use-of-missing-stdlib-module",
        """
        use nnn
        x: in[3]
        """,
        (1, 5, "no standard module named 'nnn'; did you mean 'nn'?"),
    ),
    case(
        "duplicate-declaration",
        """
        x: in[3]
        x: in[4]
        y: out = x
        """,
        (2, 1, "'x' is already defined on line 1"),
    ),
    case(
        "duplicate-function",
        """
        def f(a: [3]) -> [3] = a
        def f(a: [3]) -> [3] = a * 2.0
        x: in[3]
        y: out = f(x)
        """,
        (2, 5, "'f' is already defined on line 1"),
    ),
    case(
        "function-named-like-a-declaration",
        """
        x: in[3]
        def x(a: [3]) -> [3] = a
        y: out = x
        """,
        (2, 5, "'x' is already defined on line 1"),
    ),
]

# Shapes ---------------------------------------------------------------------------------------

DIGITS_BAD_W1 = """
// digits.tel: a two-layer classifier for 8x8 digit images
module digits
type float32                 // default element type of declarations below

use nn                       // stdlib/nn.tel: relu, softmax, cross_entropy, ...
use optim                    // stdlib/optim.tel: sgd, momentum, adam

dim B = 32                   // batch size; `telc build -D B=1` specialises it

x: in[B x 64]
labels: in[B x 10]

W1: param[46 x 128] = glorot()
b1: param[1 x 128] = 0.0
W2: param[128 x 10] = glorot()
b2: param[1 x 10] = 0.0

h: hidden[B x 128] = relu(x . W1 + b1)
y: out[B x 10] = softmax(h . W2 + b2)

loss: out[] = cross_entropy(y, labels)

train minimizing loss using sgd(rate: 0.1)
"""

SHAPES = [
    case(
        "broadcast-failure",
        """
        x: in[2 x 3]
        z: in[4 x 5]
        y: out = x + z
        """,
        (3, 10, "cannot broadcast [2 x 3] and [4 x 5] for addition"),
    ),
    case(
        "broadcast-failure-named-dims",
        """
        dim B = 8
        x: in[B x 3]
        z: in[B x 5]
        y: out = x * z
        """,
        (4, 10, "cannot broadcast [B x 3] and [B x 5] for multiplication"),
    ),
    case(
        "matrix-product-inner-dims",
        DIGITS_BAD_W1,
        (18, 27, "matrix product: inner dimensions differ"),
    ),
    case(
        "matrix-product-vector-inner-dims",
        """
        x: in[2 x 3]
        v: in[4]
        y: out = x . v
        """,
        (3, 10, "matrix product: inner dimensions differ"),
    ),
    case(
        "matrix-product-batch-dims",
        """
        a: in[2 x 3 x 4]
        b: in[5 x 4 x 2]
        y: out = a . b
        """,
        (3, 10, "matrix product: the batch dimensions differ: [2] and [5] do not broadcast"),
    ),
    case(
        "matrix-product-batch-dims-of-different-rank",
        """
        a: in[3 x 2 x 3 x 4]
        b: in[5 x 4 x 2]
        y: out = a . b
        """,
        (3, 10, "the batch dimensions differ: [3 x 2] and [5] do not broadcast"),
    ),
    case(
        "matrix-product-of-a-scalar",
        """
        x: in[3]
        y: out = x . 2.0
        """,
        (2, 10, "matrix product of a scalar; use '*' to scale"),
    ),
    case(
        "hidden-declared-vs-inferred",
        """
        dim B = 8
        x: in[B x 3]
        h: hidden[B x 4] = x * 2.0
        y: out = h
        """,
        (3, 20, "'h' is declared [B x 4] but its value has shape"),
    ),
    case(
        "unused-hidden-is-checked-too",
        """
        dim B = 32
        x: in[B x 64]
        W1: param[46 x 128] = glorot()
        b1: param[1 x 128] = 0.0
        h: hidden[B x 128] = tanh(x . W1 + b1)
        """,
        (5, 27, "matrix product: inner dimensions differ"),
    ),
    case(
        "out-declared-vs-inferred",
        """
        x: in[2 x 3]
        y: out[3 x 2] = x
        """,
        (2, 17, "'y' is declared [3 x 2] but its value has shape [2 x 3]"),
    ),
    case(
        "function-result-declared-vs-inferred",
        """
        x: in[3]
        def f(a: [3]) -> [4] = a * 2.0
        y: out = f(x)
        """,
        (2, 24, "the result of 'f': expected shape [4], found [3]"),
    ),
    case(
        "argument-shape-vs-signature",
        """
        def f(a: [N x 3]) -> [N x 3] = a * 2.0
        x: in[2 x 4]
        y: out = f(x)
        """,
        (3, 12, "argument 'a' of f: expected [N x 3], found [2 x 4]"),
    ),
    case(
        "concatenation-mismatch",
        """
        a: in[2 x 3]
        b: in[2 x 4]
        y: out = [a, b]
        """,
        (3, 14, "cannot concatenate [2 x 3] and [2 x 4] along axis 0"),
    ),
    case(
        "concatenation-mismatch-along-axis-1",
        """
        a: in[2 x 3]
        c: in[4 x 3]
        y: out = [a, c] @ 1
        """,
        (3, 14, "cannot concatenate [2 x 3] and [4 x 3] along axis 1"),
    ),
    case(
        "reshape-element-count",
        """
        x: in[2 x 3]
        y: out = x as [4 x 2]
        """,
        (2, 10, "cannot reshape [2 x 3] (6 elements) to [4 x 2] (8 elements)"),
    ),
    case(
        "slice-out-of-range",
        """
        x: in[4 x 3]
        y: out = x[1:6]
        """,
        (2, 12, "slice 1:6 is empty or out of range for size 4"),
    ),
    case(
        "index-out-of-range",
        """
        x: in[4 x 3]
        y: out = x[4]
        """,
        (2, 12, "index 4 is out of range for size 4"),
    ),
    case(
        "index-out-of-range-second-axis",
        """
        x: in[4 x 3]
        y: out = x[:, 3]
        """,
        (2, 15, "index 3 is out of range for size 3"),
    ),
    case(
        "reduction-axis-out-of-range",
        """
        x: in[4 x 3]
        y: out = sum(x, axis: 2)
        """,
        (2, 23, "axis 2 is out of range for f32[4 x 3]"),
    ),
    case(
        "reduction-negative-axis-out-of-range",
        """
        x: in[4 x 3]
        y: out = mean(x, axis: -3)
        """,
        (2, 24, "axis -3 is out of range"),
    ),
]

# Element types --------------------------------------------------------------------------------

DTYPES = [
    case(
        # The unary float built-ins share one signature (telc/lower/builtins.py: FLOAT_X).
        "softplus-of-integers-and-misused-arguments",
        """
        i: in i32[3]
        x: in[3]
        y: out = softplus(i)
        z: out = softplus(x, x)
        w: out = softplus(x: x, k: 1)
        v: out = softplus()
        """,
        (3, 10, "softplus needs a float tensor, found i32[3]; cast it first"),
        (4, 22, "softplus takes at most 1 argument, 2 given"),
        (5, 25, "softplus has no option 'k'"),
        (6, 10, "softplus needs the argument 'x'"),
    ),
    case(
        "f32-with-f64",
        """
        x: in f64[2 x 3]
        w: param[2 x 3] = 0.0
        y: out = x + w
        """,
        (3, 10, "addition of different element types: f64[2 x 3] and f32[2 x 3]"),
    ),
    case(
        "decimal-literal-with-int-tensor",
        """
        i: in i32[2 x 3]
        y: out = i * 0.5
        """,
        (2, 10, "multiplication of i32 with the number 0.5"),
    ),
    case(
        "and-on-floats",
        """
        x: in[2 x 3]
        y: out = x and x
        """,
        (2, 10, "'and' needs bool operands, found f32"),
    ),
    case(
        "not-on-floats",
        """
        x: in[3]
        y: out = not x
        """,
        (2, 10, "'not' needs a bool operand, found f32[3]"),
    ),
    case(
        "non-bool-condition-expression",
        """
        x: in[2 x 3]
        y: out = if sum(x) then x else -x
        """,
        (2, 13, "the condition must be bool, found f32"),
    ),
    case(
        "non-bool-condition-statement",
        """
        x: in[3]
        def f(a: [3]) -> [3] {
            if sum(a) {
                return a
            }
            return -a
        }
        y: out = f(x)
        """,
        (3, 8, "the condition of 'if' must be a bool scalar, found f32"),
    ),
    case(
        "declared-element-type-vs-inferred",
        """
        x: in[3]
        y: out f64[3] = x
        """,
        (2, 17, "'y' is declared f64[3] but its value is f32[3]"),
    ),
    case(
        "decimal-index",
        """
        x: in[3]
        y: out = x[0.5]
        """,
        (2, 12, "an index must be an integer, found the number 0.5"),
    ),
    case(
        "decimal-loop-bound",
        """
        x: in[3]
        def f(a: [3]) -> [3] {
            var s = a
            for i in 0..2.5 {
                s = s + a
            }
            return s
        }
        y: out = f(x)
        """,
        (4, 17, "a loop bound must be an integer scalar, found the number 2.5"),
    ),
]

# Calls ----------------------------------------------------------------------------------------

CALLS = [
    case(
        "user-function-missing-argument",
        """
        def f(a: [N], b: [N]) -> [N] = a + b
        x: in[3]
        y: out = f(x)
        """,
        (3, 10, "missing argument 'b' of f"),
    ),
    case(
        "user-function-too-many-arguments",
        """
        def f(a: [N], b: [N]) -> [N] = a + b
        x: in[3]
        y: out = f(x, x, x)
        """,
        (3, 18, "f takes 2 arguments, 3 given"),
    ),
    case(
        "user-function-unknown-keyword",
        """
        def f(a: [N], b: [N]) -> [N] = a + b
        x: in[3]
        y: out = f(x, c: x)
        """,
        (3, 15, "f has no parameter 'c'"),
    ),
    case(
        "user-function-argument-given-twice",
        """
        x: in[3]
        def f(a: [3], b: [3]) -> [3] = a + b
        y: out = f(x, a: x)
        """,
        (3, 15, "argument 'a' is given twice"),
    ),
    case(
        "built-in-too-many-arguments",
        """
        x: in[3]
        y: out = exp(x, x)
        """,
        (2, 17, "1 argument, 2 given"),
    ),
    case(
        "built-in-unknown-keyword",
        """
        x: in[3]
        y: out = sum(x, axes: 0)
        """,
        (2, 17, "sum has no option 'axes'; did you mean 'axis'?"),
    ),
    case(
        "built-in-missing-argument",
        """
        x: in[3]
        y: out = select(x > 0.0, x)
        """,
        (2, 10, "select needs the argument 'b'"),
    ),
]

# Declarations: cycles, in, param ----------------------------------------------------------------

DECLARATIONS = [
    case(
        "cycle-between-declarations",
        """
        x: in[3]
        a: hidden[3] = b + x
        b: hidden[3] = a * 2.0
        y: out = b
        """,
        (2, 1, "'a' depends on itself: a -> b -> a"),
    ),
    case(
        "declaration-using-itself",
        """
        x: in[3]
        a: hidden[3] = a + x
        y: out = a
        """,
        (2, 1, "'a' depends on itself"),
    ),
    case(
        "input-with-a-value",
        """
        x: in[3] = 1.0
        y: out = x
        """,
        (1, 12, "input 'x' cannot have a value"),
    ),
    case(
        "input-without-type",
        """
        x: in
        y: out = x
        """,
        (1, 1, "'x' needs a type"),
    ),
    case(
        "input-used-inside-a-function",
        """
        x: in[3]
        def f(a: [3]) -> [3] = a + x
        y: out = f(x)
        """,
        (2, 28, "'x' is an input of the model; functions can use parameters, dims and consts"),
    ),
    case(
        "param-without-initialiser",
        """
        w: param[3]
        x: in[3]
        y: out = x * w
        """,
        (1, 1, "param 'w' needs an initialiser"),
    ),
    case(
        "param-not-float",
        """
        w: param i32[3] = 0
        x: in i32[3]
        y: out = x * w
        """,
        (1, 10, "parameter 'w' must be a float tensor, found i32[3]"),
    ),
    case(
        "param-initialiser-uses-an-input",
        """
        x: in[3]
        w: param[3] = x * 2.0
        y: out = x * w
        """,
        (2, 15, "the initialiser of 'w' uses 'x'"),
    ),
    case(
        "const-uses-a-parameter",
        """
        w: param[] = 1.0
        const c = w
        x: in[3]
        y: out = x * c
        """,
        (
            2,
            11,
            "const c is a compile-time constant (numbers, dims and consts only): it cannot"
            " use parameter 'w'",
        ),
    ),
    case(
        "argument-default-uses-a-parameter",
        """
        def scale(a: [3], s: [] = w) -> [3] = a * s
        w: param[] = 1.0
        x: in[3]
        y: out = scale(x)
        """,
        (1, 27, "the default of argument 's' is a compile-time constant"),
    ),
    case(
        "optimiser-uses-a-parameter",
        """
        w: param[3] = 1.0
        x: in[3]
        loss: out[] = sum(x * w)
        def nudge(p: [S...], g: [S...], rate: [] = 0.1) -> [S...] = p - rate * g * w
        train minimizing loss using nudge(rate: 0.01)
        """,
        (
            5,
            29,
            "nudge uses parameter 'w', which is not at hand: an optimiser sees only the"
            " parameter it updates, its gradient and its state",
        ),
    ),
    case(
        "hyper-parameter-uses-a-parameter",
        """
        use optim
        w: param[3] = 1.0
        x: in[3]
        loss: out[] = sum(x * w)
        train minimizing loss using sgd(rate: w)
        """,
        (5, 39, "hyper-parameter rate is a compile-time constant"),
    ),
    case(
        "glorot-outside-a-param",
        """
        x: in[2 x 3]
        y: out = glorot()
        """,
        (2, 10, "glorot() initialises a parameter"),
    ),
]

# Training -------------------------------------------------------------------------------------

TRAIN_MODEL = """
use optim
x: in[4 x 3]
w: param[3 x 1] = glorot()
y: out = x . w
loss: out = mean(y)
"""

TRAIN = [
    case(
        "unknown-optimiser",
        TRAIN_MODEL + "train minimizing loss using sgdd(rate: 0.1)\n",
        (6, 29, "unknown optimiser 'sgdd'; did you mean 'sgd'?"),
    ),
    case(
        "non-scalar-objective",
        TRAIN_MODEL + "train minimizing y using sgd(rate: 0.1)\n",
        (6, 18, "the training objective must be a float scalar, found f32[4 x 1]"),
    ),
    case(
        "unknown-hyper-parameter",
        TRAIN_MODEL + "train minimizing loss using sgd(rat: 0.1)\n",
        (6, 33, "'sgd' has no hyper-parameter 'rat'; did you mean 'rate'?"),
    ),
    case(
        "positional-hyper-parameter",
        TRAIN_MODEL + "train minimizing loss using sgd(0.1)\n",
        (6, 33, "give the hyper-parameters of 'sgd' by name (rate)"),
    ),
]

# Recurrent blocks -----------------------------------------------------------------------------

RECURRENT = [
    case(
        "previous-step-outside-its-block",
        """
        dim T = 4
        xs: in[T x 2 x 3]
        Wh: param[3 x 3] = glorot()
        recurrent t in 0..T {
            h: hidden[2 x 3] = tanh(xs[t] + h[t-1] . Wh)
        }
        y: out = h[t-1]
        """,
        (7, 10, "'h[t-1]' is only available inside its recurrent block"),
    ),
    case(
        "non-hidden-declaration-in-a-block",
        """
        dim T = 4
        xs: in[T x 2 x 3]
        recurrent t in 0..T {
            h: hidden[2 x 3] = tanh(xs[t] + h[t-1])
            y: out[2 x 3] = h
        }
        z: out = h
        """,
        (5, 5, "only hidden declarations can be in a recurrent block, not out"),
    ),
    case(
        "cycle-within-one-step",
        """
        dim T = 4
        xs: in[T x 2 x 3]
        recurrent t in 0..T {
            h: hidden[2 x 3] = tanh(xs[t] + g)
            g: hidden[2 x 3] = h * 2.0
        }
        y: out = h
        """,
        (4, 5, "'h' depends on itself within one step; use h[t-1]"),
    ),
]

# Statements -----------------------------------------------------------------------------------

STATEMENTS = [
    case(
        "let-reassigned",
        """
        x: in[3]
        def f(a: [3]) -> [3] {
            let b = a * 2.0
            b = b + 1.0
            return b
        }
        y: out = f(x)
        """,
        (4, 5, "cannot assign to 'b': it is bound with 'let' (use 'var' to reassign)"),
    ),
    case(
        "assignment-changes-the-type",
        """
        x: in[3]
        def f(a: [3]) -> [3] {
            var b = a * 2.0
            b = sum(b)
            return b
        }
        y: out = f(x)
        """,
        (4, 9, "'b' holds f32[3]; the new value is f32 (a variable keeps its type)"),
    ),
    case(
        "assignment-to-undeclared-name",
        """
        x: in[3]
        def f(a: [3]) -> [3] {
            c = a
            return a
        }
        y: out = f(x)
        """,
        (3, 5, "'c' is not declared; declare it first with 'var c = …'"),
    ),
    case(
        "missing-return",
        """
        x: in[3]
        def f(a: [3]) -> [3] {
            let b = a * 2.0
        }
        y: out = f(x)
        """,
        (2, 22, "'f' can end without 'return'"),
    ),
    case(
        "unreachable-statement",
        """
        x: in[3]
        def f(a: [3]) -> [3] {
            return a * 2.0
            let b = a
        }
        y: out = f(x)
        """,
        (4, 5, "this statement is never reached: every path before it returns"),
    ),
    case(
        "unpacking-the-wrong-number-of-names",
        """
        x: in[3]
        def f(a: [3]) -> ([3], [3]) = (a, a)
        def g(a: [3]) -> [3] {
            let (p, q, r) = f(a)
            return p
        }
        y: out = g(x)
        """,
        (4, 5, "cannot unpack a tuple of 2 into 3 names"),
    ),
]

# Gradients ------------------------------------------------------------------------------------

GRADS = [
    case(
        "grad-wrt-unknown-name",
        """
        def f(a: [3]) -> [] = sum(a * a)
        x: in[3]
        g: out = grad(f, wrt: q)(x)
        """,
        (3, 23, "'q' is neither an argument of 'f' nor a parameter it uses"),
    ),
    case(
        "grad-of-non-scalar-without-seed",
        """
        def f(a: [3]) -> [3] = a * a
        x: in[3]
        g: out = grad(f)(x)
        """,
        (3, 10, "grad of 'f' needs a float scalar result, found f32[3]; pass seed:"),
    ),
    case(
        "grad-unknown-option",
        """
        x: in[3]
        def f(a: [3]) -> [] = sum(a * a)
        g: out = grad(f, wrt: a, sed: x)(x)
        """,
        (3, 26, "grad has no option 'sed'; did you mean 'seed'?"),
    ),
]

# Several independent errors ---------------------------------------------------------------------

SEVERAL = [
    case(
        "several-semantic-errors",
        """
        dim B = 4
        x: in[B x 3]
        w: param[3 x 2] = glorot()
        y: out[B x 2] = x . w + bias
        z: out = sum(x, axis: 5)
        u: out = x as [5 x 5]
        v: out = exp(xx)
        def f(a: [B x 3]) -> [B x 3] {
            let scaled = a * 2.0
            return scaledd
        }
        q: out = f(x)
        use optim
        loss: out = mean(x . w)
        train minimizing loss using sgd(rate: 0.1, beta: 0.9)
        """,
        (4, 25, "unknown name 'bias'"),
        (5, 23, "axis 5 is out of range"),
        (6, 10, "cannot reshape [B x 3] (12 elements) to [5 x 5] (25 elements)"),
        (7, 14, "unknown name 'xx'; did you mean 'x'?"),
        (10, 12, "unknown name 'scaledd'; did you mean 'scaled'?"),
        (15, 44, "'sgd' has no hyper-parameter 'beta'"),
    ),
    case(
        "shape-errors-in-several-outputs",
        """
        dim B = 4
        x: in[B x 3]
        y: out = exp(xx)
        z: out = x[9]
        m: out = x . x
        """,
        (3, 14, "unknown name 'xx'; did you mean 'x'?"),
        (4, 12, "index 9 is out of range for size 4"),
        (5, 10, "matrix product: inner dimensions differ"),
    ),
    case(
        "errors-in-a-function-nothing-calls",
        """
        x: in[3]
        def g(a: [3]) -> [3] = a + nope
        def k(a: [3]) -> [3] {
            let b = a
            b = a
            return b
        }
        y: out = x
        """,
        (2, 28, "unknown name 'nope'"),
        (5, 5, "cannot assign to 'b': it is bound with 'let'"),
    ),
]

# Numbers that do not fit, and built-in arguments of the wrong kind ------------------------------

RANGES = [
    case(
        "numbers-that-do-not-fit-their-type",
        """
        export def f(x: i32[4]) -> i32[4] = x + 3000000000
        export def g(x: i8[4]) -> i8[4] = x - 128
        export def h(x: f32[4]) -> f32[4] = x * 1e39
        export def k(x: f16[4]) -> f16[4] = x + 70000
        export def ok(x: i8[4]) -> i8[4] = x + 127 - (-128 + 128)
        """,
        (1, 37, "the number 3000000000 does not fit in i32"),
        (2, 35, "the number 128 does not fit in i8"),
        (3, 37, "the number 1e+39 does not fit in f32"),
        (4, 37, "the number 70000 does not fit in f16"),
    ),
    case(
        "compile-time-numbers-that-overflow",
        """
        const big = 2 ** 70
        const huge = 2 ** 100000000
        const far = 10.0 ** 400
        const inf = 1e300 * 1e300
        const lit = 99999999999999999999
        const zero = 1 / 0
        const c = cast(300, i8)
        x: in[2]
        y: out = x * (big + huge + far + inf + lit + zero + c)
        """,
        (1, 13, "2 ** 70 is too large: compile-time numbers must fit in i64 or f64"),
        (2, 14, "2 ** 100000000 is too large"),
        (3, 13, "10.0 ** 400 is too large"),
        (4, 13, "1e+300 * 1e+300 is too large"),
        (5, 13, ("the number 99999999999999999999 does not fit in i64", "99999999999999999999.0")),
        (6, 14, "1 / 0 divides by zero"),
        (7, 11, "the number 300 does not fit in i8"),
    ),
    case(
        "shape-with-too-many-elements",
        """
        dim N = 4294967296
        x: in[N x N x 2]
        y: out = x
        """,
        (2, 6, "has more elements than an i64 can count"),
    ),
    case(
        "conv2d-of-bool-and-repeated-axes",
        """
        x: in bool[1 x 1 x 4 x 4]
        k: in bool[1 x 1 x 3 x 3]
        v: in[4 x 4]
        y: out = conv2d(x, k)
        r: out = reverse(v, axis: (0, -2))
        s: out = sum(v, axis: (1, 1))
        """,
        (4, 10, "conv2d needs float tensors, found bool[1 x 1 x 4 x 4]"),
        (5, 27, "axis -2 is repeated"),
        (6, 23, "axis 1 is repeated"),
    ),
    case(
        "gradient-of-a-gradient-and-untyped-recursion",
        """
        def f(x: f32) -> f32 = x * x * x
        export def g(x: f32) -> f32 = grad(grad(f))(x)
        def r(x: f32) = if x > 0.0 then r(x - 1.0) else x
        export def h(x: f32) -> f32 = r(x)
        """,
        (2, 36, ("grad of a gradient: name the inner one first", "grad(f, wrt: x)(x)")),
        (3, 33, "'r' calls itself before its result type is known"),
    ),
    case(
        "unknown-names-in-a-generic-function-nothing-calls",
        """
        def g(a: [N x M], b: [S...]) -> [N] {
            let c = sum(a, axis: 1) * N + cast(sum(b), f32)
            return c + nope + cc
        }
        b: param[2] = 0.0
        x: in[2]
        y: out = x + b
        """,
        (3, 16, "unknown name 'nope'"),
        (3, 23, "unknown name 'cc'; did you mean 'c'?"),
    ),
    case(
        "transpose-by-a-non-permutation",
        """
        x: in[2 x 3 x 4]
        y: out = transpose(x, perm: (0, 0, 1))
        """,
        (2, 29, "transpose: (0, 0, 1) is not a permutation of the 3 axes of f32[2 x 3 x 4]"),
    ),
    case(
        "swap-axes-size-and-iota-need-axes-of-x",
        """
        x: in[2 x 3 x 4]
        v: in[4]
        a: out = swap_axes(x, axes: (1, -2))
        b: out = swap_axes(v)
        c: out = swap_axes(x, axes: 1)
        d: out = x * size(x, axis: 3)
        e: out = iota(v, axis: (0, 0))
        """,
        (3, 29, "axis -2 is repeated"),
        (4, 10, "axis -2 is out of range for f32[4]"),
        (5, 29, "swap_axes takes two axes, found 1"),
        (6, 28, "axis 3 is out of range for f32[2 x 3 x 4]"),
        (7, 24, "'axis' needs 1 integer, found 2"),
    ),
    case(
        "export-named-like-a-generated-entry",
        """
        x: in[4]
        w: param[4] = 1.0
        y: out = x * w
        export def infer(a: [4]) -> [4] = a
        """,
        (4, 1, "two entry points are named 'infer'"),
    ),
    case(
        # Once a builder assertion (exit 3): a dim is evaluated where no function is open.
        "dim-drawn-at-random",
        """
        dim N = random(0, 4, shape: [2])
        w: param[N] = 0.0
        """,
        (1, 9, "expected a constant (a number, a dim or a const)"),
    ),
    case(
        "const-drawn-at-random-used-by-an-entry",
        """
        const c = random(0.0, 1.0, shape: [2])
        x: in[2]
        y: out = x * c
        """,
        (1, 11, "a const must be a number known at compile time"),
    ),
]

NUMBERS = [
    case(
        "inexact-division-meets-an-integer-tensor",
        """
        i: in i32[2]
        y: out = i * (4 / 3)
        """,
        (2, 10, "multiplication of i32 with the number 1.33"),
    ),
]

# Shape arithmetic (docs/tel.md, "Shape arithmetic"); the exact text of these errors, their
# values and help lines: tests/filecheck/tel/shape-arithmetic-errors.tel.
SHAPE_ARITHMETIC = [
    case(
        "remainder-in-a-dimension",
        """
        x: in[3 x 7 / 2]
        """,
        (1, 11, "7 / 2 does not divide exactly"),
    ),
    case(
        "percent-in-a-dimension",
        """
        dim H = 4
        x: in[3 x H % 2]
        """,
        (2, 13, "'%' in a dimension"),
    ),
    case(
        "call-in-a-shape-literal",
        """
        y: out = zeros([3 x f(2)])
        """,
        (1, 21, "a dimension is an integer expression of dims and integers"),
    ),
    case(
        "zero-dimension-from-arithmetic",
        """
        dim H = 4
        x: in[2 x H - 4]
        y: out = x
        """,
        (2, 11, "dimension H - 4 is 0: a dimension must be a positive integer"),
    ),
    case(
        "arithmetic-result-of-a-def",
        """
        def f(a: [N x M]) -> [N x M + 1] = a
        x: in[2 x 3]
        y: out = f(x)
        """,
        (1, 36, "the result of 'f': expected shape [2 x 4], found [2 x 3]"),
    ),
    case(
        "dims-through-each-other",
        """
        dim A = B + 1
        dim B = 2 * A
        x: in[A]
        """,
        (1, 1, "dim A depends on itself: A -> B -> A"),
    ),
    case(
        "const-through-itself-used",
        """
        const c = c * 2
        x: in[2]
        y: out = x * c
        """,
        (1, 1, "const c depends on itself"),
    ),
]

# An error in one declaration hides no other: each declaration's own errors, and nothing from
# what uses a failed one.
INDEPENDENT = [
    case(
        "errors-after-a-declaration-error",
        """
        x: in[2 x Q]
        w: param[3 x 4]
        b: param[4] = zeros()
        y: out = x . w + nope
        z: out = b + nope2
        h: hidden[5] = b
        def f(a: [2]) -> [2] = a + missing
        """,
        (1, 11, "unknown dimension 'Q'"),
        (2, 1, "param 'w' needs an initialiser"),
        (4, 18, "unknown name 'nope'"),
        (5, 14, "unknown name 'nope2'"),
        (6, 16, "'h' is declared [5] but its value has shape [4]"),
        (7, 28, "unknown name 'missing'"),
    ),
    case(
        "hyper-parameters-checked-after-a-declaration-error",
        """
        use optim
        x: in[2]
        w: param[2] = zeros()
        v: out[2]
        train minimizing sum(x * w) using adam(lr: 0.1)
        """,
        (4, 1, "out 'v' needs a value"),
        (5, 40, "'adam' has no hyper-parameter 'lr'"),
    ),
    case(
        "a-function-reading-an-untyped-param",
        """
        W: param[3 x 2] = 0.5
        b: param = 0.0
        x: in[4 x 3]
        def loss(v: f32[4 x 3]) -> f32 = sum(v . W + b)
        g: out = grad(loss, wrt: W)(x)
        """,
        (2, 1, "param 'b' needs a type"),
    ),
    case(
        "a-function-as-a-default-argument",
        """
        use nn
        def f(a: [2], k: [] = softmax) -> [2] = a * k
        x: in[2]
        y: out = f(x)
        """,
        (2, 23, "an argument must be a value, found the function 'softmax'"),
    ),
    case(
        "a-function-as-a-default-hyper-parameter",
        """
        x: in[2]
        w: param[2] = 0.0
        def opt(w: [S...], g: [S...], rate: [] = sgd) -> [S...] = w - rate * g
        def sgd(a: [2]) -> [2] = a
        train minimizing sum(x * w) using opt()
        """,
        (3, 42, "an argument must be a value, found the function 'sgd'"),
    ),
]

ALL = SYNTAX + NAMES + SHAPES + DTYPES + CALLS + DECLARATIONS + TRAIN + RECURRENT
ALL += STATEMENTS + GRADS + SEVERAL + RANGES + SHAPE_ARITHMETIC + INDEPENDENT + NUMBERS


@pytest.mark.parametrize("text, expected", ALL)
def test_wrong_program_is_reported_at_the_right_place(text, expected):
    check(text, expected)


def program(name: str) -> str:
    """The program of the case with this id."""
    (text,) = [p.values[0] for p in ALL if p.id == name]
    return text


def expected_of(name: str) -> list[Expected]:
    (expected,) = [p.values[1] for p in ALL if p.id == name]
    return expected


def test_every_case_is_a_distinct_program():
    texts = [p.values[0] for p in ALL]
    assert len(set(texts)) == len(texts) >= 45


# What a shape error shows -----------------------------------------------------------------------


def _only(text: str) -> Diagnostic:
    diags = diagnostics_of(text)
    assert len(diags) == 1, "\n".join(d.render() for d in diags)
    return diags[0]


def _details(d: Diagnostic) -> list[str]:
    """The explanation lines under a diagnostic, with runs of spaces collapsed."""
    lines = d.render().splitlines()[3:]
    return [" ".join(line.split()) for line in lines]


def test_matrix_product_error_shows_both_operands_and_named_dims():
    d = _only(program("matrix-product-inner-dims"))
    lines = d.render().splitlines()
    assert lines[0] == "model.tel:18:27: error: matrix product: inner dimensions differ"
    assert lines[1] == "h: hidden[B x 128] = relu(x . W1 + b1)"
    assert lines[2] == " " * 26 + "^~~~~~"
    details = _details(d)
    assert "left x : [B x 64] (B = 32)" in details, d.render()
    assert "right W1 : [46 x 128]" in details, d.render()


def test_broadcast_error_shows_both_operands_and_named_dims():
    d = _only(program("broadcast-failure-named-dims"))
    lines = d.render().splitlines()
    assert lines[1:3] == ["y: out = x * z", "         ^~~~~"]
    details = _details(d)
    assert "left x : [B x 3] (B = 8)" in details, d.render()
    assert "right z : [B x 5] (B = 8)" in details, d.render()


def test_declared_shape_error_shows_the_declared_and_the_inferred_shape():
    d = _only(program("hidden-declared-vs-inferred"))
    details = _details(d)
    assert "declared [B x 4] (B = 8)" in details, d.render()
    assert {"value [8 x 3]", "value [B x 3] (B = 8)"} & set(details), d.render()


def test_argument_shape_error_shows_the_bound_dimension_variables():
    d = _only(program("argument-shape-vs-signature"))
    assert "where N = 2" in _details(d), d.render()


# Through the command line -------------------------------------------------------------------------

CLI_CASES = [
    pytest.param("x: in[3]\ny: out = x +\n", 2, 13, id="syntax"),
    pytest.param("dim B = 8\nx: in[B x 3]\nz: in[B x 5]\ny: out = x * z\n", 4, 10, id="shape"),
    pytest.param("x: in[3]\ny: out = exp(xx)\nz: out = x[7]\n", 2, 14, id="several"),
    pytest.param(
        "x: in[3]\na: hidden[3] = b + x\nb: hidden[3] = a * 2.0\ny: out = b\n", 2, 1, id="cycle"
    ),
]


@pytest.mark.parametrize("command", [["check"], ["build", "--emit", "ir"]], ids=["check", "build"])
@pytest.mark.parametrize("text, line, col", CLI_CASES)
def test_cli_reports_a_bad_file_with_status_1(tmp_path, command, text, line, col):
    path = tmp_path / "bad.tel"
    path.write_text(text, encoding="utf-8")
    result = CliRunner().invoke(cli, [*command, str(path)])
    assert result.exit_code == 1, result.output
    assert f"{path}:{line}:{col}: error: " in result.output
    assert "Traceback" not in result.output
    assert "internal error" not in result.output


def test_cli_reports_every_error_without_a_traceback(tmp_path):
    path = tmp_path / "model.tel"
    path.write_text(program("several-semantic-errors"), encoding="utf-8")
    run = subprocess.run(
        [sys.executable, "-c", "from telc.cli import main; main()", "check", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1, run.stderr
    assert run.stdout == ""
    for line, col, _ in expected_of("several-semantic-errors"):
        assert f"{path}:{line}:{col}: error: " in run.stderr, run.stderr
    assert "Traceback" not in run.stderr
    lines = run.stderr.splitlines()
    first = lines.index(f"{path}:4:25: error: unknown name 'bias'")
    assert lines[first + 1 : first + 3] == [
        "y: out[B x 2] = x . w + bias",
        " " * 24 + "^~~~",
    ]


def test_cli_reports_a_missing_file(tmp_path):
    result = CliRunner().invoke(cli, ["check", str(tmp_path / "nope.tel")])
    assert result.exit_code == 1
    assert "no such file" in result.output
    assert "Traceback" not in result.output


def test_clash_with_a_generated_entry_says_why_it_exists():
    (d,) = diagnostics_of(program("export-named-like-a-generated-entry"))
    assert _details(d) == [
        "'infer' is generated because the model has outputs; rename the function"
    ]


def test_define_of_an_unknown_name_is_an_error_with_a_suggestion():
    text = tel(
        """
        dim B = 4
        x: in[B]
        y: out = x
        """
    )
    with pytest.raises(DiagnosticError) as info:
        compile_text("model.tel", text, {"BB": 2, "B": 3})
    (d,) = info.value.diagnostics
    assert d.message == "-D BB: there is no dim or const named 'BB'; did you mean 'B'?"


def test_define_too_large_for_a_dim_is_an_error():
    text = tel(
        """
        dim B = 4
        x: in[B]
        y: out = x
        """
    )
    with pytest.raises(DiagnosticError) as info:
        compile_text("model.tel", text, {"B": 2**64})
    (d,) = info.value.diagnostics
    assert "a dim must be a positive integer below 2**63" in d.message
    assert d.loc is not None and d.loc.line_col == (1, 1)
