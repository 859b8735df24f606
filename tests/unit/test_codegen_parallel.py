"""dlvm.codegen.parallel: a module cut into parts compiles to the same objects however many
processes compile them, a library built from parts computes what the whole one does, and a
failing or dying worker is an error, not a hang. (test_codegen_memory builds its library cut
into parts too: globals, function values and helpers across parts.)"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable

import numpy as np
import pytest
from telhelp import compiled_sample

import dlvm
from dlvm.codegen import parallel
from dlvm.codegen.build import build_library, schedule
from dlvm.codegen.errors import CodegenError
from dlvm.codegen.llgen import object_files
from telc.driver import library_spec


def test_the_parts_do_not_depend_on_the_number_of_processes(monkeypatch):
    monkeypatch.setattr(parallel, "PART_SIZE", 200)
    module = schedule(copy.deepcopy(compiled_sample("mnist").module))
    alone = object_files(copy.deepcopy(module), jobs=1)
    assert len(alone) > 1
    assert object_files(copy.deepcopy(module), jobs=3) == alone


def test_a_library_in_parts_computes_what_the_whole_one_does(tmp_path, monkeypatch):
    compiled = compiled_sample("lstm")
    spec = library_spec(compiled.interface)
    build_library(compiled.module, spec, tmp_path / "whole.so")
    monkeypatch.setattr(parallel, "PART_SIZE", 1)
    build_library(compiled.module, spec, tmp_path / "parts.so")
    rng = np.random.default_rng(0)
    with (
        dlvm.load(tmp_path / "whole.so", seed=3) as whole,
        dlvm.load(tmp_path / "parts.so", seed=3) as parts,
    ):
        for name, entry in whole.entries.items():
            args = [rng.uniform(0, 1, t.shape).astype(t.dtype) for t in entry.inputs]
            want = entry(*args)
            got = parts.entries[name](*args)
            for w, g in zip(np.atleast_1d(want), np.atleast_1d(got)):
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_results_come_back_in_order():
    jobs = [lambda i=i: bytes([i]) * (100_000 + i) for i in range(7)]  # more than a pipe holds
    assert parallel.run_forked(jobs, 3) == [job() for job in jobs]


def in_a_child(work: Callable[[], bytes]) -> Callable[[], bytes]:
    """A job that does `work` in a forked worker; the parent takes a second to do nothing,
    so that the worker surely takes the other copy of the job."""
    parent = os.getpid()
    return lambda: time.sleep(1.0) or b"" if os.getpid() == parent else work()


def test_a_failing_job_raises_its_exception_in_the_parent():
    def fails() -> bytes:
        raise CodegenError("no such instruction")

    with pytest.raises(CodegenError, match="no such instruction"):
        parallel.run_forked([in_a_child(fails)] * 2, 2)


def test_a_dying_worker_is_reported():
    with pytest.raises(CodegenError, match="died"):
        parallel.run_forked([in_a_child(lambda: os._exit(3))] * 2, 2)
