"""A correct program that cannot be built says why, with exit status 1 and no traceback: an
entry point the C ABI cannot name, a construct the code generator does not compile yet, a
missing C compiler, an output that cannot be written."""

from __future__ import annotations

from click.testing import CliRunner

from dlvm.tools import dlc
from telc.cli import cli

MODEL = """module m
x: in[4]
y: out = x * 2.0
"""


def telc_build(tmp_path, text: str, *options: str, env: dict[str, str] | None = None):
    src = tmp_path / "m.tel"
    src.write_text(text)
    out = options[0] if options else str(tmp_path / "m.so")
    return CliRunner().invoke(cli, ["build", str(src), "-o", out], env=env)


def assert_cannot_build(result, *parts: str) -> None:
    assert result.exit_code == 1, result.output
    assert "telc: cannot build: " in result.output
    for part in parts:
        assert part in result.output
    assert "Traceback" not in result.output and "internal error" not in result.output


def test_an_export_named_like_an_api_function(tmp_path):
    text = MODEL + "export def save(a: [4]) -> [4] = a\n"
    assert_cannot_build(telc_build(tmp_path, text), "save")


def test_a_missing_c_compiler(tmp_path):
    result = telc_build(tmp_path, MODEL, env={"CC": str(tmp_path / "no-such-cc")})
    assert_cannot_build(result, "no-such-cc")


def test_an_output_that_cannot_be_written(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = telc_build(tmp_path, MODEL, str(blocker / "m.so"))
    assert_cannot_build(result, "cannot write")


def test_dlc_reports_a_construct_it_does_not_compile(tmp_path, capsys):
    # A scan's kernel computes its combinator inline: a function with control flow is not.
    src = tmp_path / "m.dl"
    src.write_text(
        'module "m"\nstage optimizable\n\n'
        "func @pick: (f32, f32) -> f32 {\n'entry(%a: f32, %b: f32):\n"
        "    %c = greaterThan %a: f32, %b: f32\n"
        "    conditional %c: bool then 'x(%a: f32) else 'x(%b: f32)\n"
        "'x(%r: f32):\n    return %r: f32\n}\n\n"
        "func @f: (<4 x f32>) -> <4 x f32> {\n'entry(%x: <4 x f32>):\n"
        "    %r = scan %x: <4 x f32> by @pick: (f32, f32) -> f32 along 0\n"
        "    return %r: <4 x f32>\n}\n"
    )
    assert dlc.main([str(src), "-o", str(tmp_path / "m.so")]) == 1
    err = capsys.readouterr().err
    assert "cannot build: " in err and "scan by @pick is not compiled" in err
    assert "Traceback" not in err
