"""The operator handlers, one module per family, each registering into HANDLERS
(ops/registry.py) when imported here."""

from dlvm.onnx.ops import (
    conv,
    dropout,
    elementwise,
    gather,
    linear,
    loss,
    norm,
    pool,
    recurrent,
    reduce,
    resize,
    scatter,
    shape,
)
from dlvm.onnx.ops.registry import HANDLERS, Handler, opset_text

__all__ = [
    "HANDLERS",
    "Handler",
    "conv",
    "dropout",
    "elementwise",
    "gather",
    "linear",
    "loss",
    "norm",
    "opset_text",
    "pool",
    "recurrent",
    "reduce",
    "resize",
    "scatter",
    "shape",
]
