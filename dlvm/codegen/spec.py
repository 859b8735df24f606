"""What a shipped library contains besides code: its name, parameters, optimiser state and entry
points, each mapped onto the host function that computes it (docs/c-abi.md). Front ends build a
LibrarySpec (telc from its Interface, dlc from the IR alone); the glue generator, the header, the
manifest and the Python loader read it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from dlvm.ir.types import FunctionType, TensorType, TupleType, Type
from dlvm.ir.values import Module


@dataclass(frozen=True)
class TensorSpec:
    """A named tensor: `dtype` is an IR element type name (`f32`, `i64`, `bool`…); shape () is a
    scalar."""

    name: str
    dtype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class StateSpec:
    """One optimiser state tensor of a parameter (`W1_m` of `W1`)."""

    name: str
    param: str
    dtype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class EntrySpec:
    """An entry point. Its host function `dl_<host>` takes the inputs, then the parameters named
    in `params` (in that order), then the states named in `states`, then the step when `step`
    is set (a scalar of `step_dtype`), and returns the outputs; for a train entry, the outputs
    are followed by the new values of `params` and then of `states`.

    A train entry of a library built with `--distributed` has two parts, each an entry of its
    own to the runtime (docs/distributed.md): `grads` (an infer entry: the loss, each gradient
    and each updated buffer, into one block the runtime sums across processes) and `apply` (a
    train entry taking those sums and the scale 1/ranks, with this entry's outputs)."""

    name: str
    kind: str  # "infer" | "train" | "export"
    host: str
    inputs: tuple[TensorSpec, ...] = ()
    outputs: tuple[TensorSpec, ...] = ()
    params: tuple[str, ...] = ()
    states: tuple[str, ...] = ()
    step: bool = False
    step_dtype: str = "f32"
    grads: EntrySpec | None = None
    apply: EntrySpec | None = None

    def parts(self) -> tuple[EntrySpec, ...]:
        """The entry's halves (grads, apply), or nothing."""
        return (self.grads, self.apply) if self.grads and self.apply else ()


@dataclass(frozen=True)
class LibrarySpec:
    """A whole library. `init` is the host function that returns every parameter in `params`
    order (None when the model has none). The last `buffers` of `params` are buffers:
    non-trainable state, a parameter to the runtime (saved, loaded, got and set, updated by the
    train entries that list them), marked "kind": "buffer" in the manifest.

    The last `derived` of `states` are derived from the parameters (`--quantize int8`'s int8
    weights, docs/quantization.md): host function `derive` takes every parameter and returns
    them, and the runtime runs it before an infer entry whenever the parameters changed since;
    they are neither saved, loaded nor in the manifest."""

    name: str
    compiler: str
    params: tuple[TensorSpec, ...] = ()
    states: tuple[StateSpec, ...] = ()
    init: str | None = None
    entries: tuple[EntrySpec, ...] = field(default_factory=tuple)
    buffers: int = 0
    derived: int = 0
    derive: str | None = None

    @property
    def c_name(self) -> str:
        return c_identifier(self.name)

    def every_entry(self) -> tuple[EntrySpec, ...]:
        """The entries and, after each, its parts (the halves of a distributed train entry)."""
        return tuple(x for e in self.entries for x in (e, *e.parts()))


def c_identifier(name: str) -> str:
    """A C identifier for a model or entry name (docs/c-abi.md section 1)."""
    ident = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return "m_" + ident if not ident or ident[0].isdigit() else ident


def host_symbol(function: str) -> str:
    """The C symbol of a compiled IR host function (IR names may hold '.')."""
    return "dl_" + re.sub(r"[^A-Za-z0-9_]", "_", function)


def module_spec(module: Module, compiler: str) -> LibrarySpec:
    """The library of an IR module (`dlc m.dl -o m.so`): every function with a body whose
    arguments and results are tensors becomes an export entry, its inputs named after the entry
    block's arguments and its outputs `result` (or `result0`, `result1`… for a tuple)."""

    def flat(t: Type) -> list[Type]:
        if isinstance(t, TupleType):
            return [x for e in t.elements for x in flat(e)]
        return [t]

    entries = []
    for fn in module.functions:
        if not fn.blocks or fn.is_declaration or fn.compute:
            continue
        args = [(a.name, a.type) for a in fn.arguments if isinstance(a.type, TensorType)]
        ty = fn.type
        if len(args) != len(fn.arguments) or not isinstance(ty, FunctionType):
            continue
        results = [t for t in flat(ty.result) if isinstance(t, TensorType)]
        if len(results) != len(flat(ty.result)):  # a pointer, struct… has no C form here
            continue
        names = ["result"] if len(results) == 1 else [f"result{i}" for i in range(len(results))]
        entries.append(
            EntrySpec(
                fn.name,
                "export",
                fn.name,
                tuple(
                    TensorSpec(name or f"arg{i}", t.dtype.text, t.shape)
                    for i, (name, t) in enumerate(args)
                ),
                tuple(TensorSpec(n, t.dtype.text, t.shape) for n, t in zip(names, results)),
            )
        )
    return LibrarySpec(module.name, compiler, entries=tuple(entries))
