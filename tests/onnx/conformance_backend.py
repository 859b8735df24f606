"""DLVM as a backend of onnx.backend.test.BackendTest: `prepare` finds the model's entry in the
libraries a session compiled for every selected case at once (conformance_batch), and the rep
calls that entry, the compiled code, on the test's inputs. A case that cannot be compiled fails
in `prepare` with the reason (CaseFailed), never by BackendIsNotSupposedToImplementIt, which
BackendTest counts as a pass."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from conformance_batch import (
    Compiled,
    Request,
    Stats,
    compile_all,
    constant_inputs,
    entry_name,
)
from conformance_cases import Case, graph_inputs, model_key, tensor_array
from onnx.backend.base import Backend, BackendRep

from dlvm.onnx.dtypes import NUMPY_TYPES


class CaseFailed(Exception):
    """A case that has no compiled entry: the message is why (its import's diagnostics, or the
    build's error)."""


class Session:
    """The cases of one run, compiled together when the first is prepared: `select` names them
    (a model no selected case has is compiled alone when asked for)."""

    def __init__(self, cache: Path | None = None) -> None:
        self.cache = cache
        self.stats = Stats()
        self.compile_s = 0.0
        self._requests: dict[str, Request] = {}  # by model key
        self._compiled: dict[str, Compiled] | None = None

    def select(self, cases: Sequence[Case]) -> None:
        """The cases to compile on first use (the first of those sharing a model names it)."""
        for case in cases:
            names = [v.name for v in graph_inputs(case.model)]
            constant = constant_inputs(names, case.data)
            self._requests.setdefault(
                model_key(case.model),
                Request(entry_name(case.id), case.model, case.shapes, constant),
            )
        self._compiled = None

    def fixed_inputs(self, model: Any) -> dict[str, np.ndarray]:
        """The inputs of `model` that its compiled form fixed at import (none before it is
        compiled)."""
        request = self._requests.get(model_key(model))
        if self._compiled is None or request is None:
            return {}
        compiled = self._compiled.get(request.name)
        imported = compiled.imported if compiled is not None else None
        return imported.fixed if imported is not None else {}

    def compiled(self, model: Any) -> Compiled:
        """The compiled form of `model`, all selected cases compiled on the first call."""
        key = model_key(model)
        if self._compiled is None:
            self._compiled = self._compile(list(self._requests.values()))
        request = self._requests.get(key)
        if request is None:
            request = self._requests[key] = Request(entry_name(f"model/{key[:16]}"), model)
            self._compiled.update(self._compile([request]))
        return self._compiled[request.name]

    def _compile(self, requests: list[Request]) -> dict[str, Compiled]:
        t0 = time.perf_counter()
        result = compile_all(requests, self.cache, stats=self.stats)
        self.compile_s += time.perf_counter() - t0
        return result


SESSION = Session()


class DlvmRep(BackendRep):
    """A compiled model: `run` calls its library entry with the inputs, then its initializers.
    The inputs are given in the order of the graph's inputs less its initializers (which an
    older model lists among its inputs too), as onnx.backend.test gives them."""

    def __init__(self, compiled: Compiled, model: Any) -> None:
        assert compiled.imported is not None and compiled.entry is not None
        self.imported = compiled.imported
        self.entry = compiled.entry
        initialized = {t.name for t in model.graph.initializer}
        self.input_names = [v.name for v in model.graph.input if v.name not in initialized]

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        given = dict(zip(self.input_names, map(tensor_array, inputs)))
        for name, value in self.imported.fixed.items():
            _check_fixed(name, given.get(name), value)
        args = []
        for name, ty in self.imported.inputs:
            args.append(_argument(name, given[name], NUMPY_TYPES[ty.dtype], ty.shape))
        for p in self.imported.params:
            args.append(p.value)
        results = self.entry(*args)
        results = results if isinstance(results, tuple) else (results,)
        return tuple(np.asarray(r) for r in results)


def _check_fixed(name: str, given: Any, fixed: np.ndarray) -> None:
    """A fixed input must be given the value it was fixed to: the library computed nothing from
    it, so a case must never pass on another (CaseFailed)."""
    array = np.asarray(given) if given is not None else None
    same = (
        array is not None
        and array.dtype == fixed.dtype
        and array.shape == fixed.shape
        and bool(np.array_equal(array, fixed, equal_nan=fixed.dtype.kind == "f"))
    )
    if not same:
        raise CaseFailed(
            f"input {name!r} was fixed at build time to {fixed.tolist()!r} ({fixed.dtype}), "
            f"but is given {None if array is None else array.tolist()!r}"
        )


def _argument(name: str, value: Any, dtype: type, shape: tuple[int, ...]) -> np.ndarray:
    """The input as the entry takes it; CaseFailed for another dtype or shape than the one it
    was compiled for (the loader would convert a dtype it can)."""
    array = np.asarray(value)
    if array.dtype != np.dtype(dtype) or array.shape != tuple(shape):
        raise CaseFailed(
            f"input {name!r}: given {array.dtype}{list(array.shape)}, compiled for "
            f"{np.dtype(dtype)}{list(shape)}"
        )
    return array


class DlvmBackend(Backend):
    """The backend BackendTest runs: the CPU only, every model through SESSION."""

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> DlvmRep:
        compiled = SESSION.compiled(model)
        if compiled.failure is not None:
            raise CaseFailed(compiled.failure)
        return DlvmRep(compiled, model)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device == "CPU"
