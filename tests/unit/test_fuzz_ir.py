"""Fuzzing the IR's parser, verifier and -O2 pipeline, and dlopt itself, with real modules
mutated (tests/filecheck, samples/ir, the IR telc makes of samples/*.tel) by the mutations of
test_property_mutations and hostile ones: declared types past any memory, deep nesting, numbers
of thousands of digits, long runs of blanks, strings that never close. Also `dlopt` run as a
program, and `dlopt --run` given hostile JSON and .npy arguments. The contract (fuzzing.py):
no traceback, no exit status 3, no crash, no hang, every diagnostic located."""

from __future__ import annotations

import contextlib
import functools
import glob
import io
import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
from fuzzing import check_command_output, fuzz_settings
from hypothesis import given
from hypothesis import strategies as st
from test_property_mutations import MUTATIONS, _replace, _tokens, change_number
from test_property_parser import check_diagnostics

from dlvm.diagnostics import DiagnosticError
from dlvm.ir import lexer as L
from dlvm.ir import module_text, parse_module
from dlvm.ir.verifier import verify
from dlvm.tools import dlopt
from dlvm.tools.verify_diagnostics import split_chunks
from dlvm.transforms.differentiation import Differentiation
from dlvm.transforms.pass_manager import PassManager
from dlvm.transforms.pipelines import PIPELINES

TIME_LIMIT = 30  # seconds for one input, far more than any takes: past it, a hang


@functools.cache
def bases() -> list[str]:
    """Every module of the test suite and the samples, and the IR of every TEL sample."""
    from telc.driver import compile_text

    paths = sorted(glob.glob("tests/filecheck/**/*.dl", recursive=True))
    paths += sorted(glob.glob("samples/ir/*.dl"))
    texts = [chunk for p in paths for chunk in split_chunks(Path(p).read_text(encoding="utf-8"))]
    for path in sorted(glob.glob("samples/*.tel")):
        texts.append(module_text(compile_text(path, Path(path).read_text(encoding="utf-8")).module))
    return [t for t in texts if "module" in t]


# Hostile mutations ---------------------------------------------------------------------------

HUGE_DIMENSIONS = ["300000000", str(2**62 - 1), str(2**62), str(2**63 - 1), str(2**64), "9" * 4300,
                   "9" * 5000, "0", "-1"]  # fmt: skip
HUGE_NUMBERS = ["9" * 4300, "9" * 5000, "-" + "9" * 4301, "1e999", "-1e999", "1e-999", "nan",
                "1" + "0" * 400 + ".5", str(2**63), str(-(2**63) - 1), "-inf", "0.0e0"]  # fmt: skip
RUNS = [" " * 20_000, "\t" * 20_000, "\n" * 20_000, "// c" + " " * 20_000, "(" * 20_000,
        '"' + '\\"' * 10_000, "\r\\\"" * 5000, "\n " * 10_000, "<" * 20_000]  # fmt: skip


def huge_type(text: str, a: int, b: int) -> str:
    """A dimension of a tensor type, or an array's size, past any memory."""
    toks = [t for t in _tokens(text) if t[0] in (L.TENSOR, L.USE) and "<" in t[1]]
    if not toks:
        return text
    _, t, o = toks[a % len(toks)]
    dims = list(re.finditer(r"[0-9]+", t[t.index("<") :]))
    d = dims[b % len(dims)]
    start = o + t.index("<") + d.start()
    return text[:start] + HUGE_DIMENSIONS[b % len(HUGE_DIMENSIONS)] + text[start + len(d[0]) :]


def huge_number(text: str, a: int, b: int) -> str:
    toks = [tok for tok in _tokens(text) if tok[0] in (L.INT, L.FLOAT)]
    if not toks:
        return text
    _, t, o = toks[a % len(toks)]
    return _replace(text, o, t, HUGE_NUMBERS[b % len(HUGE_NUMBERS)])


def deep_nesting(text: str, a: int, b: int) -> str:
    """A type or a literal use wrapped in many levels of tuples, boxes, pointers or arrays."""
    toks = [tok for tok in _tokens(text) if tok[0] in (L.TENSOR, L.WORD) and tok[1] in WRAPPABLE]
    if not toks:
        return text
    _, t, o = toks[a % len(toks)]
    depth = [10, 63, 64, 65, 1000, 20_000][b % 6]
    left, right = [("(", ")"), ("box{", "}"), ("*", ""), ("[1 x ", "]")][(b // 6) % 4]
    return _replace(text, o, t, left * depth + t + right * depth)


WRAPPABLE = {"f32", "f64", "i64", "i32", "bool"}


def long_run(text: str, a: int, b: int) -> str:
    i = a % (len(text) + 1)
    return text[:i] + RUNS[b % len(RUNS)] + text[i:]


def repeat_line(text: str, a: int, b: int) -> str:
    lines = text.split("\n")
    i = a % len(lines)
    return "\n".join(lines[:i] + [lines[i]] * (2 + b % 2000) + lines[i:])


def retype(text: str, a: int, b: int) -> str:
    """One dimension size replaced by a huge one in every tensor type: the module stays
    consistent, so it often still verifies, and the passes see the huge types."""
    sizes = sorted({d for t in re.findall(TENSOR, text) for d in re.findall(r"(\d+) x", t)})
    if not sizes:
        return text
    old, new = sizes[a % len(sizes)], HUGE_DIMENSIONS[b % len(HUGE_DIMENSIONS)]
    return re.sub(TENSOR, lambda m: re.sub(rf"\b{old} x", f"{new} x", m[0]), text)


TENSOR = r"<[^<>]*x [a-z0-9]+>"  # a tensor type


HOSTILE = [huge_type, huge_number, deep_nesting, long_run, repeat_line, retype]
MUTATION = st.tuples(
    st.sampled_from(MUTATIONS + HOSTILE * 2), st.integers(0, 1 << 20), st.integers(0, 1 << 20)
)


# The contract, in process -------------------------------------------------------------------


class Hang(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds: float):
    def expire(signum, frame):
        raise Hang(f"no answer after {seconds} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def check_module(text: str) -> None:
    """Parse, verify, differentiate and -O2: located diagnostics or a module that verifies and
    prints back to itself, never another exception, within TIME_LIMIT."""
    with time_limit(TIME_LIMIT):
        try:
            module = parse_module(text, "fuzz.dl")
        except DiagnosticError as e:
            check_diagnostics(e.diagnostics, text)
            return
        diags = verify(module)
        check_diagnostics(diags, text)
        if diags:
            return
        printed = module_text(module)
        assert module_text(parse_module(printed)) == printed
        if module.stage != "raw":
            return  # the -O2 passes run on differentiated modules
        manager = PassManager(verify_each=True, emit=lambda _: None)
        try:
            manager.run(module, [Differentiation])
        except DiagnosticError as e:  # what cannot be differentiated
            check_diagnostics(e.diagnostics, text)
            return
        manager.run_pipeline(module, PIPELINES[2])
        printed = module_text(module)
        assert module_text(parse_module(printed)) == printed


@fuzz_settings(200)
@given(st.integers(0, 1 << 20), st.lists(MUTATION, min_size=1, max_size=3))
def test_fuzz_mutated_modules(pick, mutations):
    text = bases()[pick % len(bases())]
    for mutate, a, b in mutations:
        text = mutate(text, a, b)
    check_module(text)


@fuzz_settings(150)
@given(
    st.integers(0, 1 << 20),
    st.sampled_from(HOSTILE),
    st.integers(0, 1 << 20),
    st.integers(0, 1 << 20),
)
def test_fuzz_hostile_mutations(pick, mutate, a, b):
    check_module(mutate(bases()[pick % len(bases())], a, b))


@functools.cache
def valid_bases() -> list[str]:
    """The bases that verify at stage raw: what -O2 runs on."""
    out = []
    for text in bases():
        try:
            module = parse_module(text)
        except DiagnosticError:
            continue
        if module.stage == "raw" and not verify(module):
            out.append(text)
    return out


@fuzz_settings(150)
@given(
    st.integers(0, 1 << 20),
    st.lists(
        st.tuples(st.sampled_from([retype, huge_number, change_number]), st.integers(0, 1 << 20),
                  st.integers(0, 1 << 20)),
        min_size=1, max_size=3,
    ),
)  # fmt: skip
def test_fuzz_optimising_mutated_modules(pick, mutations):
    """Mutations that often keep a module valid (huge tensor types throughout, other numbers),
    so the differentiation and the -O2 pipeline see them."""
    text = valid_bases()[pick % len(valid_bases())]
    for mutate, a, b in mutations:
        text = mutate(text, a, b)
    check_module(text)


# dlopt as a program -------------------------------------------------------------------------


def check_dlopt_output(status: int, out: str, err: str, allowed: tuple[int, ...]) -> list[str]:
    """The statuses allowed, no traceback, no internal error; the places errors name."""
    assert "Traceback (most recent call last)" not in out, out[-2000:]
    return check_command_output("dlopt", status, err, allowed)


@fuzz_settings(6, 100)
@given(st.integers(0, 1 << 20), st.lists(MUTATION, min_size=1, max_size=2))
def test_fuzz_dlopt_program(tmp_path_factory, pick, mutations):
    text = bases()[pick % len(bases())]
    for mutate, a, b in mutations:
        text = mutate(text, a, b)
    path = tmp_path_factory.mktemp("dlopt") / "fuzz.dl"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    proc = subprocess.run(
        [sys.executable, "-m", "dlvm.tools.dlopt", str(path), "-O2", "--print-ir"],
        capture_output=True, text=True, timeout=TIME_LIMIT * 4,
    )  # fmt: skip
    for where in check_dlopt_output(proc.returncode, proc.stdout, proc.stderr, (0, 1)):
        assert re.fullmatch(re.escape(str(path)) + r":\d+:\d+", where), where


# dlopt --run with hostile arguments ---------------------------------------------------------

RUN_MODULE = """module "run"
stage raw

func @vector: (<2 x f32>) -> <2 x f32> {
'entry(%x: <2 x f32>):
    %y = multiply %x: <2 x f32>, 2: f32
    return %y: <2 x f32>
}

func @matrix: (<2 x 3 x i64>, i32, <2 x bool>, f16) -> i32 {
'entry(%m: <2 x 3 x i64>, %n: i32, %b: <2 x bool>, %h: f16):
    return %n: i32
}

func @pair: ((f32, f32)) -> () {
'entry(%p: (f32, f32)):
    return
}
"""
PARAMETERS = {"@vector": 1, "@matrix": 4, "@pair": 1}

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=12,
)
DTYPES = ["<f4", "<f8", "<i8", "<i4", "|b1", "<f2", "<c8", "|O", "<U3", "V8", ">f8", "|u1", "x"]
SHAPES = st.lists(st.integers(-2, 3) | st.sampled_from([2**40, 2**63, 2**64]), max_size=3)


@st.composite
def npy_file(draw) -> bytes:
    """A .npy file's bytes: a real one, a crafted header, either cut or corrupted."""
    if draw(st.booleans()):
        shape = draw(st.lists(st.integers(1, 3), max_size=3))
        dtype = draw(st.sampled_from(["f4", "i8", "i4", "?", "f2", "c8", "u1"]))
        out = io.BytesIO()
        np.save(out, np.ones(shape, dtype))
        data = out.getvalue()
    else:
        header = {"descr": draw(st.sampled_from(DTYPES)), "fortran_order": draw(st.booleans()),
                  "shape": tuple(draw(SHAPES))}  # fmt: skip
        text = repr(header) if draw(st.booleans()) else draw(st.text(max_size=40))
        head = text.encode("utf-8", "surrogatepass") + b"\n"
        data = b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") + head
        data += draw(st.binary(max_size=64))
    cut = draw(st.integers(0, len(data)))
    if draw(st.booleans()):
        data = data[:cut]
    elif cut < len(data) and draw(st.booleans()):
        data = data[:cut] + bytes([draw(st.integers(0, 255))]) + data[cut + 1 :]
    return data


ARGUMENT = st.one_of(
    JSON.map(lambda v: json.dumps(v, allow_nan=True)),
    st.integers(1, 100_000).map(lambda n: "[" * n + "]" * n),
    st.integers(1, 100_000).map(lambda n: "[" * n + "1" + "]" * n),
    st.sampled_from(HUGE_NUMBERS + ["-Infinity", "NaN", "true", "[true, false]", "[[1, 2, 3]]"]),
    npy_file(),
)


@fuzz_settings(150)
@given(st.sampled_from(sorted(PARAMETERS)), st.lists(ARGUMENT, min_size=1, max_size=4))
def test_fuzz_dlopt_run_arguments(tmp_path_factory, func, arguments):
    directory = tmp_path_factory.mktemp("run")
    module = directory / "run.dl"
    module.write_text(RUN_MODULE, encoding="utf-8")
    texts = []
    for i, argument in enumerate(arguments):
        if isinstance(argument, bytes):
            path = directory / f"argument{i}.npy"
            path.write_bytes(argument)
            argument = str(path)
        texts.append(argument)
    out, err = io.StringIO(), io.StringIO()
    with time_limit(TIME_LIMIT), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = dlopt.main([str(module), "--run", func, "--args", *texts])
    places = check_dlopt_output(status, out.getvalue(), err.getvalue(), (0, 1))
    assert places == [""] * len(places)  # `error: argument N: …` or `error: @f …`: no file
    for line in err.getvalue().splitlines():
        assert line.startswith(("error: argument ", f"error: {func} ")), line
