"""Diagnostics render like a compiler's, all errors of a file are reported, and dlopt turns
them into exit status 1 without a traceback."""

import subprocess
import sys
from pathlib import Path

import pytest

from dlvm.diagnostics import DiagnosticError
from dlvm.ir import parse_module
from dlvm.tools import dlopt

BAD = """module "m"
stage raw

func @f: (f32) -> f32 {
'entry(%x: f32):
    %a = ad %x: f32, 1: f32
    %b = add %x: f32, 1: i32
    %c = multiply %x: f32, %nope: f32
    return %x: f32
}
"""


def test_every_error_of_a_file_is_reported_with_line_and_caret():
    with pytest.raises(DiagnosticError) as e:
        parse_module(BAD, "bad.dl")
    rendered = e.value.render()
    assert rendered.splitlines()[:3] == [
        "bad.dl:6:10: error: unknown instruction 'ad' (did you mean 'add' or 'and'?)",
        "    %a = ad %x: f32, 1: f32",
        "         ^~",
    ]
    assert "bad.dl:7:10: error: add: operand data types differ: f32 and i32" in rendered
    assert "bad.dl:8:28: error: use of undefined value %nope" in rendered
    assert len(e.value.diagnostics) == 3


def test_a_long_line_is_shown_around_its_caret():
    """A dense literal's line holds megabytes of hex: an error on it shows 100 characters on
    either side of the caret, `…` where the line is cut."""
    hex_ = "ab" * 500_000
    text = 'module "m"\nstage raw\n\nfunc @f: () -> () {\n\'entry():\n'
    text += f'    %a = literal dense "{hex_}": <3 x i8> oops\n    return\n}}\n'
    with pytest.raises(DiagnosticError) as e:
        parse_module(text, "long.dl")
    head, line, caret = e.value.render().splitlines()[:3]
    column = text.splitlines()[5].index("oops") + 1
    assert head == f"long.dl:6:{column}: error: expected end of line, found 'oops'"
    assert line == "…" + f'{hex_}": <3 x i8> oops'[-104:]  # 100 before the caret
    assert caret == " " * 101 + "^~~~"


def test_uses_of_a_failed_definition_do_not_cascade():
    text = BAD.replace("%c = multiply %x: f32, %nope: f32", "%c = multiply %a: f32, %a: f32")
    with pytest.raises(DiagnosticError) as e:
        parse_module(text, "bad.dl")
    assert len(e.value.diagnostics) == 2  # nothing about %a in the multiply


def test_dlopt_exit_status_and_stderr(tmp_path, capsys):
    path = tmp_path / "bad.dl"
    path.write_text(BAD)
    assert dlopt.main([str(path), "-p", "DCE"]) == 1
    err = capsys.readouterr().err
    assert f"{path}:6:10: error: unknown instruction 'ad'" in err
    assert "Traceback" not in err


def test_dlopt_refuses_to_overwrite_its_input(tmp_path, capsys):
    path = tmp_path / "ok.dl"
    path.write_text('module "m"\nstage raw\n')
    assert dlopt.main([str(path), "-o", str(path)]) == 2
    assert "refusing to write over the input" in capsys.readouterr().err


def test_a_reader_that_stops_early_is_not_an_error():
    """`dlopt … | head -1`: the closed pipe ends dlopt quietly with status 0."""
    sample = str(Path(__file__).parents[2] / "samples" / "ir" / "inference.dl")
    dlopt_exe = str(Path(sys.executable).parent / "dlopt")
    # Many copies of the module, so that the output overflows the pipe's buffer.
    proc = subprocess.Popen(
        [dlopt_exe, "--print-ir", *[sample] * 400], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()
    assert proc.wait(timeout=60) == 0
    assert proc.stderr.read() == b""
