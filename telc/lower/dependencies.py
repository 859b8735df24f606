"""The model's declarations as a dependency graph, from the syntax tree alone: what each
declaration uses (through the functions it calls too), the order to compute them in (the
members of a recurrent block together), cycles, and what each entry point needs."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from telc import ast
from telc.lower.walk import ProgramFacts, names_used, walk
from telc.program import Program


class Reporter(Protocol):
    def error(self, span: ast.Span, message: str, details: list[str] | None = None) -> object: ...


class DeclarationGraph:
    """Dependencies between the root file's declarations; cycles are reported as errors."""

    def __init__(self, program: Program, facts: ProgramFacts, report: Reporter) -> None:
        self.root = program.root
        self.facts = facts
        self.report = report

    def refs(self, d: ast.Declaration) -> list[str]:
        """The declarations d's expressions name (not `h[t-1]` of its own block), in order."""
        root = self.root
        block = root.recurrent_of.get(d.name)
        members = {m.name for m in block.declarations} if block else set()
        out: list[str] = []
        exprs = [x for x in (d.value, d.init) if x is not None]
        for x in exprs:
            skip: set[int] = set()
            for n in walk(x):
                if (
                    block is not None
                    and isinstance(n, ast.Index)
                    and isinstance(n.operand, ast.Name)
                    and previous_step(n, block.var)
                    and n.operand.id in members
                ):
                    skip.add(id(n.operand))
                if (
                    isinstance(n, ast.Name)
                    and id(n) not in skip
                    and n.id in root.declarations
                    and n.id not in out
                ):
                    out.append(n.id)
        facts = self.facts.of(root)
        for x in exprs:
            for name in sorted(names_used(x) & set(root.functions)):
                for p in facts.params[name]:
                    if p not in out:
                        out.append(p)
        return out

    def dependency_order(self) -> list[str] | None:
        """Every declaration after those it uses (members of a recurrent block together);
        None after reporting a cycle. A depth-first search that keeps its own stack, so a
        chain of any length of declarations using each other is fine."""
        root = self.root
        state: dict[str, int] = {}  # 1 while being visited, 2 once ordered
        order: list[str] = []
        path: list[str] = []

        def enter(name: str) -> bool | _Visit:
            """The visit of name's unit (itself, or its recurrent block), or its outcome
            when there is nothing to visit: done before, or a cycle (reported)."""
            block = root.recurrent_of.get(name)
            unit = [m.name for m in block.declarations] if block else [name]
            key = unit[0]
            if state.get(key) == 2:
                return True
            if state.get(key) == 1:
                cycle = path[path.index(key) :] + [key] if key in path else [key]
                d = root.declarations[key]
                self.report.error(d.name_span, f"'{name}' depends on itself: " + " -> ".join(cycle))
                return False
            state[key] = 1
            path.append(key)
            inner = set(unit) if block is not None else set()
            deps = (
                dep
                for member in unit
                for dep in self.refs(root.declarations[member])
                if dep not in inner
            )
            return _Visit(key, unit, block, deps)

        ok = True
        for name in root.declarations:
            first = enter(name)
            if isinstance(first, bool):
                ok &= first
                continue
            stack = [first]
            while stack:
                top = stack[-1]
                dep = next(top.deps, None)
                if dep is not None:
                    child = enter(dep)
                    if isinstance(child, bool):
                        top.ok &= child
                    else:
                        stack.append(child)
                    continue
                if top.block is not None:
                    top.ok &= self.block_order(top.block) is not None
                path.pop()
                state[top.key] = 2
                order.extend(top.unit)
                stack.pop()
                if stack:
                    stack[-1].ok &= top.ok
                else:
                    ok &= top.ok
        return order if ok else None

    def block_order(self, block: ast.Recurrent) -> list[ast.Declaration] | None:
        """A recurrent block's declarations in the order one step computes them (a search
        with its own stack, as dependency_order's); None after reporting a cycle."""
        members = {m.name: m for m in block.declarations}
        state: dict[str, int] = {}
        out: list[ast.Declaration] = []

        def enter(m: ast.Declaration) -> bool | None:
            """True if m is done, False after reporting a cycle through it, None if entered."""
            if state.get(m.name) == 2:
                return True
            if state.get(m.name) == 1:
                self.report.error(
                    m.name_span,
                    f"'{m.name}' depends on itself within one step; use {m.name}[{block.var}-1]",
                )
                return False
            state[m.name] = 1
            return None

        def deps(m: ast.Declaration) -> Iterator[ast.Declaration]:
            return iter([members[r] for r in self.refs(m) if r in members])

        for first in block.declarations:
            entered = enter(first)
            if entered is not None:
                if not entered:
                    return None
                continue
            stack = [(first, deps(first))]
            failed = False  # a cycle was found: every member on the stack ends at once
            while stack:
                m, pending = stack[-1]
                dep = None if failed else next(pending, None)
                if dep is not None:
                    entered = enter(dep)
                    if entered is None:
                        stack.append((dep, deps(dep)))
                    elif not entered:
                        failed = True
                    continue
                state[m.name] = 2
                out.append(m)
                stack.pop()
            if failed:
                return None
        return out

    def closure(self, names: list[str]) -> set[str]:
        """The declarations names need, themselves included."""
        seen: set[str] = set()
        root = self.root
        stack = list(names)
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            block = root.recurrent_of.get(n)
            if block is not None:
                stack.extend(m.name for m in block.declarations)
            stack.extend(self.refs(root.declarations[n]))
        return seen

    def objective_refs(self, t: ast.Train) -> list[str]:
        """The declarations a training objective names, directly or through functions."""
        return self.expr_refs(t.objective)

    def expr_refs(self, x: ast.Expr) -> list[str]:
        """The declarations an expression of the model names, directly or through functions."""
        root = self.root
        out = [n.id for n in walk(x) if isinstance(n, ast.Name) and n.id in root.declarations]
        facts = self.facts.of(root)
        for name in sorted(names_used(x) & set(root.functions)):
            out += facts.params[name]
        return out

    def infer_outputs(self) -> list[str]:
        """The outputs `infer` computes: those that need no input only training provides."""
        root = self.root
        outs = [d.name for d in root.declarations.values() if d.role == "out"]
        if not root.trains:
            return outs
        inputs = {d.name for d in root.declarations.values() if d.role == "in"}
        objective_outs = {t.objective.id for t in root.trains if isinstance(t.objective, ast.Name)}
        training = set()
        for t in root.trains:
            training |= self.closure(self.objective_refs(t)) & inputs
        for o in outs:
            if o not in objective_outs:
                training -= self.closure([o])
        return [o for o in outs if not (self.closure([o]) & training)]

    def entry_args(self, names: set[str]) -> tuple[list[str], list[str]]:
        """The inputs and the parameters among names, in declaration order."""
        root = self.root
        inputs = [d.name for d in root.declarations.values() if d.role == "in" and d.name in names]
        params = [
            d.name for d in root.declarations.values() if d.role == "param" and d.name in names
        ]
        return inputs, params

    def stacked(self, name: str) -> bool:
        """Whether `name[*]` appears anywhere in the model."""
        root = self.root
        exprs = [d.value for d in root.declarations.values() if d.value is not None]
        exprs += [t.objective for t in root.trains]
        for x in exprs:
            for n in walk(x):
                if (
                    isinstance(n, ast.Index)
                    and isinstance(n.operand, ast.Name)
                    and n.operand.id == name
                    and any(isinstance(s, ast.Every) for s in n.subscripts)
                ):
                    return True
        return False


@dataclass
class _Visit:
    """A declaration (or recurrent block) being visited by dependency_order: the declarations
    it still has to visit first, and whether those visited so far were free of cycles."""

    key: str
    unit: list[str]
    block: ast.Recurrent | None
    deps: Iterator[str]
    ok: bool = True


def previous_step(e: ast.Index, var: str) -> bool:
    """Whether e is `h[var-1]`."""
    if len(e.subscripts) != 1 or not isinstance(e.subscripts[0], ast.At):
        return False
    x = e.subscripts[0].index
    return (
        isinstance(x, ast.Binary)
        and x.op == "-"
        and isinstance(x.left, ast.Name)
        and x.left.id == var
        and isinstance(x.right, ast.Number)
        and x.right.value == 1
    )
