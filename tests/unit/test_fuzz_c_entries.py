"""Fuzzing a library's C functions through ctypes with hostile arguments: NULL models, tables
and buffers, DLTensors of every wrong ndim, shape, strides, byte_offset, dtype and device, bad
parameter names, paths and devices. Every call must return a status, a non-OK one with a message
that names the function, and a failed call must leave the model's parameters alone. The calls
run in a worker process (tests/unit/c_entry_worker.py), so a crash fails the fuzzer (with the
call that crashed, shrunk) instead of killing a test worker."""

from __future__ import annotations

import base64
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from c_entry_worker import ENTRIES, PARAMS, SLACK
from fuzzing import fuzz_settings
from hypothesis import event, example, given
from hypothesis import strategies as st
from modellib import zoo_library

from dlvm.runtime import DLDataType, DType

WORKER = Path(__file__).with_name("c_entry_worker.py")


# DLVM_FUZZ_ASAN=1 (make sanitize): the library built with AddressSanitizer and UBSan, which the
# worker preloads, so that a memory error is found where it happens and not only as a crash.
ASAN = os.environ.get("DLVM_FUZZ_ASAN") == "1"
ASAN_FLAGS = ("-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-g")


class Worker:
    """The worker process, started again after a crash."""

    def __init__(self, library: Path, directory: Path) -> None:
        self.args = [sys.executable, str(WORKER), str(library), str(directory)]
        self.process: subprocess.Popen[str] | None = None
        self.env = dict(os.environ)
        if ASAN:
            cc = shlex.split(os.environ.get("CC") or "cc")
            found = subprocess.run([*cc, "-print-file-name=libasan.so"], capture_output=True,
                                   text=True, check=True)  # fmt: skip
            self.env.update(LD_PRELOAD=found.stdout.strip(), ASAN_OPTIONS="detect_leaks=0")

    def call(self, call: dict[str, Any]) -> dict[str, Any]:
        if self.process is None or self.process.poll() is not None:
            self.process = subprocess.Popen(
                self.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True, env=self.env,
            )  # fmt: skip
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(call) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            self.process.wait()
            err = self.process.stderr.read() if self.process.stderr else ""
            why = f"exit status {self.process.returncode}; {err.strip()[-2000:]}"
            self.process = None
            pytest.fail(f"the worker died ({why}) on {call}")
        return json.loads(line)

    def close(self) -> None:
        if self.process is not None:
            self.process.stdin.close()  # type: ignore[union-attr]
            self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory):
    flags = ASAN_FLAGS if ASAN else ()
    library = zoo_library(tmp_path_factory.mktemp("zoo"), os.environ.get("CC") or "cc", flags)
    w = Worker(library, tmp_path_factory.mktemp("files"))
    yield w
    w.close()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


I64 = st.integers(-(2**63), 2**63 - 1)
U64 = st.integers(0, 2**64 - 1)


FIELDS = ["data", "misalign", "device", "ndim", "dtype", "shape", "strides", "byte_offset"]


@st.composite
def dltensor(
    draw: st.DrawFn, dtype: str, shape: tuple[int, ...], spoil: bool
) -> dict[str, Any] | None:
    """A DLTensor for an argument of `dtype` and `shape`: a right one, or with `spoil`, one
    with a few of its fields spoiled (most often one, so that each check meets its own hostile
    value while every other argument is right)."""
    if spoil and draw(st.integers(0, 15)) == 0:
        return None
    right = DLDataType.of(DType.from_ir(dtype))
    nbytes = DType.from_ir(dtype).size * max(1, _count(shape))
    t: dict[str, Any] = {
        "data": nbytes,
        "misalign": 0,
        "device": (1, 0),
        "ndim": len(shape),
        "dtype": (right.code, right.bits, right.lanes),
        "shape": list(shape),
        "strides": draw(
            st.sampled_from([None, [_count(shape[i + 1 :]) for i in range(len(shape))]])
        ),
        "byte_offset": draw(st.sampled_from([0, 0, 64])),
    }
    spoiled = st.lists(st.sampled_from(FIELDS), min_size=1, max_size=3, unique=True)
    for field in draw(spoiled) if spoil else []:
        if field == "data":
            t["data"] = None
        elif field == "misalign":
            t["misalign"] = draw(st.sampled_from([1, 2, 4]))
        elif field == "device":
            t["device"] = draw(st.tuples(st.sampled_from([1, 2, 3, 13, 0, 4, 99, -1]),
                                         st.integers(-2, 3)))  # fmt: skip
        elif field == "ndim":
            t["ndim"] = draw(st.one_of(st.integers(-3, 12), st.just(2**31 - 1)))
        elif field == "dtype":
            t["dtype"] = draw(st.tuples(st.integers(0, 255), st.sampled_from([8, 16, 32, 64, 0]),
                                        st.sampled_from([1, 0, 2, 65535])))  # fmt: skip
        elif field in ("shape", "strides"):
            t[field] = draw(st.one_of(st.none(), st.lists(
                st.one_of(st.sampled_from([*shape, 0, 1, -1, 2]), I64),
                min_size=len(shape), max_size=len(shape))))  # fmt: skip
        else:  # in range (inside the slack after the buffer), or past the address space's end
            t["byte_offset"] = draw(st.one_of(st.integers(1, SLACK // 2),
                                              st.integers(2**63, 2**64 - 1)))  # fmt: skip
    # The runtime reads ndim dimensions only when ndim is the right one; keep the lists that long.
    length = min(max(t["ndim"], 0), 12)
    for field in ("shape", "strides"):
        if t[field] is not None and len(t[field]) != length:
            t[field] = (t[field] + [1] * length)[:length]
    return t


def _count(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


NAMES = st.one_of(
    st.none(),
    st.sampled_from(PARAMS + ["W_v", "__step__", "", "w", "W" * 5000]).map(str.encode),
    st.binary(max_size=40),
).map(lambda b: None if b is None else b64(b))

PATHS = st.one_of(
    st.none(),
    st.sampled_from(
        [
            b"",
            b".",
            b"ck.safetensors",
            b"nodir/ck.safetensors",
            b"x" * 300,
            b"\xff\xfe.st",
            b"ck.safetensors/inside",
        ]
    ),  # fmt: skip
    st.binary(min_size=1, max_size=20).filter(lambda b: b"/" not in b and b not in (b".", b"..")),
).map(lambda b: None if b is None else b64(b))


@st.composite
def a_call(draw: st.DrawFn) -> dict[str, Any]:
    """One call of a zoo function, with hostile arguments."""
    kind = draw(st.sampled_from(["entry", "dl", "dl", "dl", "param", "file", "create"]))
    model = draw(st.integers(0, 9)) > 0
    if kind == "entry":
        fn = draw(st.sampled_from(sorted(ENTRIES)))
        args = draw(st.lists(st.integers(0, 7).map(bool), min_size=4, max_size=4))
        return {"fn": fn, "model": model, "args": args[: len(ENTRIES[fn])]}
    if kind == "dl":
        fn = draw(st.sampled_from(sorted(ENTRIES)))
        victim = draw(st.integers(-1, len(ENTRIES[fn]) - 1))  # -1: all right
        tensors = [draw(dltensor(d, s, i == victim)) for i, (d, s) in enumerate(ENTRIES[fn])]
        table = draw(st.one_of(st.just(tensors + [None] * (4 - len(tensors))), st.none()))
        return {"fn": fn + "_dl", "model": model, "args": table}
    if kind == "param":
        return {"fn": draw(st.sampled_from(["get_param", "set_param"])), "model": model,
                "name": draw(NAMES), "buffer": draw(st.integers(0, 5)) > 0}  # fmt: skip
    if kind == "file":
        return {"fn": draw(st.sampled_from(["save", "load"])), "model": model,
                "path": draw(PATHS)}  # fmt: skip
    device = st.one_of(
        st.none(),
        st.sampled_from([b"cpu", b"cuda:0", b"cuda:", b"cuda:99999999999", b"CPU", b""]),
        st.binary(max_size=12),
    )
    return {"fn": "create", "device": draw(device.map(lambda b: None if b is None else b64(b))),
            "seed": draw(U64), "out": draw(st.integers(0, 5)) > 0}  # fmt: skip


RIGHT_X = {"data": 12, "misalign": 0, "device": (1, 0), "ndim": 1, "dtype": (2, 32, 1),
           "shape": [3], "strides": None, "byte_offset": 0}  # fmt: skip
RIGHT_Y = {**RIGHT_X, "data": 8, "shape": [2]}


@given(calls=st.lists(a_call(), min_size=1, max_size=8))
@example(calls=[{"fn": "infer_dl", "model": True,  # what the long run found first: a crash
                 "args": [{**RIGHT_X, "byte_offset": 2**63}, RIGHT_Y, None, None]}])  # fmt: skip
@fuzz_settings(25, 2000)
def test_hostile_calls_fail_cleanly(worker: Worker, calls: list[dict[str, Any]]) -> None:
    for call in calls:
        result = worker.call(call)
        event(f"status {result['status']}")
        if result["status"] != 0:
            name = "zoo_" + call["fn"].removesuffix("_dl")
            assert result["message"].startswith(name), (call, result)
            assert not result["changed"], f"a failed call changed the model: {call}"


def test_the_worker_reports_a_crash(worker: Worker) -> None:
    """A call that kills the worker (a read of address 0) fails the test, naming the call."""
    with pytest.raises(pytest.fail.Exception, match="the worker died"):
        worker.call({"fn": "crash"})
