"""The `telc` command line as a user meets it: exit statuses and messages for missing and
unreadable files and bad options, `check`, `--target`, `-O` levels, `--verbose`, `run` on .npy
inputs (and every way its inputs can be wrong), and the build cache (hits, what rebuilds, where
it lives, concurrent builds)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import dlvm
from telc import cache, syntax
from telc.cli import cli

SAMPLE = "samples/xor.tel"  # the quickest sample to build
TINY = "module tiny\nx: in[2 x 3]\nW: param[3 x 2] = 1.0\ny: out[2 x 2] = x . W * 2.0\n"
TELC = [sys.executable, "-c", "from telc.cli import main; main()"]
XOR_X = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], np.float32)
XOR_LABELS = np.array([[0], [1], [1], [0]], np.float32)


def telc(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(cli, [str(a) for a in args], env=env)


def no_traceback(result) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output and "internal error" not in result.output


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.tel"
    path.write_text(TINY, encoding="utf-8")
    return path


@pytest.fixture
def xor_inputs(tmp_path: Path) -> dict[str, Path]:
    paths = {"x": tmp_path / "x.npy", "labels": tmp_path / "labels.npy"}
    np.save(paths["x"], XOR_X.astype(np.float64))  # float64, as numpy makes by default
    np.save(paths["labels"], XOR_LABELS)
    return paths


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory) -> Path:
    """A build cache the tests of this module may share where they only need a build to
    exist (the key keeps them from seeing a stale one)."""
    return tmp_path_factory.mktemp("shared-telc-cache")


# --- files that are missing or unreadable ---------------------------------------------------


COMMANDS = [["check"], ["build"], ["build", "--emit", "ir"], ["run"]]
COMMAND_IDS = ["check", "build", "emit-ir", "run"]


@pytest.mark.parametrize("command", COMMANDS, ids=COMMAND_IDS)
def test_a_missing_file_is_status_1(tmp_path, command):
    missing = tmp_path / "nope.tel"
    result = telc(*command, missing)
    assert result.exit_code == 1, result.output
    assert result.stderr == f"error: {missing}: no such file\n"
    assert result.stdout == ""
    no_traceback(result)


@pytest.mark.parametrize("command", COMMANDS, ids=COMMAND_IDS)
def test_an_unreadable_file_is_status_1(tmp_path, command):
    path = tmp_path / "secret.tel"
    path.write_text(TINY, encoding="utf-8")
    path.chmod(0)
    if os.geteuid() == 0 or os.access(path, os.R_OK):  # root reads anything: use a directory
        path = tmp_path / "folder.tel"
        path.mkdir()
        expected = f"error: {path}: is a directory\n"
    else:
        expected = f"error: {path}: Permission denied\n"
    result = telc(*command, path)
    assert result.exit_code == 1, result.output
    assert result.stderr == expected
    no_traceback(result)


def test_a_file_that_is_not_utf8_is_located(tmp_path):
    path = tmp_path / "binary.tel"
    path.write_bytes(b"module m\nx: in[2]\ny: out = x \xff\n")
    result = telc("check", path)
    assert result.exit_code == 1
    assert result.stderr.startswith(f"{path}:3:12: error: not UTF-8 text")
    no_traceback(result)


def test_a_real_process_exits_with_the_documented_statuses(tmp_path, tiny):
    def status(*args: str) -> int:
        return subprocess.run([*TELC, *args], capture_output=True, check=False).returncode

    assert status("check", str(tiny)) == 0
    assert status("check", str(tmp_path / "nope.tel")) == 1
    assert status("build", str(tiny), "--bogus") == 2


# --- bad options ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bogus"], "Error: No such option '--bogus'"),
        (["-D", "B"], "Error: Invalid value for '-D': 'B' is not NAME=NUMBER (such as -D B=64)"),
        (["-D", "B=big"], "Error: Invalid value for '-D': 'B=big' is not NAME=NUMBER"),
        (["-D", "=4"], "Error: Invalid value for '-D': '=4' is not NAME=NUMBER"),
        (["-O3"], "Error: Invalid value for '-O': '3' is not one of '0', '1', '2'."),
        (["-Ofast"], "Error: Invalid value for '-O': 'fast' is not one of '0', '1', '2'."),
        (["--target", "gpu"], "Error: Invalid value for '--target': 'gpu' is not one of"),
        (["--emit", "cubin"], "Error: Invalid value for '--emit': 'cubin' is not one of"),
        (["--gpu", "sm_70"], "Error: Invalid value for '--gpu': 'sm_70' is not one of"),
        (["-q", "-v"], "Error: -q and -v cannot be used together"),
    ],
    ids=["unknown-flag", "D-no-value", "D-not-number", "D-no-name", "O3", "Ofast", "target",
         "emit", "gpu", "quiet-verbose"],
)  # fmt: skip
def test_a_bad_option_is_status_2_with_usage(tiny, args, message):
    result = telc("build", tiny, *args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("Usage: telc build [OPTIONS] FILE\n")
    assert message in result.stderr
    assert not Path(tiny.stem + ".so").exists()  # nothing written where telc ran
    no_traceback(result)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--input", "x"], "'x' is not NAME=FILE"),
        (["--input", "x=a.npy", "--input", "x=b.npy"], "input 'x' is given twice"),
        (["--steps", "0"], "0 is not in the range 1 to"),
        (["--seed", "-1"], "-1 is not in the range 0 to"),
    ],
    ids=["input-syntax", "input-twice", "steps", "seed"],
)
def test_a_bad_run_option_is_status_2(tiny, args, message):
    result = telc("run", tiny, *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    no_traceback(result)


def test_a_mistyped_command_is_a_usage_error_with_a_suggestion(tiny):
    result = telc("chek", tiny)
    assert result.exit_code == 2
    assert "No such command 'chek'" in result.stderr and "'check'" in result.stderr


def test_an_unknown_define_name_is_rejected_with_a_suggestion(tiny):
    result = telc("check", tiny, "-D", "X=3")
    assert result.exit_code == 1
    assert "-D X: there is no dim or const named 'X'" in result.stderr


def test_help_documents_exit_statuses_and_examples():
    top = telc("--help")
    assert top.exit_code == 0
    for line in [
        "Exit status:",
        "  0    success",
        "  2    bad usage",
        "Examples:",
        "TELC_CACHE_DIR",
    ]:
        assert line in top.stdout, line
    for command in ["build", "check", "run", "cache"]:
        assert re.search(rf"^  {command} +\S", top.stdout, re.M), command
    for command in ["build", "check", "run"]:
        text = telc(command, "--help").stdout
        assert "Examples:" in text and "Exit status:" in text, command
        assert f"  telc {command} model.tel" in text
    assert "-O [0|1|2]" in telc("build", "--help").stdout


def test_output_has_no_control_codes_off_a_terminal(tiny):
    for result in [telc("check", tiny), telc("--help"), telc("build", tiny, "-O9")]:
        assert "\x1b" not in result.output


# --- check ---------------------------------------------------------------------------------


def test_check_says_ok_in_one_line_and_nothing_with_q(tiny):
    result = telc("check", tiny)
    assert result.exit_code == 0
    assert result.stdout == ""
    assert result.stderr == f"telc: {tiny}: ok (module tiny; entries infer; 1 parameter)\n"
    quiet = telc("check", "-q", tiny)
    assert quiet.exit_code == 0 and quiet.output == ""


def test_check_reports_located_errors_with_status_1(tmp_path):
    path = tmp_path / "bad.tel"
    path.write_text("module m\nx: in[4]\ny: out[4] = x * w\nz: out[3] = x\n", encoding="utf-8")
    result = telc("check", path)
    assert result.exit_code == 1
    assert result.stdout == ""
    assert f"{path}:3:17: error: unknown name 'w'" in result.stderr
    assert f"{path}:4:" in result.stderr  # every error, not only the first
    assert "ok" not in result.stderr
    assert not list(tmp_path.glob("*.so"))


# --- targets, levels, verbose --------------------------------------------------------------


def test_the_cuda_target_builds_a_library_for_both_devices(tmp_path, tiny):
    out = tmp_path / "tiny.so"
    result = telc("build", tiny, "--target", "cuda", "--gpu", "sm_80", "-o", str(out), "-q")
    assert result.exit_code == 0, result.output
    assert 'or "cuda:N" (a GPU of sm_80 or newer' in out.with_suffix(".h").read_text()
    with dlvm.load(out) as model:
        assert model.manifest["devices"] == ["cpu", "cuda"]
        assert model.manifest["gpu"] == "sm_80"


def test_run_on_a_gpu_that_is_not_there_says_why(tiny, tmp_path, monkeypatch):
    np.save(tmp_path / "x.npy", np.zeros((2, 3), np.float32))
    monkeypatch.setenv("DLRT_CUDA_DRIVER", str(tmp_path / "no" / "libcuda.so.1"))
    result = telc("run", tiny, "--device", "cuda:0", "--input", f"x={tmp_path / 'x.npy'}")
    assert result.exit_code == 1
    assert "\ntelc: cannot run: cannot create the model on cuda:0: " in result.stderr
    assert "cannot load the CUDA driver" in result.stderr
    no_traceback(result)


def test_emit_ptx_writes_the_kernels_for_the_gpu_asked_for(tmp_path, tiny):
    out = tmp_path / "k.ptx"
    result = telc("build", tiny, "--emit", "ptx", "--gpu", "sm_86", "-o", str(out), "-q")
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert ".target sm_86" in text and ".visible .entry dlk_" in text
    shown = telc("build", tiny, "--emit", "schedule", "--target", "cuda")
    assert "[schedule cuda block" in shown.stdout
    assert "[schedule cuda" not in telc("build", tiny, "--emit", "schedule").stdout


def test_the_cuda_target_does_not_matter_before_code_generation(tiny):
    plain, cuda = telc(tiny, "--emit", "ir"), telc(tiny, "--emit", "ir", "--target", "cuda")
    assert cuda.exit_code == 0 and cuda.stdout == plain.stdout


def test_optimisation_levels_change_the_optimized_ir():
    o0 = telc(SAMPLE, "--emit", "optimized", "-O0")
    o1 = telc(SAMPLE, "--emit", "optimized", "-O1")
    o2 = telc(SAMPLE, "--emit", "optimized")
    assert o0.exit_code == o1.exit_code == o2.exit_code == 0
    assert o0.stdout != o2.stdout
    assert " = apply @linear" in o0.stdout  # -O0: differentiation only, nothing inlined
    assert " = apply " not in o2.stdout.split("func @train_step:")[1].split("\n}")[0]
    assert o2.stdout == telc(SAMPLE, "--emit", "optimized", "-O2").stdout  # -O2 is the default
    assert o1.stdout != o2.stdout  # -O2's passes (here LBP) find more to do


def test_minus_O0_builds_a_library_that_computes_the_same(tmp_path):
    x = np.random.default_rng(0).random((4, 2), np.float32)
    outputs = []
    for level in ["-O0", "-O2"]:
        out = tmp_path / level / "xor.so"
        result = telc("build", SAMPLE, level, "-o", out, "-q")
        assert result.exit_code == 0, result.output
        outputs.append(dlvm.load(out, seed=3).infer(x))
    np.testing.assert_allclose(outputs[0], outputs[1], rtol=1e-5, atol=1e-6)


def test_verbose_says_what_the_build_did(tmp_path, tiny):
    result = telc("build", tiny, "-o", tmp_path / "out" / "tiny.so", "-v")
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert lines[0] == "telc: options -O2 --target=cpu --cpu=native"
    assert lines[1] == f"telc: sources {tiny}"
    assert re.fullmatch(r"telc: cache miss: [0-9a-f]{32} in .+", lines[2])
    first_round = telc_levels()[2]
    start = lines.index("telc: passes") + 1
    passes = lines[start : start + len(first_round)]
    names = [p.split()[0] for p in passes]
    assert names == list(first_round)
    assert all(re.fullmatch(r"  \S+ +(changed|unchanged) +\d+ ms", p) for p in passes), passes
    assert re.search(r"^telc: \d+ kernels$", result.stderr, re.M)
    assert re.search(r"^  @infer +\d+ (B|KiB)$", result.stderr, re.M)
    assert "  infer(x: f32[2 x 3]) -> y: f32[2 x 2]  [infer]" in lines
    assert "  W: f32[3 x 2]" in lines
    assert all(line == line.rstrip() for line in lines)
    assert result.stderr.count("telc: wrote ") == 1


def telc_levels() -> dict[int, tuple[str, ...]]:
    from telc.driver import OPT_LEVELS

    return {n: level.passes for n, level in OPT_LEVELS.items()}


def test_emit_obj_writes_an_object_file(tmp_path, tiny):
    out = tmp_path / "tiny.o"
    result = telc(tiny, "--emit", "obj", "-o", out)
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:4] == b"\x7fELF"
    assert result.output == ""


# --- run -----------------------------------------------------------------------------------


def test_run_prints_the_outputs_of_infer(tmp_path, xor_inputs):
    result = telc("run", SAMPLE, "--input", f"x={xor_inputs['x']}", "--seed", "5")
    assert result.exit_code == 0, result.output
    expected = dlvm.load(built(tmp_path), seed=5).infer(XOR_X)
    lines = result.stdout.splitlines()
    assert lines[0] == "y: f32[4 x 1]"
    printed = [float(v) for v in re.findall(r"[-\d.e]+", "".join(lines[1:]))]
    np.testing.assert_allclose(printed, expected.ravel(), rtol=1e-5)
    assert result.stderr.startswith(f"telc: built {SAMPLE} in ")


def built(tmp_path: Path) -> Path:
    """samples/xor.tel built as telc run builds it (the cache makes this cheap after a run)."""
    out = tmp_path / "lib" / "xor.so"
    result = telc("build", SAMPLE, "-o", out, "-q")
    assert result.exit_code == 0, result.output
    return out


def test_run_saves_outputs_as_npz_or_npy_files(tmp_path, xor_inputs):
    expected = dlvm.load(built(tmp_path), seed=0).infer(XOR_X)
    npz = tmp_path / "out" / "y.npz"
    result = telc("run", SAMPLE, "--input", f"x={xor_inputs['x']}", "-o", npz)
    assert result.exit_code == 0, result.output
    assert result.stdout == "" and result.stderr == f"telc: wrote {npz}\n"  # built already
    with np.load(npz) as saved:
        assert list(saved) == ["y"]
        np.testing.assert_array_equal(saved["y"], expected)
    folder = tmp_path / "outputs"
    result = telc("run", SAMPLE, "--input", f"x={xor_inputs['x']}", "-o", folder, "-q")
    assert result.exit_code == 0 and result.output == ""
    assert sorted(os.listdir(folder)) == ["y.npy"]
    np.testing.assert_array_equal(np.load(folder / "y.npy"), expected)


def test_run_trains_and_saves_parameters_that_a_later_run_loads(tmp_path, xor_inputs):
    params = tmp_path / "xor.safetensors"
    inputs = ["--input", f"x={xor_inputs['x']}", "--input", f"labels={xor_inputs['labels']}"]
    result = telc("run", SAMPLE, "--entry", "train_step", *inputs, "--steps", "300",
                  "--save", params)  # fmt: skip
    assert result.exit_code == 0, result.output
    losses = [float(m) for m in re.findall(r"^step +\d+  loss (\S+)$", result.stderr, re.M)]
    assert len(losses) == 11 and losses[-1] < 0.1 * losses[0]
    assert re.fullmatch(r"loss: f32\[\] = \S+\n", result.stdout)
    assert float(result.stdout.split("= ")[1]) == pytest.approx(losses[-1], rel=1e-5)
    result = telc("run", SAMPLE, "--load", params, "--input", f"x={xor_inputs['x']}", "-o",
                  tmp_path / "y.npz")  # fmt: skip
    assert result.exit_code == 0, result.output
    y = np.load(tmp_path / "y.npz")["y"]
    np.testing.assert_array_equal(y > 0.5, XOR_LABELS > 0.5)  # XOR learnt


def test_run_summarises_a_large_output(tmp_path):
    path = tmp_path / "wide.tel"
    path.write_text("module wide\nx: in[40 x 30]\ny: out[40 x 30] = x * 2.0\n", encoding="utf-8")
    np.save(tmp_path / "x.npy", np.ones((40, 30), np.float32))
    result = telc("run", path, "--input", f"x={tmp_path / 'x.npy'}")
    assert result.exit_code == 0, result.output
    assert "..." in result.stdout
    assert "  min 2  mean 2  max 2  (1200 values)" in result.stdout
    assert len(result.stdout.splitlines()) < 15


@pytest.mark.parametrize(
    ("make", "args", "message"),
    [
        ("shape", ["--input", "x={d}/bad.npy"],
         "telc: cannot run: input 'x' ({d}/bad.npy) has shape [3 x 2]; it must be f32[4 x 2]\n"),
        ("dtype", ["--input", "x={d}/bad.npy"],
         "telc: cannot run: input 'x' ({d}/bad.npy) has dtype complex64, which does not convert "
         "to f32 without changing kind\n"),
        ("junk", ["--input", "x={d}/bad.npy"],
         "telc: cannot run: input 'x': {d}/bad.npy: not a NumPy .npy file (save one with "
         "numpy.save)\n"),
        ("none", ["--input", "x={d}/missing.npy"],
         "telc: cannot run: input 'x': {d}/missing.npy: no such file\n"),
        ("none", ["--input", "x={d}"], "telc: cannot run: input 'x': {d}: is a directory\n"),
        ("none", [], "telc: cannot run: infer needs input x: f32[4 x 2]: pass --input "
         "x=FILE.npy\n"),
        ("none", ["--input", "x={d}/x.npy", "--input", "z={d}/x.npy"],
         "telc: cannot run: infer has no input 'z' (its inputs: x: f32[4 x 2])\n"),
        ("none", ["--input", "xx={d}/x.npy"],
         "telc: cannot run: infer has no input 'xx'; did you mean 'x'? (its inputs: "
         "x: f32[4 x 2])\n"),
        ("none", ["--entry", "train_step", "--input", "x={d}/x.npy"],
         "telc: cannot run: train_step needs input labels: f32[4 x 1]: pass --input "
         "labels=FILE.npy\n"),
        ("none", ["--entry", "predict", "--input", "x={d}/x.npy"],
         "telc: cannot run: model 'xor' has no entry 'predict' (entries: infer, train_step)\n"),
        ("none", ["--input", "x={d}/x.npy", "--load", "{d}/nope.safetensors"],
         "telc: cannot run: cannot load parameters from {d}/nope.safetensors: "),
    ],
    ids=["shape", "dtype", "not-npy", "missing-file", "directory", "missing-input",
         "unknown-input", "misspelt-input", "missing-train-input", "unknown-entry",
         "bad-checkpoint"],
)  # fmt: skip
def test_run_rejects_bad_inputs_with_status_1(
    tmp_path, xor_inputs, shared_cache, monkeypatch, make, args, message
):
    monkeypatch.setenv("TELC_CACHE_DIR", str(shared_cache))  # one build for every case
    d = str(tmp_path)
    bad = tmp_path / "bad.npy"
    if make == "shape":
        np.save(bad, np.zeros((3, 2), np.float32))
    elif make == "dtype":
        np.save(bad, np.zeros((4, 2), np.complex64))
    elif make == "junk":
        bad.write_text("x = [[0, 0], [0, 1]]\n")
    built(tmp_path)  # the build's own lines are not part of the message
    result = telc("run", SAMPLE, *[a.format(d=d) for a in args])
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith(message.format(d=d)), result.stderr
    assert result.stdout == ""
    no_traceback(result)


# --- the build cache -----------------------------------------------------------------------


def entries(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if (p / cache.META).is_file())


def stage_names(stderr: str) -> list[str]:
    return [m.group(1) for m in re.finditer(r"^  (\S[\w ]*?) +\d+ ms", stderr, re.M)]


def test_an_unchanged_build_comes_from_the_cache(tmp_path, tiny, telc_cache):
    out = tmp_path / "out" / "tiny.so"
    t0 = time.perf_counter()
    first = telc("build", tiny, "-o", out)
    t1 = time.perf_counter()
    assert first.exit_code == 0, first.output
    assert "(cached)" not in first.stderr and "llvm" in stage_names(first.stderr)
    library, header = out.read_bytes(), out.with_suffix(".h").read_bytes()
    out.unlink()
    t2 = time.perf_counter()
    second = telc("build", tiny, "-o", out)
    t3 = time.perf_counter()
    assert second.exit_code == 0, second.output
    assert second.stderr.splitlines()[0].endswith(" s (cached)")
    assert stage_names(second.stderr) == ["parse", "cache", "total"]  # nothing compiled
    assert t3 - t2 < t1 - t0
    assert out.read_bytes() == library and out.with_suffix(".h").read_bytes() == header
    assert (out.parent / "dlrt.h").is_file()
    assert len(entries(telc_cache)) == 1


def test_what_changes_the_key_rebuilds(tmp_path, tiny, telc_cache):
    out = tmp_path / "tiny.so"

    def cached(*args: str) -> bool:
        result = telc("build", tiny, "-o", out, *args)
        assert result.exit_code == 0, result.output
        return "(cached)" in result.stderr

    assert not cached()
    assert cached()
    assert not cached("-O1") and cached("-O1")
    assert not cached("--cpu", "x86-64") and cached("--cpu", "x86-64")
    tiny.write_text(TINY.replace("2.0", "3.0"), encoding="utf-8")
    assert not cached() and cached()
    tiny.write_text(TINY.replace("2.0", "3.0") + "// a comment changes the text\n")
    assert not cached()
    assert len(entries(telc_cache)) == 5


def test_a_define_rebuilds_and_the_output_follows_it(tmp_path):
    # Each library is loaded from a path of its own: a process keeps a loaded path's library.
    def build(*args: str) -> tuple[bool, tuple[int, ...]]:
        out = tmp_path / str(len(list(tmp_path.iterdir()))) / "xor.so"
        result = telc("build", SAMPLE, "-o", out, *args)
        assert result.exit_code == 0, result.output
        return "(cached)" in result.stderr, dlvm.load(out).param_specs["W1"].shape

    assert build("-D", "H=4") == (False, (2, 4))
    assert build() == (False, (2, 8))
    assert build("-D", "H=4") == (True, (2, 4))


def test_a_change_in_a_used_module_rebuilds(tmp_path):
    (tmp_path / "layers.tel").write_text("def double(a: [S...]) -> [S...] = a * 2.0\n")
    model = tmp_path / "m.tel"
    model.write_text("module m\nuse ./layers\nx: in[4]\ny: out[4] = double(x)\n")

    def build(folder: str) -> tuple[bool, np.ndarray]:
        out = tmp_path / folder / "m.so"
        result = telc("build", model, "-o", out)
        assert result.exit_code == 0, result.output
        return "(cached)" in result.stderr, dlvm.load(out).infer(np.ones(4, np.float32))

    assert build("a")[0] is False
    cached, y = build("b")
    assert cached and (y == 2.0).all()
    (tmp_path / "layers.tel").write_text("def double(a: [S...]) -> [S...] = a * 3.0\n")
    cached, y = build("c")
    assert not cached and (y == 3.0).all()


def test_a_compiler_change_rebuilds(tmp_path, tiny, monkeypatch):
    out = tmp_path / "tiny.so"
    assert telc("build", tiny, "-o", out, "-q").exit_code == 0
    assert "(cached)" in telc("build", tiny, "-o", out).stderr
    monkeypatch.setattr(cache, "compiler_version", lambda: "telc 0.1.0+changed")
    assert "(cached)" not in telc("build", tiny, "-o", out).stderr
    assert "(cached)" in telc("build", tiny, "-o", out).stderr


def test_the_compiler_version_covers_the_compilers_sources():
    files = {p.relative_to(cache.ROOT).as_posix() for p in cache.compiler_files()}
    for name in ["telc/cli.py", "telc/grammar.lark", "telc/lower/__init__.py",
                 "dlvm/codegen/llgen.py", "dlvm/transforms/pass_manager.py",
                 "runtime/include/dlrt.h", "runtime/src/error.c"]:  # fmt: skip
        assert name in files, name
    assert re.fullmatch(r"telc \d+\.\d+\.\d+\+[0-9a-f]{12}", cache.compiler_version())


def test_the_cache_lives_where_the_environment_says(tmp_path, tiny, monkeypatch):
    monkeypatch.delenv("TELC_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_root() == tmp_path / "xdg" / "telc"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_root() == tmp_path / "home" / ".cache" / "telc"
    chosen = tmp_path / "chosen"
    monkeypatch.setenv("TELC_CACHE_DIR", str(chosen))
    assert telc("build", tiny, "-o", tmp_path / "tiny.so", "-q").exit_code == 0
    assert len(entries(chosen)) == 1
    assert not (tmp_path / "home" / ".cache" / "telc").exists()
    assert not (tmp_path / "xdg" / "telc").exists()
    listing = telc("cache")
    assert listing.exit_code == 0
    assert listing.stdout.startswith(f"{chosen}: 1 build, ")
    cleared = telc("cache", "--clear")
    assert cleared.stdout == f"telc: removed 1 cached build from {chosen}\n"
    assert entries(chosen) == []


def test_no_cache_neither_reads_nor_writes_it(tmp_path, tiny, telc_cache):
    out = tmp_path / "tiny.so"
    assert "(cached)" not in telc("build", tiny, "-o", out, "--no-cache").stderr
    assert entries(telc_cache) == []
    assert telc("build", tiny, "-o", out, "-q").exit_code == 0
    assert "(cached)" not in telc("build", tiny, "-o", out, "--no-cache").stderr


def test_no_cache_still_uses_the_compilers_own_cache(tmp_path, tiny, telc_cache, monkeypatch):
    own = tmp_path / "dlvm-cache"
    monkeypatch.setenv("DLVM_CACHE_DIR", str(own))
    syntax._parser.cache_clear()  # this process has its parser already
    assert telc("build", tiny, "-o", tmp_path / "a.so", "--no-cache", "-q").exit_code == 0
    [runtime] = own.glob("runtime-*")
    stamps = {p.name: p.stat().st_mtime_ns for p in runtime.iterdir()}
    assert stamps and list(own.glob("telc-parser-*")), "the runtime's objects, the parser's tables"
    assert telc("build", tiny, "-o", tmp_path / "b.so", "--no-cache", "-q").exit_code == 0
    assert {p.name: p.stat().st_mtime_ns for p in runtime.iterdir()} == stamps, "reused"
    assert entries(telc_cache) == []


def test_a_damaged_entry_is_rebuilt(tmp_path, tiny, telc_cache):
    out = tmp_path / "tiny.so"
    assert telc("build", tiny, "-o", out, "-q").exit_code == 0
    [entry] = entries(telc_cache)
    (entry / "tiny.so").unlink()
    result = telc("build", tiny, "-o", out)
    assert result.exit_code == 0 and "(cached)" not in result.stderr
    (entry / cache.META).write_text("{not json")
    assert "(cached)" not in telc("build", tiny, "-o", out).stderr


def test_an_unwritable_cache_warns_and_builds(tmp_path, tiny, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("TELC_CACHE_DIR", str(blocker / "cache"))
    result = telc("build", tiny, "-o", tmp_path / "tiny.so")
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith(f"telc: warning: cannot use the cache {blocker / 'cache'}: ")
    assert "building without the cache" in result.stderr
    assert (tmp_path / "tiny.so").is_file()
    run = telc("run", tiny, "--input", f"x={save(tmp_path, np.ones((2, 3)))}", "-q")
    assert run.exit_code == 0, run.output


def save(tmp_path: Path, arr: np.ndarray) -> Path:
    path = tmp_path / "input.npy"
    np.save(path, arr)
    return path


def test_text_stages_are_cached_too(tmp_path, tiny, telc_cache):
    first = telc(tiny, "--emit", "llvm")
    assert first.exit_code == 0 and first.stdout.startswith("; ModuleID")
    again = telc(tiny, "--emit", "llvm")
    assert again.stdout == first.stdout
    assert len(entries(telc_cache)) == 1
    assert telc(tiny, "--emit", "ir").exit_code == 0
    assert len(entries(telc_cache)) == 1  # the cheap stages are not kept


def test_run_uses_the_cache_of_build(tmp_path, tiny):
    x = save(tmp_path, np.ones((2, 3)))
    assert telc("build", tiny, "-o", tmp_path / "tiny.so", "-q").exit_code == 0
    result = telc("run", tiny, "--input", f"x={x}")
    assert result.exit_code == 0, result.output
    assert result.stderr == ""  # nothing built
    assert result.stdout == "y: f32[2 x 2]\n  [[6. 6.]\n   [6. 6.]]\n"


def test_concurrent_builds_share_one_entry_and_write_whole_files(tmp_path, tiny, telc_cache):
    env = {**os.environ, "TELC_CACHE_DIR": str(telc_cache)}
    outs = [tmp_path / f"out{i}" / "tiny.so" for i in range(4)]
    procs = [
        subprocess.Popen(
            [*TELC, "build", str(tiny), "-o", str(out), "-q"], env=env, stderr=subprocess.PIPE
        )  # fmt: skip
        for out in outs
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    assert len({out.read_bytes() for out in outs}) == 1
    assert len(entries(telc_cache)) == 1
    assert not [p for p in telc_cache.iterdir() if p.name.startswith(".")]  # no leftovers
    assert not [p for out in outs for p in out.parent.iterdir() if p.name.startswith(".")]


def test_emit_asm_prints_the_machine_code(tmp_path):
    """--emit asm: assembly of the compiled kernels and host functions, on stdout only."""
    result = CliRunner().invoke(cli, ["build", "-q", "--emit", "asm", SAMPLE])
    assert result.exit_code == 0, result.output
    assert "dl_infer:" in result.output and "\tret" in result.output
