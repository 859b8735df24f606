"""Staging Python functions into DLVM IR (NNKit, after the DLVM paper's embedded DSL), and their
just-in-time compilation.

`@dlvm.stage` wraps a Python function over tensors. Called on NumPy arrays (or anything NumPy
reads through DLPack), it runs once per signature of shapes and element types on symbolic
tensors (dlvm.nnkit.tensor), which records every operation as an IR instruction: Python control
flow on concrete values unrolls, and a staged function called from another becomes an `apply` of
its own IR function. The module is then compiled as telc compiles a model (differentiation, the
-O2 pipeline, compute stages, LLVM) by dlvm.nnkit.jit, which caches the library in memory and
on disk, and called through dlvm.load. `dlvm.gradient` stages the IR gradient declaration of a
staged function: `[gradient @f wrt … keeping … seedable]`."""

from __future__ import annotations

import functools
import inspect
import os
import re
import threading
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dlvm.ir.builder import Builder
from dlvm.ir.literals import AggregateLiteral
from dlvm.ir.printer import module_text
from dlvm.ir.typerules import TypeRuleError, gradient_type
from dlvm.ir.types import DATA_TYPES, FunctionType, TupleType
from dlvm.ir.values import (
    Argument,
    Block,
    ElementKey,
    Function,
    GradientDecl,
    LiteralValue,
    Module,
    Value,
)
from dlvm.loader import cuda_ordinal, dlpack_type
from dlvm.nnkit.jit import Compiled
from dlvm.nnkit.tensor import Tensor, TensorSpec, emit, staging_error

_state = threading.local()  # the Staging being built on this thread, if any
# Per module being staged, the IR function of each (staged function, argument types) in it.
_STAGED: weakref.WeakKeyDictionary[Module, dict[Any, Function]] = weakref.WeakKeyDictionary()


def current() -> Staging | None:
    return getattr(_state, "staging", None)


class Staging:
    """One IR function being built from a Python function's run on symbolic tensors."""

    def __init__(self, module: Module, name: str, params: list[tuple[str, TensorSpec]]) -> None:
        self.module = module
        arguments = [Argument(n, spec.ir) for n, spec in params]
        self.fn = Function(name, FunctionType(tuple(a.type for a in arguments), TupleType(())))
        module.add_function(self.fn)
        block = Block("entry", arguments)
        self.fn.add_block(block)
        self.builder = Builder(block)
        self.arguments = [Tensor(a, self) for a in arguments]

    def emit(self, opname: str, operands: list[Value], **attrs: Any) -> Tensor:
        return Tensor(emit(self.builder, opname, operands, **attrs), self)

    def finish(self, result: Any) -> None:
        """Returns `result`: a tensor, or a tuple of them (a tuple in the IR too)."""
        items = result if isinstance(result, tuple) else (result,)
        for r in items:
            if not isinstance(r, Tensor) or r.staging is not self:
                raise staging_error(f"a staged function must return tensors it computed, not {r!r}")
        if isinstance(result, tuple):
            tuple_type = TupleType(tuple(r.type for r in items))
            items_ = tuple(r.value for r in items)
            literal = LiteralValue(AggregateLiteral("tuple", items_), tuple_type)
            value: Value = emit(self.builder, "literal", [literal])
        else:
            value = result.value
        emit(self.builder, "return", [value])
        ty = self.fn.type
        assert isinstance(ty, FunctionType)
        self.fn.type = FunctionType(ty.arguments, value.type)


def spec_of(value: Any, where: str) -> TensorSpec:
    """The shape and element type a NumPy array (or a DLPack array) gives an argument."""
    if cuda_ordinal(value) is not None:  # in GPU memory: read from its DLTensor, not copied
        try:
            shape, dtype = dlpack_type(value)
        except TypeError as e:
            raise TypeError(f"{where}: {e}") from None
        return TensorSpec(DATA_TYPES[dtype.name.lower()], shape)
    if isinstance(value, np.ndarray):
        arr = value
    elif hasattr(value, "__dlpack__"):  # a framework's array: shape and dtype through DLPack
        arr = np.from_dlpack(value)
    else:
        arr = np.asarray(value)
    kind = {"f": "f", "i": "i", "b": "bool"}.get(arr.dtype.kind)
    name = "bool" if kind == "bool" else f"{kind}{arr.dtype.itemsize * 8}" if kind else ""
    if arr.dtype.name == "bfloat16":  # ml_dtypes' (the `bf16` extra), NumPy kind 'V'
        name = "bf16"
    if name not in DATA_TYPES:
        raise TypeError(f"{where}: no DLVM element type for NumPy's {arr.dtype}")
    return TensorSpec(DATA_TYPES[name], tuple(arr.shape))


def device_of(values: Sequence[Any]) -> str:
    """ "cuda:N" when arrays among `values` are in the memory of GPU N (DLPack kDLCUDA), else
    "cpu"; TypeError for arrays on several GPUs."""
    ordinals = {n for n in map(cuda_ordinal, values) if n is not None}
    if len(ordinals) > 1:
        raise TypeError(f"arguments on several GPUs ({', '.join(map(str, sorted(ordinals)))})")
    return f"cuda:{ordinals.pop()}" if ordinals else "cpu"


def ir_name(name: str) -> str:
    """A Python function's name as an IR name: `<lambda>` is `lambda`, and what the IR's names
    cannot spell (docs/ir.md, "Textual format": ASCII letters, digits, `_` and `.`) becomes `_`."""
    name = re.sub(r"[^A-Za-z0-9_]+", "_", name.strip("<>")).strip("_") or "staged"
    return name if not name[0].isdigit() else "_" + name


def _numpy(dtype: Any) -> np.dtype:
    from dlvm.runtime import DType

    return np.dtype(DType.from_ir(dtype.text).numpy)


class Staged:
    """A Python function staged into DLVM IR and compiled on first call per signature."""

    tuple_result = False  # whether a call returns a tuple whatever the IR's result type

    def __init__(self, fn: Callable[..., Any]) -> None:
        functools.update_wrapper(self, fn)
        self.py = fn
        self.name = fn.__name__
        signature = inspect.signature(fn)
        self.params = list(signature.parameters)
        try:
            annotations = inspect.get_annotations(fn, eval_str=True)
        except Exception as e:  # a string annotation naming what the module does not define
            raise staging_error(
                f"{self.name}(): cannot evaluate its annotations ({e}); string annotations "
                "are evaluated in the function's module"
            ) from None
        self.annotated = [annotations.get(p) for p in self.params]
        self.compiled: dict[tuple[TensorSpec, ...], Compiled] = {}
        self.compiled_cuda: dict[tuple[TensorSpec, ...], Compiled] = {}
        self.fast: dict[tuple[Any, ...], Callable[..., Any]] = {}  # by the arrays' signature

    def __repr__(self) -> str:
        return f"<dlvm.stage {self.name}>"

    def specs(self, args: Sequence[Any]) -> tuple[TensorSpec, ...]:
        if len(args) != len(self.params):
            raise TypeError(f"{self.name}() takes {len(self.params)} arguments, got {len(args)}")
        out = []
        for p, a, given in zip(self.params, args, self.annotated):
            if isinstance(a, Tensor):
                spec = TensorSpec(a.dtype, a.shape)
            else:
                spec = spec_of(a, f"{self.name}(): argument '{p}'")
                if isinstance(given, TensorSpec) and spec.shape == given.shape and np.can_cast(
                        _numpy(spec.dtype), _numpy(given.dtype), "same_kind"):  # fmt: skip
                    spec = given  # converted on the call, as dlvm.load's entries do
            if isinstance(given, TensorSpec) and spec != given:
                what = f"{given.dtype.text}{list(given.shape)}"
                raise staging_error(f"{self.name}(): argument '{p}' must be {what}, got "
                                    f"{spec.dtype.text}{list(spec.shape)}")  # fmt: skip
            out.append(spec)
        return tuple(out)

    def stage_into(self, module: Module, specs: tuple[TensorSpec, ...]) -> Function:
        """This function's IR for these argument types in `module` (staged once per module)."""
        staged = _STAGED.setdefault(module, {})
        key = (self, specs)
        if key in staged:
            return staged[key]
        taken = {f.name for f in module.functions}
        base = ir_name(self.name)
        name, k = base, 0
        while name in taken:
            k += 1
            name = f"{base}_{k}"
        outer = current()
        staging = Staging(module, name, list(zip(self.params, specs)))
        staged[key] = staging.fn
        _state.staging = staging
        try:
            staging.finish(self.py(*staging.arguments))
        finally:
            _state.staging = outer
        return staging.fn

    def __call__(self, *args: Any, out: Any = None) -> Any:
        """The function on arrays: NumPy arrays (or DLPack arrays in host memory) give NumPy
        arrays; with arrays in GPU memory (CuPy, PyTorch CUDA tensors: DLPack kDLCUDA) it runs
        on that GPU, compiled for CUDA, and its results come back as NumPy arrays unless `out`
        gives arrays (on the GPU or not) to write them into, as dlvm.load's entries do."""
        # The steady state: NumPy arrays of a signature already compiled go straight to the
        # library's entry point (the per-call overhead is what a JIT is judged by).
        key = tuple([(a.shape, a.dtype) for a in args if type(a) is np.ndarray])
        fast = self.fast.get(key) if len(key) == len(args) and out is None else None
        if fast is not None:
            return fast(*args)
        outer = current()
        if any(isinstance(a, Tensor) for a in args) or outer is not None:
            if out is not None:
                raise staging_error(f"{self.name}(): out= is for calls on arrays, not staging")
            return self.apply(outer, args)
        outs = out if isinstance(out, tuple) else () if out is None else (out,)
        device = device_of([*args, *outs])
        specs = self.specs(args)
        compiled = self.compile(specs, cuda=device != "cpu")
        result = compiled(*args, device=device, out=out)
        # Only arrays the library takes as they are go the fast way, which converts nothing:
        # an f64 array for an f32 annotation (or a byte-swapped one) takes the full call.
        arrays = len(key) == len(args)  # NumPy arrays, every one
        if arrays and out is None and all(a.dtype == _numpy(s.dtype) for a, s in zip(args, specs)):
            self.fast[key] = compiled.entry_call()
            # The optimised library, when it comes, takes the fast path over.
            compiled.on_optimised(lambda: self.fast.__setitem__(key, compiled.entry_call()))
        return result

    def apply(self, outer: Staging | None, args: Sequence[Any]) -> Any:
        """A call from a function being staged: `apply` of this function's IR."""
        if outer is None:
            raise staging_error(f"{self.name}() called on staged tensors outside staging")
        tensors = [a if isinstance(a, Tensor) else None for a in args]
        if any(t is None for t in tensors):
            raise staging_error(f"{self.name}(): every argument of a staged call must be a "
                                "staged tensor")  # fmt: skip
        callee = self.stage_into(outer.module, self.specs(args))
        call = outer.emit("apply", [callee, *[t.value for t in tensors]])  # type: ignore[union-attr]
        ty = callee.type
        assert isinstance(ty, FunctionType)
        result = ty.result
        if isinstance(result, TupleType):
            return tuple(outer.emit("extract", [call.value], keys=(ElementKey(index=i),))
                         for i in range(len(result.elements)))  # fmt: skip
        return call

    def staged(self, specs: tuple[TensorSpec, ...]) -> tuple[Module, str]:
        """A module of its own with this function staged for `specs`, and the entry's name."""
        module = Module(f"nnkit_{ir_name(self.name)}")
        return module, self.stage_into(module, specs).name

    def module(self, specs: tuple[TensorSpec, ...]) -> Module:
        return self.staged(specs)[0]

    def compile(self, specs: tuple[TensorSpec, ...], cuda: bool = False) -> Compiled:
        """The compiled function for these argument types (for CUDA GPUs too with `cuda`)."""
        table = self.compiled_cuda if cuda else self.compiled
        hit = table.get(specs)
        if hit is None:
            module, entry = self.staged(specs)
            hit = table[specs] = Compiled(module, entry, self.tuple_result, cuda)
        return hit

    def ir(self, *args: Any) -> str:
        """The raw IR staged for these arguments (arrays, or TensorSpecs), as text."""
        return module_text(self.module(self.specs_or_given(args)))

    def llvm(self, *args: Any) -> str:
        """The optimised LLVM IR of the compiled module for these arguments."""
        return self.compile(self.specs_or_given(args)).llvm()

    def export(self, path: str | os.PathLike[str], *args: Any) -> Path:
        """The compiled function for these arguments (arrays or TensorSpecs; by default its
        annotations) as a shared library at `path` with its C header beside it, like a TEL
        model's: the function is its entry point (docs/c-abi.md)."""
        compiled = self.compile(self.specs_or_given(args))
        target = Path(path)
        compiled.build(target)  # makes the directory, or raises BuildError saying why not
        return target

    def specs_or_given(self, args: Sequence[Any]) -> tuple[TensorSpec, ...]:
        if not args and all(isinstance(a, TensorSpec) for a in self.annotated):
            return tuple(self.annotated)  # type: ignore[arg-type]
        if args and all(isinstance(a, TensorSpec) for a in args):
            return tuple(args)
        return self.specs(args)


class Gradient(Staged):
    """`dlvm.gradient(f, …)`: the IR gradient declaration of staged function f, compiled."""

    tuple_result = True  # the derivatives, then the kept results: a tuple, as its IR type says

    def __init__(self, of: Staged, wrt: Sequence[int] | None, seedable: bool,
                 keeping: Sequence[int], source: int | None = None) -> None:  # fmt: skip
        self.of = of
        self.source = source
        self.wrt = tuple(wrt) if wrt is not None else None
        self.seedable = seedable
        self.keeping = tuple(keeping)
        self.py = of.py
        self.name = of.name + "_gradient"
        self.params = list(of.params)
        self.annotated = list(of.annotated)
        if seedable:
            self.params.append("seed")
            self.annotated.append(None)
        self.compiled = {}
        self.compiled_cuda = {}
        self.fast = {}

    def __repr__(self) -> str:
        return f"<dlvm.gradient of {self.of.name}>"

    def specs(self, args: Sequence[Any]) -> tuple[TensorSpec, ...]:
        n = len(self.of.params)
        base = self.of.specs(args[:n])
        if self.seedable:
            if len(args) != n + 1:
                raise TypeError(f"{self.name}() takes {n + 1} arguments (the last a seed)")
            return (*base, spec_of(args[n], f"{self.name}(): the seed"))
        return base

    def stage_into(self, module: Module, specs: tuple[TensorSpec, ...]) -> Function:
        n = len(self.of.params)
        of = self.of.stage_into(module, specs[:n])
        try:
            ty = gradient_type(of.type, self.source, self.wrt, self.keeping, self.seedable)  # type: ignore[arg-type]
        except TypeRuleError as e:
            raise staging_error(f"gradient of {self.of.name}: {e}") from None
        grad = Function(f"{of.name}_grad", ty)
        grad.declaration = GradientDecl(of, self.source, self.wrt, self.keeping, self.seedable)
        module.add_function(grad)
        return grad
