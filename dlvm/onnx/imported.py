"""What `import_model` returns (docs/onnx.md): the module with its one function, and the names and
types of the function's inputs, outputs and parameters as the ONNX model spells them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from dlvm.ir.types import TensorType
from dlvm.ir.values import Function, Module


@dataclass(frozen=True)
class ImportedTensor:
    """An initializer the function takes as an argument: `param` (trainable) or `buffer` (a
    statistic such as BatchNormalization's running mean), with its value from the model."""

    name: str
    type: TensorType
    value: np.ndarray = field(repr=False)
    kind: Literal["param", "buffer"]


@dataclass(frozen=True)
class Imported:
    """An imported model: `function` (in `module`, stage raw, verified) takes the inputs, then
    the params, and returns a tuple of the outputs in the graph's order, then the next values
    of the buffers in `updates`. Names are the ONNX
    ones; the IR's argument names are sanitised from them (docs/onnx.md, "Names")."""

    module: Module
    function: Function
    inputs: list[tuple[str, TensorType]]
    outputs: list[tuple[str, TensorType]]
    params: list[ImportedTensor]
    # Whether the graph computes something else in training (BatchNormalization, Dropout), so
    # that a front end imports it again with training=True for its train entries.
    trains_differently: bool = False
    # Imported with training=True: the buffers whose next values (BatchNormalization's running
    # statistics) the function returns after the outputs, in this order.
    updates: list[str] = field(default_factory=list)
    # The graph inputs fixed at import (`values=`), as arrays of their element types: constants
    # of the function, which takes them no more (`inputs` lists the others).
    fixed: dict[str, np.ndarray] = field(default_factory=dict)
