"""GPU execution tests: they run only where the NVIDIA driver answers with at least one device
(never in CI, which has no GPU) and are skipped cleanly elsewhere, saying why. The helpers of
tests/unit (IR cases, samples) are shared."""

from __future__ import annotations

import ctypes
import functools
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "unit"))
os.chdir(os.path.join(os.path.dirname(__file__), "..", ".."))


@functools.cache
def gpu_absent() -> str | None:
    """Why no GPU test can run here, or None when the driver reports a device."""
    try:
        driver = ctypes.CDLL(os.environ.get("DLRT_CUDA_DRIVER") or "libcuda.so.1")
    except OSError:
        return "no NVIDIA driver (libcuda.so.1)"
    count = ctypes.c_int(0)
    if driver.cuInit(0) != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return "the NVIDIA driver does not start"
    return None if count.value > 0 else "no CUDA device"


def pytest_collection_modifyitems(config, items):
    reason = gpu_absent()
    for item in items:
        if "tests/gpu/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.gpu)
            if reason is not None:
                item.add_marker(pytest.mark.skip(reason=f"needs a GPU: {reason}"))
