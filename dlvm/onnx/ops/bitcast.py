"""BitCast: a tensor's bytes read as another element type of the same width (the IR's
`bitCast`); types DLVM IR lacks (unsigned integers) are refused before lowering."""

from __future__ import annotations

from dlvm.onnx.context import Lowering, LoweringError
from dlvm.onnx.dtypes import ir_type_of, onnx_type_name
from dlvm.onnx.graph import Facts, Node
from dlvm.onnx.ops.common import tensor
from dlvm.onnx.ops.registry import HANDLERS


def _check(node: Node, facts: Facts) -> list[str]:
    to = node.attr("to", 0)
    if ir_type_of(to) is None:
        return [f"a bit cast to {onnx_type_name(to)}: DLVM IR has no such type"]
    return []


@HANDLERS.register("BitCast", since=26, check=_check)
def bit_cast(cx: Lowering, node: Node) -> None:
    x = cx.value(node.input(0))
    t = tensor(x)
    to = ir_type_of(node.attr("to"))
    assert to is not None
    if to.bits != t.dtype.bits or to.is_bool or t.dtype.is_bool:
        raise LoweringError(f"a bit cast from {t.dtype} to {to}: the widths must be equal")
    cx.define(node.out(0), cx.emit("bitCast", x, type=t.with_dtype(to)))
