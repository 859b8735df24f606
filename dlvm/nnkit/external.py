"""Functions of an IR module (a TEL program lowered by telc, a parsed `.dl` file) called from
staged Python code: each call copies the function, and every function it calls, into the module
being staged, and stages an `apply` of the copy."""

from __future__ import annotations

import weakref
from typing import Any

from dlvm.ir.cloning import ValueMap, clone_body
from dlvm.ir.types import FunctionType, TupleType
from dlvm.ir.values import ElementKey, Function, Module
from dlvm.nnkit.staging import current
from dlvm.nnkit.tensor import Tensor, staging_error

# Per module being staged, the copy of each function imported into it.
_IMPORTED: weakref.WeakKeyDictionary[Module, dict[Function, Function]] = weakref.WeakKeyDictionary()


class ExternalFunction:
    """A function of another module, callable on staged tensors."""

    def __init__(self, fn: Function) -> None:
        self.fn = fn

    def __repr__(self) -> str:
        return f"<IR function @{self.fn.name}>"

    def __call__(self, *args: Any) -> Any:
        staging = current()
        if staging is None or not all(isinstance(a, Tensor) for a in args):
            raise staging_error(
                f"@{self.fn.name} is called on staged tensors, in a staged function"
            )
        callee = _import(self.fn, staging.module)
        call = staging.emit("apply", [callee, *[a.value for a in args]])
        ty = callee.type
        assert isinstance(ty, FunctionType)
        if isinstance(ty.result, TupleType):
            return tuple(staging.emit("extract", [call.value], keys=(ElementKey(index=i),))
                         for i in range(len(ty.result.elements)))  # fmt: skip
        return call


def _import(fn: Function, module: Module) -> Function:
    """fn's copy in `module` (made once), with the functions it reaches copied too."""
    copies = _IMPORTED.setdefault(module, {})
    if fn in copies:
        return copies[fn]
    reach, work = [], [fn]
    while work:
        f = work.pop()
        if f in reach or f in copies:
            continue
        reach.append(f)
        for block in f.blocks:
            for inst in block.instructions:
                work += [v for v in inst.operands if isinstance(v, Function)]
    taken = {f.name for f in module.functions}
    for f in reach:
        name, k = f.name, 0
        while name in taken:
            k += 1
            name = f"{f.name}_{k}"
        taken.add(name)
        ty = f.type
        assert isinstance(ty, FunctionType)
        copy = Function(name, ty)
        copy.attributes = list(f.attributes)
        module.add_function(copy)
        copies[f] = copy
    for f in reach:
        clone_body(f, copies[f], ValueMap({g: copies[g] for g in copies}))
    return copies[fn]


def functions(module: Module) -> Any:
    """The functions of `module` with bodies, as attributes callable from staged code
    (`functions(m).chain(x)`)."""
    table = {f.name: ExternalFunction(f) for f in module.functions if f.blocks}

    class Namespace:
        def __getattr__(self, name: str) -> ExternalFunction:
            try:
                return table[name]
            except KeyError:
                raise AttributeError(f"the module has no function @{name}") from None

    return Namespace()
