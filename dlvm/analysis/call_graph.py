"""The call graph of a module: which functions each function refers to, its strongly connected
components in bottom-up order (callees before callers), and which functions are recursive.

An edge f → g means f's body names g anywhere (an `apply @g`, a combinator `by @g`, or `@g`
passed on as a value), and a body-less gradient declaration refers to its primal, so a cycle
through a function value counts as recursion: the graph over-approximates who may call whom.
"""

from __future__ import annotations

from dlvm.ir.values import Function, Module


def referenced_functions(fn: Function) -> list[Function]:
    """The functions fn's body (or, for a body-less gradient declaration, its primal) refers
    to, each once, in order of first reference."""
    out: dict[Function, None] = {}
    if fn.gradient is not None and not fn.blocks:
        out[fn.gradient.of] = None
    for inst in fn.instructions():
        for v in inst.uses():
            if isinstance(v, Function):
                out[v] = None
    return list(out)


class CallGraph:
    """Edges between the module's functions (references to functions of other modules are
    left out) and their strongly connected components."""

    def __init__(self, module: Module) -> None:
        members = set(module.functions)
        self.callees: dict[Function, list[Function]] = {
            f: [g for g in referenced_functions(f) if g in members] for f in module.functions
        }
        self.components: list[list[Function]] = _components(module.functions, self.callees)
        self._component = {f: i for i, c in enumerate(self.components) for f in c}

    def component(self, fn: Function) -> int:
        """The index of fn's component in `components` (bottom-up order)."""
        return self._component[fn]

    def is_recursive(self, fn: Function) -> bool:
        """Whether fn may reach itself: it refers to itself or shares a cycle with others."""
        return fn in self.callees[fn] or len(self.components[self._component[fn]]) > 1


def _components(
    functions: list[Function], callees: dict[Function, list[Function]]
) -> list[list[Function]]:
    """Tarjan's algorithm without recursion: components in the order they complete, which puts
    every component after the ones it calls; deterministic for a given function order."""
    index: dict[Function, int] = {}
    low: dict[Function, int] = {}
    on_stack: set[Function] = set()
    stack: list[Function] = []
    out: list[list[Function]] = []
    for root in functions:
        if root in index:
            continue
        work: list[tuple[Function, int]] = [(root, 0)]
        while work:
            f, i = work.pop()
            if i == 0:
                index[f] = low[f] = len(index)
                stack.append(f)
                on_stack.add(f)
            succ = callees[f]
            if i < len(succ):
                work.append((f, i + 1))
                g = succ[i]
                if g not in index:
                    work.append((g, 0))
                elif g in on_stack:
                    low[f] = min(low[f], index[g])
                continue
            if low[f] == index[f]:
                component: list[Function] = []
                while True:
                    g = stack.pop()
                    on_stack.discard(g)
                    component.append(g)
                    if g is f:
                        break
                out.append(component[::-1])
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[f])
    return out
