"""The operator handlers, one module per family, each registering into HANDLERS
(ops/registry.py) when imported here."""

from dlvm.onnx.ops import (
    bitcast,
    control,
    conv,
    dropout,
    einsum,
    elementwise,
    linalg,
    linear,
    norm,
    optional,
    pool,
    recurrent,
    reduce,
    resize,
    shape,
    spectral,
    text,
    topk,
)
from dlvm.onnx.ops.registry import HANDLERS, Handler, opset_text

__all__ = [
    "HANDLERS",
    "Handler",
    "bitcast",
    "control",
    "conv",
    "dropout",
    "einsum",
    "elementwise",
    "linalg",
    "linear",
    "norm",
    "optional",
    "opset_text",
    "pool",
    "recurrent",
    "reduce",
    "resize",
    "shape",
    "spectral",
    "text",
    "topk",
]
