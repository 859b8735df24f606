"""Property: a valid module mutated at random (a deleted range or token, a duplicated or swapped
line, a replaced token, number or type, a truncation) either still parses and verifies (and then
round-trips), or is rejected with DiagnosticError whose diagnostics all point inside the file."""

import glob
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ir_examples import module_for
from test_property_parser import check

from dlvm.ir import lexer as L
from dlvm.ir.ops import OPS

BASES = [module_for(op) for op in sorted(OPS)] + [
    Path(path).read_text(encoding="utf-8") for path in sorted(glob.glob("samples/ir/*.dl"))
]
NUMBERS = ["0", "1", "-1", "2", "3", "7", "100", "0.5", "-2.5", "1e-05", "1e400", "9" * 30]
TYPES = [
    "f32",
    "f64",
    "i32",
    "i64",
    "bool",
    "<2 x f32>",
    "<2 x 3 x f32>",
    "<3 x 2 x f32>",
    "<1 x 3 x f32>",
    "<2 x 3 x bool>",
    "(f32, f32)",
    "()",
    "$S",
    "$E",
    "*f32",
    "*$S",
    "box{f32}",
    "stack",
    "[2 x f32]",
    "(f32, f32) -> f32",
    "$Nope",
    "<0 x f32>",
]


def _tokens(text: str) -> list[tuple[str, str, int]]:
    kinds, texts, offsets = L.tokenize(text)
    return [(k, t, o) for k, t, o in zip(kinds, texts, offsets) if k not in (L.NL, L.EOF)]


def _replace(text: str, offset: int, old: str, new: str) -> str:
    return text[:offset] + new + text[offset + len(old) :]


def delete_range(text: str, a: int, b: int) -> str:
    i = a % (len(text) + 1)
    return text[:i] + text[i + 1 + b % 24 :]


def delete_token(text: str, a: int, b: int) -> str:
    toks = _tokens(text)
    if not toks:
        return text
    _, t, o = toks[a % len(toks)]
    return _replace(text, o, t, "")


def duplicate_line(text: str, a: int, b: int) -> str:
    lines = text.split("\n")
    i = a % len(lines)
    return "\n".join(lines[: i + 1] + [lines[i]] + lines[i + 1 :])


def swap_lines(text: str, a: int, b: int) -> str:
    lines = text.split("\n")
    i, j = a % len(lines), b % len(lines)
    lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines)


def replace_token(text: str, a: int, b: int) -> str:
    toks = _tokens(text)
    if not toks:
        return text
    _, t, o = toks[a % len(toks)]
    return _replace(text, o, t, toks[b % len(toks)][1])


def change_number(text: str, a: int, b: int) -> str:
    toks = [tok for tok in _tokens(text) if tok[0] in (L.INT, L.FLOAT)]
    if not toks:
        return text
    _, t, o = toks[a % len(toks)]
    return _replace(text, o, t, NUMBERS[b % len(NUMBERS)])


def change_type(text: str, a: int, b: int) -> str:
    toks = [
        tok
        for tok in _tokens(text)
        if tok[0] in (L.TENSOR, L.TYPE) or (tok[0] == L.WORD and tok[1] in TYPES)
    ]
    if not toks:
        return text
    _, t, o = toks[a % len(toks)]
    return _replace(text, o, t, TYPES[b % len(TYPES)])


def truncate(text: str, a: int, b: int) -> str:
    return text[: a % (len(text) + 1)]


MUTATIONS = [
    delete_range,
    delete_token,
    duplicate_line,
    swap_lines,
    replace_token,
    change_number,
    change_type,
    truncate,
]
MUTATION = st.tuples(st.sampled_from(MUTATIONS), st.integers(0, 1 << 20), st.integers(0, 1 << 20))


@settings(
    max_examples=1500,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.sampled_from(BASES), st.lists(MUTATION, min_size=1, max_size=3))
def test_mutated_modules_are_accepted_or_rejected_with_located_diagnostics(base, mutations):
    text = base
    for mutate, a, b in mutations:
        text = mutate(text, a, b)
    check(text)


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(
    st.sampled_from(BASES),
    st.sampled_from(MUTATIONS[:-1]),
    st.integers(0, 1 << 20),
    st.integers(0, 1 << 20),
)
def test_single_mutations(base, mutate, a, b):
    check(mutate(base, a, b))


def test_bases_are_valid():
    for text in BASES:
        check(text)
