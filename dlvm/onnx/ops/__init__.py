"""The operator handlers, one module per family, each registering into HANDLERS
(ops/registry.py) when imported here."""

from dlvm.onnx.ops import (
    bitwise,
    conv,
    dropout,
    elementwise,
    generate,
    linear,
    norm,
    pool,
    quantize,
    recurrent,
    reduce,
    resize,
    shape,
    training,
)
from dlvm.onnx.ops.registry import HANDLERS, Handler, opset_text

__all__ = [
    "HANDLERS",
    "Handler",
    "bitwise",
    "conv",
    "dropout",
    "elementwise",
    "generate",
    "linear",
    "norm",
    "opset_text",
    "pool",
    "quantize",
    "recurrent",
    "reduce",
    "resize",
    "shape",
    "training",
]
