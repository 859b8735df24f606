"""The exit-status contract dlopt and dlc share (dlvm/tools/driver.py: `command`): a rejected
input is 1 with located diagnostics, a bad command line 2, a bug 3 with one line and a hint to
report it (DLVM_TRACEBACK=1 shows the traceback), an interrupt 130. And the `--run` arguments
that used to end in a traceback: deep or huge JSON, broken .npy files, `-1e999`."""

import io
import warnings

import numpy as np
import pytest

from dlvm.tools import dlc, dlopt
from dlvm.tools.driver import EXIT_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK

ARITH = "samples/ir/arith.dl"  # @axpy: (f32, <2 x f32>, <2 x f32>), @factorial: (i64)


def _fail_with(error: BaseException):
    def fail(*args, **kwargs):
        raise error

    return fail


@pytest.mark.parametrize("tool", [dlopt, dlc])
def test_an_internal_error_is_one_line_and_exit_status_3(tool, monkeypatch, capsys):
    monkeypatch.delenv("DLVM_TRACEBACK", raising=False)
    monkeypatch.setattr(tool, "load_module", _fail_with(RuntimeError("boom\nsecond line")))
    assert tool.main([ARITH]) == EXIT_INTERNAL
    err = capsys.readouterr().err
    name = tool.__name__.rsplit(".", 1)[1]
    assert err.splitlines() == [
        f"{name}: internal error: RuntimeError: boom",
        f"This is a bug in {name}; please report it with the input file "
        "(DLVM_TRACEBACK=1 shows where it happened).",
    ]


@pytest.mark.parametrize("tool", [dlopt, dlc])
def test_dlvm_traceback_shows_the_traceback(tool, monkeypatch):
    monkeypatch.setenv("DLVM_TRACEBACK", "1")
    monkeypatch.setattr(tool, "load_module", _fail_with(RuntimeError("boom")))
    with pytest.raises(RuntimeError, match="boom"):
        tool.main([ARITH])


def test_an_interrupt_is_exit_status_130(monkeypatch, capsys):
    monkeypatch.setattr(dlopt, "load_module", _fail_with(KeyboardInterrupt()))
    assert dlopt.main([ARITH]) == EXIT_INTERRUPTED
    assert capsys.readouterr().err == "dlopt: interrupted\n"


def test_dlc_cannot_write_its_output(tmp_path, capsys):
    assert dlc.main([ARITH, "-o", str(tmp_path)]) == EXIT_INPUT
    assert f"{tmp_path}: cannot write: Is a directory" in capsys.readouterr().err


def _run(capsys, *args: str) -> tuple[int, str, str]:
    status = dlopt.main([ARITH, "--run", *args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "internal error" not in err
    return status, out, err


def test_negative_numbers_are_arguments_not_options(capsys):
    status, out, _ = _run(capsys, "@axpy", "--args", "-1e999", "[-1e-3, -Infinity]", "[1, 2]")
    assert status == EXIT_OK
    assert "result: <2 x f32> = [inf, inf]" in out
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning from NumPy: 1e300 is inf as an f32
        status, out, err = _run(capsys, "@axpy", "--args", "1e300", "[1, 2]", "[3, 4]")
    assert status == EXIT_OK
    assert "result: <2 x f32> = [inf, inf]" in out
    status, _, err = _run(capsys, "@factorial", "--args", "-inf")
    assert status == EXIT_INPUT
    assert "argument 0: cannot read '-inf' as a number" in err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[" * 100_000 + "]" * 100_000, "is nested too deeply"),
        ("9" * 5000, "has a number with too many digits"),
        ("[" * 70 + "1" + "]" * 70, "is not a i64 tensor"),  # deeper than NumPy's 64 dims
        ("null", "is not a number or a nested list"),
        ('["1"]', "is not a number or a nested list"),
        ("1" * 30, "is not a i64 tensor"),
    ],
)
def test_hostile_json_arguments_are_rejected(capsys, text, message):
    status, _, err = _run(capsys, "@factorial", "--args", text)
    assert status == EXIT_INPUT
    assert f"error: argument 0: '{text[:40]}" in err and message in err


def _npy_header(shape: tuple[int, ...]) -> bytes:
    out = io.BytesIO()
    header = {"descr": "<i8", "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(out, header)
    return out.getvalue()


def test_hostile_npy_arguments_are_rejected(tmp_path, capsys):
    files = {
        "empty": (b"", "No data left in file"),
        "magic_only": (b"\x93NUMPY\x01\x00", "cannot read"),
        "corrupt": (b"\x93NUMPY\x01\x00garbage", "cannot read"),
        "no_data": (_npy_header(()), "cannot read"),
        # A header that claims far more data than the file holds: never read, nor allocated.
        "huge": (_npy_header((1 << 40,)) + bytes(8), "describes more data than the file holds"),
        "huge_scalar": (_npy_header(()).replace(b"()", b"(1 << 40,)"), "cannot read"),
        "overflowing": (_npy_header((2**63,)), "cannot read"),  # an OverflowError in NumPy
        "overflowing_product": (_npy_header((2**62, 2**62)), "cannot read"),
        # NumPy's header parser raises its tokenizer's own error here.
        "tokenizer": (b"\x93NUMPY\x01\x00\x07\x000)\xf0\x90\x80\x80\n", "cannot read"),
    }
    for name, (data, message) in files.items():
        path = tmp_path / f"{name}.npy"
        path.write_bytes(data)
        status, _, err = _run(capsys, "@factorial", "--args", str(path))
        assert status == EXIT_INPUT, name
        assert err.startswith("error: argument 0") and message in err, (name, err)


def test_npy_arguments_of_other_kinds_are_rejected(tmp_path, capsys):
    for name, array in [
        ("complex", np.complex64(1)),
        ("text", np.str_("1")),
        ("shape", np.zeros(3)),
    ]:
        path = tmp_path / f"{name}.npy"
        np.save(path, array)
        status, _, err = _run(capsys, "@factorial", "--args", str(path))
        assert status == EXIT_INPUT, name
        assert "holds" in err or "has shape 3" in err, err
    path = tmp_path / "ok.npy"
    np.save(path, np.int64(5))
    assert _run(capsys, "@factorial", "--args", str(path))[1].endswith("result: i64 = 120\n")


def test_npy_arguments_in_bf16(tmp_path, capsys):
    """A .npy file of ml_dtypes.bfloat16 (numpy.save writes 2-byte opaque elements) is a bf16
    argument, bits as they are; given for another type, or as a 2-byte record, it is refused."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    source = tmp_path / "f.dl"
    source.write_text(
        'module "m"\nstage raw\n\n'
        "func @f: (<2 x bf16>, <2 x f32>) -> <2 x bf16> {\n"
        "'entry(%x: <2 x bf16>, %y: <2 x f32>):\n"
        "    %z = add %x: <2 x bf16>, 1: bf16\n"
        "    return %z: <2 x bf16>\n}\n"
    )
    x = tmp_path / "x.npy"
    np.save(x, np.array([1.5, 256], ml_dtypes.bfloat16))
    assert dlopt.main([str(source), "--run", "@f", "--args", str(x), "[0, 0]"]) == EXIT_OK
    assert capsys.readouterr().out.endswith("result: <2 x bf16> = [2.5, 256]\n")
    assert dlopt.main([str(source), "--run", "@f", "--args", str(x), str(x)]) == EXIT_INPUT
    assert "argument 1: " in (err := capsys.readouterr().err) and "not f32" in err
    record = tmp_path / "record.npy"
    np.save(record, np.zeros(2, [("a", "u1"), ("b", "u1")]))
    assert dlopt.main([str(source), "--run", "@f", "--args", str(record), "[0, 0]"]) == EXIT_INPUT
    assert "not numbers" in capsys.readouterr().err
