"""samples/c: the commands of samples/c/README.md, run as written, build the digits library,
train it, save its parameters and compile classify.c; the program prints the digit and the
probabilities dlvm.load computes for the same parameters and image, and a missing or corrupt
parameter file, a bad image or a library built for batches of images give exit status 1 and
the reason."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

import dlvm

README = Path("samples/c/README.md")
BUILD = Path("build/c")  # where the README's commands write, under the repository root


def readme_blocks(language: str) -> list[str]:
    """The fenced code blocks of the README marked with `language`."""
    return re.findall(rf"^```{language}\n(.*?)^```$", README.read_text(), re.M | re.S)


def readme_command(program: str) -> str:
    """The one line of the README's shell blocks that runs `program`."""
    lines = [line for block in readme_blocks("sh") for line in block.splitlines()]
    found = [line for line in lines if line.split(" ", 1)[0] == program]
    assert len(found) == 1, f"{README} runs {program} {len(found)} times: {found}"
    return found[0]


def shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`command` run by sh in `cwd`, with this Python's scripts (telc) first on PATH."""
    path = f"{sysconfig.get_path('scripts')}{os.pathsep}{os.environ.get('PATH', '')}"
    run = subprocess.run(["sh", "-c", command], cwd=cwd, env={**os.environ, "PATH": path},
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert run.returncode == 0, f"{command}\n{run.stdout}{run.stderr}"
    return run


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """A copy of the files the README uses, laid out as in the repository, in which its
    steps 1 to 3 have run: BUILD holds digits.so, the parameters, image.txt and classify.
    Made once per test run; the pytest-xdist workers of a run take turns through a lock."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the run's directory, above each worker's own
    root = base / "c-example"
    with open(base / "c-example.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "done").exists():
            shutil.rmtree(root, ignore_errors=True)
            run_readme_steps(root)
            (root / "done").touch()
    return root


def run_readme_steps(root: Path) -> None:
    for name in ("digits.tel", "c/classify.c"):
        (root / "samples" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(Path("samples") / name, root / "samples" / name)
    shell(readme_command("telc"), root)
    (train,) = readme_blocks("python")
    trained = subprocess.run([sys.executable, "-c", train], cwd=root, capture_output=True,
                             text=True, timeout=120)  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    compiled = shell(readme_command("cc"), root)
    assert compiled.stdout + compiled.stderr == "", "the program compiles with warnings"


def classify(root: Path, *args: str | Path, **kwargs) -> subprocess.CompletedProcess[str]:
    """The compiled program run with `args`, from a directory other than its own."""
    return subprocess.run([root / BUILD / "classify", *args], cwd=root.parent,
                          capture_output=True, text=True, timeout=60, **kwargs)  # fmt: skip


def expected_output(root: Path) -> str:
    """What the program should print for the README's image, computed by dlvm.load."""
    image = np.loadtxt(root / BUILD / "image.txt", dtype=np.float32).reshape(1, 64)
    with dlvm.load(root / BUILD / "digits.so", seed=1) as model:
        model.load(root / BUILD / "digits.safetensors")
        (probabilities,) = model.infer(image)
    lines = [f"digit: {np.argmax(probabilities)}", "probabilities:"]
    lines += [f"  {digit}  {float(p):.6g}" for digit, p in enumerate(probabilities)]
    return "\n".join(lines) + "\n"


def load_error(root: Path, path: Path) -> str:
    """The runtime's message when the digits model loads parameters from `path`."""
    with dlvm.load(root / BUILD / "digits.so") as model, pytest.raises(dlvm.LibraryError) as e:
        model.load(path)
    return e.value.message


def test_readme_run_prints_the_prediction_of_dlvm_load(root):
    run = shell(readme_command(f"{BUILD}/classify"), root)
    assert run.stderr == ""
    assert run.stdout == expected_output(root)


@pytest.mark.parametrize("how", ["dash", "no-argument"])
def test_image_is_read_from_standard_input(root, how):
    params = root / BUILD / "digits.safetensors"
    with open(root / BUILD / "image.txt") as image:
        run = classify(root, params, *(["-"] if how == "dash" else []), stdin=image)
    assert (run.returncode, run.stderr) == (0, "")
    assert run.stdout == expected_output(root)


@pytest.mark.parametrize("damage", ["missing", "truncated", "not-safetensors"])
def test_bad_parameter_file_gives_status_1_and_the_runtime_message(root, tmp_path, damage):
    path = tmp_path / "params.safetensors"
    data = (root / BUILD / "digits.safetensors").read_bytes()
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "not-safetensors":
        path.write_bytes(b"\xff" * 64)
    run = classify(root, path, root / BUILD / "image.txt")
    assert (run.returncode, run.stdout) == (1, "")
    assert f"classify: {load_error(root, path)} (status " in run.stderr


@pytest.mark.parametrize(
    ("image", "message"),
    [
        ("0.5 " * 63, "expected 64 numbers, but the input ends after 63"),
        ("0.5 " * 10 + "x", "expected 64 numbers, but found something else after 10"),
        ("0.5 " * 65, "more than 64 numbers"),
    ],
)
def test_bad_image_gives_status_1(root, tmp_path, image, message):
    path = tmp_path / "image.txt"
    path.write_text(image)
    run = classify(root, root / BUILD / "digits.safetensors", path)
    assert (run.returncode, run.stdout) == (1, "")
    assert f"classify: {path}: {message}" in run.stderr


@pytest.mark.parametrize("args", [[], ["a", "b", "c"]])
def test_wrong_arguments_give_usage_and_status_1(root, args):
    run = classify(root, *args)
    assert (run.returncode, run.stdout) == (1, "")
    assert run.stderr.startswith("usage: classify PARAMS.safetensors [IMAGE]\n")


def test_library_built_for_batches_is_refused(root, sample_library, tmp_path):
    # The program finds digits.so beside itself: put the default build (B=32) there.
    shutil.copy(root / BUILD / "classify", tmp_path)
    shutil.copy(sample_library("digits"), tmp_path)
    run = subprocess.run([tmp_path / "classify", root / BUILD / "digits.safetensors",
                          root / BUILD / "image.txt"], capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert (run.returncode, run.stdout) == (1, "")
    assert "rebuild it with `telc build samples/digits.tel -D B=1`" in run.stderr
