"""Syntax-tree queries that need no types: sub-node walks, the names a function binds, the
module parameters a function reads (through calls), and whether it reads `training`."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from telc import ast
from telc.program import Program, Unit


def children(node: object) -> Iterator[object]:
    """The direct sub-nodes of an AST node (through tuples)."""
    if not dataclasses.is_dataclass(node):
        return
    for f in dataclasses.fields(node):
        if f.name == "span" or f.name.endswith("_span"):
            continue
        value = getattr(node, f.name)
        if isinstance(value, ast.Node):
            yield value
        elif isinstance(value, tuple):
            for v in value:
                if isinstance(v, ast.Node):
                    yield v


def walk(node: object) -> Iterator[object]:
    """node and every node below it, depth first."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(list(children(n))))


def names_used(node: object) -> set[str]:
    return {n.id for n in walk(node) if isinstance(n, ast.Name)}


def bound_names(fn: ast.Function) -> set[str]:
    """Every name a function binds: its parameters, lets, vars and loop counters."""
    names = {p.name for p in fn.parameters}
    for n in walk(fn.body):
        if isinstance(n, ast.Let | ast.Var):
            names.add(n.name)
        elif isinstance(n, ast.LetTuple):
            names.update(n.names)
        elif isinstance(n, ast.ForStatement):
            names.add(n.var)
    return names


def assigned_names(block: ast.Block) -> list[str]:
    """Names assigned with `x = e` anywhere in a block, in order of first assignment."""
    out: list[str] = []
    for n in walk(block):
        if isinstance(n, ast.Assign) and n.name not in out:
            out.append(n.name)
    return out


class FunctionFacts:
    """For the functions of one file: the module parameters each reads (directly or through the
    functions it calls or differentiates), whether it reads `training` and whether it draws
    random numbers, as fixpoints over the call graph, so recursion is handled."""

    def __init__(
        self,
        functions: dict[str, ast.Function],
        params: list[str],
        imported_training: set[str] | frozenset[str] = frozenset(),
        imported_random: set[str] | frozenset[str] = frozenset(),
    ) -> None:
        self.params: dict[str, list[str]] = {}
        self.training: dict[str, bool] = {}
        self.random: dict[str, bool] = {}  # draws random numbers (random, normal), maybe in callees
        direct: dict[str, set[str]] = {}
        calls: dict[str, set[str]] = {}
        for name, fn in functions.items():
            used = names_used(fn.body) - bound_names(fn)
            direct[name] = used & set(params)
            calls[name] = used & set(functions)
            self.training[name] = "training" in used or bool(used & imported_training)
            self.random[name] = bool(used & {"random", "normal"}) or bool(used & imported_random)
        changed = True
        while changed:
            changed = False
            for name in functions:
                for callee in calls[name]:
                    if not direct[callee] <= direct[name]:
                        direct[name] |= direct[callee]
                        changed = True
                    if self.training[callee] and not self.training[name]:
                        self.training[name] = True
                        changed = True
                    if self.random[callee] and not self.random[name]:
                        self.random[name] = True
                        changed = True
        order = {p: i for i, p in enumerate(params)}
        for name in functions:
            self.params[name] = sorted(direct[name], key=order.__getitem__)


class ProgramFacts:
    """The FunctionFacts of each file of a program, computed when first asked for (a file's
    facts include what the functions it imports do)."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self._facts: dict[int, FunctionFacts] = {}

    def of(self, unit: Unit) -> FunctionFacts:
        facts = self._facts.get(id(unit))
        if facts is None:
            imported_training = {
                name for u in unit.uses for name in u.functions if self.of(u).training[name]
            }
            imported_random = {
                name for u in unit.uses for name in u.functions if self.of(u).random[name]
            }
            params = (
                [d.name for d in unit.declarations.values() if d.role in ("param", "buffer")]
                if unit is self.program.root
                else []
            )
            facts = FunctionFacts(unit.functions, params, imported_training, imported_random)
            self._facts[id(unit)] = facts
        return facts
