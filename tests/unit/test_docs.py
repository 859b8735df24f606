"""Every code example in docs/*.md and README.md is compiled or run, so the docs never rot.

One test per fenced code block, named after its file and line (`docs/tel.md:66`). What a block
is, and what is done with it, comes from its info string: a language, then optional words.

  tel         A complete TEL module: parsed, checked, lowered, differentiated and optimised by
              telc's driver. `invalid`: it must be rejected with diagnostics instead.
  dl, dlvm    A complete IR module: parsed and verified. `invalid`: it must be rejected.
  python      Run, in document order, in one namespace per document. `file=NAME`: written to
              NAME and not run (a script a later `console run` block runs, say under mpiexec).
  c           Compiled (syntax and types: `cc -std=c11 -Wall -Werror -fsyntax-only`) against the
              headers written so far, the newest first. `model=M`: against the library of
              samples/M.tel, whose header is included first and for which `NAME_` stands for
              `M_`; the block may restate declarations of that header (enum and struct typedefs
              are then compared member by member). `mpi`: it includes <mpi.h>, found beside the
              MPI compiler wrapper (mpicc) of the virtual environment (the `mpi` extra's
              MPICH); skipped, saying so, where there is none.
  json        Parsed. `model=M`: its keys, at every level, are those of M's manifest, in order.
  sh          Not run, unless `run`: then run by `bash -e`, which must succeed.
  console     Not run, unless `run`: each `$ ` line is a command, the lines after it its expected
              output (stdout and stderr together); `...` stands for any text within a line, or
              for any number of lines on a line of its own. Every command must exit with status
              0, or N with `status=N`. `mpi`: it runs MPI programs (mpicc, mpiexec); skipped,
              saying so, where the virtual environment has no MPI compiler wrapper.
  text        Never run: grammars, schemas, sample output.

A block with another info string, or none, or with a word its language does not take, fails:
every block says what it is.

Each document runs in a temporary directory of its own, its blocks in document order, and later
blocks see what earlier ones left there. `file=NAME` writes the block to NAME (relative to that
directory) before compiling or running it, for a later block to `use`, build or compile. The
directory holds `samples`, a link to the repository's samples/; commands find telc, dlopt, dlc
and python on PATH (the virtual environment's). A block's test first runs the earlier blocks of
its document that leave something behind (python blocks, `run` blocks and `file=` blocks), so
any one test can run alone. Line numbers in diagnostics and tracebacks of unnamed blocks are
those of the Markdown file. docs/README.md repeats these rules for writers.
"""

from __future__ import annotations

import difflib
import functools
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from dlvm.diagnostics import DiagnosticError
from dlvm.ir.ops import OP_ALIASES, OPS
from dlvm.ir.parser import parse_module
from dlvm.ir.verifier import verify
from dlvm.transforms import PASSES

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
BIN = Path(sys.executable).parent  # the virtual environment's bin: telc, dlopt, dlc, python
CC = os.environ.get("CC", "cc")

# The words each language takes after its name (`file`, `model`, `status` take `=VALUE`).
WORDS = {
    "tel": {"file", "invalid"},
    "dl": {"file", "invalid"},
    "dlvm": {"file", "invalid"},
    "python": {"file"},
    "c": {"file", "model", "mpi"},
    "json": {"model"},
    "sh": {"run"},
    "console": {"run", "status", "mpi"},
    "text": set(),
}


@dataclass
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    info: str
    text: str
    lang: str = ""
    words: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        lang, *words = self.info.split() or [""]
        self.lang = lang
        for w in words:
            key, _, value = w.partition("=")
            self.words[key] = value

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def runs(self) -> bool:
        """Whether the test does anything with the block (else it is only shown)."""
        return self.lang not in ("sh", "console", "text") or "run" in self.words

    @property
    def leaves_state(self) -> bool:
        """Whether later blocks of the document may depend on what this one did."""
        return self.runs and (self.lang == "python" or "run" in self.words or "file" in self.words)

    def problem(self) -> str | None:
        """What is wrong with the info string, if anything."""
        if not self.info.strip():
            return "has no info string (say what it is: tel, dl, python, c, sh, text, …)"
        if self.lang not in WORDS:
            return f"has the unknown language '{self.lang}' (known: {', '.join(WORDS)})"
        unknown = set(self.words) - WORDS[self.lang]
        if unknown:
            return f"has words its language does not take: {', '.join(sorted(unknown))}"
        for key in ("file", "model", "status"):
            if key in self.words and not self.words[key]:
                return f"needs a value after {key}="
        return None


_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


def code_blocks(path: Path) -> list[Block]:
    """The fenced code blocks of a Markdown file (fences may be indented, as in lists)."""
    blocks: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        fence, indent, start = m["fence"], len(m["indent"]), i
        body: list[str] = []
        i += 1
        while i < len(lines):
            stripped = lines[i].strip()
            if stripped.startswith(fence) and not stripped.strip(fence[0]):
                break
            line = lines[i]
            body.append(line[indent:] if not line[:indent].strip() else line.lstrip())
            i += 1
        text = "\n".join(body) + "\n"
        blocks.append(Block(path, start + 1, m["info"].strip(), text))
        i += 1
    return blocks


BLOCKS = [b for p in DOCUMENTS for b in code_blocks(p)]


def prose(path: Path) -> str:
    """A Markdown file without its code blocks."""
    lines = path.read_text(encoding="utf-8").splitlines()
    inside = {n for b in code_blocks(path) for n in range(b.line, b.line + b.text.count("\n") + 2)}
    return "\n".join(line for n, line in enumerate(lines, 1) if n not in inside)


# Running a document ------------------------------------------------------------------------------


class DocumentRun:
    """One document's working directory, Python namespace and the blocks already run."""

    def __init__(self, path: Path, workdir: Path, libraries: Callable[[str], Path]) -> None:
        self.path = path
        self.workdir = workdir
        self.libraries = libraries
        self.namespace: dict[str, Any] = {"__name__": f"doc_{path.stem}"}
        self.outcome: dict[int, BaseException | None] = {}  # by block line; None: it passed
        (workdir / "samples").symlink_to(ROOT / "samples")

    def run_through(self, block: Block) -> None:
        """Runs the earlier blocks later ones may depend on, then `block`."""
        for earlier in code_blocks(self.path):
            if earlier.line >= block.line:
                break
            if not earlier.leaves_state:
                continue
            if earlier.line not in self.outcome:
                self.run(earlier)
            if self.outcome[earlier.line] is not None:
                pytest.fail(f"{earlier.id}, which this block may depend on, failed", pytrace=False)
        if block.line in self.outcome:
            error = self.outcome[block.line]
            if error is not None:
                raise error
            return
        self.run(block)
        error = self.outcome[block.line]
        if error is not None:
            raise error

    def run(self, block: Block) -> None:
        try:
            RUNNERS[block.lang](self, block)
            self.outcome[block.line] = None
        except (Exception, pytest.fail.Exception) as e:
            self.outcome[block.line] = e

    def source_path(self, block: Block, suffix: str) -> Path:
        """Where the block lives: its `file=`, written now, or a name of its own."""
        if "file" in block.words:
            path = self.workdir / block.words["file"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(block.text, encoding="utf-8")
            return path
        return self.workdir / f"block_L{block.line}{suffix}"

    def numbered(self, block: Block) -> str:
        """The text of an unnamed block, moved down to its lines in the Markdown file."""
        return block.text if "file" in block.words else "\n" * block.line + block.text

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
        env["NO_COLOR"] = "1"
        env["TELC_CACHE_DIR"] = str(self.workdir / ".telc-cache")  # not the user's cache
        env.pop("TELC_TRACEBACK", None)
        return env


def run_tel(run: DocumentRun, block: Block) -> None:
    from telc.driver import compile_text, optimize

    path = run.source_path(block, ".tel")
    try:
        compiled = compile_text(str(path), run.numbered(block))
        optimize(compiled.module)
        rendered = None
    except DiagnosticError as e:
        rendered = e.render()
    if rendered is None:
        if "invalid" in block.words:
            pytest.fail(f"{block.id}: the example is marked invalid but compiles", pytrace=False)
    elif "invalid" not in block.words or "internal error" in rendered:
        pytest.fail(f"{block.id}: the TEL example is rejected:\n{rendered}", pytrace=False)


def run_dl(run: DocumentRun, block: Block) -> None:
    path = run.source_path(block, ".dl")
    try:
        diags = verify(parse_module(run.numbered(block), str(path)))
    except DiagnosticError as e:
        diags = e.diagnostics
    if "invalid" in block.words:
        if not diags:
            pytest.fail(f"{block.id}: the example is marked invalid but verifies", pytrace=False)
    elif diags:
        rendered = "\n".join(d.render() for d in diags)
        pytest.fail(f"{block.id}: the IR example does not verify:\n{rendered}", pytrace=False)


def run_python(run: DocumentRun, block: Block) -> None:
    if "file" in block.words:  # a script for a later command: written, not run here
        run.source_path(block, ".py")
        return
    code = compile("\n" * block.line + block.text, str(block.path), "exec")
    cwd = os.getcwd()
    os.chdir(run.workdir)
    try:
        exec(code, run.namespace)
    finally:
        os.chdir(cwd)


_ANONYMOUS = re.compile(r"typedef\s+(enum|struct)\s*\{(.*?)\}\s*(\w+)\s*;", re.S)
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def restated(code: str) -> str:
    """`code` with each anonymous enum or struct typedef replaced by static assertions that the
    header's definition has the same members (values; types, in order), since C does not allow
    defining them twice."""

    def checks(m: re.Match[str]) -> str:
        kind, body, name = m[1], _COMMENT.sub(" ", m[2]), m[3]
        out: list[str] = []
        if kind == "enum":
            value = -1
            for item in filter(None, (s.strip() for s in body.split(","))):
                constant, _, given = (s.strip() for s in item.partition("="))
                value = int(given, 0) if given else value + 1
                out.append(f'_Static_assert({constant} == {value}, "{constant} == {value}");')
            return " ".join(out)
        previous = None
        for decl in filter(None, (s.strip() for s in body.split(";"))):
            member = re.search(r"(\w+)\s*(\[\d+\])?$", decl)  # `x` or an array `x[3]`
            assert member, f"cannot read the member declaration {decl!r}"
            ctype = decl[: member.start()].strip() + (member[2] or "")
            out.append(
                f"_Static_assert(__builtin_types_compatible_p(__typeof__((({name} *)0)->"
                f'{member[1]}), {ctype}), "{name}.{member[1]} is {ctype}");'
            )
            if previous:
                out.append(
                    f"_Static_assert(offsetof({name}, {previous}) < offsetof({name}, {member[1]}),"
                    f' "{name}.{previous} comes before {member[1]}");'
                )
            previous = member[1]
        return " ".join(out)

    # The same number of lines, so that the #line numbering stays right.
    return _ANONYMOUS.sub(lambda m: checks(m) + "\n" * m[0].count("\n"), code)


def needs_mpi(block: Block) -> list[str]:
    """The include option of MPI's header for a block marked `mpi` (none for another block);
    the test is skipped where the virtual environment has no MPI compiler wrapper."""
    if "mpi" not in block.words:
        return []
    header = BIN.parent / "include" / "mpi.h"
    if not (BIN / "mpicc").exists() or not header.exists():
        pytest.skip(f"{block.id}: needs MPI (pip install 'telc[mpi]': mpicc and mpi.h)")
    return [f"-I{header.parent}"]


def run_c(run: DocumentRun, block: Block) -> None:
    mpi = needs_mpi(block)
    path = run.source_path(block, ".c")
    # The directories of the headers written so far, the newest first: the build just before
    # a block is the one it is about.
    headers = sorted(run.workdir.rglob("*.h"), key=lambda h: -h.stat().st_mtime_ns)
    includes = list(dict.fromkeys(h.parent for h in headers if "samples" not in h.parts))
    code = block.text
    prelude = ""
    if "model" in block.words:
        model = block.words["model"]
        includes.insert(0, run.libraries(model).parent)
        prelude = f'#include <stddef.h>\n#include "{model}.h"\n'
        code = restated(code.replace("NAME_", f"{model}_"))
    if prelude or "file" not in block.words:
        path = run.workdir / f"block_L{block.line}.c"
        path.write_text(f'{prelude}#line {block.line + 1} "{block.path}"\n{code}', encoding="utf-8")
    cmd = [CC, "-std=c11", "-Wall", "-Werror", "-fsyntax-only", *mpi]
    cmd += [f"-I{d}" for d in [*includes, run.workdir]] + [str(path)]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=run.workdir, timeout=120)
    if done.returncode != 0:
        pytest.fail(f"{block.id}: the C example does not compile:\n{done.stderr}", pytrace=False)


def key_skeleton_problems(doc: Any, real: Any, where: str = "manifest") -> list[str]:
    """Where the keys of `doc` differ from those of `real` (objects: the same keys in the same
    order; arrays: each element against the real one at its index)."""
    if isinstance(doc, dict):
        if not isinstance(real, dict):
            return [f"{where} is an object in the docs, not in the library"]
        if list(doc) != list(real):
            return [f"{where} has keys {list(doc)} in the docs, {list(real)} in the library"]
        return [p for k in doc for p in key_skeleton_problems(doc[k], real[k], f"{where}.{k}")]
    if isinstance(doc, list) and isinstance(real, list):
        return [
            p
            for i, (d, r) in enumerate(zip(doc, real))
            for p in key_skeleton_problems(d, r, f"{where}[{i}]")
        ]
    return []


def run_json(run: DocumentRun, block: Block) -> None:
    try:
        doc = json.loads(block.text)
    except json.JSONDecodeError as e:
        doc, error = None, str(e)
    if doc is None:
        pytest.fail(f"{block.id}: not JSON: {error}", pytrace=False)
    if "model" in block.words:
        import dlvm

        with dlvm.load(run.libraries(block.words["model"])) as model:
            problems = key_skeleton_problems(doc, model.manifest)
        if problems:
            pytest.fail(f"{block.id}: " + "; ".join(problems), pytrace=False)


def run_sh(run: DocumentRun, block: Block) -> None:
    done = subprocess.run(["bash", "-e", "-c", block.text], cwd=run.workdir, env=run.environment(),
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    if done.returncode != 0:
        pytest.fail(
            f"{block.id}: exit status {done.returncode}\n{done.stdout}{done.stderr}", pytrace=False
        )


def console_session(text: str) -> list[tuple[str, list[str]]]:
    """(command, expected output lines) for each `$ ` line of a console block."""
    session: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            session.append((line[2:], []))
        elif session:
            session[-1][1].append(line)
        elif line.strip():
            raise ValueError(f"output before the first command: {line!r}")
    return session


def output_matches(expected: list[str], actual: list[str]) -> bool:
    """Whether the lines match, `...` matching any text in a line or any lines on its own."""
    expected = [e.rstrip() for e in expected]
    actual = [a.rstrip() for a in actual]
    while expected and not expected[-1]:
        expected.pop()
    while actual and not actual[-1]:
        actual.pop()

    def line(e: str, a: str) -> bool:
        if "..." not in e:
            return e == a
        return re.fullmatch(".*".join(map(re.escape, e.split("..."))), a) is not None

    @functools.cache
    def match(i: int, j: int) -> bool:
        if i == len(expected):
            return j == len(actual)
        if expected[i] == "...":
            return match(i + 1, j) or (j < len(actual) and match(i, j + 1))
        return j < len(actual) and line(expected[i], actual[j]) and match(i + 1, j + 1)

    return match(0, 0)


def run_console(run: DocumentRun, block: Block) -> None:
    needs_mpi(block)
    status = int(block.words.get("status", "0"))
    for command, expected in console_session(block.text):
        done = subprocess.run(["bash", "-c", command], cwd=run.workdir, env=run.environment(),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=300)  # fmt: skip
        if done.returncode != status:
            pytest.fail(
                f"{block.id}: `{command}` exited with status {done.returncode}, not {status}:\n"
                + done.stdout,
                pytrace=False,
            )
        if not output_matches(expected, done.stdout.splitlines()):
            diff = difflib.unified_diff(expected, done.stdout.splitlines(), "docs", "printed")
            pytest.fail(
                f"{block.id}: `{command}` printed something else:\n" + "\n".join(diff),
                pytrace=False,
            )


RUNNERS: dict[str, Callable[[DocumentRun, Block], None]] = {
    "tel": run_tel,
    "dl": run_dl,
    "dlvm": run_dl,
    "python": run_python,
    "c": run_c,
    "json": run_json,
    "sh": run_sh,
    "console": run_console,
}

_RUNS: dict[Path, DocumentRun] = {}


@pytest.fixture
def document(tmp_path_factory, sample_library) -> Callable[[Path], DocumentRun]:
    def get(path: Path) -> DocumentRun:
        if path not in _RUNS:
            workdir = tmp_path_factory.mktemp(f"doc-{path.stem}")
            _RUNS[path] = DocumentRun(path, workdir, sample_library)
        return _RUNS[path]

    return get


# The tests -----------------------------------------------------------------------------------


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.runs], ids=lambda b: b.id)
def test_code_block(block: Block, document) -> None:
    problem = block.problem()
    if problem:
        pytest.fail(f"{block.id}: the code block {problem}", pytrace=False)
    document(block.path).run_through(block)


def test_every_code_block_says_what_it_is() -> None:
    problems = [f"{b.id}: the code block {b.problem()}" for b in BLOCKS if b.problem()]
    assert not problems, "\n".join(problems)


def test_console_blocks_start_with_a_command() -> None:
    for b in BLOCKS:
        if b.lang == "console":
            console_session(b.text)  # raises on output before the first `$ `


def test_output_matching() -> None:
    assert output_matches(["a", "...", "d"], ["a", "b", "c", "d"])
    assert output_matches(["a", "...", "b"], ["a", "b"])
    assert output_matches(["wrote m.so (...) in ... s"], ["wrote m.so (70 KiB) in 0.9 s"])
    assert not output_matches(["a"], ["a", "b"])
    assert not output_matches(["a", "c"], ["a", "b"])


def test_restated_declarations() -> None:
    code = "typedef enum { A = 0, B, C = 7 } e;\ntypedef struct { int x; /* c */ char *y; } s;"
    text = restated(code)
    assert "_Static_assert(B == 1" in text and "_Static_assert(C == 7" in text
    assert "((s *)0)->y), char *)" in text and "offsetof(s, x) < offsetof(s, y)" in text


IR_DOC = ROOT / "docs" / "ir.md"


def test_ir_reference_shows_every_instruction() -> None:
    """A new instruction in dlvm/ir/ops.py cannot be left out of docs/ir.md: each one appears
    in an example that verifies (a test above checks that they do)."""
    shown: set[str] = set()
    for b in code_blocks(IR_DOC):
        if b.lang in ("dl", "dlvm") and "invalid" not in b.words:
            for fn in parse_module(b.text, b.id).functions:
                shown.update(inst.opcode for inst in fn.instructions())
    assert sorted(set(OPS) - shown) == []
    text = prose(IR_DOC)
    assert [a for a in OP_ALIASES if f"`{a}`" not in text] == []


def test_ir_reference_names_every_pass() -> None:
    text = prose(IR_DOC)
    named = [p for p in PASSES.values() if f"`{p.name}`" in text and f"`{p.alias}`" in text]
    assert [p.name for p in PASSES.values() if p not in named] == []


_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def test_relative_links_lead_somewhere() -> None:
    broken = []
    for path in DOCUMENTS:
        for target in _LINK.findall(prose(path)):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            if not (path.parent / target.split("#")[0]).exists():
                broken.append(f"{path.relative_to(ROOT)}: {target}")
    assert broken == []


def test_readme_links_every_document() -> None:
    text = prose(ROOT / "README.md")
    missing = [p.name for p in DOCUMENTS[:-1] if f"(docs/{p.name})" not in text]
    assert missing == []
