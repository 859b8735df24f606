"""The limits of telc/limits.py (docs/tel.md, "Limits") that the parser enforces: nesting
deeper than MAX_NESTING and number literals of more than MAX_DIGITS digits are errors at the
place they are written, found before anything recurses over the tree; a chain of one operator
is one level however long."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from dlvm.diagnostics import Diagnostic, DiagnosticError
from telc import ast
from telc.cli import cli
from telc.driver import compile_text
from telc.limits import MAX_DIGITS, MAX_NESTING
from telc.program import load


def errors(text: str, path: str = "m.tel") -> list[Diagnostic]:
    with pytest.raises(DiagnosticError) as e:
        compile_text(path, text)
    return e.value.diagnostics


def only(text: str, path: str = "m.tel") -> Diagnostic:
    [d] = errors(text, path)
    return d


def where(d: Diagnostic) -> tuple[int, int]:
    assert d.loc is not None, d.message
    return d.loc.line_col


def helps(d: Diagnostic) -> list[str]:
    return [n.message.strip() for n in d.notes if n.message.strip().startswith("help:")]


# Chains of an operator: as long as one likes ----------------------------------------------


def test_a_chain_is_folded_to_the_left_with_the_spans_of_nested_operators() -> None:
    text = "y: out = (a) + (b // note\n) - c * d * (e)\n"
    decl = load("m.tel", text).root.tree.items[0]
    assert isinstance(decl, ast.Declaration)
    outer = decl.value
    assert isinstance(outer, ast.Binary) and outer.op == "-"
    inner = outer.left
    assert isinstance(inner, ast.Binary) and inner.op == "+"
    assert inner.span.text() == "(a) + (b // note\n)"  # as when chains nested in the grammar
    assert outer.span.text() == "(a) + (b // note\n) - c * d * (e)"
    product = outer.right
    assert isinstance(product, ast.Binary) and product.span.text() == "c * d * (e)"
    assert isinstance(product.left, ast.Binary) and product.left.span.text() == "c * d"


# Nesting ------------------------------------------------------------------------------------

NESTS = {
    "minus": ("x: in[2]\ny: out = {}x\n", "-", "", 10),
    "not": ("x: in bool[2]\ny: out = {}x\n", "not ", "", 10),
    "call": ("x: in[2]\ny: out = {}x{}\n", "exp(", ")", 10),
    "transpose": ("x: in[2 x 2]\ny: out = x{}\n", "", "^T", None),
    "index": ("x: in[2]\ny: out = x{}\n", "", "[:]", None),
    "tuple": ("x: in[2]\ny: out = {}x{}\n", "(", ", x)[0]", 10),
    "conditional": ("x: in[2]\nc: in bool\ny: out = {}x\n", "if c then x else ", "", 10),
}


def _nested(kind: str, n: int) -> str:
    template, opening, closing, _ = NESTS[kind]
    if "{}x{}" in template:
        return template.format(opening * n, closing * n)
    return template.format(opening * n if opening else closing * n)


def _levels(kind: str) -> int:
    """How many levels one repetition is: a tuple element two (the tuple, the index)."""
    return 2 if kind == "tuple" else 1


@pytest.mark.parametrize("kind", NESTS)
def test_nesting_beyond_the_limit_is_located(kind: str) -> None:
    template, opening, _, column = NESTS[kind]
    n = MAX_NESTING // _levels(kind)
    d = only(_nested(kind, n + 1))
    assert d.message == f"expression nested deeper than {MAX_NESTING} levels"
    assert helps(d) == [
        "help: give a part of it a name: `let` in a function, a `hidden` declaration in a model"
    ]
    line, col = where(d)
    assert line == len(template.split("\n")) - 1
    if column is not None:  # at the opening of the level one too deep
        assert col == column + n * len(opening)


def test_nesting_far_beyond_the_limit_is_refused_before_anything_recurses() -> None:
    d = only("x: in[2]\ny: out = " + "-" * 200_000 + "x\n")
    assert d.message == f"expression nested deeper than {MAX_NESTING} levels"


def test_nested_statements_beyond_the_limit_are_located() -> None:
    depth = MAX_NESTING + 1
    lines = ["x: in[2]", "def f(a: [2]) -> [2] {", "    var b = a"]
    lines += ["    " + "if sum(b) > 0.0 {"] * depth
    lines += ["    b = b + 1"] + ["    }"] * depth + ["    return b", "}", "y: out = f(x)"]
    d = only("\n".join(lines) + "\n")
    assert d.message == f"statements nested deeper than {MAX_NESTING} levels"
    assert where(d) == (3 + depth, 5)
    assert helps(d) == ["help: move the inner statements into a function"]


# Numbers --------------------------------------------------------------------------------------

HUGE = "9" * (MAX_DIGITS + 1)


@pytest.mark.parametrize(
    ("text", "col"),
    [
        (f"dim B = {HUGE}\nx: in[B]\ny: out = x\n", 9),
        (f"x: in[{HUGE}]\ny: out = x\n", 7),
        (f"x: in[2]\ny: out = x + {HUGE}\n", 14),
        (f"x: in[2]\ny: out = [x, x] @ {HUGE}\n", 19),
        (f"x: in[2]\ny: out = x + 0.{'0' * 5000}{HUGE}\n", 14),
        (f"x: in[2]\ny: out = x * {'0' * 5000}{HUGE}\n", 14),
    ],
    ids=["dim", "shape", "value", "axis", "decimal", "zeros"],
)
def test_a_number_with_too_many_digits_is_located(text: str, col: int) -> None:
    d = only(text)
    assert d.message.endswith(f"literal too large: {MAX_DIGITS + 1} digits, above the limit "
                              f"of {MAX_DIGITS}")  # fmt: skip
    assert where(d)[1] == col and helps(d)


def test_a_number_of_many_leading_zeros_is_its_value() -> None:
    compile_text("zeros.tel", f"x: in[2]\ny: out = x * {'0' * 5000}2 + 0.{'0' * 5000}1\n")


def test_a_define_with_too_many_digits_is_bad_usage(tmp_path: Path) -> None:
    path = tmp_path / "m.tel"
    path.write_text("dim B = 2\nx: in[B]\ny: out = x\n", encoding="utf-8")
    result = CliRunner().invoke(cli, ["check", str(path), "-D", f"B={'9' * 5000}"])
    assert result.exit_code == 2
    assert f"the number has 5000 digits, above the limit of {MAX_DIGITS}" in result.output


# Tensor sizes ---------------------------------------------------------------------------------
