"""The prepared GPU check, in two steps, for a session lent a GPU machine for a few minutes.

Here, where the compiler is installed (a few minutes on the CPU):

    python tests/gpu/device_check.py prepare gpu-build

builds every library tests/gpu runs (tests/gpu/prebuild.py) and the GPU benchmark's libraries
(bench/gpu.py build, sm_90) into gpu-build/, and copies the pure-Python packages the GPU
machine lacks (lark) into gpu-build/site. There, with gpu-build carried and $OUT the folder that
comes back, one command:

    python3 tests/gpu/device_check.py run gpu-build "$OUT"

records the card and the software, runs tests/gpu on the prebuilt libraries, trains the digits
model on "cuda:0" beside "cpu", and runs bench/gpu.py run --write; each step under its own time
limit, so a hang in one leaves the others' results. Logs land in $OUT (env.txt, tests.log,
tests.xml, digits.log, bench.log, RESULTS-gpu.md) and a short summary is printed last."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# (step, seconds it may take on the GPU machine): the sum plus the machine's start fits one
# 10-minute device call with room left for a rerun.
LIMITS = {"tests": 170, "digits": 70, "bench": 220}
CARRIED = ("lark",)  # pure Python, needed to parse TEL and IR; not in the GPU machine's image


def prepare(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    python = sys.executable
    subprocess.run([python, "tests/gpu/prebuild.py", str(directory / "tests")], cwd=ROOT,
                   check=True)  # fmt: skip
    subprocess.run([python, "bench/gpu.py", "build", str(directory / "bench")], cwd=ROOT,
                   check=True)  # fmt: skip
    site = directory / "site"
    for name in CARRIED:
        module = __import__(name)
        source = Path(module.__file__).parent
        shutil.rmtree(site / name, ignore_errors=True)
        shutil.copytree(source, site / name, ignore=shutil.ignore_patterns("__pycache__"))
    size = sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())
    print(f"prepared {directory}: {size / 2**20:.1f} MiB to carry")


DIGITS = """
import time, numpy as np, dlvm
from telc import demo
data = demo.load_data()
for device in ("cpu", "cuda:0"):
    with dlvm.load("{library}", device=device, seed=0) as model:
        t0 = time.perf_counter()
        history = demo.train(model, data, epochs=10, seed=0)
        seconds = time.perf_counter() - t0
        acc = demo.accuracy(demo.predict(model, data.x_test), data.y_test)
        print(f"digits on {{device}}: 10 epochs in {{seconds:.2f}} s, test accuracy {{acc:.4f}}")
"""


def step(name: str, command: list[str], out: Path, env: dict[str, str]) -> str:
    """Runs one step with its time limit, its output in out/NAME.log; a one-line outcome."""
    t0 = time.perf_counter()
    with open(out / f"{name}.log", "w", encoding="utf-8") as log:
        try:
            rc = subprocess.run(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                timeout=LIMITS[name]).returncode  # fmt: skip
            outcome = f"exit {rc}"
        except subprocess.TimeoutExpired:
            outcome = f"stopped at its limit of {LIMITS[name]} s"
    lines = (out / f"{name}.log").read_text(encoding="utf-8", errors="replace").splitlines()
    tail = [line for line in lines if line.strip()][-3:]
    return f"{name}: {outcome} after {time.perf_counter() - t0:.0f} s\n    " + "\n    ".join(tail)


def run(directory: Path, out: Path) -> int:
    directory = directory.resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(directory / "site"), str(ROOT)])
    env["PYTHONUNBUFFERED"] = "1"
    env["DLVM_GPU_PREBUILT"] = str(directory / "tests")
    python = sys.executable
    versions = (
        "import sys, numpy, torch; "
        "print(sys.version, numpy.__version__, torch.__version__, torch.cuda.get_device_name(0))"
    )
    nccl = "import cupy; from cupy.cuda import nccl; print(cupy.__version__, nccl.get_version())"
    with open(out / "env.txt", "w", encoding="utf-8") as f:
        for command in (["nvidia-smi"], [python, "-c", versions], [python, "-c", nccl]):
            try:
                f.write(subprocess.run(command, capture_output=True, text=True, timeout=60).stdout)
            except (OSError, subprocess.TimeoutExpired) as e:
                f.write(f"{command[0]}: {e}\n")
    workers = ["-n", "8"] if _has("xdist") else []
    summary = [
        step(
            "tests",
            [
                python,
                "-m",
                "pytest",
                "tests/gpu",
                "-p",
                "no:cacheprovider",
                "-rfEs",
                "--junitxml",
                str(out / "tests.xml"),
                *workers,
            ],
            out,
            env,
        ),  # fmt: skip
        step(
            "digits",
            [python, "-c", DIGITS.format(library=directory / "tests" / "digits.so")],
            out,
            env,
        ),  # fmt: skip
        step(
            "bench",
            [python, "bench/gpu.py", "run", str(directory / "bench"), "--runs", "20", "--write"],
            out,
            env,
        ),  # fmt: skip
    ]
    results = (ROOT / "bench" / "RESULTS.md").read_text(encoding="utf-8")
    marks = ("<!-- gpu results", "<!-- end of gpu results -->")
    if marks[0] in results:
        section = marks[0] + results.split(marks[0], 1)[1].split(marks[1], 1)[0] + marks[1]
        (out / "RESULTS-gpu.md").write_text(section + "\n", encoding="utf-8")
    print("\n".join(summary))
    return 0


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="here: build the libraries and gather what is carried")
    p.add_argument("directory", type=Path)
    r = sub.add_parser("run", help="on the GPU machine: tests, digits, benchmark; logs in OUT")
    r.add_argument("directory", type=Path)
    r.add_argument("out", type=Path)
    args = ap.parse_args()
    if args.command == "prepare":
        prepare(args.directory)
        return 0
    return run(args.directory, args.out)


if __name__ == "__main__":
    sys.exit(main())
