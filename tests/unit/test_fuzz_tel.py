"""Fuzzing TEL's front end: real programs (samples/, stdlib/, the constructs of
tests/filecheck/tel and the examples of docs/tel.md) mutated as a hand or a tool would break
them (flipped bytes, deleted, duplicated, swapped and replaced tokens, deep nesting, huge
numbers, odd Unicode, truncation) go through `telc check` and `telc build --emit ir`, in
process through the driver's functions and a few through the command line. The contract: no
traceback, no exit status 3, no hang, and every diagnostic located. Short and fixed-seed in
`make test`, at length under `make fuzz` (tests/unit/fuzzing.py)."""

from __future__ import annotations

import contextlib
import glob
import re
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from fuzzing import LONG, check_command_output, fuzz_settings
from hypothesis import given
from hypothesis import strategies as st

from dlvm.diagnostics import DiagnosticError
from dlvm.sources import read_text
from telc.build import produce
from telc.cli import cli
from telc.driver import BuildOptions, compile_text, optimize

SECONDS = 60  # for one program; a hang is a failure, not a stuck test run
TELC = [sys.executable, "-c", "from telc.cli import main; main()"]


def _doc_examples() -> list[tuple[str, str, dict[str, str]]]:
    """The ```tel examples of docs/tel.md, each with the named files (`file=NAME`) it may use."""
    text = Path("docs/tel.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```tel([^\n]*)\n(.*?)```", text, re.S)
    named = {}
    for words, body in blocks:
        m = re.search(r"file=(\S+)", words)
        if m:
            named[m.group(1)] = body
    return [(f"doc{i}.tel", body, named) for i, (_, body) in enumerate(blocks)]


def _seeds() -> list[tuple[str, str, dict[str, str]]]:
    """(file name, text, other files beside it) of every program the mutations start from."""
    paths = sorted(glob.glob("samples/*.tel") + glob.glob("stdlib/*.tel"))
    paths += sorted(glob.glob("tests/filecheck/tel/*.tel"))
    seeds = []
    for p in paths:
        text = Path(p).read_text(encoding="utf-8")
        beside = {}
        if "use ./layers" in text:  # the construct tests' helper module
            beside["layers.tel"] = Path("tests/filecheck/tel/Inputs/layers.tel").read_text()
        seeds.append((Path(p).name, text, beside))
    return seeds + _doc_examples()


SEEDS = _seeds()

# Mutations: (bytes, two numbers drawn for it) -> bytes ---------------------------------------

_TOKEN = re.compile(
    rb"[A-Za-z_][A-Za-z0-9_]*|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|\*\*|<=|>=|==|!=|->|\S"
)
POOL = [
    b"(", b")", b"[", b"]", b"{", b"}", b",", b":", b"=", b"+", b"-", b"*", b"/", b"%", b"**",
    b".", b"^T", b"<", b"==", b"->", b"..", b"...", b"@", b"[*]", b"x", b"0", b"1", b"-1", b"0.5",
    b"let", b"var", b"def", b"if", b"then", b"else", b"for", b"in", b"return", b"use", b"dim",
    b"const", b"param", b"out", b"hidden", b"train", b"grad", b"sum", b"exp", b"zeros", b"\n",
    b"//", b"\t", b"not", b"and", b"as",
]  # fmt: skip
NUMBERS = [
    b"9" * 20, b"9" * 399, b"9" * 400, b"9" * 401, b"9" * 5000, b"0" * 6000 + b"7",
    b"1e308", b"1e309", b"1e99999", b"2.5e-400", b"0." + b"0" * 5000 + b"1",
    b"9223372036854775807", b"9223372036854775808", b"18446744073709551616",
    b"2147483648", b"4611686018427387904", b"1" + b"0" * 400 + b".5",
]  # fmt: skip
UNICODE = [
    "\u200b", "\ufeff", "\u202e", "\u00a0", "é", "ℕ", "𝑥", "🙂", "\x00", "\r", "\x0b", "\x1b",
    "１２", "٣", "\u0301", "\uffff", "\U0010ffff", "•", "−", "×",
]  # fmt: skip
DEPTHS = [2, 255, 256, 257, 1000, 5000]


def _tokens(data: bytes) -> list[tuple[int, bytes]]:
    return [(m.start(), m.group()) for m in _TOKEN.finditer(data)]


def _at(data: bytes, a: int) -> int:
    return a % (len(data) + 1)


def flip_byte(data: bytes, a: int, b: int) -> bytes:
    if not data:
        return data
    i = a % len(data)
    return data[:i] + bytes([data[i] ^ (1 << (b % 8))]) + data[i + 1 :]


def delete_token(data: bytes, a: int, b: int) -> bytes:
    toks = _tokens(data)
    if not toks:
        return data
    o, t = toks[a % len(toks)]
    return data[:o] + data[o + len(t) :]


def duplicate_token(data: bytes, a: int, b: int) -> bytes:
    toks = _tokens(data)
    if not toks:
        return data
    o, t = toks[a % len(toks)]
    return data[:o] + t + b" " + data[o:]


def swap_tokens(data: bytes, a: int, b: int) -> bytes:
    toks = _tokens(data)
    if len(toks) < 2:
        return data
    (o1, t1), (o2, t2) = sorted([toks[a % len(toks)], toks[b % len(toks)]])
    if o1 + len(t1) > o2:
        return data
    return data[:o1] + t2 + data[o1 + len(t1) : o2] + t1 + data[o2 + len(t2) :]


def replace_token(data: bytes, a: int, b: int) -> bytes:
    toks = _tokens(data)
    if not toks:
        return data
    o, t = toks[a % len(toks)]
    pool = POOL + [tok for _, tok in toks]
    return data[:o] + pool[b % len(pool)] + data[o + len(t) :]


def nest(data: bytes, a: int, b: int) -> bytes:
    """A token wrapped in deep nesting of one kind (or a long chain after it)."""
    toks = _tokens(data)
    if not toks:
        return data
    o, t = toks[a % len(toks)]
    n = DEPTHS[b % len(DEPTHS)]
    kinds = [
        (b"-" * n, b""), (b"not " * n, b""), (b"exp(" * n, b")" * n), (b"(" * n, b")" * n),
        (b"[" * n, b"]" * n), (b"(" * n, b", 1)" * n), (b"if c then " * n, b""),
        (b"", b"^T" * n), (b"", b"[0]" * n), (b"", b" + x" * n), (b"", b" ** 2" * n),
        (b"{\n" * n, b"}\n" * n), (b"if t {\n" * n, b"\n}" * n),
    ]  # fmt: skip
    before, after = kinds[(a // 7 + b) % len(kinds)]
    return data[:o] + before + t + after + data[o + len(t) :]


def huge_number(data: bytes, a: int, b: int) -> bytes:
    """A number (or any token) replaced by a huge, tiny or long one."""
    toks = _tokens(data)
    numbers = [(o, t) for o, t in toks if t[:1].isdigit()] or toks
    if not numbers:
        return data
    o, t = numbers[a % len(numbers)]
    return data[:o] + NUMBERS[b % len(NUMBERS)] + data[o + len(t) :]


def odd_unicode(data: bytes, a: int, b: int) -> bytes:
    i = _at(data, a)
    return data[:i] + UNICODE[b % len(UNICODE)].encode("utf-8", "surrogatepass") + data[i:]


def truncate(data: bytes, a: int, b: int) -> bytes:
    return data[: _at(data, a)]


def swap_lines(data: bytes, a: int, b: int) -> bytes:
    lines = data.split(b"\n")
    i, j = a % len(lines), b % len(lines)
    lines[i], lines[j] = lines[j], lines[i]
    return b"\n".join(lines)


MUTATIONS = [
    flip_byte, delete_token, duplicate_token, swap_tokens, replace_token, nest, huge_number,
    odd_unicode, truncate, swap_lines,
]  # fmt: skip

_number = st.integers(min_value=0, max_value=10**6)
mutations = st.lists(
    st.tuples(st.sampled_from(MUTATIONS), _number, _number), min_size=1, max_size=4
)


def mutate(text: str, steps: list[tuple[Callable[[bytes, int, int], bytes], int, int]]) -> bytes:
    data = text.encode("utf-8")
    for mutation, a, b in steps:
        data = mutation(data, a, b)
    return data


# The contract ---------------------------------------------------------------------------------


class Hang(Exception):
    pass


@contextlib.contextmanager
def promptly(seconds: int) -> Iterator[None]:
    """Raises Hang in the block after `seconds` (on the main thread, where signals arrive)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def alarm(signum, frame) -> None:
        raise Hang(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def write(directory: Path, seed: tuple[str, str, dict[str, str]], data: bytes) -> Path:
    name, _, beside = seed
    for other, text in beside.items():
        (directory / other).write_text(text, encoding="utf-8")
    path = directory / name
    path.write_bytes(data)
    return path


def rejected_properly(e: DiagnosticError) -> None:
    """A rejection as a user must see it: diagnostics, each located, none an internal error."""
    assert e.diagnostics, "a DiagnosticError without diagnostics"
    for d in e.diagnostics:
        assert d.loc is not None, f"a diagnostic without a location: {d.message}"
        assert "internal error" not in d.message, d.render()
        d.render()


def check_in_process(path: Path) -> None:
    """What `telc check` and `telc build --emit ir` do, through the driver's functions."""
    file = str(path)

    def check() -> None:
        compiled = compile_text(file, read_text(file))
        optimize(compiled.module, level=0)

    def emit_ir() -> None:
        produce(file, "ir", BuildOptions())

    for run in (check, emit_ir):
        with promptly(SECONDS):
            try:
                run()
            except DiagnosticError as e:
                rejected_properly(e)


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="telc-fuzz-") as d:
        yield Path(d)


def test_the_seeds_compile(workdir: Path) -> None:
    assert len(SEEDS) > 40
    for seed in SEEDS:
        check_in_process(write(workdir, seed, seed[1].encode("utf-8")))


@fuzz_settings(200, 5000)
@given(st.sampled_from(SEEDS), mutations)
def test_fuzz_mutated_programs(workdir: Path, seed, steps) -> None:
    check_in_process(write(workdir, seed, mutate(seed[1], steps)))


@fuzz_settings(6, 300)
@given(st.sampled_from(SEEDS), mutations)
def test_fuzz_mutated_programs_through_the_command_line(workdir: Path, seed, steps) -> None:
    path = write(workdir, seed, mutate(seed[1], steps))
    for command in (["check"], ["build", "--emit", "ir"]):
        result = subprocess.run(
            [*TELC, *command, str(path)],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=SECONDS,
            check=False,
        )
        places = check_command_output("telc", result.returncode, result.stderr, (0, 1))
        if result.returncode == 1:
            assert places and all(re.fullmatch(r".+:\d+:\d+", p) for p in places), result.stderr


_define_value = st.one_of(
    st.text(max_size=30),
    st.sampled_from([n.decode() for n in NUMBERS] + ["nan", "-inf", "1_000", "0x10", " 7 "]),
)


@fuzz_settings(30, 1000)
@given(st.sampled_from(["B", "eps", "nope", ""]), _define_value)
def test_fuzz_defines(workdir: Path, name: str, value: str) -> None:
    """`-D NAME=VALUE` with any value: a usage error, a located error, or a build."""
    path = workdir / "defines.tel"
    path.write_text("dim B = 2\nconst eps = 0.5\nx: in[B]\ny: out = x * eps\n", encoding="utf-8")
    with promptly(SECONDS):
        result = CliRunner().invoke(cli, ["check", "-q", str(path), "-D", f"{name}={value}"])
    assert result.exit_code in (0, 1, 2), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "internal error" not in result.output


@pytest.mark.skipif(not LONG, reason="only under make fuzz: minutes")
def test_fuzz_every_seed_nested_at_every_depth(workdir: Path) -> None:
    """Every seed with a token wrapped in each kind of nesting at each depth (a different
    token for each kind)."""
    kinds = 13
    for seed in SEEDS:
        data = seed[1].encode("utf-8")
        for a in range(0, 7 * kinds, 7):
            for b in range(len(DEPTHS)):
                check_in_process(write(workdir, seed, nest(data, a, b)))
