"""Classic declarations to entry points: `init` (parameter initialisers), `infer` (the outputs),
one function per `train` (objective, gradient declaration, optimiser per parameter) and one per
`export def`; recurrent blocks as loops; dependency order and cycles."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from dlvm.ir.builder import Builder
from dlvm.ir.types import DataType, FunctionType, TensorType, TupleType, Type
from dlvm.ir.values import Argument, Block, ElementKey, Function, GradientDecl, Successor, Value
from telc import ast
from telc.lower.core import Abort, FnState, Scope, constant, ftype, show
from telc.lower.exprs import BUILTIN_NAMES
from telc.lower.statements import Statements
from telc.lower.values import POISON, TV, Elaborated, FnRef, _Poison
from telc.lower.walk import bound_names, names_used, walk
from telc.program import Unit, suggest
from telc.types import DTYPES, shape_str


@dataclass
class Entry:
    """An entry point of the shipped library and how its IR function's arguments and results
    map onto the model: inputs, parameters, optimiser state, the step count, outputs."""

    name: str
    kind: str  # "init" | "infer" | "train" | "export"
    inputs: list[tuple[str, Type]] = field(default_factory=list)
    params: list[str] = field(default_factory=list)
    states: list[tuple[str, str, Type]] = field(default_factory=list)  # (param, state, type)
    step: Type | None = None
    outputs: list[tuple[str, Type]] = field(default_factory=list)


@dataclass
class Interface:
    """What `telc build` needs besides the IR: the model's parameters and entry points."""

    name: str
    params: list[tuple[str, Type]] = field(default_factory=list)
    entries: list[Entry] = field(default_factory=list)


class Model(Statements):
    """Lowering of a whole program."""

    def lower_program(self) -> Interface:
        root = self.program.root
        self.interface = Interface(root.name)
        self.decl_types: dict[str, Type | None] = {}
        self.param_types: dict[str, Type] = {}
        self.check_declarations()
        order = self.dependency_order()
        entries: list[tuple[Entry, object]] = []
        if self.param_types:
            entries.append((Entry("init", "init"), None))
        outs = self.infer_outputs()
        if outs:
            entries.append((Entry("infer", "infer"), outs))
        for t in root.trains:
            entries.append((Entry(t.name or "train_step", "train"), t))
        for fn in root.functions.values():
            if fn.export:
                entries.append((Entry(fn.name, "export"), fn))
        names = [e.name for e, _ in entries]
        for i, name in enumerate(names):
            if name in names[:i]:
                what = entries[i][1]
                span = what.span if isinstance(what, ast.Node) else root.tree.span
                self.error(span, f"two entry points are named '{name}'", [_clash_hint(entries, i)])
        self.reserved = set(names) | {
            n + "_objective" for e, n in zip(entries, names) if e[0].kind == "train"
        }
        self.interface.params = list(self.param_types.items())
        if self.diags or order is None:
            return self.interface
        for entry, what in entries:
            try:
                if entry.kind == "init":
                    self.lower_init(entry)
                elif entry.kind == "infer":
                    self.lower_infer(entry, what, order)  # type: ignore[arg-type]
                elif entry.kind == "train":
                    self.lower_train(entry, what, order)  # type: ignore[arg-type]
                else:
                    self.lower_export(entry, what)  # type: ignore[arg-type]
            except Abort:
                pass
            self.interface.entries.append(entry)
        self.check_unused(order, entries)
        self.check_functions()
        return self.interface

    @property
    def reserved_names(self) -> list[str]:
        return sorted(getattr(self, "reserved", ()))

    # Declarations ---------------------------------------------------------------------------

    def check_declarations(self) -> None:
        root = self.program.root
        scope = Scope(root)
        for d in root.declarations.values():
            if d.role not in ast.ROLES:
                hint = suggest(d.role, ast.ROLES)
                self.error(
                    d.role_span,
                    f"unknown role '{d.role}'{hint}; a declaration is in, param, hidden or out",
                )
                continue
            in_block = d.name in root.recurrent_of
            if d.role == "in" and d.value is not None:
                self.error(
                    d.value.span,
                    f"input '{d.name}' cannot have a value; inputs are given by the caller",
                )
            if d.role in ("param", "hidden", "out") and d.value is None:
                what = "an initialiser" if d.role == "param" else "a value"
                self.error(d.span, f"{d.role} '{d.name}' needs {what}: {d.name}: {d.role}[…] = …")
            if d.init is not None and not in_block:
                self.error(
                    d.init.span, "'init' gives the value before the first step of a recurrent block"
                )
            if in_block and d.role != "hidden":
                self.error(
                    d.span, f"only hidden declarations can be in a recurrent block, not {d.role}"
                )
            if d.role in ("in", "param") and d.type is None:
                self.error(d.span, f"{d.role} '{d.name}' needs a type: {d.name}: {d.role}[…]")
                continue
            if in_block and d.type is None:
                self.error(
                    d.span,
                    f"'{d.name}' is in a recurrent block and needs a shape: {d.name}: hidden[…]",
                )
                continue
            ty = self.resolve_type(d.type, scope) if d.type is not None else None
            self.decl_types[d.name] = ty
            if d.role == "param" and ty is not None:
                if not isinstance(ty, TensorType) or not ty.dtype.is_float:
                    span = d.type.span if d.type is not None else d.span
                    self.error(
                        span, f"parameter '{d.name}' must be a float tensor, found {show(ty)}"
                    )
                else:
                    self.param_types[d.name] = ty
        for t in root.trains:
            if (
                t.optimizer not in root.functions
                and self.imported(root, t.optimizer, t.optimizer_span) is None
            ):
                names = list(root.functions) + [n for u in root.uses for n in u.functions]
                self.error(
                    t.optimizer_span,
                    f"unknown optimiser '{t.optimizer}'{suggest(t.optimizer, names)}",
                )

    def refs(self, d: ast.Declaration) -> list[str]:
        """The declarations d's expressions name (not `h[t-1]` of its own block), in order."""
        root = self.program.root
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
                    and _previous_step(n, block.var)
                    and n.operand.id in members
                ):
                    skip.add(id(n.operand))
                named = isinstance(n, ast.Name) and id(n) not in skip
                if named and n.id in root.declarations and n.id not in out:  # type: ignore[attr-defined]
                    out.append(n.id)  # type: ignore[attr-defined]
        facts = self.facts_for(root)
        for x in exprs:
            for name in sorted(names_used(x) & set(root.functions)):
                for p in facts.params[name]:
                    if p not in out:
                        out.append(p)
        return out

    def dependency_order(self) -> list[str] | None:
        """Every declaration after those it uses (members of a recurrent block together);
        None after reporting a cycle."""
        root = self.program.root
        state: dict[str, int] = {}
        order: list[str] = []
        path: list[str] = []

        def visit(name: str) -> bool:
            block = root.recurrent_of.get(name)
            unit = [m.name for m in block.declarations] if block else [name]
            key = unit[0]
            if state.get(key) == 2:
                return True
            if state.get(key) == 1:
                cycle = path[path.index(key) :] + [key] if key in path else [key]
                d = root.declarations[key]
                self.error(d.name_span, f"'{name}' depends on itself: " + " -> ".join(cycle))
                return False
            state[key] = 1
            path.append(key)
            ok = True
            inner = set(unit) if block is not None else set()
            for member in unit:
                for dep in self.refs(root.declarations[member]):
                    if dep not in inner:
                        ok &= visit(dep)
            if block is not None:
                ok &= self.block_order(block) is not None
            path.pop()
            state[key] = 2
            order.extend(unit)
            return ok

        ok = True
        for name in root.declarations:
            ok &= visit(name)
        return order if ok else None

    def block_order(self, block: ast.Recurrent) -> list[ast.Declaration] | None:
        """A recurrent block's declarations in the order one step computes them."""
        members = {m.name: m for m in block.declarations}
        state: dict[str, int] = {}
        out: list[ast.Declaration] = []

        def visit(m: ast.Declaration) -> bool:
            if state.get(m.name) == 2:
                return True
            if state.get(m.name) == 1:
                self.error(
                    m.name_span,
                    f"'{m.name}' depends on itself within one step; use {m.name}[{block.var}-1]",
                )
                return False
            state[m.name] = 1
            ok = all(visit(members[r]) for r in self.refs(m) if r in members)
            state[m.name] = 2
            out.append(m)
            return ok

        return out if all(visit(m) for m in block.declarations) else None

    def closure(self, names: list[str]) -> set[str]:
        seen: set[str] = set()
        root = self.program.root
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
        root = self.program.root
        out = [
            n.id for n in walk(t.objective) if isinstance(n, ast.Name) and n.id in root.declarations
        ]
        facts = self.facts_for(root)
        for name in sorted(names_used(t.objective) & set(root.functions)):
            out += facts.params[name]
        return out

    def infer_outputs(self) -> list[str]:
        root = self.program.root
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

    # Entry functions ------------------------------------------------------------------------

    def start_entry(
        self, name: str, args: list[tuple[str, Type]]
    ) -> tuple[Function, list[Argument]]:
        fn = Function(name, FunctionType(tuple(t for _, t in args), TupleType(())))
        self.module.add_function(fn)
        state = FnState(fn, name, None)
        arguments = [Argument(_fresh(n, state.taken), t) for n, t in args]
        block = Block("entry", arguments)
        fn.add_block(block)
        self.fn = state
        self.b = Builder(block)
        return fn, arguments

    def finish_entry(
        self, fn: Function, results: list[TV], span: ast.Span, always_tuple: bool
    ) -> None:
        if any(not isinstance(r, TV) for r in results):
            raise Abort  # a value it returns had an error, already reported
        if len(results) == 1 and not always_tuple:
            value = results[0].ir()
        else:
            value = self.make_tuple(results, span).ir()
        self.emit("return", [value], span)
        fn.type = FunctionType(ftype(fn).arguments, value.type)

    def model_scope(
        self, order: list[str], needed: set[str], args: dict[str, TV], training: bool
    ) -> Scope:
        """Lowers the needed declarations (inputs and parameters given) into a scope."""
        root = self.program.root
        scope = Scope(root, training=training)
        for name, tv in args.items():
            scope.values[name] = tv
            if root.declarations[name].role == "param":
                scope.params[name] = tv
        done: set[int] = set()
        for name in order:
            if name not in needed or name in args:
                continue
            block = root.recurrent_of.get(name)
            if block is not None and id(block) in done:
                continue
            try:
                if block is not None:
                    done.add(id(block))
                    self.lower_recurrent(block, scope)
                else:
                    self.lower_declaration(root.declarations[name], scope)
            except Abort:
                # Reported; what depends on it is skipped silently and the rest is checked.
                for member in (
                    block.declarations if block is not None else [root.declarations[name]]
                ):
                    scope.values[member.name] = POISON
                    scope.values[f"{member.name}[*]"] = POISON
        return scope

    def lower_declaration(self, d: ast.Declaration, scope: Scope) -> TV:
        assert d.value is not None
        tv = self.lower_expr(d.value, scope)
        if isinstance(tv, _Poison):
            raise Abort
        if not isinstance(tv, TV):
            self.error(d.value.span, f"'{d.name}' must be a tensor, found {_describe(tv)}")
            raise Abort
        declared = self.decl_types.get(d.name)
        if declared is not None:
            tv = self.check_declared(d, tv, declared)
        elif tv.weak or tv.value is None:
            tv = TV(tv.ty, tv.ir(), sym=tv.sym)
        self.name_value(tv.value, d.name)
        scope.values[d.name] = tv
        return tv

    def check_declared(self, d: ast.Declaration, tv: TV, declared: Type) -> TV:
        assert d.value is not None and isinstance(declared, TensorType)
        sym = (
            tuple(x.value for x in d.type.shape.dims)
            if isinstance(d.type, ast.TensorType)
            else None
        )
        if isinstance(tv.ty, TensorType) and not tv.weak:
            if tv.ty.shape != declared.shape:
                details = [f"  declared {shape_str(sym or declared.shape)}"]
                named = [
                    f"{n} = {v}" for n, v in zip(sym or (), declared.shape) if isinstance(n, str)
                ]
                if named:
                    details[0] += "     (" + ", ".join(dict.fromkeys(named)) + ")"
                details.append(f"  value    {shape_str(tv.ty.shape)}")
                self.error(
                    d.value.span,
                    f"'{d.name}' is declared {shape_str(sym or declared.shape)} but its value "
                    f"has shape {shape_str(tv.ty.shape)}",
                    details,
                )
                raise Abort
            if tv.ty.dtype is not declared.dtype:
                self.error(
                    d.value.span,
                    f"'{d.name}' is declared {show(declared)} but its value is {show(tv.ty)}",
                )
                raise Abort
        v = self.coerce(tv, declared, d.value.span, f"'{d.name}'")
        if isinstance(v, _Poison):
            raise Abort
        return TV(declared, v, sym=sym)

    def entry_args(self, names: set[str]) -> tuple[list[str], list[str]]:
        root = self.program.root
        inputs = [d.name for d in root.declarations.values() if d.role == "in" and d.name in names]
        params = [
            d.name for d in root.declarations.values() if d.role == "param" and d.name in names
        ]
        return inputs, params

    def lower_infer(self, entry: Entry, outs: list[str], order: list[str]) -> None:
        needed = self.closure(outs)
        inputs, params = self.entry_args(needed)
        args = [(n, self.decl_types[n]) for n in inputs + params]
        fn, arguments = self.start_entry(entry.name, args)  # type: ignore[arg-type]
        entry.inputs = [(n, self.decl_types[n]) for n in inputs]  # type: ignore[misc]
        entry.params = params
        given = {n: TV(a.type, a, sym=self.decl_sym(n)) for n, a in zip(inputs + params, arguments)}
        scope = self.model_scope(order, needed, given, training=False)
        results = [scope.values[o] for o in outs]
        entry.outputs = [(o, r.ty) for o, r in zip(outs, results) if isinstance(r, TV)]
        self.finish_entry(fn, results, self.program.root.tree.span, always_tuple=False)  # type: ignore[arg-type]

    def decl_sym(self, name: str) -> tuple | None:
        d = self.program.root.declarations[name]
        if isinstance(d.type, ast.TensorType) and d.type.shape.rest is None:
            return tuple(x.value for x in d.type.shape.dims)
        return None

    def lower_init(self, entry: Entry) -> None:
        root = self.program.root
        fn, _ = self.start_entry(entry.name, [])
        results = []
        for name, ty in self.param_types.items():
            d = root.declarations[name]
            assert d.value is not None
            used = [r for r in self.refs(d) if r in root.declarations]
            if used:
                self.error(
                    d.value.span,
                    f"the initialiser of '{name}' uses '{used[0]}'; initialisers are constants, "
                    "random(…), normal(…), glorot() or he()",
                )
                raise Abort
            scope = Scope(root)
            scope.values["<declared shape>"] = TV(ty)
            tv = self.lower_expr(d.value, scope)
            if isinstance(tv, _Poison):
                raise Abort
            if not isinstance(tv, TV):
                self.error(
                    d.value.span, f"'{name}' needs a tensor initialiser, found {_describe(tv)}"
                )
                raise Abort
            tv = self.check_declared(d, tv, ty)
            self.name_value(tv.value, name)
            results.append(tv)
        entry.outputs = [(n, t) for n, t in self.param_types.items()]
        self.finish_entry(fn, results, root.tree.span, always_tuple=True)

    # Recurrence -----------------------------------------------------------------------------

    def lower_recurrent(self, block: ast.Recurrent, scope: Scope) -> None:
        lo_c, hi_c = self.constant_of(block.lo, scope), self.constant_of(block.hi, scope)
        if lo_c is None or hi_c is None:
            raise Abort
        if (
            not all(isinstance(c, int) and not isinstance(c, bool) for c in (lo_c, hi_c))
            or hi_c <= lo_c
        ):
            self.error(
                block.lo.span.to(block.hi.span),
                f"a recurrent block needs integer steps lo..hi with lo < hi, found {lo_c}..{hi_c}",
            )
            raise Abort
        lo, hi = int(lo_c), int(hi_c)
        members = self.block_order(block)
        assert members is not None
        stacked = [m.name for m in block.declarations if self.stacked(m.name)]
        types: dict[str, TensorType] = {}
        for m in block.declarations:
            ty = self.decl_types[m.name]
            if not isinstance(ty, TensorType):
                raise Abort
            types[m.name] = ty
        span = block.span
        inits = []
        for m in block.declarations:
            ty = types[m.name]
            assert isinstance(ty, TensorType)
            if m.init is not None:
                tv = self.lower_expr(m.init, scope)
                if not isinstance(tv, TV):
                    raise Abort
                v = self.coerce(tv, ty, m.init.span, f"the init of '{m.name}'")
                if isinstance(v, _Poison):
                    raise Abort
                inits.append(v)
            else:
                inits.append(self.splat(0, ty, span))
        stack_types = [TensorType((hi - lo,) + types[n].shape, types[n].dtype) for n in stacked]
        stacks = [self.splat(0, t, span) for t in stack_types]
        counter = TensorType((), DataType.I64)
        header_args: list[tuple[str, Type]] = [(block.var, counter)]
        header_args += [(m.name + "_prev", types[m.name]) for m in block.declarations]
        header_args += [(n + "_steps", t) for n, t in zip(stacked, stack_types)]
        header = self.new_block("recurrent_" + block.var, header_args)
        body, exit_ = self.new_block(block.var + "_step"), self.new_block(block.var + "_done")
        const = TV(counter, weak=True, const=lo).ir(DataType.I64)
        self.emit("branch", [], span, dest=Successor(header, [const, *inits, *stacks]))
        self.b.at_end(header)
        t = header.arguments[0]
        n_members = len(block.declarations)
        prevs = header.arguments[1 : 1 + n_members]
        stack_args = header.arguments[1 + n_members :]
        more = self.emit("lessThan", [t, TV(counter, weak=True, const=hi).ir(DataType.I64)], span)
        self.emit(
            "conditional", [more], span, then_=Successor(body, []), else_=Successor(exit_, [])
        )
        self.b.at_end(body)
        inner = scope.child()
        inner.values[block.var] = TV(counter, t)
        for m, p in zip(block.declarations, prevs):
            inner.values[f"{m.name}[{block.var}-1]"] = TV(p.type, p, sym=self.decl_sym(m.name))
        for m in members:
            self.lower_declaration(m, inner)
        step: Value = t
        if lo:
            step = self.emit(
                "subtract", [t, TV(counter, weak=True, const=lo).ir(DataType.I64)], span
            )
        new_stacks = []
        for n, s in zip(stacked, stack_args):
            member = inner.values[n]
            assert isinstance(member, TV)
            new_stacks.append(
                self.emit("insert", [member.ir(), s], span, keys=(ElementKey(value=step),))
            )
        nxt = self.emit("add", [t, TV(counter, weak=True, const=1).ir(DataType.I64)], span)
        values = [inner.values[m.name].ir() for m in block.declarations]  # type: ignore[union-attr]
        self.emit("branch", [], span, dest=Successor(header, [nxt, *values, *new_stacks]))
        self.b.at_end(exit_)
        for m, p in zip(block.declarations, prevs):
            scope.values[m.name] = TV(p.type, p, sym=self.decl_sym(m.name))
        for n, s in zip(stacked, stack_args):
            scope.values[f"{n}[*]"] = TV(s.type, s)

    def stacked(self, name: str) -> bool:
        """Whether `name[*]` appears anywhere in the model."""
        root = self.program.root
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

    def recurrent_index(self, e: ast.Index, scope: Scope) -> Elaborated | None:
        if not isinstance(e.operand, ast.Name):
            return None
        name = e.operand.id
        root = self.program.root
        block = root.recurrent_of.get(name)
        if block is None or scope.unit is not root:
            return None
        if len(e.subscripts) == 1 and isinstance(e.subscripts[0], ast.Every):
            tv = scope.values.get(f"{name}[*]")
            return (
                tv
                if tv is not None
                else self.error(e.span, f"'{name}[*]' is only available after its recurrent block")
            )
        if _previous_step(e, block.var):
            tv = scope.values.get(f"{name}[{block.var}-1]")
            if tv is None:
                return self.error(
                    e.span, f"'{name}[{block.var}-1]' is only available inside its recurrent block"
                )
            return tv
        sub = e.subscripts[0]
        if (
            len(e.subscripts) == 1
            and isinstance(sub, ast.At)
            and f"{name}[{block.var}-1]" in scope.values
        ):
            return self.error(
                e.span,
                f"inside its block, '{name}' can be read as {name} (this step) or "
                f"{name}[{block.var}-1] (the previous one)",
            )
        return None

    # Training -------------------------------------------------------------------------------

    def lower_train(self, entry: Entry, t: ast.Train, order: list[str]) -> None:
        root = self.program.root
        needed = self.closure(self.objective_refs(t))
        inputs, _ = self.entry_args(needed)
        params = [n for n in self.param_types]
        in_types = [(n, self.decl_types[n]) for n in inputs]
        p_types = [(n, self.param_types[n]) for n in params]
        # The objective, a function of the inputs and every parameter.
        obj, arguments = self.start_entry(entry.name + "_objective", in_types + p_types)  # type: ignore[arg-type]
        given = {n: TV(a.type, a, sym=self.decl_sym(n)) for n, a in zip(inputs + params, arguments)}
        scope = self.model_scope(order, needed, given, training=True)
        loss = self.lower_expr(t.objective, scope)
        if isinstance(loss, _Poison):
            raise Abort
        if (
            not isinstance(loss, TV)
            or not isinstance(loss.ty, TensorType)
            or loss.ty.shape
            or not loss.ty.dtype.is_float
        ):
            self.error(
                t.objective.span,
                f"the training objective must be a float scalar, found {_describe(loss)}",
            )
            raise Abort
        self.finish_entry(obj, [loss], t.objective.span, always_tuple=False)
        # Its gradient with respect to every parameter, keeping the loss.
        n_in = len(inputs)
        wrt = tuple(range(n_in, n_in + len(params)))
        from dlvm.ir.typerules import gradient_type

        gty = gradient_type(ftype(obj), None, wrt, (0,), False)
        grad = Function(_fresh(obj.name + "_grad", {f.name for f in self.module.functions}), gty)
        grad.declaration = GradientDecl(obj, None, wrt, (0,), False)
        self.module.add_function(grad)
        # The optimiser.
        opt = self.optimizer(t)
        states, step_type, hypers = opt
        fn_ast, unit = self.optimizer_ref(t)
        args = in_types + p_types
        state_args = [(f"{p}_{s}", ty) for p, ty in p_types for s in states]
        args = args + state_args  # type: ignore[operator]
        if step_type is not None:
            args = args + [("step", step_type)]
        fn, arguments = self.start_entry(entry.name, args)  # type: ignore[arg-type]
        entry.inputs = in_types  # type: ignore[assignment]
        entry.params = params
        entry.states = [(p, s, ty) for p, ty in p_types for s in states]
        entry.step = step_type
        span = t.span
        r = self.emit("apply", [grad, *arguments[: n_in + len(params)]], span)
        loss_v = self.emit("extract", [r], span, keys=(ElementKey(index=len(params)),))
        self.name_value(loss_v, "loss")
        new_params: list[TV] = []
        new_states: list[TV] = []
        step_tv = TV(step_type, arguments[-1]) if step_type is not None else None
        for i, (p, ty) in enumerate(p_types):
            w = TV(ty, arguments[n_in + i])
            g = self.emit("extract", [r], span, keys=(ElementKey(index=i),))
            self.name_value(g, "d" + p)
            base = n_in + len(params) + i * len(states)
            st = [TV(ty, arguments[base + j]) for j in range(len(states))]
            call_args, spans = self.optimizer_args(fn_ast, w, TV(ty, g), st, step_tv, hypers, t)
            out = self.call_with(
                FnRef(fn_ast, unit), call_args, spans, t.optimizer_span,
                Scope(root, training=True, paramless="an optimiser sees only the parameter it"
                      " updates, its gradient and its state"),
            )  # fmt: skip
            if not isinstance(out, TV):
                raise Abort
            if states:
                if not isinstance(out.ty, TupleType) or len(out.ty.elements) != 1 + len(states):
                    self.error(
                        t.optimizer_span,
                        f"optimiser '{t.optimizer}' must return (weight, {len(states)} state "
                        "tensors)",
                    )
                    raise Abort
                parts = [
                    self.emit("extract", [out.ir()], span, keys=(ElementKey(index=k),))
                    for k in range(1 + len(states))
                ]
                new_params.append(TV(parts[0].type, parts[0]))
                new_states.extend(TV(v.type, v) for v in parts[1:])
            else:
                new_params.append(out)
            self.name_value(new_params[-1].value, p)
        entry.outputs = [("loss", loss_v.type)] + [(p, ty) for p, ty in p_types]
        entry.outputs += [(f"{p}_{s}", ty) for p, ty in p_types for s in states]
        self.finish_entry(
            fn, [TV(loss_v.type, loss_v), *new_params, *new_states], span, always_tuple=True
        )

    def optimizer_ref(self, t: ast.Train) -> tuple[ast.Function, object]:
        root = self.program.root
        if t.optimizer in root.functions:
            return root.functions[t.optimizer], root
        imp = self.imported(root, t.optimizer, t.optimizer_span)
        assert isinstance(imp, tuple)
        return imp[1], imp[0]

    def optimizer(self, t: ast.Train) -> tuple[list[str], Type | None, dict[str, TV]]:
        """The optimiser's state names, the type of its step argument, and the hyper-parameter
        values of `using OPT(…)`."""
        fn, unit = self.optimizer_ref(t)
        ps = fn.parameters
        bad = len(ps) < 2 or not all(_is_rest(p.type) for p in ps[:2])
        if bad:
            self.error(
                t.optimizer_span,
                f"'{t.optimizer}' is not an optimiser: it must start (w: [S...], g: [S...], …)",
            )
            raise Abort
        rest = ps[0].type.shape.rest  # type: ignore[union-attr]
        states = []
        hyper_params = []
        step_type: Type | None = None
        for p in ps[2:]:
            if _is_rest(p.type) and p.type.shape.rest == rest:  # type: ignore[union-attr]
                states.append(p.name)
            elif p.name == "step":
                step_type = None
                scope = Scope(unit, dtype_var=next(iter(self.param_types.values())).dtype)  # type: ignore[arg-type,attr-defined]
                step_type = self.resolve_type(p.type, scope)
            else:
                hyper_params.append(p)
        hypers: dict[str, TV] = {}
        names = [p.name for p in hyper_params]
        for a in t.arguments:
            if not isinstance(a, ast.Keyword):
                self.error(
                    a.span,
                    f"give the hyper-parameters of '{t.optimizer}' by name ({', '.join(names)})",
                )
                raise Abort
            if a.name not in names:
                self.error(
                    a.span,
                    f"'{t.optimizer}' has no hyper-parameter '{a.name}'{suggest(a.name, names)}",
                )
                raise Abort
            v = self.lower_expr(
                a.value, Scope(self.program.root, paramless=constant(f"hyper-parameter {a.name}"))
            )
            if not isinstance(v, TV):
                raise Abort  # already reported
            if v.const is None:
                self.error(a.value.span, "a hyper-parameter must be a number known at compile time")
                raise Abort
            hypers[a.name] = v
        for p in hyper_params:
            if p.name not in hypers and p.default is None:
                self.error(t.span, f"'{t.optimizer}' needs the hyper-parameter '{p.name}'")
                raise Abort
        return states, step_type, hypers

    def optimizer_args(
        self,
        fn: ast.Function,
        w: TV,
        g: TV,
        states: list[TV],
        step: TV | None,
        hypers: dict[str, TV],
        t: ast.Train,
    ):
        args, spans = [w, g], [t.optimizer_span, t.optimizer_span]
        it = iter(states)
        for p in fn.parameters[2:]:
            if p.name in hypers:
                args.append(hypers[p.name])
            elif p.name == "step" and step is not None:
                args.append(step)
            elif _is_rest(p.type):
                args.append(next(it))
            else:
                assert p.default is not None
                fixed = constant(f"the default of hyper-parameter {p.name}")
                d = self.lower_expr(p.default, Scope(self.program.root, paramless=fixed))
                if not isinstance(d, TV):
                    raise Abort
                args.append(d)
            spans.append(t.optimizer_span)
        return args, spans

    # Exports and the rest ---------------------------------------------------------------------

    def lower_export(self, entry: Entry, fn: ast.Function) -> None:
        root = self.program.root
        scope = Scope(root)
        types = []
        for p in fn.parameters:
            ty = self.resolve_type(p.type, scope)
            if ty is None:
                self.error(
                    p.span,
                    f"exported function '{fn.name}' needs concrete types (dims declared with "
                    "'dim')",
                )
                raise Abort
            types.append(ty)
        facts = self.facts_for(root)
        params = facts.params[fn.name]
        entry.inputs = [(p.name, t) for p, t in zip(fn.parameters, types)]
        entry.params = params
        cs = Scope(root, dtype_var=root.dtype)
        inst = self.instance(FnRef(fn, root), types, cs, fn.span, force_name=fn.name)
        if inst is not None and inst.result is not None:
            entry.outputs = [("result", inst.result)]

    def check_unused(self, order: list[str], entries: list) -> None:
        """Checks the declarations no entry point needs (in a function that is then dropped),
        so that `telc check` reports their errors too."""
        root = self.program.root
        covered: set[str] = set()
        for entry, what in entries:
            if entry.kind == "infer":
                covered |= self.closure(what)
            elif entry.kind == "train":
                covered |= self.closure(self.objective_refs(what))
        rest = [n for n in order if n not in covered]
        rest = [n for n in rest if root.declarations[n].role not in ("in", "param")]
        if not rest:
            return
        needed = self.closure(rest)
        inputs, params = self.entry_args(needed)
        args = [(n, self.decl_types[n]) for n in inputs + params]
        if any(t is None for _, t in args):
            return
        before = len(self.module.functions)
        fn, arguments = self.start_entry("unused", args)  # type: ignore[arg-type]
        given = {n: TV(a.type, a, sym=self.decl_sym(n)) for n, a in zip(inputs + params, arguments)}
        with contextlib.suppress(Abort):
            self.model_scope(order, needed, given, training=False)
        self.drop_functions_from(before)

    def drop_functions_from(self, index: int) -> None:
        """Removes the functions created after `index` (compiled only to be checked)."""
        dropped = self.module.functions[index:]
        for f in dropped:
            self.module.remove_function(f)
        ids = {id(f) for f in dropped}
        for key in [k for k, inst in self.instances.items() if id(inst.ir) in ids]:
            del self.instances[key]

    def check_functions(self) -> None:
        """Compiles every function of the model's file whose signature has no dimension
        variables (open element types take the module's), so `telc check` reports errors in
        functions nothing calls yet; what only this needed is then dropped."""
        root = self.program.root
        before = len(self.module.functions)
        for fn in root.functions.values():
            if fn.export:
                continue
            scope = Scope(root, dtype_var=root.dtype)
            types = []
            for p in fn.parameters:
                if not isinstance(p.type, ast.ScalarType | ast.TensorType) or _open(p.type, root):
                    break
                saved = len(self.diags)
                ty = self.resolve_type(p.type, scope)
                del self.diags[saved:]
                if ty is None:
                    break
                types.append(ty)
            else:
                with contextlib.suppress(Abort):
                    self.instance(
                        FnRef(fn, root), types, Scope(root, dtype_var=root.dtype), fn.span
                    )
                continue
            if not any(key[0] == id(fn) for key in self.instances):
                self.check_names(fn, root)
        self.drop_functions_from(before)

    def check_names(self, fn: ast.Function, unit: Unit) -> None:
        """Reports the unknown names of a generic function no call has compiled (its shapes
        are checked only once a call binds them)."""
        signature = [*fn.parameters, *([fn.result] if fn.result is not None else [])]
        dims = {d.value for s in signature for d in walk(s) if isinstance(d, ast.Dim)}
        rests = {s.rest for p in signature for s in walk(p) if isinstance(s, ast.Shape)}
        known = bound_names(fn) | set(self.visible_names(Scope(unit))) | BUILTIN_NAMES
        known |= set(DTYPES) | {d for d in dims | rests if isinstance(d, str)}
        for n in walk(fn.body):
            if isinstance(n, ast.Name) and n.id not in known:
                self.error(n.span, f"unknown name '{n.id}'{suggest(n.id, known)}")


def _open(spec: ast.ScalarType | ast.TensorType, unit) -> bool:
    if isinstance(spec, ast.ScalarType):
        return False
    if spec.shape.rest is not None:
        return True
    return any(isinstance(d.value, str) and d.value not in unit.dims for d in spec.shape.dims)


def _is_rest(spec: ast.TypeSpec) -> bool:
    return isinstance(spec, ast.TensorType) and spec.shape.rest is not None


def _previous_step(e: ast.Index, var: str) -> bool:
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


def _describe(x: Elaborated) -> str:
    from telc.lower.exprs import describe

    return describe(x)


def _fresh(name: str, taken: set[str]) -> str:
    from dlvm.ir.values import fresh_name

    return fresh_name(name, taken)


__all__ = ["POISON", "Entry", "Interface", "Model"]


def _clash_hint(entries: list[tuple[Entry, object]], i: int) -> str:
    """How to resolve the clash of entries[i] with an earlier entry of the same name."""
    entry = entries[i][0]
    first = next(e for e, _ in entries if e.name == entry.name)
    generated = {"init": "the model has parameters", "infer": "the model has outputs"}
    if first.kind in generated:
        return (f"'{entry.name}' is generated because {generated[first.kind]}; "
                "rename the function")  # fmt: skip
    if first.kind == "train":
        return "name the train: train NAME minimizing …"
    return "rename one of them"
