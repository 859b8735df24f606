"""A whole program lowered: the parts of the lowering wired together, and the model's entry
points planned and built: `init` (parameter initialisers), `infer` (the outputs), one function
per `train` and one per `export def`; then what no entry point needs is checked too."""

from __future__ import annotations

import contextlib

from dlvm.ir.types import TupleType, Type
from telc import ast
from telc.lower.builtins import BUILTINS
from telc.lower.calls import CallLowerer
from telc.lower.context import Abort, Context, Scope
from telc.lower.declarations import DeclarationLowerer
from telc.lower.dependencies import DeclarationGraph
from telc.lower.entries import (
    Entry,
    Interface,
    drop_unread_arguments,
    export_outputs,
    finish_entry,
    start_entry,
)
from telc.lower.exprs import ExprLowerer
from telc.lower.gradients import GradsLowerer
from telc.lower.instances import Instances
from telc.lower.resolve import Resolver
from telc.lower.statements import StatementLowerer
from telc.lower.tensor_ops import TensorOps
from telc.lower.train import TrainLowerer
from telc.lower.values import POISON, TV, Elaborated, FnRef, _Poison, describe, show
from telc.lower.walk import bound_names, walk
from telc.program import Program, Unit, stdlib_help, suggest
from telc.types import DTYPES

# What an entry point is made from: nothing (init), the outputs (infer), a train, a def.
Source = None | list[str] | ast.Train | ast.Function


class Model:
    """The lowering of one program."""

    def __init__(self, program: Program, distributed: bool = False) -> None:
        self.program = program
        self.cx = cx = Context(program, distributed)
        self.resolve = Resolver(cx)
        self.ops = TensorOps(cx)
        self.exprs = ExprLowerer(cx, self.resolve, self.ops)
        self.statements = StatementLowerer(cx, self.exprs, self.resolve)
        self.instances = Instances(cx, self.exprs, self.resolve, self.statements)
        self.calls = CallLowerer(cx, self.exprs, self.resolve, self.instances)
        self.resolve.connect(self.exprs)  # dims and consts are expressions,
        self.exprs.connect(self.calls)  # and calls are expressions
        self.graph = DeclarationGraph(program, cx.facts, cx)
        self.decls = DeclarationLowerer(cx, self.exprs, self.resolve, self.graph)
        self.train = TrainLowerer(cx, self.exprs, self.resolve, self.calls, self.decls, self.graph)
        self.grads = GradsLowerer(cx, self.exprs, self.train)

    def lower_program(self) -> Interface:
        cx = self.cx
        root = self.program.root
        interface = Interface(root.name)
        self.resolve.check_constants(root)
        self.decls.check_declarations()
        self.check_optimizers()
        self.train.check_updates()
        order = self.graph.dependency_order()
        entries: list[tuple[Entry, Source]] = []
        if cx.param_types:
            entries.append((Entry("init", "init"), None))
        outs = self.graph.infer_outputs()
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
                cx.error(span, f"two entry points are named '{name}'", [_clash_hint(entries, i)])
        cx.reserved = set(names) | {
            n + "_objective"
            for (e, what), n in zip(entries, names)
            if e.kind == "train" or (isinstance(what, ast.Function) and what.bare)
        }
        interface.params = list(cx.param_types.items())
        interface.buffers = [n for n in cx.param_types if n in cx.buffers]
        if order is None:
            return interface
        if cx.diags:
            self.check_after_errors(order)
            return interface
        for entry, what in entries:
            try:
                match what:
                    case None:
                        self.lower_init(entry)
                    case list():
                        self.lower_infer(entry, what, order)
                    case ast.Train():
                        self.train.lower_train(entry, what, order)
                    case ast.Function() if what.bare:
                        self.grads.lower_grads(entry, what, order)
                    case ast.Function():
                        self.lower_export(entry, what)
            except Abort:
                pass
            interface.entries.append(entry)
        self.check_unused(order, entries)
        self.check_functions()
        return interface

    def check_optimizers(self) -> None:
        """Every train's optimiser is a def of the model's file or of a module it uses."""
        root = self.program.root
        for t in root.trains:
            if (
                t.optimizer not in root.functions
                and self.resolve.imported(root, t.optimizer, t.optimizer_span) is None
            ):
                names = list(root.functions) + [n for u in root.uses for n in u.functions]
                helps = stdlib_help(t.optimizer)
                hint = "" if helps else suggest(t.optimizer, names)
                self.cx.error(t.optimizer_span, f"unknown optimiser '{t.optimizer}'{hint}", helps)

    # Entry functions ------------------------------------------------------------------------

    def lower_init(self, entry: Entry) -> None:
        cx = self.cx
        root = self.program.root
        fn, _ = start_entry(cx, entry.name, [])
        results = []
        for name, ty in cx.param_types.items():
            d = root.declarations[name]
            assert d.value is not None
            used = [r for r in self.graph.refs(d) if r in root.declarations]
            if used:
                cx.error(
                    d.value.span,
                    f"the initialiser of '{name}' uses '{used[0]}'; initialisers are constants, "
                    "random(…), normal(…), glorot() or he()",
                )
                raise Abort
            scope = Scope(root)
            scope.values["<declared shape>"] = TV(ty)
            tv = self.exprs.lower_expr(d.value, scope)
            if isinstance(tv, _Poison):
                raise Abort
            if not isinstance(tv, TV):
                cx.error(d.value.span, f"'{name}' needs a tensor initialiser, found {describe(tv)}")
                raise Abort
            tv = self.decls.check_declared(d, tv, ty)
            cx.name_value(tv.value, name)
            results.append(tv)
        entry.outputs = [(n, t) for n, t in cx.param_types.items()]
        finish_entry(cx, self.ops, fn, results, root.tree.span, always_tuple=True)

    def lower_infer(self, entry: Entry, outs: list[str], order: list[str]) -> None:
        needed = self.graph.closure(outs)
        inputs, params = self.graph.entry_args(needed)
        args = [(n, self.decls.declared_type(n)) for n in inputs + params]
        fn, arguments = start_entry(self.cx, entry.name, args)
        entry.inputs = args[: len(inputs)]
        entry.params = params
        given = {
            n: TV(a.type, a, sym=self.decls.decl_sym(n)) for n, a in zip(inputs + params, arguments)
        }
        scope = self.decls.model_scope(order, needed, given, training=False)
        results = [scope.values[o] for o in outs]
        entry.outputs = [(o, r.ty) for o, r in zip(outs, results) if isinstance(r, TV)]
        finish_entry(
            self.cx, self.ops, fn, results, self.program.root.tree.span, always_tuple=False
        )
        kept = drop_unread_arguments(fn, len(args))
        entry.inputs = [args[i] for i in kept if i < len(inputs)]
        entry.params = [args[i][0] for i in kept if i >= len(inputs)]

    def lower_export(self, entry: Entry, fn: ast.Function) -> None:
        root = self.program.root
        scope = Scope(root)
        types = []
        for p in fn.parameters:
            ty = self.resolve.resolve_type(p.type, scope)
            if ty is None:
                self.cx.error(
                    p.span,
                    f"exported function '{fn.name}' needs concrete types (dims declared with "
                    "'dim')",
                )
                raise Abort
            if isinstance(ty, TupleType):
                fix = "pass its elements as separate arguments"
                self.cx.error(
                    p.span,
                    f"exported function '{fn.name}' takes the tuple {show(ty)} as '{p.name}'; "
                    "entry points take tensors and scalars",
                    [f"  help: {fix}"],
                )
                raise Abort
            types.append(ty)
        facts = self.cx.facts.of(root)
        params = facts.params[fn.name]
        entry.inputs = [(p.name, t) for p, t in zip(fn.parameters, types)]
        entry.params = params
        cs = Scope(root, dtype_var=root.dtype)
        inst = self.instances.instance(FnRef(fn, root), types, cs, fn.span, force_name=fn.name)
        if inst is None or inst.result is None:
            return
        outputs = export_outputs(inst.result)
        if outputs is None:
            span = fn.result.span if fn.result is not None else fn.name_span
            fix = "return one flat tuple of tensors, such as (a, b, c)"
            self.cx.error(
                span,
                f"exported function '{fn.name}' returns {show(inst.result)}; an entry point "
                "returns a tensor or a tuple of tensors",
                [f"  help: {fix}"],
            )
            raise Abort
        entry.outputs = outputs

    # What no entry point needs ----------------------------------------------------------------

    def check_unused(self, order: list[str], entries: list[tuple[Entry, Source]]) -> None:
        """Checks the declarations no entry point needs (in a function that is then dropped),
        so that `telc check` reports their errors too."""
        covered: set[str] = set()
        for _, what in entries:
            if isinstance(what, list):
                covered |= self.graph.closure(what)
            elif isinstance(what, ast.Train):
                covered |= self.graph.closure(self.graph.objective_refs(what))
        self.check_values([n for n in order if n not in covered], order)

    def check_values(self, names: list[str], order: list[str]) -> None:
        """Checks the values of the declarations `names` (in a function that is then
        dropped). An input or parameter whose type failed is poisoned, so what uses it is
        skipped silently while the rest is checked."""
        root = self.program.root
        rest = [n for n in names if root.declarations[n].role not in ("in", "param", "buffer")]
        if not rest:
            return
        needed = self.graph.closure(rest)
        inputs, params = self.graph.entry_args(needed)
        args: list[tuple[str, Type]] = []
        for n in inputs + params:
            ty = self.decls.decl_types.get(n)
            if ty is not None:
                args.append((n, ty))
        before = len(self.cx.module.functions)
        fn, arguments = start_entry(self.cx, "unused", args)
        given: dict[str, Elaborated] = {
            n: TV(a.type, a, sym=self.decls.decl_sym(n)) for (n, _), a in zip(args, arguments)
        }
        malformed = self.malformed()
        given |= {n: POISON for n in inputs + params + malformed if n not in given}
        given |= {f"{n}[*]": POISON for n in malformed}
        with contextlib.suppress(Abort):
            self.decls.model_scope(order, needed, given, training=False)
        self.drop_functions_from(before)

    def malformed(self) -> list[str]:
        """The declarations whose value cannot be lowered, already reported: of no known
        role, without a value, or in a recurrent block one of whose members is malformed."""
        root = self.program.root
        out = []
        for d in root.declarations.values():
            if d.role in ("in", "param", "buffer"):
                continue
            block = root.recurrent_of.get(d.name)
            members = block.declarations if block is not None else (d,)
            if any(
                m.role not in ast.ROLES
                or m.value is None
                or (block is not None and (m.role != "hidden" or m.type is None))
                for m in members
            ):
                out.append(d.name)
        return out

    def check_after_errors(self, order: list[str]) -> None:
        """After errors in the declarations (so that no entry point is built), still checks
        every declaration's value, every function and every optimiser's hyper-parameters,
        so that one `telc check` reports every independent error."""
        root = self.program.root
        self.check_values(order, order)
        self.check_functions()
        if not self.cx.param_types:
            return
        for t in root.trains:
            if t.optimizer in root.functions or isinstance(
                self.resolve.imported(root, t.optimizer, t.optimizer_span), tuple
            ):
                with contextlib.suppress(Abort):
                    self.train.optimizer(t)

    def drop_functions_from(self, index: int) -> None:
        """Removes the functions created after `index` (compiled only to be checked)."""
        dropped = self.cx.module.functions[index:]
        for f in dropped:
            self.cx.module.remove_function(f)
        self.instances.drop(dropped)

    def check_functions(self) -> None:
        """Compiles every function of the model's file whose signature has no dimension
        variables (open element types take the module's), so `telc check` reports errors in
        functions nothing calls yet; what only this needed is then dropped."""
        root = self.program.root
        before = len(self.cx.module.functions)
        for fn in root.functions.values():
            if fn.export:
                continue
            if fn.bare:
                with contextlib.suppress(Abort):
                    self.grads.check_form(fn)
                continue
            scope = Scope(root, dtype_var=root.dtype)
            types = []
            for p in fn.parameters:
                if not isinstance(p.type, ast.ScalarType | ast.TensorType) or _open(p.type, root):
                    break
                saved = len(self.cx.diags)
                ty = self.resolve.resolve_type(p.type, scope)
                del self.cx.diags[saved:]
                if ty is None:
                    break
                types.append(ty)
            else:
                with contextlib.suppress(Abort):
                    self.instances.instance(
                        FnRef(fn, root), types, Scope(root, dtype_var=root.dtype), fn.span
                    )
                continue
            if not any(key[0] == id(fn) for key in self.instances.table):
                self.check_names(fn, root)
        self.drop_functions_from(before)

    def check_names(self, fn: ast.Function, unit: Unit) -> None:
        """Reports the unknown names of a generic function no call has compiled (its shapes
        are checked only once a call binds them)."""
        signature = [*fn.parameters, *([fn.result] if fn.result is not None else [])]
        dims = {d.value for s in signature for d in walk(s) if isinstance(d, ast.Dim)}
        rests = {s.rest for p in signature for s in walk(p) if isinstance(s, ast.Shape)}
        known = bound_names(fn) | set(self.resolve.visible_names(Scope(unit)))
        known |= set(BUILTINS.names()) | set(DTYPES)
        known |= {d for d in dims | rests if isinstance(d, str)}
        for n in walk(fn.body):
            if isinstance(n, ast.Name) and n.id not in known:
                helps = stdlib_help(n.id)
                hint = "" if helps else suggest(n.id, known)
                self.cx.error(n.span, f"unknown name '{n.id}'{hint}", helps)


def _open(spec: ast.ScalarType | ast.TensorType, unit: Unit) -> bool:
    if isinstance(spec, ast.ScalarType):
        return False
    if spec.shape.rest is not None:
        return True
    return any(n not in unit.dims for d in spec.shape.dims for n in d.names())


def _clash_hint(entries: list[tuple[Entry, Source]], i: int) -> str:
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


__all__ = ["Entry", "Interface", "Model"]
