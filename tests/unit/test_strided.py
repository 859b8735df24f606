"""dlvm.ir.strided: chains of transposes and changes of shape addressed in place, checked
against NumPy's views of the same chains."""

from __future__ import annotations

import numpy as np
import pytest

from dlvm.ir.builder import Builder
from dlvm.ir.strided import contiguous_strides, view_strides
from dlvm.ir.types import DataType, TensorType
from dlvm.ir.values import Argument, Block, Instruction, Value

# A chain: ("t",) a transpose (all axes reversed), or a shape.
Step = tuple[int, ...] | str


def _chain(shape: tuple[int, ...], steps: list[Step]) -> tuple[Argument, Value]:
    x = Argument("x", TensorType(shape, DataType.F32))
    b = Builder(Block("entry", [x]))
    v: Value = x
    for s in steps:
        v = b.transpose(v) if s == "t" else b.shapeCast(v, shape=s)
    return x, v


def _numpy(a: np.ndarray, steps: list[Step]) -> np.ndarray:
    for s in steps:
        a = a.T if s == "t" else a.reshape(s)
    return a


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
    want = _numpy(data.reshape(shape), steps)
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
