"""The lexer's two paths give the same tokens: the fast one (one findall, for text without
comments) and the exact loop (one match at a time), on modules, on lines wrapped at every place a
line may wrap, and with the cache of token kinds cold or warm."""

import glob
import random
import re
import time
from pathlib import Path

from ir_examples import module_for

from dlvm.ir import lexer as L
from dlvm.ir.ops import OPS


def _bases() -> list[str]:
    texts = [module_for(op) for op in sorted(OPS)]
    texts += [Path(p).read_text(encoding="utf-8") for p in sorted(glob.glob("samples/ir/*.dl"))]
    texts += [Path(p).read_text(encoding="utf-8") for p in sorted(glob.glob("tests/**/*.dl"))]
    return [re.sub(r"//[^\r\n]*", "", t) for t in texts]  # the fast path takes no comments


def _wrapped(text: str, rng: random.Random) -> str:
    """Newlines (and blank lines, CRLF, lone CR) before or after joinable tokens."""
    for _ in range(rng.randint(1, 6)):
        places = [m.start() for m in re.finditer(r"->|[,()\[\]<>{}=x]", text)]
        if not places:
            break
        i = rng.choice(places)
        if rng.random() < 0.5:
            i += 2 if text.startswith("->", i) else 1
        newline = rng.choice(["\n", "\r\n", "\r", "\n\n", "\n  \n\t", " \n   "])
        text = text[:i] + newline + text[i:]
    return text


def _same(text: str) -> None:
    assert L._tokenize_fast(text) == L._tokenize_loop(text), text


def test_fast_path_matches_the_exact_loop():
    rng = random.Random(0)
    for base in _bases():
        _same(base)
        _same(base.replace("\n", "\r\n"))
        _same(_wrapped(base, rng))
    for text in ["", "\n\n", "  x", "%", "% x", "-inf-", "a\r\n)", "a,\n\n)", "x\n->", '"a\n']:
        _same(text)
    # Strings without their closing quote, ending in blanks, escapes, a lone backslash, a CR.
    for text in [
        '"a  \n',
        '"a\\ \n',
        '"a\\\n',
        '"\\"\\"',
        '"a\rb\n"',
        '"\r\\"\r\\"',
        'x "a\t\r\n)',
    ]:
        _same(text)


def test_kinds_do_not_depend_on_what_was_seen_before():
    text = _bases()[0]
    warm = L.tokenize(text)
    saved = dict(L._KIND_OF)
    try:
        L._KIND_OF.clear()
        L._KIND_OF.update({"": L.NL})
        assert L.tokenize(text) == warm
    finally:
        L._KIND_OF.clear()
        L._KIND_OF.update(saved)


def test_comments_and_wraps_vanish():
    kinds, texts, _ = L.tokenize("a, // c\n\n  b // d\n)\nc\n")
    assert list(zip(kinds, texts)) == [
        (L.WORD, "a"),
        (L.PUNCT, ","),
        (L.WORD, "b"),
        (L.PUNCT, ")"),
        (L.NL, ""),
        (L.WORD, "c"),
        (L.NL, ""),
        (L.EOF, ""),
    ]


def test_an_unterminated_string_is_one_error_token():
    kinds, texts, _ = L.tokenize('module "m\\"x  \nstage raw\n')
    assert (kinds[1], texts[1]) == (L.ERROR, '"m\\"x')
    assert texts[2:5] == ["", "stage", "raw"]


def _lexing_time(text: str) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        L.tokenize(text)
        best = min(best, time.perf_counter() - start)
    return best


def test_lexing_is_linear_on_adversarial_text():
    """Text built to make a backtracking lexer rescan the same characters from every position
    (trailing blanks after a comment took 56 s for 16,000 blanks) lexes about as fast as a
    module of the same size: the bound is generous, a quadratic lexer misses it by far."""
    n = 8000
    base = "// c\n" + _bases()[0]  # through the exact path, as most adversarial texts
    ordinary = (base * (n // len(base) + 1))[:n]
    adversarial = [
        'module "m"\n// c\n' + " " * n,  # the exact path's trailing blanks
        '"' + '\\"' * (n // 2),  # a string that never closes, restarted at every quote
        '// c\n"' + '\\"' * (n // 2),
        "// c\n" + '\r\\"' * (n // 3),  # a CR, which ends a line but not a string
    ]
    reference = _lexing_time(ordinary)
    for text in adversarial:
        assert _lexing_time(text) < 20 * reference + 0.05, repr(text[:20])


def test_a_long_string_lexes_about_as_fast_as_a_module_of_its_size():
    """A dense literal's hex is one string of megabytes. Matched a character at a time, a
    million characters took 6 times as long as a module of that size (an unterminated one, 8
    times); as runs between escapes, a string takes a small part of it, an unterminated one
    less than it. Each run lexes another string: a token seen before is not lexed again."""
    n = 1_000_000
    base = _bases()[0]
    reference = _lexing_time((base * (n // len(base) + 1))[:n])
    for end in ('"\n', "  \n"):
        texts = ['"' + "0a" * (n // 2 - 1) + f"{i:02x}" + end for i in range(3)]
        best = float("inf")
        for text in texts:
            start = time.perf_counter()
            kinds, tokens, _ = L.tokenize(text)
            best = min(best, time.perf_counter() - start)
            assert kinds[0] == (L.STRING if end[0] == '"' else L.ERROR)
            assert tokens[0] == text[: n + 1] + end[0] * (end[0] == '"')
        assert best < 2 * reference, repr(end)
