"""Property: whatever text or bytes the parser and verifier are given, they answer with located
diagnostics (DiagnosticError or a list from `verify`), never another exception; `dlopt` turns
such input into `file:line:col: error:` lines and exit status 1, never a traceback."""

import random
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlvm.diagnostics import Diagnostic, DiagnosticError
from dlvm.ir import module_text, parse_module
from dlvm.ir.verifier import verify
from dlvm.tools import dlopt

FAST = settings(
    max_examples=1000,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

HEADER = 'module "m"\nstage raw\n'
FUNC_HEAD = HEADER + "func @f: (f32, <2 x 3 x f32>) -> f32 {\n'entry(%x: f32, %m: <2 x 3 x f32>):\n"

# Words and fragments of the textual IR, to build text that gets past the lexer.
WORDS = (
    'module "m" stage raw optimizable compute schedule canonical func @f @g @comb : ( ) -> { } '
    "'entry 'next %x %m %0.0 %1.2 %r = add multiply tanh dot transpose reduce by init along "
    "concatenate slice from upto shapeCast to padShape squeezeShape at dataTypeCast select "
    "lessThan literal extract insert apply branch conditional then else branchEnum case ?some "
    "return f32 f64 i64 bool < > x 2 3 0 -1 1.5 1e-05 , struct enum type "
    "opaque var $S $E #a * [ ] extern gradient adjoint wrt keeping seedable !inline zero null "
    "undefined true false box stack scalar random convolve kernel padding half groups "
    "reduceWindow dims strides createStack push pop allocateBox load store copy count trap"
)
FRAGMENTS = ["<2 x 3 x f32>", "<2 x f32>", "{#a = 1: f32}", "?some(1: f32)", "//c\n", "\r\n"]
VOCAB = WORDS.split() + FRAGMENTS + ["\n", "\n", "\n", "\t"]


def check(text: str) -> None:
    """Parses and verifies text; every diagnostic must render and point inside the text."""
    try:
        module = parse_module(text, "fuzz.dl")
    except DiagnosticError as e:
        assert e.diagnostics
        check_diagnostics(e.diagnostics, text)
        return
    diags = verify(module)
    check_diagnostics(diags, text)
    if not diags:
        printed = module_text(module)
        assert module_text(parse_module(printed)) == printed


def check_diagnostics(diags: list[Diagnostic], text: str) -> None:
    lines = text.split("\n")
    for d in diags:
        d.render()
        assert d.loc is not None, f"unlocated diagnostic: {d.message}"
        line, col = d.loc.line_col
        assert 1 <= line <= len(lines), (d.message, line)
        assert 1 <= col <= len(lines[line - 1]) + 1, (d.message, line, col)


@FAST
@given(st.binary(max_size=200))
def test_random_bytes(data):
    check(data.decode("latin-1"))


@FAST
@given(st.binary(max_size=200))
def test_random_bytes_after_a_valid_header(data):
    check(HEADER + data.decode("utf-8", errors="replace"))


@FAST
@given(st.text(max_size=200))
def test_random_text(text):
    check(text)


@FAST
@given(st.lists(st.sampled_from(VOCAB), max_size=60))
def test_random_tokens_at_top_level(words):
    check(HEADER + " ".join(words))


@FAST
@given(st.lists(st.sampled_from(VOCAB), max_size=40), st.booleans())
def test_random_tokens_in_a_function_body(words, close):
    check(FUNC_HEAD + "    " + " ".join(words) + ("\n    return %x: f32\n}\n" if close else ""))


# dlopt on files of such text ---------------------------------------------------------------

LOCATED = re.compile(r"^(?P<path>.+):\d+:\d+: error: ", re.M)


def _inputs() -> list[bytes]:
    rng = random.Random(1234)
    out = [
        bytes(rng.randrange(256) for _ in range(rng.randrange(1, 120))).decode("latin-1").encode()
        for _ in range(3)
    ]
    for _ in range(3):
        words = [rng.choice(VOCAB) for _ in range(rng.randrange(5, 40))]
        out.append((FUNC_HEAD + " ".join(words)).encode())
    out.append(b'module "m"\nstage raw\nfunc @f: (f32) -> f32 {\n')  # truncated
    out.append(FUNC_HEAD.encode() + b"    return 1e400: f32\n}\n")
    return out


def test_dlopt_reports_located_errors(tmp_path, capsys):
    for i, data in enumerate(_inputs()):
        path = tmp_path / f"input{i}.dl"
        path.write_bytes(data)
        status = dlopt.main([str(path), "-p", "DCE", "CSE", "--print-ir"])
        out, err = capsys.readouterr()
        assert status == 1, (data, out, err)
        assert "Traceback" not in err + out
        m = LOCATED.search(err)
        assert m is not None and m.group("path") == str(path), err


def test_dlopt_reports_non_utf8_input(tmp_path, capsys):
    for i, data in enumerate([b"\xff\xfe\x00garbage", HEADER.encode() + b"var @g: f32 \xc3\x28\n"]):
        path = tmp_path / f"bad{i}.dl"
        path.write_bytes(data)
        status = dlopt.main([str(path), "-p", "DCE", "CSE", "--print-ir"])
        out, err = capsys.readouterr()
        assert status == 1
        assert "Traceback" not in err + out
        assert "error:" in err and str(path) in err and "UTF-8" in err
    # The bad byte is located: line 3 of the second file, after `var @g: f32 `.
    assert f"{tmp_path / 'bad1.dl'}:3:13: error: not UTF-8 text" in err


# Regressions found by the properties above ------------------------------------------------


def _first_error(text: str) -> str:
    try:
        parse_module(text, "t.dl")
    except DiagnosticError as e:
        check_diagnostics(e.diagnostics, text)
        return e.diagnostics[0].render()
    raise AssertionError("expected a DiagnosticError")


def test_float_literal_that_overflows_is_an_error():
    # 1e400 used to parse as inf and print as `inf`, which does not parse again.
    msg = _first_error(FUNC_HEAD + "    %a = add %x: f32, 1e400: f32\n    return %a: f32\n}\n")
    assert "t.dl:5:23: error: float literal 1e400 is out of range" in msg


def test_numbers_with_thousands_of_digits_are_errors():
    # int() refuses more than 4300 digits: each used to escape as a ValueError.
    digits = "9" * 5000
    cases = [
        FUNC_HEAD + f"    %a = add %x: f32, {digits}: f32\n    return %a: f32\n}}\n",
        HEADER + f"var @g: <{digits} x f32>\n",
        HEADER + f"var @g: [{digits} x f32]\n",
        FUNC_HEAD + f"    %{digits}.0 = tanh %x: f32\n    return %x: f32\n}}\n",
        FUNC_HEAD + f"    return %{digits}.0: f32\n}}\n",
    ]
    for text in cases:
        assert "has a number with too many digits" in _first_error(text)


def test_deep_nesting_is_an_error_not_a_recursion_error():
    deep = 2000
    cases = [
        HEADER + "var @g: " + "*" * deep + "f32\n",
        HEADER + "var @g: " + "(" * deep + "f32" + ")" * deep + "\n",
        HEADER + "var @g: " + "box{" * deep + "f32" + "}" * deep + "\n",
        HEADER + "var @g: " + "[2 x " * deep + "f32" + "]" * deep + "\n",
        FUNC_HEAD + "    %a = literal " + "(" * deep + "1: f32" + "): f32" * deep + "\n}\n",
    ]
    for text in cases:
        assert "nested more than 64 levels deep" in _first_error(text)


def test_nesting_up_to_the_limit_parses_verifies_and_prints():
    n = 63
    ty = "(" * n + "f32" + ")" * n
    lit, lit_ty = "1", "f32"
    for _ in range(n):
        lit, lit_ty = f"({lit}: {lit_ty})", f"({lit_ty})"
    text = (
        HEADER + "var @g: " + "*" * 64 + "f32\n"
        f"func @f: ({ty}) -> {lit_ty} {{\n'entry(%x: {ty}):\n"
        f"    %a = literal {lit}: {lit_ty}\n    return %a: {lit_ty}\n}}\n"
    )
    module = parse_module(text)
    assert verify(module) == []
    printed = module_text(module)
    assert module_text(parse_module(printed)) == printed
