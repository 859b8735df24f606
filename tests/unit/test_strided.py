"""dlvm.ir.strided: chains of transposes and changes of shape addressed in place, checked
against NumPy's views of the same chains."""

from __future__ import annotations

import numpy as np
import pytest
from fuzzing import fuzz_settings
from hypothesis import given
from viewchains import Step, chains, numpy_chain

from dlvm.ir.builder import Builder
from dlvm.ir.strided import base_axis_terms, contiguous_strides, view_strides
from dlvm.ir.types import DataType, TensorType
from dlvm.ir.values import Argument, Block, Instruction, Value


def _chain(shape: tuple[int, ...], steps: list[Step]) -> tuple[Argument, Value]:
    x = Argument("x", TensorType(shape, DataType.F32))
    b = Builder(Block("entry", [x]))
    v: Value = x
    for s in steps:
        v = b.transpose(v) if s == "t" else b.shapeCast(v, shape=s)
    return x, v


def _exchange(b: int, c: int, n: tuple[int, ...]) -> list[Step]:
    """What adjoints_window._reverse_axes emits for batch and channels exchanged."""
    p = int(np.prod(n))
    return [(1, b, c, p), "t", (p, c * b, 1), "t", (c, b, *n)]


CHAINS = [
    ((32, 64, 8, 8), _exchange(32, 64, (8, 8))),
    ((3, 5, 7), _exchange(3, 5, (7,))),
    ((4, 6, 2, 3), [(4, 1, 6, 2, 3), (1, 4, 1, 6, 6), "t", (6, 24, 1), "t", (6, 1, 4, 2, 3)]),
    ((2, 3, 4), ["t"]),
    ((2, 3, 4), [(6, 4), "t", (2, 2, 6)]),
]


@pytest.mark.parametrize("shape,steps", CHAINS)
def test_strides_address_the_view(shape: tuple[int, ...], steps: list[Step]) -> None:
    x, v = _chain(shape, steps)
    found = view_strides(v)
    assert found is not None
    base, strides = found
    assert base is x
    data = np.arange(int(np.prod(shape)), dtype=np.float32)
    want = numpy_chain(data.reshape(shape), steps)
    got = np.lib.stride_tricks.as_strided(data, want.shape, [s * 4 for s in strides])
    np.testing.assert_array_equal(got, want)


def test_a_view_merging_axes_apart_in_memory_is_refused() -> None:
    _, v = _chain((2, 3, 4), ["t", (12, 2)])  # [4, 3, 2] merged: 4 and 3 lie apart
    assert view_strides(v) is None


def test_within_stops_the_chain() -> None:
    x, v = _chain((2, 3), ["t", (3, 2, 1)])
    assert isinstance(v, Instruction)
    found = view_strides(v, within=lambda i: i.opcode == "shapeCast")
    assert found is not None
    assert found[0] is v.operands[0] and found[1] == (2, 1, 0)
    assert view_strides(x) == (x, contiguous_strides((2, 3)))


@fuzz_settings(200, 5000)
@given(chain=chains())
def test_random_chains_are_addressed_as_numpy_views_them(
    chain: tuple[tuple[int, ...], list[Step]],
) -> None:
    """Strides, when found, address NumPy's view of the same chain; the base's index found
    axis by axis (base_axis_terms), when found, is the one the offset unravels to."""
    shape, steps = chain
    x, v = _chain(shape, steps)
    found = view_strides(v)
    if found is None:
        return
    base, strides = found
    assert base is x
    data = np.arange(int(np.prod(shape)))
    want = numpy_chain(data.reshape(shape), steps)
    got = np.lib.stride_tricks.as_strided(data, want.shape, [s * 8 for s in strides])
    np.testing.assert_array_equal(got, want)
    terms = base_axis_terms(shape, want.shape, strides)
    if terms is None:
        return
    idx = np.indices(want.shape)
    index = [sum((idx[k] * m for k, m in axis), np.zeros(want.shape, np.int64)) for axis in terms]
    np.testing.assert_array_equal(np.ravel_multi_index(index, shape), want)


def test_an_axis_across_two_axes_of_the_base_has_no_terms() -> None:
    _, v = _chain((2, 6), [(12,)])  # one axis over both rows
    found = view_strides(v)
    assert found is not None and found[1] == (1,)
    assert base_axis_terms((2, 6), (12,), found[1]) is None
    assert base_axis_terms((4, 6), (2, 2, 6), (12, 6, 1)) == [[(0, 2), (1, 1)], [(2, 1)]]
