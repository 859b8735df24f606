"""Property: whatever text telc is given (random bytes, random text, soups of TEL tokens, and
every sample, stdlib module and construct test of tests/filecheck/tel mutated at random: a
deleted, duplicated or replaced character or token, swapped, duplicated or deleted lines),
`telc.driver.compile_text` and `telc.program.load` either succeed or raise DiagnosticError whose
diagnostics all render and include no internal error (IR that does not verify); never another
exception. Through the command line, `telc check` exits with 0 or 1 and never prints a
traceback."""

from __future__ import annotations

import glob
import os
import re
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlvm.diagnostics import DiagnosticError
from telc.cli import cli
from telc.driver import compile_text
from telc.program import load

SAMPLES = sorted(glob.glob("samples/*.tel"))
STDLIB = sorted(glob.glob("stdlib/*.tel"))
# The FileCheck tests of every construct (functions, loops, recurrence, grad…, which the samples
# do not all use), without their comment lines: more programs to mutate. Those that expect telc
# to fail (`RUN: not …`) test diagnostics themselves and are left out.
CONSTRUCTS = sorted(
    p
    for p in glob.glob("tests/filecheck/tel/*.tel")
    if "RUN: not" not in Path(p).read_text(encoding="utf-8")
)

# Programs that call every stdlib function, appended to the module so that mutations of the
# function bodies reach the lowering of an instance, as in a real model.
_DRIVERS = {
    "nn": """
x: in[4 x 3]
lab: in[4 x 3]
g: param[1 x 3] = 1.0
bb: param[1 x 3] = 0.0
W: param[3 x 3] = glorot()
o1: out = sigmoid(x) + relu(x) + leaky_relu(x, slope: 0.1) + gelu(x)
o2: out = softmax(x) + log_softmax(x)
o3: out = cross_entropy(softmax(x), lab) + mse(x, lab)
o4: out = layer_norm(linear(x, W, bb), g, bb) + dropout(x)
loss: out = mse(o4, lab)
train minimizing loss using plain_sgd(rate: 0.1)
def plain_sgd(w: [S...], g: [S...], rate: [] = 0.01) -> [S...] = w - rate * g
""",
    "optim": """
x: in[4 x 3]
W: param[3 x 3] = glorot()
b: param[1 x 3] = 0.0
loss: out = sum(x . W + b)
train a minimizing loss using sgd(rate: 0.1)
train b minimizing loss using momentum()
train c minimizing loss using adam(rate: 0.01)
train d minimizing loss using rmsprop()
""",
}


def _bases() -> list[tuple[str, str]]:
    out = [(p, Path(p).read_text(encoding="utf-8")) for p in SAMPLES]
    for p in STDLIB:
        text = Path(p).read_text(encoding="utf-8")
        out.append((p, text))
        driver = _DRIVERS.get(Path(p).stem)
        if driver is not None:
            out.append((p, text + driver))
    return out


def _constructs() -> list[tuple[str, str]]:
    out = []
    for p in CONSTRUCTS:
        lines = Path(p).read_text(encoding="utf-8").split("\n")
        out.append((p, "\n".join(line for line in lines if not line.startswith("//"))))
    return out


BASES = _bases() + _constructs()  # each compiles as it is

# The tokens that mutations insert or substitute, and that soups are made of.
TOKENS = (  # noqa: SIM905
    "module type use dim const in param hidden out init recurrent train minimizing using def "
    "export let var if then else for return as and or not true false training grad wrt keeping "
    "seed shape axis keepdims x y h t W b N M S B T nn optim f32 f64 i32 i64 bool float64 "
    "sum mean max min prod exp log tanh transpose reverse concat cast select conv2d maxpool2d "
    "avgpool2d random normal zeros ones onehot argmax glorot he softmax relu sgd adam"
).split() + [
    "[", "]", "(", ")", "{", "}", ",", ":", "=", "+", "-", "*", "/", "%", "**", ".", "•",
    "^T", "<", "<=", ">", ">=", "==", "!=", "->", "..", "...", "@", "[*]", "[t-1]", "0", "1",
    "2", "-1", "0.5", "1e-5", "1e400", "99999999999999999999", "[2 x 3]", "[S...]", "[]",
    "[784x10]", "\n", "\n\n", "    ", "//", "\t", "\\", "'", '"', "#", "$", "é", "\x00",
]  # fmt: skip
_TOKEN = re.compile(
    r"[A-Za-z_][A-Za-z0-9_]*|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|\*\*|<=|>=|==|!=|->|\.\.\.|\.\.|\S"
)


def _tokens(text: str) -> list[tuple[int, str]]:
    return [(m.start(), m.group()) for m in _TOKEN.finditer(text)]


def _delete_char(text: str, a: int, b: int) -> str:
    i = a % (len(text) + 1)
    return text[:i] + text[i + 1 :]


def _duplicate_char(text: str, a: int, b: int) -> str:
    i = a % (len(text) + 1)
    return text[:i] + text[i : i + 1] + text[i:]


def _replace_char(text: str, a: int, b: int) -> str:
    i = a % (len(text) + 1)
    chars = " x[](){}:,=+-*/.^@\n0123456789aT_•"
    return text[:i] + chars[b % len(chars)] + text[i + 1 :]


def _delete_token(text: str, a: int, b: int) -> str:
    toks = _tokens(text)
    if not toks:
        return text
    o, t = toks[a % len(toks)]
    return text[:o] + text[o + len(t) :]


def _duplicate_token(text: str, a: int, b: int) -> str:
    toks = _tokens(text)
    if not toks:
        return text
    o, t = toks[a % len(toks)]
    return text[:o] + t + " " + text[o:]


def _replace_token(text: str, a: int, b: int) -> str:
    toks = _tokens(text)
    if not toks:
        return text
    o, t = toks[a % len(toks)]
    pool = TOKENS + [tok for _, tok in toks]
    return text[:o] + pool[b % len(pool)] + text[o + len(t) :]


def _swap_lines(text: str, a: int, b: int) -> str:
    lines = text.split("\n")
    i, j = a % len(lines), b % len(lines)
    lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines)


def _duplicate_line(text: str, a: int, b: int) -> str:
    lines = text.split("\n")
    i = a % len(lines)
    return "\n".join(lines[: i + 1] + [lines[i]] + lines[i + 1 :])


def _delete_line(text: str, a: int, b: int) -> str:
    lines = text.split("\n")
    i = a % len(lines)
    return "\n".join(lines[:i] + lines[i + 1 :])


def _truncate(text: str, a: int, b: int) -> str:
    return text[: a % (len(text) + 1)]


MUTATIONS = [
    _delete_char,
    _duplicate_char,
    _replace_char,
    _delete_token,
    _duplicate_token,
    _replace_token,
    _swap_lines,
    _duplicate_line,
    _delete_line,
    _truncate,
]

_index = st.integers(min_value=0, max_value=10**6)
mutations = st.lists(st.tuples(st.sampled_from(MUTATIONS), _index, _index), min_size=1, max_size=3)


def _mutate(text: str, steps: list) -> str:
    for mutation, a, b in steps:
        text = mutation(text, a, b)
    return text


def check(path: str, text: str) -> None:
    """compile_text and load succeed or raise DiagnosticError whose diagnostics render."""
    for run in (lambda: compile_text(path, text), lambda: load(path, text)):
        try:
            run()
        except DiagnosticError as e:
            assert e.diagnostics, "a DiagnosticError without diagnostics"
            for d in e.diagnostics:
                assert isinstance(d.render(), str)
            text_of_error = e.render()
            assert isinstance(str(e), str)
            # IR that does not verify is telc's fault, not the program's.
            assert "internal error" not in text_of_error, text_of_error


def test_the_bases_compile() -> None:
    assert len(SAMPLES) >= 8 and len(STDLIB) >= 2 and len(CONSTRUCTS) >= 15
    for path, text in BASES:
        compile_text(path, text)


_settings = settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@_settings
@given(st.sampled_from(BASES), mutations)
def test_mutated_programs(base: tuple[str, str], steps: list) -> None:
    path, text = base
    check(path, _mutate(text, steps))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes(data: bytes) -> None:
    check("bytes.tel", data.decode("utf-8", errors="replace"))
    check("bytes.tel", data.decode("latin-1"))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_random_text(text: str) -> None:
    check("text.tel", text)


_prelude = "x: in[2 x 3]\nW: param[3 x 3] = 0.5\ndim N = 2\n"


@settings(max_examples=250, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), min_size=1, max_size=40), st.booleans())
def test_token_soups(tokens: list[str], prelude: bool) -> None:
    text = " ".join(tokens)
    check("soup.tel", (_prelude if prelude else "") + text + "\n")


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), min_size=1, max_size=12), st.integers(0, 10**6))
def test_token_soups_in_samples(tokens: list[str], at: int) -> None:
    """A soup of tokens inserted as a line of a real program (its other declarations valid)."""
    path, text = BASES[at % len(BASES)]
    lines = text.split("\n")
    i = (at // len(BASES)) % (len(lines) + 1)
    check(path, "\n".join(lines[:i] + [" ".join(tokens)] + lines[i:]))


BLOCKS = [(path, text) for path, text in BASES if "\n    " in text]


def _block_tokens(text: str) -> list[tuple[int, str]]:
    """The tokens on indented lines: inside function bodies, loops and recurrent blocks."""
    out = []
    for offset, tok in _tokens(text):
        start = text.rfind("\n", 0, offset) + 1
        if text[start] in " \t":
            out.append((offset, tok))
    return out


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(BLOCKS), st.data())
def test_token_replaced_in_blocks(base: tuple[str, str], data: st.DataObject) -> None:
    """One token of a function body, loop, if or recurrent block replaced by another: an unknown
    name, a value of another shape or type, a keyword, a bracket… Statements lower through
    their own code paths (carried vars, joins, early returns), which top-level mutations rarely
    reach."""
    path, text = base
    toks = _block_tokens(text)
    offset, tok = data.draw(st.sampled_from(toks), label="replaced")
    new = data.draw(st.sampled_from(TOKENS + [t for _, t in toks]), label="by")
    check(path, text[:offset] + new + text[offset + len(tok) :])


@pytest.fixture(scope="module")
def workdir():
    with tempfile.TemporaryDirectory() as d:
        yield d


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.sampled_from(BASES), mutations)
def test_cli_check_on_mutated_files(workdir: str, base: tuple[str, str], steps: list) -> None:
    path, text = base
    # The samples `use nn` and `use optim` from the stdlib, so the copy may live anywhere.
    target = os.path.join(workdir, os.path.basename(path))
    Path(target).write_text(_mutate(text, steps), encoding="utf-8")
    result = CliRunner().invoke(cli, ["check", target])
    assert result.exit_code in (0, 1), result.output
    # CliRunner turns an escaped exception into exit code 1: only SystemExit is allowed.
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert "Traceback" not in result.output
    if result.exit_code == 1:
        assert "error" in result.output


# Hand-made mutations, each a typical mistake: (file, text replaced, replacement).
EDITS = [
    ("samples/xor.tel", "linear(x, W1, b1)", "linear(x, W2, b1)"),
    ("samples/rnn.tel", "h[t-1] . Wh", "h[t-2] . Wh"),
    ("samples/cnn.tel", "maxpool2d(conv,", "maxpool2d conv,"),
    ("tests/filecheck/tel/functions.tel", "acc = acc * 2", "acc = nope * 2"),
    ("tests/filecheck/tel/recursion.tel", "def fact(k: i64) -> i64 {", "def fact(k: i64) {"),
    ("tests/filecheck/tel/train.tel", "using adam()", "using adam(rate: x)"),
]


@pytest.mark.parametrize(("path", "old", "new"), EDITS)
def test_cli_check_on_edited_files(workdir: str, path: str, old: str, new: str) -> None:
    text = Path(path).read_text(encoding="utf-8")
    assert old in text
    target = os.path.join(workdir, "edited_" + os.path.basename(path))
    Path(target).write_text(text.replace(old, new, 1), encoding="utf-8")
    result = CliRunner().invoke(cli, ["check", target])
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output and "internal error" not in result.output
    assert f"{target}:" in result.output and ": error: " in result.output


def test_cli_check_on_bad_bytes(workdir: str) -> None:
    target = os.path.join(workdir, "bad.tel")
    Path(target).write_bytes(b"x: in[2 x 3]\ny: out = \xff\xfe x\x00\n")
    result = CliRunner().invoke(cli, ["check", target])
    assert result.exit_code in (0, 1), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
