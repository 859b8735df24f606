import functools
import os
import sys

import pytest

# Shared IR examples live beside the tests.
sys.path.insert(0, os.path.dirname(__file__))
os.chdir(os.path.join(os.path.dirname(__file__), "..", ".."))


@pytest.fixture(scope="session")
def sample_library(tmp_path_factory):
    """sample_library(NAME): the path of NAME.so, samples/NAME.tel built once per test run
    (NAME.h and dlrt.h beside it); the pytest-xdist workers of a run share the builds."""
    from telhelp import shared_sample_library

    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the run's directory, above each worker's own
    return functools.partial(shared_sample_library, root=base / "sample-libraries")


@pytest.fixture(autouse=True)
def telc_cache(tmp_path_factory, monkeypatch):
    """Each test builds with its own telc build cache (TELC_CACHE_DIR), so no test finds
    another's builds, or the user's."""
    path = tmp_path_factory.mktemp("telc-cache")
    monkeypatch.setenv("TELC_CACHE_DIR", str(path))
    return path
