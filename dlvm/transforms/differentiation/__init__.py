"""The differentiation pass (AD): expands every gradient declaration into adjoint code.

`[gradient @f from S wrt … keeping … seedable] func @g: T` becomes a definition of @g: a copy of
@f's body followed by the reverse sweep (docs/differentiation.md). Calls are differentiated through
generated `@f_grad` functions (seedable, with respect to every float argument), created once per
configuration and expanded in turn, so recursion and mutual recursion close on themselves; a
gradient of a gradient function expands the inner one first. The pass sets the stage to optimizable.
"""

from __future__ import annotations

from typing import ClassVar

from dlvm.diagnostics import Diagnostic, DiagnosticError
from dlvm.ir.typerules import TypeRuleError, gradient_type
from dlvm.ir.types import same_type
from dlvm.ir.values import EXTERN, Function, GradientDecl, Module, fresh_name
from dlvm.transforms.pass_base import Pass

Config = tuple[Function, int | None, tuple[int, ...] | None, tuple[int, ...], bool]


class Differentiation(Pass):
    name: ClassVar[str] = "differentiation"
    alias: ClassVar[str] = "AD"
    summary: ClassVar[str] = "expands gradient declarations into adjoint code"

    def run(self, module: Module) -> bool:
        changed = ModuleDifferentiator(module).run()
        if module.stage == "raw":
            module.stage = "optimizable"
        return changed


class ModuleDifferentiator:
    """The gradient functions of one module: declared ones and those calls need."""

    def __init__(self, module: Module) -> None:
        self.module = module
        self.by_config: dict[Config, Function] = {}
        self.config_of: dict[Function, Config] = {}
        self.expanded: set[Function] = set()
        self.in_progress: list[Function] = []
        self.waiting: list[Function] = []  # gradients waiting for the gradient they differentiate
        self.diagnostics: list[Diagnostic] = []
        for f in module.functions:
            d = f.gradient
            if d is not None:
                self._register(f, (d.of, d.source, d.wrt, d.keeping, d.seedable))

    def _register(self, g: Function, config: Config) -> None:
        self.by_config.setdefault(config, g)
        self.config_of[g] = config

    def run(self) -> bool:
        declared = [f for f in self.module.functions if f.gradient is not None]
        for g in declared:
            self.expand(g)
        if self.diagnostics:
            raise DiagnosticError(self.diagnostics)
        return bool(declared)

    def expand(self, g: Function) -> None:
        """Gives g (a gradient declaration) its body, expanding what it depends on first."""
        decl = g.gradient
        if decl is None or g in self.expanded or g in self.in_progress:
            return
        primal = decl.of
        if primal is g or primal in self.waiting:
            self.diagnostics.append(
                Diagnostic(f"gradient declarations form a cycle through @{primal.name}", g.loc)
            )
            return
        if primal.gradient is not None:
            self.waiting.append(g)
            try:
                self.expand(primal)  # a gradient of a gradient: the inner one first
            finally:
                self.waiting.remove(g)
        if primal.declaration == EXTERN or not primal.blocks:
            self.diagnostics.append(
                Diagnostic(f"cannot differentiate @{primal.name}: it has no body", g.loc)
            )
            return
        try:
            expected = gradient_type(
                primal.type,  # type: ignore[arg-type]
                decl.source,
                decl.wrt,
                decl.keeping,
                decl.seedable,
            )
        except TypeRuleError as e:
            self.diagnostics.append(Diagnostic(f"gradient of @{primal.name}: {e}", g.loc))
            return
        if not same_type(expected, g.type):
            self.diagnostics.append(
                Diagnostic(f"gradient of @{primal.name} must have type {expected}", g.loc)
            )
            return
        from dlvm.transforms.differentiation.function import FunctionDifferentiator

        self.in_progress.append(g)
        g.declaration = None
        try:
            FunctionDifferentiator(self, g, decl).run()
        except DiagnosticError as e:
            self.diagnostics.extend(e.diagnostics)  # report every declaration's problems
        finally:
            self.in_progress.remove(g)
        self.expanded.add(g)

    def gradient_of(
        self, f: Function, source: int | None, wrt: tuple[int, ...], at: Function
    ) -> Function:
        """The seedable gradient of f from `source` with respect to `wrt`, generated (after
        the function `at`) and expanded if it does not exist yet."""
        config: Config = (f, source, wrt, (), True)
        g = self.by_config.get(config)
        if g is None:
            ty = gradient_type(f.type, source, wrt, (), True)  # type: ignore[arg-type]
            taken = {fn.name for fn in self.module.functions}
            g = Function(fresh_name(f.name + "_grad", taken), ty, at.loc)
            g.declaration = GradientDecl(f, source, wrt, (), True)
            self.module.add_function(g, self.module.functions.index(at) + 1)
            self._register(g, config)
            self.expand(g)
        return g
