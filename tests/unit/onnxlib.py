"""Tiny ONNX models for the importer's tests (tests/unit/test_onnx_*.py), built with
onnx.helper, and the check every op test makes: the imported function run by the interpreter
against ONNX's reference evaluator on the same inputs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import dlvm
from dlvm.interp import run_function
from dlvm.ir import module_text
from dlvm.onnx import Imported, import_model

RNG_SEED = 0


def model(
    nodes: Sequence[onnx.NodeProto],
    inputs: dict[str, np.ndarray],
    outputs: Sequence[str],
    initializers: dict[str, np.ndarray] | None = None,
    opset: int = 17,
    dynamic: dict[str, Sequence[int | str]] | None = None,
) -> onnx.ModelProto:
    """A model of `nodes` whose inputs have the types of the example arrays (or the dims of
    `dynamic`), its outputs typed by running the reference evaluator on those arrays."""
    inits = [numpy_helper.from_array(v, n) for n, v in (initializers or {}).items()]
    ins = [
        helper.make_tensor_value_info(
            n, helper.np_dtype_to_tensor_dtype(v.dtype), (dynamic or {}).get(n, v.shape)
        )
        for n, v in inputs.items()
    ]
    opsets = [helper.make_opsetid("", opset)]
    untyped = [helper.make_empty_tensor_value_info(n) for n in outputs]
    probe = helper.make_model(
        helper.make_graph(nodes, "probe", ins, untyped, inits), opset_imports=opsets
    )
    results = ReferenceEvaluator(probe).run(None, inputs)
    outs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(r.dtype), r.shape)
        for n, r in zip(outputs, results)
    ]
    graph = helper.make_graph(nodes, "test", ins, outs, inits)
    return helper.make_model(graph, opset_imports=opsets)


def run(imp: Imported, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The imported function on the inputs (in the model's order) and its parameters."""
    args = [inputs[name] for name, _ in imp.inputs] + [p.value for p in imp.params]
    return list(run_function(imp.module, imp.function.name, args))


def check(
    m: onnx.ModelProto,
    inputs: dict[str, np.ndarray],
    rtol: float = 1e-5,
    atol: float = 1e-6,
    **options,
) -> Imported:
    """Imports m and compares each output with the reference evaluator's."""
    imp = import_model(m, shapes={n: v.shape for n, v in inputs.items()}, **options)
    expected = ReferenceEvaluator(m).run(None, inputs)
    got = run(imp, inputs)
    assert len(got) == len(expected)
    for g, e, (name, _) in zip(got, expected, imp.outputs):
        assert g.shape == e.shape, (name, g.shape, e.shape)
        assert g.dtype == e.dtype, (name, g.dtype, e.dtype)
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=name)
    return imp


def check_compiled(
    m: onnx.ModelProto,
    inputs: dict[str, np.ndarray],
    directory: Path,
    rtol: float = 1e-5,
    atol: float = 1e-6,
) -> Imported:
    """Imports m, builds it as a library in `directory` and compares each output of the
    compiled code with the reference evaluator's."""
    imp = import_model(m, shapes={n: v.shape for n, v in inputs.items()}, name="imported")
    got = compiled_outputs(m, inputs, directory)
    expected = ReferenceEvaluator(m).run(None, inputs)
    assert len(got) == len(expected)
    for g, e, (name, _) in zip(got, expected, imp.outputs):
        g = np.asarray(g)
        assert g.shape == e.shape and g.dtype == e.dtype, (name, g.shape, e.shape, g.dtype)
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=name)
    return imp


def compiled_outputs(
    m: onnx.ModelProto, inputs: dict[str, np.ndarray], directory: Path
) -> list[np.ndarray]:
    """The outputs of m imported and built as a library in `directory`, on the inputs."""
    from irlib import ir_library

    imp = import_model(m, shapes={n: v.shape for n, v in inputs.items()}, name="imported")
    lib = dlvm.load(ir_library(module_text(imp.module), "imported", directory))
    args = [inputs[name] for name, _ in imp.inputs] + [p.value for p in imp.params]
    got = lib.imported(*args)
    return [np.asarray(g) for g in (got if isinstance(got, tuple) else (got,))]


def single(
    op: str,
    inputs: dict[str, np.ndarray],
    initializers: dict[str, np.ndarray] | None = None,
    opset: int = 17,
    outputs: int = 1,
    **attrs,
) -> onnx.ModelProto:
    """A model of one node of `op` over the inputs and initializers, in that order."""
    names = list(inputs) + list(initializers or {})
    outs = [f"y{i}" for i in range(outputs)]
    node = helper.make_node(op, names, outs, name=f"the_{op.lower()}", **attrs)
    return model([node], inputs, outs, initializers, opset)


def normal(*shape: int, dtype=np.float32, seed: int = RNG_SEED) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def positive(*shape: int, seed: int = RNG_SEED) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0.5, 2.0, shape).astype(np.float32)
