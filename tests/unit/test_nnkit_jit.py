"""NNKit's two-tier JIT (dlvm.nnkit.jit): the first call runs the quickly compiled library, the
optimised one built by another process takes over (from memory, the fast path and the disk
cache), a failed optimised build leaves the first working with a warning, DLVM_JIT_TIERS=1
builds the optimised library at once; and the direct call path of a loaded entry."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import dlvm
from dlvm import nnkit as nk
from dlvm.library_check import check_library
from dlvm.nnkit import jit

A = np.arange(6, dtype=np.float32).reshape(2, 3)
B = np.full((3, 2), 0.5, np.float32)


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """A cache of this test's own: nothing compiled before is found."""
    monkeypatch.setenv("DLVM_CACHE_DIR", str(tmp_path / "cache"))
    yield
    nk.wait_optimised()


def library_on_disk(f: nk.Staged) -> bool:
    (compiled,) = f.compiled.values()
    return compiled.cached().is_file()


def test_the_optimised_library_takes_over_from_the_first():
    f = dlvm.stage(lambda x, w: nk.tanh(x @ w) * 2.0)  # a lambda: staged as @lambda
    np.testing.assert_allclose(f(A, B), np.tanh(A @ B) * 2, rtol=1e-6)
    (compiled,) = f.compiled.values()
    (key,) = f.fast
    first, first_fast = jit.Compiled.loaded[compiled.key], f.fast[key]
    nk.wait_optimised()
    assert library_on_disk(f)
    assert jit.Compiled.loaded[compiled.key] is not first  # the -O2 library, loaded
    assert f.fast[key] is not first_fast  # and the fast path goes to it
    np.testing.assert_allclose(f(A, B), np.tanh(A @ B) * 2, rtol=1e-6)
    assert "func @lambda:" in f.ir(A, B)


def test_a_failed_optimised_build_keeps_the_first_with_a_warning(monkeypatch):
    monkeypatch.setattr(jit.sys, "executable", "/bin/false")
    f = dlvm.stage(lambda x: x * 3.0)
    with pytest.warns(RuntimeWarning, match="optimised build of @lambda failed.*exit status 1"):
        np.testing.assert_array_equal(f(A), A * 3)
        nk.wait_optimised()
    assert not library_on_disk(f)
    np.testing.assert_array_equal(f(A), A * 3)
    monkeypatch.setattr(jit.sys, "executable", sys.executable)


def test_one_tier_builds_the_optimised_library_on_the_first_call(monkeypatch):
    monkeypatch.setenv("DLVM_JIT_TIERS", "1")
    f = dlvm.stage(lambda x: x - 1.0)
    np.testing.assert_array_equal(f(A), A - 1)
    assert not jit.OptimisedBuild.running and library_on_disk(f)


def test_the_direct_path_falls_back_for_arrays_it_cannot_pass_as_they_are(tmp_path):
    f = dlvm.stage(lambda x, w: x @ w)
    expected = A @ B
    np.testing.assert_allclose(f(A, B), expected)
    nk.wait_optimised()
    (fast,) = f.fast.values()
    strided = np.zeros((3, 4), np.float32)[:, ::2]
    strided[...] = B
    readonly = B.copy()
    readonly.flags.writeable = False
    for w in (strided, readonly):
        np.testing.assert_allclose(fast(A, w), expected)  # the full call converts them
    model = jit.Compiled.loaded[next(iter(f.compiled.values())).key]
    model.close()
    with pytest.raises(ValueError, match="is closed"):
        fast(A, B)
    jit.Compiled.loaded.clear()


def test_a_damaged_library_in_the_disk_cache_is_built_again():
    """The cached library's digest is checked before it is used: one that lost a byte on disk
    is removed and built again, not loaded (nor refused on every call from then on)."""
    f = dlvm.stage(lambda x, w: x @ w + 1.0)
    f(A, B)
    nk.wait_optimised()
    (compiled,) = f.compiled.values()
    path = compiled.cached()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged = path.with_name("damaged")
    damaged.write_bytes(bytes(data))
    damaged.replace(path)  # not in place: this process maps the library
    jit.Compiled.loaded.clear()  # as in a new process
    hits = jit.Compiled.hits
    g = dlvm.stage(lambda x, w: x @ w + 1.0)  # the same IR: the same key
    np.testing.assert_allclose(g(A, B), A @ B + 1, rtol=1e-6)
    nk.wait_optimised()
    assert jit.Compiled.hits == hits and path.read_bytes() != bytes(data)
    check_library(str(path), verify=True)


def outcome(call, args):
    """What a call gives: ("ok", its result) or ("error", the exception's type and message)."""
    try:
        return ("ok", call(*args).tolist())
    except (TypeError, ValueError) as e:
        return ("error", type(e).__name__, str(e))


class Subclass(np.ndarray):
    pass


def test_the_checked_direct_path_compares_each_dtype_and_shape():
    """Entry.direct() skips conversion, never the bounds: an argument of another dtype, shape,
    type or number takes the full call, which converts or refuses it exactly as the entry
    does (an f32[1, 3] array went straight to a library that reads f32[2, 3])."""
    f = dlvm.stage(lambda x, w: x @ w)
    f(A, B)
    nk.wait_optimised()
    model = jit.Compiled.loaded[next(iter(f.compiled.values())).key]
    (entry,) = model.entries.values()
    direct = entry.direct()
    assert direct is not entry  # the direct path, not the general one
    cases = [
        (A, B),
        (A[:1], B),  # fewer bytes than the library reads
        (np.zeros((4, 3), np.float32), B),  # more
        (A, B.reshape(2, 3)),  # as many, another shape
        (A.astype(np.float64), B),  # converted
        (A.astype(np.int32), B),  # as many bytes, converted
        (A.astype(np.complex64), B),  # refused
        (A.tolist(), B),
        (A.view(Subclass), B),  # whose attributes might say anything
        (A,),
        (A, B, B),
    ]
    for args in cases:
        assert outcome(direct, args) == outcome(entry, args), [np.shape(a) for a in args]
    assert outcome(entry.unsafe_direct(), (A, B)) == outcome(entry, (A, B))


def test_arrays_on_several_gpus_are_refused():
    class OnGpu:  # only what device_of reads of a CuPy array
        def __init__(self, n: int) -> None:
            self.n = n

        def __dlpack_device__(self) -> tuple[int, int]:
            return (2, self.n)  # kDLCUDA

    f = dlvm.stage(lambda x, y: x + y)
    with pytest.raises(TypeError, match=r"arguments on several GPUs \(0, 1\)"):
        f(OnGpu(0), OnGpu(1))


def test_an_optimised_build_that_cannot_start_is_a_warning_not_a_hang(monkeypatch):
    monkeypatch.setattr(jit.sys, "executable", "/nonexistent/python")
    f = dlvm.stage(lambda x: x / 2.0)
    with pytest.warns(RuntimeWarning, match="FileNotFoundError: .*/nonexistent/python"):
        np.testing.assert_array_equal(f(A), A / 2)
        nk.wait_optimised()  # returns: the build is over, failed
    assert not jit.OptimisedBuild.running


@pytest.mark.parametrize(
    "m,k,n", [(1, 5, 3), (5, 7, 9), (13, 300, 40), (19, 1100, 70), (33, 784, 128), (47, 64, 300)]
)
def test_the_first_tiers_compact_products_compute_what_numpy_does(tmp_path, m, k, n):
    """The first tier's kernels are compact (LLVM level 1: leftover rows in tiles of 4, then
    of 1): every count of leftover rows, one slice of k or several, packed b or not."""
    rng = np.random.default_rng(m * k * n)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    f = dlvm.stage(lambda x, w: x @ w)
    compiled = f.compile(f.specs((x, w)))
    compiled.build(tmp_path / "first.so", jit.FIRST_TIER)
    with dlvm.load(tmp_path / "first.so") as model:
        got = model.entries[compiled.entry](x, w)
    np.testing.assert_allclose(got, x @ w, rtol=1e-4, atol=1e-4 * np.sqrt(k))


def test_arrays_that_need_converting_never_take_the_fast_path():
    """An f32 function called with f64 or byte-swapped f32 arrays converts them on every call:
    the fast path, which passes arrays as they are, is only for exact dtypes."""

    def body(x: nk.Tensor[nk.f32, 2, 3]):
        return x * 2.0

    f = dlvm.stage(body)
    wide, swapped = A.astype(np.float64), A.astype(">f4")
    for _ in range(3):
        np.testing.assert_array_equal(f(wide), A * 2)
        np.testing.assert_array_equal(f(swapped), A * 2)
    assert f.fast == {}
    np.testing.assert_array_equal(f(A), A * 2)
    assert len(f.fast) == 1
