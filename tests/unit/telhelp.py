"""Helpers for the TEL tests: compiling samples and snippets, calling their entry points on the
interpreter with arguments named after the TEL declarations, and finite differences."""

from __future__ import annotations

import fcntl
import functools
import glob
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from dlvm.interp import run_function
from dlvm.interp.objects import np_dtype
from dlvm.ir.values import Module
from telc.driver import DEFAULT_OPT_LEVEL, Compiled, compile_text, optimize
from telc.lower import Interface
from telc.lower.model import Entry

SAMPLES_DIR = "samples"
GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden"
# The seed the sample libraries' models are created with for the golden files.
GOLDEN_SEED = 7

Arrays = dict[str, np.ndarray]


def sample_names() -> list[str]:
    """The file names (without .tel) of samples/*.tel, sorted."""
    paths = sorted(glob.glob(os.path.join(SAMPLES_DIR, "*.tel")))
    return [os.path.splitext(os.path.basename(p))[0] for p in paths]


def sample_path(name: str) -> str:
    return os.path.join(SAMPLES_DIR, name + ".tel")


@functools.cache
def compiled_sample(
    name: str, level: int = DEFAULT_OPT_LEVEL, distributed: bool = False, precision: str = "f32"
) -> Compiled:
    """samples/NAME.tel compiled and optimised at -O`level` (differentiated), shared by the
    tests of one process; nothing the tests do modifies it. `distributed`: as --distributed
    builds it, each train entry also in halves; `precision`: as --precision builds it."""
    path = sample_path(name)
    with open(path, encoding="utf-8") as f:
        compiled = compile_text(path, f.read(), distributed=distributed, precision=precision)
    optimize(compiled.module, level=level)
    return compiled


def build_sample(name: str, directory: Path, precision: str = "f32") -> Path:
    """samples/NAME.tel built into DIRECTORY/NAME.so (with NAME.h and dlrt.h beside it), its
    train steps computing in `precision`."""
    from dlvm.codegen.build import build_library  # LLVM, only for the tests that build

    compiled = compiled_sample(name, precision=precision)
    path = Path(directory) / f"{name}.so"
    build_library(compiled.module, compiled.spec, path)
    return path


def build_distributed_sample(name: str, directory: Path, precision: str = "f32") -> Path:
    """samples/NAME.tel built with --distributed (and --precision PRECISION) into
    DIRECTORY/NAME.so."""
    from dlvm.codegen.build import build_library

    compiled = compiled_sample(name, distributed=True, precision=precision)
    library = Path(directory) / f"{name}.so"
    build_library(compiled.module, compiled.spec, library)
    return library


def shared_sample_library(name: str, root: Path) -> Path:
    """samples/NAME.tel built once into ROOT/NAME/ (ROOT shared by the processes of one test
    run, which take turns through a lock file): the path of NAME.so."""
    root.mkdir(parents=True, exist_ok=True)
    directory = root / name
    done = directory / "built"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            directory.mkdir(exist_ok=True)
            build_sample(name, directory)
            done.touch()
    return directory / f"{name}.so"


def inputs_for(spec_inputs: Iterable[tuple[str, Any]], seed: int) -> Arrays:
    """Inputs of an entry point for the golden tests: uniform in [0, 1) (f32) for a float
    input, 0 or 1 of the input's own element type (i64, i32, bool, ...) otherwise, from a
    generator seeded by SEED."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, ty in spec_inputs:
        if ty.dtype.is_float:
            out[name] = rng.uniform(0, 1, ty.shape).astype(np.float32)
        else:
            out[name] = rng.integers(0, 2, ty.shape).astype(np_dtype(ty.dtype))
    return out


def draws_random_numbers(module: Module, name: str) -> bool:
    """Whether @name or a function it calls has a `random` instruction."""
    seen, todo = set(), [module.function_named(name)]
    while todo:
        fn = todo.pop()
        if fn is None or fn.name in seen:
            continue
        seen.add(fn.name)
        for inst in fn.instructions():
            if inst.opcode == "random":
                return True
            if inst.opcode == "apply" and hasattr(inst.operands[0], "blocks"):
                todo.append(inst.operands[0])
    return False


def compile_snippet(directory: str, text: str, name: str = "snippet") -> Compiled:
    """TEL source written to DIRECTORY/NAME.tel, compiled and optimised."""
    path = os.path.join(directory, name + ".tel")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    compiled = compile_text(path, text)
    optimize(compiled.module)
    return compiled


def build_snippet(directory: Path, text: str, name: str, cuda: bool = False) -> Path:
    """The library of a TEL program, built into DIRECTORY/NAME.so (NAME.h beside it)."""
    from dlvm.codegen.build import build_library  # LLVM, only for the tests that build

    compiled = compile_snippet(str(directory), text, name)
    library = Path(directory) / f"{name}.so"
    build_library(compiled.module, compiled.spec, library, cuda=cuda)
    return library


def entry(interface: Interface, kind: str) -> Entry:
    """The only entry point of the given kind."""
    found = [e for e in interface.entries if e.kind == kind]
    assert len(found) == 1, f"{len(found)} entry points of kind {kind} in {interface.name}"
    return found[0]


def has_entry(interface: Interface, kind: str) -> bool:
    return any(e.kind == kind for e in interface.entries)


def param_names(interface: Interface) -> list[str]:
    return [name for name, _ in interface.params]


def run_init(compiled: Compiled, seed: int, float64: bool = True) -> Arrays:
    """The `init` entry point's parameters, by name."""
    init = entry(compiled.interface, "init")
    values = run_function(compiled.module, init.name, [], float64=float64, seed=seed)
    names = param_names(compiled.interface)
    assert isinstance(values, (tuple, list)) and len(values) == len(names)
    return dict(zip(names, values))


def as_tuple(value: object, count: int) -> tuple:
    """An entry point's result as a tuple of COUNT values (one result comes back bare)."""
    if count == 1 and not isinstance(value, (tuple, list)):
        return (value,)
    assert isinstance(value, (tuple, list)) and len(value) == count, value
    return tuple(value)


def run_infer(
    compiled: Compiled, inputs: Arrays, params: Arrays, float64: bool = True, seed: int = 0
) -> Arrays:
    """The `infer` entry point's outputs, by name."""
    infer = entry(compiled.interface, "infer")
    args = [inputs[n] for n, _ in infer.inputs] + [params[n] for n in infer.params]
    result = run_function(compiled.module, infer.name, args, float64=float64, seed=seed)
    values = as_tuple(result, len(infer.outputs))
    return {name: v for (name, _), v in zip(infer.outputs, values)}


def zero_states(train: Entry, dtype: type = np.float64) -> list[np.ndarray]:
    """Optimiser state as the model starts with it: zeros, in the entry's state order."""
    return [np.zeros(ty.shape, dtype=dtype) for _, _, ty in train.states]


def run_train_step(
    compiled: Compiled,
    train: Entry,
    inputs: Arrays,
    params: Arrays,
    states: list[np.ndarray],
    step: int,
    float64: bool = True,
    seed: int | None = None,
) -> tuple[float, Arrays, list[np.ndarray]]:
    """One call of a train entry point: (loss, new parameters by name, new state in order)."""
    args = [inputs[n] for n, _ in train.inputs] + [params[n] for n in train.params] + states
    if train.step is not None:
        args.append(np.asarray(step, dtype=np.float64 if float64 else np.float32))
    result = run_function(
        compiled.module, train.name, args, float64=float64, seed=step if seed is None else seed
    )
    values = as_tuple(result, 1 + len(train.params) + len(train.states))
    assert len(train.outputs) == len(values)
    loss = float(values[0])
    new_params = dict(zip(train.params, values[1 : 1 + len(train.params)]))
    new_states = list(values[1 + len(train.params) :])
    return loss, new_params, new_states


def library_and_interpreter_step(
    compiled: Compiled, train: Entry, lib: Any, seed: int = 2
) -> tuple[Any, float, Arrays]:
    """One step of the train entry `train` by the loaded library `lib` and by the interpreter
    (f32, zero optimiser state) on the same made-up inputs and `lib`'s parameters before it:
    (the library's result, the interpreter's loss, its new parameters by name)."""
    inputs = inputs_for(train.inputs, seed)
    params = lib.params
    states = [np.zeros(t.shape, np.float32) for _, _, t in train.states]
    loss, new_params, _ = run_train_step(
        compiled, train, inputs, params, states, step=1, float64=False
    )
    return getattr(lib, train.name)(**inputs), loss, new_params


def central_gradient(
    f: Callable[[np.ndarray], float],
    x: np.ndarray,
    h: float = 1e-6,
    indices: list[tuple[int, ...]] | None = None,
) -> np.ndarray:
    """Central differences (f(x + h e_i) - f(x - h e_i)) / 2h of a scalar function, in float64,
    at every index of x (or only at INDICES; the other entries are NaN)."""
    x = np.array(x, dtype=np.float64)
    grad = np.full(x.shape, np.nan)
    for i in indices if indices is not None else list(np.ndindex(x.shape)):
        saved = x[i]
        x[i] = saved + h
        up = float(f(x))
        x[i] = saved - h
        down = float(f(x))
        x[i] = saved
        grad[i] = (up - down) / (2 * h)
    return grad
