"""The cases of ONNX's backend conformance suite (onnx.backend.test), by group, each with its
model, the shapes of its inputs in the data it is run on, and its data where the suite stores it
(whether a case is in scope: float, int and bool tensors of static non-zero shapes)."""

from __future__ import annotations

import glob
import hashlib
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.backend.test.loader import load_model_tests

from dlvm.onnx.dtypes import IR_TYPES

# BackendTest's category of each group (its test classes are OnnxBackend<category>Test) and the
# kind of onnx.backend.test.loader that holds it. The "real" kind is the light models: their
# weights are constants of the model, their outputs stored beside it.
GROUPS: dict[str, tuple[str, str]] = {
    "node": ("NodeModel", "node"),
    "simple": ("SimpleModel", "simple"),
    "pytorch-converted": ("PyTorchConvertedModel", "pytorch-converted"),
    "pytorch-operator": ("PyTorchOperatorModel", "pytorch-operator"),
    "light": ("RealModel", "real"),
}
GROUP_OF_CLASS = {f"OnnxBackend{category}Test": group for group, (category, _) in GROUPS.items()}

# The ONNX element types DLVM IR has: FLOAT, INT8, INT16, INT32, INT64, BOOL, FLOAT16, DOUBLE,
# BFLOAT16.
IR_ELEMENT_TYPES = frozenset(IR_TYPES)


@dataclass(frozen=True)
class Case:
    """One conformance case: `id` is `group/test_name`, as known_failures.txt names it."""

    group: str
    name: str
    model: Any = field(repr=False)  # onnx.ModelProto
    shapes: dict[str, tuple[int, ...]] = field(repr=False)
    data: Sequence[tuple[Sequence[Any], Sequence[Any]]] = field(repr=False)

    @property
    def id(self) -> str:
        return f"{self.group}/{self.name}"


def case_id(class_name: str, test_name: str) -> str | None:
    """The case a BackendTest test runs (`OnnxBackendNodeModelTest`, `test_abs_cpu` ->
    `node/test_abs`), None for another class or a device other than the CPU."""
    group = GROUP_OF_CLASS.get(class_name)
    if group is None or not test_name.endswith("_cpu"):
        return None
    return f"{group}/{test_name.removesuffix('_cpu')}"


def model_key(model: Any) -> str:
    """What identifies a model: the digest of its bytes, which BackendTest's copy of it (loaded
    again from the same file, or the same object) shares."""
    return hashlib.sha256(model.SerializeToString(deterministic=True)).hexdigest()


def load_cases(groups: Sequence[str] = tuple(GROUPS)) -> list[Case]:
    """Every case of `groups`, in the loader's order."""
    cases = []
    with warnings.catch_warnings():
        # The node cases compute their expected outputs with NumPy as they are made, some on
        # purpose overflowing or dividing by zero.
        warnings.simplefilter("ignore", RuntimeWarning)
        for group in groups:
            for test in load_model_tests(kind=GROUPS[group][1]):
                cases.append(_case(group, test))
    return cases


def _case(group: str, test: Any) -> Case:
    if test.model is not None:  # node cases: built in memory
        model = test.model
        data = [(_arrays(ins), _arrays(outs)) for ins, outs in test.data_sets or []]
    elif test.model_dir is not None:
        model = onnx.load(os.path.join(test.model_dir, "model.onnx"))
        sets = sorted(glob.glob(os.path.join(test.model_dir, "test_data_set*")))
        data = [_data_set(d) for d in sets]
    else:  # a light model: BackendTest runs it on made-up inputs (below), stored outputs
        path = os.path.join(os.path.dirname(onnx.__file__), "..", test.url)
        model = onnx.load(os.path.normpath(path))
        outputs = _tensor(os.path.normpath(path).removesuffix(".onnx") + "_output_0.pb")
        data = [([_dummy_input(v) for v in graph_inputs(model)], [outputs])]
    shapes = {}
    if data:
        for v, array in zip(graph_inputs(model), data[0][0]):
            if isinstance(array, (np.ndarray, np.generic)):  # a 0-d input may be a NumPy scalar
                shapes[v.name] = tuple(int(n) for n in np.shape(array))
    return Case(group, test.name, model, shapes, data)


def _arrays(values: Sequence[Any]) -> list[Any]:
    """A data set's values, a TensorProto (how the node cases give types NumPy lacks, such as
    CastLike's bfloat16) read as its array."""
    return [tensor_array(v) for v in values]


def tensor_array(value: Any) -> Any:
    """`value`, or its array where it is a TensorProto."""
    return numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else value


def graph_inputs(model: Any) -> list[Any]:
    """The graph's inputs that are not initializers, in order (as a data set gives them)."""
    initialized = {t.name for t in model.graph.initializer}
    return [v for v in model.graph.input if v.name not in initialized]


def _data_set(directory: str) -> tuple[list[Any], list[Any]]:
    def files(kind: str) -> list[Any]:
        count = len(glob.glob(os.path.join(directory, f"{kind}_*.pb")))
        return [_tensor(os.path.join(directory, f"{kind}_{i}.pb")) for i in range(count)]

    return files("input"), files("output")


def _tensor(path: str) -> Any:
    """The array of a stored TensorProto; None for another proto (a sequence, an optional)."""
    proto = onnx.TensorProto()
    with open(path, "rb") as f:
        try:
            proto.ParseFromString(f.read())
            return numpy_helper.to_array(proto)
        except Exception:  # a SequenceProto or OptionalProto does not read as a tensor
            return None


def _dummy_input(v: Any) -> np.ndarray:
    """The input BackendTest makes for a light model (Runner.generate_dummy_data, random=False):
    its dynamic dimensions 1."""
    dims = v.type.tensor_type.shape.dim
    shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in dims)
    n = int(np.prod(shape))
    return (np.arange(n).reshape(shape) / n).astype(np.float32)


def out_of_scope(case: Case) -> str | None:
    """Why a case is outside the goal's scope (float, int and bool tensors of static non-zero
    shapes), None where it is inside: an element type DLVM IR lacks, a value that is not a
    tensor, or an empty tensor."""
    for v in (*case.model.graph.input, *case.model.graph.output):
        which = v.type.WhichOneof("value")
        if which != "tensor_type":
            return f"unsupported type: {v.name!r} is a {which or 'value of no type'}"
        elem = v.type.tensor_type.elem_type
        if elem not in IR_ELEMENT_TYPES:
            name = onnx.TensorProto.DataType.Name(elem)
            return f"unsupported dtype: {v.name!r} is {name}"
    for inputs, outputs in case.data:
        for array in (*inputs, *outputs):
            if not isinstance(array, (np.ndarray, np.generic)):
                return "unsupported type: a value that is not a tensor"
            if np.size(array) == 0:
                return f"empty shape: a tensor of shape {list(np.shape(array))}"
    return None
