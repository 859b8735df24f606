"""Operators that make a tensor of a shape known at import: ConstantOfShape, EyeLike, Range and
OneHot. Where the shape is an input computed at run time (the conformance tests feed it), it is
taken from the output's declared or inferred shape; the values may still be run-time ones
(Range's start and delta, OneHot's indices and values)."""

from __future__ import annotations

import numpy as np

from dlvm.ir.types import DataType, TensorType
from dlvm.onnx.context import Lowering
from dlvm.onnx.dtypes import NUMPY_TYPES, ir_type_of
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops.common import axis_of, cast, reshape, tensor
from dlvm.onnx.ops.registry import HANDLERS


def _known_output(node: Node, facts: Facts) -> list[str]:
    if node.out(0) not in facts.shapes:
        return [f"the shape of output '{node.out(0)}' must be known at import (declared, or "
                "inferred from inputs known then)"]  # fmt: skip
    if 0 in facts.shapes[node.out(0)]:
        return [f"an empty output {list(facts.shapes[node.out(0)])} (DLVM IR has none)"]
    return []


def _output_type(cx: Lowering, node: Node) -> TensorType:
    dtype = ir_type_of(cx.facts.elem_types.get(node.out(0), 0))
    assert dtype is not None  # support.py refused an output of another type
    return TensorType(cx.facts.shapes[node.out(0)], dtype)


@HANDLERS.register("ConstantOfShape", since=9, check=_known_output)
def constant_of_shape(cx: Lowering, node: Node) -> None:
    """Its `value` (a one-element tensor, 0.0 in f32 without one) in the output's shape."""
    value = node.attr("value")
    first = np.asarray(0.0) if value is None else _array(value).ravel()[0]
    cx.define(node.out(0), cx.splat(first.item(), _output_type(cx, node)))


def _array(value: object) -> np.ndarray:
    from onnx import numpy_helper

    return np.asarray(numpy_helper.to_array(value))  # type: ignore[arg-type]


def _eye_check(node: Node, facts: Facts) -> list[str]:
    shape = facts.shapes.get(node.input(0))
    if shape is None or len(shape) != 2:
        return [f"input '{node.input(0)}' must have a known shape of rank 2"]
    return []


@HANDLERS.register("EyeLike", since=9, check=_eye_check)
def eye_like(cx: Lowering, node: Node) -> None:
    """Ones on diagonal k of the input's shape, in `dtype` (the input's without it)."""
    n, m = cx.facts.shapes[node.input(0)]
    dtype = ir_type_of(int(node.attr("dtype", 0))) or cx.dtype(node.input(0))
    eye: np.ndarray = np.eye(n, m, int(node.attr("k", 0)), dtype=NUMPY_TYPES[dtype])
    cx.define(node.out(0), cx.literal(eye))


def _range_check(node: Node, facts: Facts) -> list[str]:
    return _known_output(node, facts)


@HANDLERS.register("Range", since=11, check=_range_check)
def range_op(cx: Lowering, node: Node) -> None:
    """start + i · delta for i below the output's length (limit only decides that length)."""
    ty = _output_type(cx, node)
    (n,) = ty.shape
    start = cast(cx, cx.value(node.input(0)), ty.dtype)
    delta = cast(cx, cx.value(node.input(2)), ty.dtype)
    steps = cx.literal(np.arange(n, dtype=NUMPY_TYPES[ty.dtype]))
    cx.define(node.out(0), cx.emit("add", start, cx.emit("multiply", steps, delta)))


def _one_hot_check(node: Node, facts: Facts) -> list[str]:
    return _known_output(node, facts)


@HANDLERS.register("OneHot", since=9, check=_one_hot_check)
def one_hot(cx: Lowering, node: Node) -> None:
    """values[1] where an index (truncated to an integer; a negative one counts from the end)
    equals the position along `axis`, values[0] elsewhere, out-of-range indices included. The
    depth is the output's length along `axis`."""
    ty = _output_type(cx, node)
    axis = axis_of(int(node.attr("axis", -1)), len(ty.shape))
    depth = ty.shape[axis]
    ids = cast(cx, cx.value(node.input(0)), DataType.I64)
    negative = cx.emit("lessThan", ids, cx.scalar(0, DataType.I64))
    ids = cx.emit("select", cx.emit("add", ids, cx.scalar(depth, DataType.I64)), ids, negative)
    ids = cx.emit("padShape", ids, index=axis) if tensor(ids).shape else reshape(cx, ids, (1,))
    positions = np.arange(depth, dtype=np.int64).reshape(
        [depth if d == axis else 1 for d in range(len(ty.shape))]
    )
    hot = cx.emit("equal", ids, cx.literal(positions))
    values = cast(cx, cx.value(node.input(2)), ty.dtype)
    off = reshape(cx, cx.emit("slice", values, lo=0, hi=0), ())
    on = reshape(cx, cx.emit("slice", values, lo=1, hi=1), ())
    cx.define(node.out(0), cx.emit("select", on, off, hot))
