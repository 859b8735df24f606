"""`telc build` reports each stage's time and the total on stderr, says nothing with `-q`, keeps
stdout to the emitted text under `--emit`, keeps its error format, and writes control codes only
to a terminal."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys

from click.testing import CliRunner

from dlvm.ir.printer import module_text
from telc.cli import cli
from telc.driver import Timings, compile_text, optimize

SAMPLE = "samples/xor.tel"  # the quickest sample to build
FRONTEND = ["parse", "lower", "differentiation", "optimization"]
CODEGEN = ["load llvm", "compute stages", "llvm", "runtime", "glue", "link", "write"]
TELC = [sys.executable, "-c", "from telc.cli import main; main()"]


def test_the_summary_times_every_stage_and_the_total(tmp_path):
    out = tmp_path / "xor.so"
    result = CliRunner().invoke(cli, ["build", SAMPLE, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""  # progress and summary go to stderr
    head, *rows = result.stderr.splitlines()
    assert re.fullmatch(
        rf"telc: wrote {re.escape(str(out))} \(\d+\.\d KiB\), {re.escape(str(tmp_path))}/xor\.h "
        rf"and {re.escape(str(tmp_path))}/dlrt\.h in \d+\.\d\d s",
        head,
    )
    assert f"({out.stat().st_size / 1024:.1f} KiB)" in head
    timed = [re.fullmatch(r"  (\S.*?)\s+(\d+) ms\s+(\d+)%", row) for row in rows]
    assert all(timed), rows
    names = [m.group(1) for m in timed if m]
    assert names == [*FRONTEND, *CODEGEN, "total"]


def test_quiet_prints_nothing_on_success(tmp_path):
    out = tmp_path / "xor.so"
    result = CliRunner().invoke(cli, ["build", SAMPLE, "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    assert result.output == ""
    assert out.exists() and out.with_suffix(".h").exists()


def test_emit_ir_writes_exactly_the_ir_to_stdout():
    result = CliRunner().invoke(cli, [SAMPLE, "--emit", "ir"])
    assert result.exit_code == 0, result.output
    with open(SAMPLE, encoding="utf-8") as f:
        expected = module_text(compile_text(SAMPLE, f.read()).module)
    assert result.stdout == expected
    assert result.stderr == ""


def test_a_failing_build_prints_its_error_and_no_summary(tmp_path):
    src = tmp_path / "m.tel"
    src.write_text("module m\nx: in[4]\ny: out = x * zz\n")
    result = CliRunner().invoke(cli, ["build", str(src), "-o", str(tmp_path / "m.so")])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.startswith(f"{src}:3:14: error: unknown name 'zz'\n")
    assert "telc: wrote" not in result.stderr and "total" not in result.stderr
    assert not (tmp_path / "m.so").exists()


def test_a_failing_codegen_step_keeps_the_cannot_build_format(tmp_path):
    env = {"CC": str(tmp_path / "no-such-cc")}
    result = CliRunner().invoke(cli, ["build", SAMPLE, "-o", str(tmp_path / "x.so")], env=env)
    assert result.exit_code == 1
    assert result.stderr.startswith("telc: cannot build: cannot run the C compiler")
    assert "total" not in result.stderr


def test_no_control_codes_when_stderr_is_a_pipe(tmp_path):
    """A real process writing to pipes, as in CI, even with FORCE_COLOR set."""
    env = {**os.environ, "FORCE_COLOR": "1", "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    done = subprocess.run(
        [*TELC, "build", SAMPLE, "-o", str(tmp_path / "xor.so")],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert "\x1b" not in done.stderr and "\r" not in done.stderr
    assert done.stderr.startswith("telc: wrote ") and "  total " in done.stderr


def test_on_a_terminal_the_spinner_stays_on_stderr(tmp_path):
    """With stderr on a terminal the running stage is shown and erased; stdout, a pipe, still
    holds exactly the emitted text."""
    leader, follower = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "100"}
    proc = subprocess.Popen(
        [*TELC, SAMPLE, "--emit", "llvm", "-o", str(tmp_path / "xor.ll")],
        stdout=subprocess.PIPE,
        stderr=follower,
        env=env,
    )
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal's other end closed
            break
        if not chunk:
            break
        seen += chunk
    stdout, _ = proc.communicate(timeout=60)
    os.close(leader)
    assert proc.returncode == 0, seen
    assert stdout == b""
    assert b"llvm\xe2\x80\xa6" in seen  # "llvm…" beside the spinner
    assert (tmp_path / "xor.ll").read_text().startswith("; ModuleID")


def test_timings_record_the_frontend_stages_without_changing_the_ir():
    with open(SAMPLE, encoding="utf-8") as f:
        text = f.read()
    started: list[str] = []
    timings = Timings(started=started.append)
    timed = compile_text(SAMPLE, text, None, timings)
    optimize(timed.module, timings)
    plain = compile_text(SAMPLE, text)
    optimize(plain.module)
    assert module_text(timed.module) == module_text(plain.module)
    assert started == FRONTEND
    assert [name for name, _ in timings.stages] == FRONTEND
    assert all(seconds >= 0 for _, seconds in timings.stages)
