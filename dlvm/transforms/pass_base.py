"""What a pass is: a whole-word name, a DLVM alias, the stages it may run at, and `run`."""

from __future__ import annotations

from typing import ClassVar

from dlvm.ir.values import STAGES, Function, Module


class Pass:
    """A module transform. `run` returns True when it changed the module."""

    name: ClassVar[str]
    alias: ClassVar[str]
    summary: ClassVar[str] = ""
    stages: ClassVar[tuple[str, ...]] = STAGES

    def run(self, module: Module) -> bool:  # pragma: no cover - every pass overrides
        raise NotImplementedError


class FunctionPass(Pass):
    """A pass applied to each function definition in turn (declarations are skipped).

    `prepare` runs once first, for what the functions share (module-level analyses)."""

    def prepare(self, module: Module) -> None:
        pass

    def run(self, module: Module) -> bool:
        self.prepare(module)
        changed = False
        for fn in list(module.functions):
            if fn.blocks and not fn.is_declaration:
                changed |= self.run_on_function(fn)
        return changed

    def run_on_function(self, fn: Function) -> bool:  # pragma: no cover
        raise NotImplementedError
