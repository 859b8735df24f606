"""The limits of telc/limits.py (docs/tel.md, "Limits"): what a program may be and what is a
located error instead of a crash. Long chains of an operator compile however long; nesting
deeper than MAX_NESTING, compiling deeper than MAX_DEPTH (through functions, dims and consts),
modules used more than MAX_USE_DEPTH deep, number literals of more than MAX_DIGITS digits and
tensors of 2**62 bytes or more are errors at the place they are written; and deep_stack gives
the front end room for everything within the limits."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from dlvm.diagnostics import Diagnostic, DiagnosticError
from dlvm.ir.printer import module_text
from telc import ast, limits, syntax
from telc.cli import cli
from telc.driver import compile_text
from telc.limits import MAX_DEPTH, MAX_DIGITS, MAX_NESTING, MAX_USE_DEPTH
from telc.lower import context
from telc.lower.dependencies import DeclarationGraph
from telc.lower.walk import ProgramFacts
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


@pytest.mark.parametrize("op", ["+", "-", "*", "/", ".", "and", "or"])
def test_a_long_chain_of_one_operator_compiles(op: str) -> None:
    operand = {"and": "c", "or": "c", ".": "m"}.get(op, "x")
    terms = f" {op} ".join([operand] * 3000)
    text = f"x: in[2]\nc: in bool[2]\nm: in[2 x 2]\ny: out = {terms}\n"
    ir = module_text(compile_text("chain.tel", text).module)
    assert ir.count("\n") > 3000


def test_a_sum_of_ten_thousand_terms_compiles_through_the_command_line(tmp_path: Path) -> None:
    path = tmp_path / "sum.tel"
    path.write_text("x: in[2]\ny: out = " + " + ".join(["x"] * 10_000) + "\n", encoding="utf-8")
    for command in (["check", "-q"], ["build", "--emit", "ir"]):
        result = CliRunner().invoke(cli, [*command, str(path)])
        assert result.exit_code == 0, result.output


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


def test_an_error_inside_a_long_chain_is_located() -> None:
    terms = ["x"] * 2000
    terms[1500] = "q"
    d = only("x: in[2]\ny: out = " + " + ".join(terms) + "\n")
    assert d.message == "unknown name 'q'"
    assert where(d) == (2, 10 + 1500 * 4)


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


@pytest.mark.parametrize("kind", NESTS)
def test_nesting_to_the_limit_compiles(kind: str) -> None:
    compile_text("deep.tel", _nested(kind, MAX_NESTING // _levels(kind)))


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


def test_a_type_nested_beyond_the_limit_is_located() -> None:
    def program(n: int) -> str:
        return f"x: in[2]\ndef f(a: [2]) -> {'(' * n}[2]{')' * n} = a\ny: out = f(x)\n"

    d = only(program(MAX_NESTING + 1))
    assert d.message == f"type nested deeper than {MAX_NESTING} levels"
    assert where(d) == (2, 18 + MAX_NESTING) and helps(d) == ["help: make the tuple type flatter"]
    # Parsed: the result is not a tuple of tuples, and an output cannot be a tuple.
    d, output = errors(program(MAX_NESTING))
    assert d.message.startswith("the result of 'f': expected (((")
    assert output.message.startswith("output 'y' is the tuple (((")


def test_two_hundred_nested_calls_compile() -> None:
    compile_text("calls.tel", "x: in[2]\ny: out = " + "exp(" * 200 + "x" + ")" * 200 + "\n")


# Depth through functions, dims and consts ---------------------------------------------------


def _function_chain(n: int) -> str:
    lines = ["x: in[2]", "def f0(a: [2]) -> [2] = a"]
    lines += [f"def f{i}(a: [2]) -> [2] = f{i - 1}(a) + 1" for i in range(1, n)]
    return "\n".join([*lines, f"y: out = f{n - 1}(x)", ""])


def test_a_chain_of_functions_compiles_up_to_the_depth_limit() -> None:
    compile_text("chain.tel", _function_chain(500))  # Python's own limit held fewer than 100


def test_a_chain_of_functions_beyond_the_depth_limit_is_located() -> None:
    diags = errors(_function_chain(MAX_DEPTH // 2 + 50))
    d = diags[0]
    assert d.message.startswith(f"nested deeper than {MAX_DEPTH} levels, counting")
    assert where(d)[0] > 2 and helps(d)[0].startswith("help: shorten the chain of functions")


@pytest.mark.parametrize("kind", ["dim", "const"])
def test_a_chain_of_dims_or_consts_is_compiled_or_located(kind: str) -> None:
    def chain(n: int) -> str:
        name = "D" if kind == "dim" else "C"
        lines = [f"{kind} {name}0 = 1"]
        lines += [f"{kind} {name}{i} = {name}{i - 1} + 0" for i in range(1, n)]
        lines.reverse()  # every dim and const is evaluated in turn: the first is the deepest
        use = f"x: in[{name}{n - 1}]\ny: out = x" if kind == "dim" else f"y: out = {name}{n - 1}"
        return "\n".join([*lines, use, ""])

    compile_text("chain.tel", chain(1000))
    assert any(d.message.startswith("nested deeper than") for d in errors(chain(2 * MAX_DEPTH)))


def test_declarations_are_ordered_without_recursion() -> None:
    n = 3 * sys.getrecursionlimit()
    lines = ["x: in[2]", f"y: out = h{n - 1}"]
    lines += [f"h{i}: hidden = h{i - 1} + 1" for i in range(n - 1, 0, -1)] + ["h0: hidden = x"]
    program = load("decls.tel", "\n".join(lines) + "\n")

    class Reporter:
        def error(self, span: ast.Span, message: str, details: list[str] | None = None) -> None:
            raise AssertionError(message)

    # On this thread (not deep_stack's), under Python's own recursion limit.
    graph = DeclarationGraph(program, ProgramFacts(program), Reporter())
    order = graph.dependency_order()
    assert order is not None and order[:2] == ["x", "h0"] and order[-1] == "y"


def test_modules_used_more_than_the_limit_deep_are_located(tmp_path: Path) -> None:
    for i in range(MAX_USE_DEPTH + 1):
        (tmp_path / f"m{i}.tel").write_text(f"use ./m{i + 1}\n" if i < MAX_USE_DEPTH else "")
    root = tmp_path / "root.tel"
    d = only("use ./m0\nx: in[2]\ny: out = x\n", str(root))
    assert d.message.startswith(f"modules use each other more than {MAX_USE_DEPTH} deep")
    assert str(d.loc) == f"{tmp_path / f'm{MAX_USE_DEPTH - 2}.tel'}:1:1"  # root.tel is the first


# Frames per level: what RECURSION_LIMIT is made of -------------------------------------------


def _peak(text: str) -> tuple[int, int]:
    """The most Python frames on deep_stack's thread and the deepest Context.depth while
    compiling text."""
    peak = [0, 0]
    depth: list[int | None] = [None]
    contexts: list[context.Context] = []

    def profile(frame, event, arg) -> None:
        if event == "call":
            if depth[0] is None:
                n, f = 0, frame
                while f is not None:
                    n, f = n + 1, f.f_back
                depth[0] = n
            else:
                depth[0] += 1
            peak[0] = max(peak[0], depth[0])
            if contexts:
                peak[1] = max(peak[1], contexts[-1].depth)
        elif event == "return" and depth[0] is not None:
            depth[0] -= 1

    init = context.Context.__init__

    def recording(self, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        contexts.append(self)

    context.Context.__init__ = recording  # type: ignore[method-assign]
    threading.setprofile(profile)
    try:
        compile_text("deep.tel", text)
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]
        context.Context.__init__ = init  # type: ignore[method-assign]
    return peak[0], peak[1]


@pytest.mark.parametrize(
    "text",
    [
        _function_chain(150),
        "x: in[2]\ny: out = " + "exp(" * 200 + "x" + ")" * 200 + "\n",
        "x: in[2]\nc: in bool\n"
        + "def f0(a: [2], c: bool) -> [2] = a\n"
        + "".join(f"def f{i}(a: [2], c: bool) -> [2] = if c then f{i - 1}(a, c) else a\n"
                  for i in range(1, 150))
        + "y: out = f149(x, c)\n",
    ],
    ids=["functions", "built-ins", "conditionals"],
)  # fmt: skip
def test_a_level_of_depth_takes_at_most_half_the_frames_allowed(text: str) -> None:
    frames, depth = _peak(text)
    assert depth > 100
    assert frames <= depth * limits.FRAMES_PER_LEVEL // 2


# deep_stack -----------------------------------------------------------------------------------


def test_deep_stack_restores_the_recursion_limit_and_passes_exceptions_on() -> None:
    before = sys.getrecursionlimit()
    seen = []

    @limits.deep_stack
    def inner() -> int:
        seen.append(sys.getrecursionlimit())
        return threading.get_ident()

    @limits.deep_stack
    def outer() -> int:
        assert inner() == threading.get_ident()  # already deep: in place
        raise KeyError("x")

    with pytest.raises(KeyError):
        outer()
    assert seen == [limits.RECURSION_LIMIT] and sys.getrecursionlimit() == before
    assert inner() != threading.get_ident()


def test_deep_stack_runs_in_place_without_a_thread(monkeypatch) -> None:
    monkeypatch.setattr(limits, "_start", lambda body: None)
    compile_text("calls.tel", "x: in[2]\ny: out = " + "exp(" * 100 + "x" + ")" * 100 + "\n")
    assert not getattr(limits._here, "deep", False)


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


def test_a_declared_tensor_of_2_to_the_62_bytes_or_more_is_located() -> None:
    d = only("x: param f32[2147483648 x 2147483648] = 0.0\ny: out = x\n")
    assert d.message == (
        "f32[2147483648 x 2147483648] is too large: 18446744073709551616 bytes (2**64); "
        "a tensor must take fewer than 2**62 bytes"
    )
    assert where(d) == (1, 10)
    assert only("dim N = 4611686018427387904\nx: in bool[N]\n").loc is not None
    compile_text("big.tel", "x: in f32[1073741824 x 536870912]\ny: out = x\n")  # 2**61 bytes


def test_a_computed_tensor_of_2_to_the_62_bytes_or_more_is_located() -> None:
    d = only("x: in[2147483648 x 1]\ny: in[1 x 2147483648]\nz: out = x + y\n")
    assert d.message.startswith("f32[2147483648 x 2147483648] is too large")
    assert where(d) == (3, 10)


# File sizes -----------------------------------------------------------------------------------


def test_a_tel_file_of_more_than_the_limit_is_refused_before_parsing() -> None:
    text = "x: in[2]\ny: out = x\n// " + "é" * (limits.MAX_TEL_BYTES // 2)  # 2 bytes each
    d = only(text)
    size = len(text.encode())
    assert d.message == f"this file has {size} bytes of TEL; telc reads at most 4194304 (4 MiB)"
    assert where(d) == (1, 1) and helps(d) == ["help: split it into modules that `use` each other"]
    compile_text("m.tel", text[: limits.MAX_TEL_BYTES // 2])


def test_a_large_file_with_many_errors_is_parsed_a_few_times_only(monkeypatch) -> None:
    monkeypatch.setattr(syntax, "REPARSE_FLOOR", 0)  # as if the file were large
    lines = ["x: in[2]"] + [f"y{i}: out = x + ) 1" for i in range(40)]
    reported = errors("\n".join(lines) + "\n")
    assert 1 < len(reported) < 40  # not one parse per error
    monkeypatch.undo()
    assert len(errors("\n".join(lines) + "\n")) == 40
