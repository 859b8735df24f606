"""One entry point per `train`: the objective as a function of the inputs and parameters, its
gradient declaration (keeping the loss), and the optimiser applied to each parameter with its
state and hyper-parameters."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, NoReturn

from dlvm.ir.builder import gradient_declaration
from dlvm.ir.types import TensorType, TupleType, Type
from dlvm.ir.values import ElementKey, Function, fresh_name
from telc import ast
from telc.lower.calls import CallLowerer
from telc.lower.context import Abort, Context, Scope, compile_time
from telc.lower.declarations import DeclarationLowerer
from telc.lower.dependencies import DeclarationGraph
from telc.lower.entries import (
    STEP_DTYPES,
    Entry,
    drop_unread_arguments,
    finish_entry,
    is_step_type,
    start_entry,
)
from telc.lower.exprs import ExprLowerer
from telc.lower.habits import unknown_keyword
from telc.lower.resolve import Resolver
from telc.lower.train_split import lower_split
from telc.lower.values import TV, FnRef, _Poison, describe, show
from telc.program import Unit, suggest

# An optimiser as `using OPT(…)` gives it: its state names, the type of its step argument (if
# it takes one) and the hyper-parameters given.
Optimiser = tuple[list[str], Type | None, dict[str, TV]]


class Objective(NamedTuple):
    """An objective function and its arguments: the inputs it needs, every parameter, every
    buffer; it returns the loss, then the new values of the buffers `updated`, in order."""

    function: Function
    inputs: list[tuple[str, Type]]
    params: list[tuple[str, Type]]
    buffers: list[tuple[str, Type]]
    updated: list[str]


class TrainLowerer:
    """The entry point of one `train … using OPT(…)`."""

    def __init__(
        self,
        cx: Context,
        exprs: ExprLowerer,
        resolve: Resolver,
        calls: CallLowerer,
        decls: DeclarationLowerer,
        graph: DeclarationGraph,
    ) -> None:
        self.cx = cx
        self.exprs = exprs
        self.resolve = resolve
        self.calls = calls
        self.decls = decls
        self.graph = graph

    def objective(
        self,
        name: str,
        objective: ast.Expr,
        order: list[str],
        what: str,
        helps: list[str],
        updates: bool = False,
    ) -> Objective:
        """The function `name`_objective computing `objective` (training's, or the loss of
        an `export def … = grad(LOSS, …)`) from the inputs it needs, every parameter and every
        buffer, in declaration order, returning the loss and, with `updates`, the new values
        of the buffers that `name <- e` updates; a located error, `what` must be a float
        scalar, if it is not one."""
        cx = self.cx
        cx.graph_updates = {}  # the imported graphs this objective calls fill it again
        refs = self.graph.expr_refs(objective)
        if updates:
            refs += [r for u in cx.program.root.updates for r in self.graph.expr_refs(u.value)]
        needed = self.graph.closure(refs)
        inputs, _ = self.graph.entry_args(needed)
        params = [n for n in cx.param_types if n not in cx.buffers]
        buffers = [n for n in cx.param_types if n in cx.buffers]
        in_types = [(n, self.decls.declared_type(n)) for n in inputs]
        p_types: list[tuple[str, Type]] = [(n, cx.param_types[n]) for n in params]
        b_types: list[tuple[str, Type]] = [(n, cx.param_types[n]) for n in buffers]
        every = inputs + params + buffers
        obj, arguments = start_entry(cx, name + "_objective", in_types + p_types + b_types)
        given = {n: TV(a.type, a, sym=self.decls.decl_sym(n)) for n, a in zip(every, arguments)}
        scope = self.decls.model_scope(order, needed, given, training=True)
        loss = self.exprs.lower_expr(objective, scope)
        if isinstance(loss, _Poison):
            raise Abort
        if (
            not isinstance(loss, TV)
            or not isinstance(loss.ty, TensorType)
            or loss.ty.shape
            or not loss.ty.dtype.is_float
        ):
            found = describe(loss)
            cx.error(objective.span, f"{what} must be a float scalar, found {found}", helps)
            raise Abort
        updated = self.buffer_updates(scope) if updates else {}
        results = [loss, *updated.values()]
        finish_entry(cx, self.exprs.ops, obj, results, objective.span, always_tuple=False)
        in_types = [in_types[i] for i in drop_unread_arguments(obj, len(in_types))]
        return Objective(obj, in_types, p_types, b_types, list(updated))

    def lower_train(self, entry: Entry, t: ast.Train, order: list[str]) -> None:
        cx = self.cx
        # The objective, a function of the inputs, every parameter and every buffer, returning
        # the loss and then the buffers' new values.
        obj, in_types, p_types, b_types, updated = self.objective(
            entry.name, t.objective, order, "the training objective", [], updates=True
        )
        entry.objective = obj.name
        inputs, params = [n for n, _ in in_types], [n for n, _ in p_types]
        buffers = [n for n, _ in b_types]
        every = inputs + params + buffers
        # Its gradient with respect to every parameter (never a buffer), keeping the loss and
        # the buffers' new values.
        n_in = len(inputs)
        wrt = tuple(range(n_in, n_in + len(params)))
        name = fresh_name(obj.name + "_grad", {f.name for f in cx.module.functions})
        source = 0 if updated else None
        keeping = tuple(range(1 + len(updated)))
        grad = cx.module.add_function(gradient_declaration(name, obj, wrt, keeping, source=source))
        # The optimiser.
        optimiser = self.optimizer(t)
        states, step_type, _ = optimiser
        args = in_types + p_types + b_types
        args += [(f"{p}_{s}", ty) for p, ty in p_types for s in states]
        if step_type is not None:
            args = args + [("step", step_type)]
        fn, arguments = start_entry(cx, entry.name, args)
        entry.inputs = in_types
        entry.params = params + buffers
        entry.states = [(p, s, ty) for p, ty in p_types for s in states]
        entry.step = step_type
        span = t.span
        r = cx.emit("apply", [grad, *arguments[: len(every)]], span)
        loss_v = cx.emit("extract", [r], span, keys=(ElementKey(index=len(params)),))
        cx.name_value(loss_v, "loss")
        # Each buffer's new value: its update, or the buffer as it was.
        new_buffers: list[TV] = []
        for i, (b, ty) in enumerate(b_types):
            if b in updated:
                k = len(params) + 1 + list(updated).index(b)
                v = cx.emit("extract", [r], span, keys=(ElementKey(index=k),))
                cx.name_value(v, b)
                new_buffers.append(TV(ty, v))
            else:
                new_buffers.append(TV(ty, arguments[n_in + len(params) + i]))
        step_tv = TV(step_type, arguments[-1]) if step_type is not None else None

        def gradient(i: int) -> TV:
            g = cx.emit("extract", [r], span, keys=(ElementKey(index=i),))
            cx.name_value(g, "d" + params[i])
            return TV(g.type, g)

        weights = [TV(ty, arguments[n_in + i]) for i, (_, ty) in enumerate(p_types)]
        state_tvs = [TV(ty, a) for (_, ty), a in zip(args[len(every) :], arguments[len(every) :])]
        new_params, new_states = self.update(
            t, p_types, weights, gradient, state_tvs, step_tv, optimiser
        )
        entry.outputs = [("loss", loss_v.type)] + p_types + b_types
        entry.outputs += [(f"{p}_{s}", ty) for p, ty in p_types for s in states]
        results = [TV(loss_v.type, loss_v), *new_params, *new_buffers, *new_states]
        finish_entry(cx, self.exprs.ops, fn, results, span, always_tuple=True)
        if cx.distributed:
            shapes = (in_types, p_types, b_types)
            entry.parts = lower_split(self, entry, t, grad, shapes, list(updated), optimiser)

    def update(
        self,
        t: ast.Train,
        p_types: list[tuple[str, Type]],
        weights: list[TV],
        gradient: Callable[[int], TV],
        state_tvs: list[TV],
        step_tv: TV | None,
        optimiser: Optimiser,
    ) -> tuple[list[TV], list[TV]]:
        """The optimiser applied to each parameter at the insertion point, in turn: parameter
        i's weight, gradient(i) (asked for just before its update) and states (`state_tvs`
        holds each parameter's states in turn); the new parameters and the new states."""
        cx = self.cx
        root = cx.program.root
        span = t.span
        states, _, hypers = optimiser
        fn_ast, unit = self.optimizer_ref(t)
        new_params: list[TV] = []
        new_states: list[TV] = []
        for i, (p, _) in enumerate(p_types):
            w = weights[i]
            g = gradient(i)
            st = state_tvs[i * len(states) : (i + 1) * len(states)]
            call_args, spans = self.optimizer_args(fn_ast, w, g, st, step_tv, hypers, t)
            out = self.calls.call_with(
                FnRef(fn_ast, unit), call_args, spans, t.optimizer_span,
                Scope(root, training=True, paramless="an optimiser sees only the parameter it"
                      " updates, its gradient and its state"),
            )  # fmt: skip
            if not isinstance(out, TV):
                raise Abort
            if states:
                if not isinstance(out.ty, TupleType) or len(out.ty.elements) != 1 + len(states):
                    cx.error(
                        t.optimizer_span,
                        f"optimiser '{t.optimizer}' must return (weight, {len(states)} state "
                        "tensors)",
                    )
                    raise Abort
                parts = [
                    cx.emit("extract", [out.ir()], span, keys=(ElementKey(index=k),))
                    for k in range(1 + len(states))
                ]
                new_params.append(TV(parts[0].type, parts[0]))
                new_states.extend(TV(v.type, v) for v in parts[1:])
            else:
                new_params.append(out)
            cx.name_value(new_params[-1].value, p)
        return new_params, new_states

    def buffer_updates(self, scope: Scope) -> dict[str, TV]:
        """The new value of each buffer a `name <- e` updates (checked by check_updates), in
        the scope of the training objective, so that they read the values before the step."""
        cx = self.cx
        out: dict[str, TV] = dict(cx.graph_updates)
        for u in cx.program.root.updates:
            ty = cx.param_types[u.name]
            if u.name in cx.graph_updates:
                cx.error(
                    u.name_span,
                    f"buffer '{u.name}' is updated by the imported graph that uses it; it cannot "
                    "be assigned with '<-' too",
                )
                raise Abort
            v = self.exprs.lower_expr(u.value, scope)
            if isinstance(v, _Poison):
                raise Abort
            if not isinstance(v, TV) or v.ty != ty:
                cx.error(
                    u.value.span,
                    f"the new value of buffer '{u.name}' is {describe(v)}; it is declared "
                    f"{show(ty)}",
                )
                raise Abort
            out[u.name] = v
        return out

    def check_updates(self) -> None:
        """Each `name <- e` names a buffer, at most once, and the model has a train entry to
        evaluate it in."""
        cx = self.cx
        root = cx.program.root
        seen: dict[str, ast.Update] = {}
        for u in root.updates:
            d = root.declarations.get(u.name)
            if d is None:
                known = [n for n, d in root.declarations.items() if d.role == "buffer"]
                cx.error(u.name_span, f"unknown buffer '{u.name}'{suggest(u.name, known)}")
            elif d.role != "buffer":
                fix = {
                    "param": "parameters are updated by the optimiser of `train`; declare "
                    f"{u.name}: buffer[…] = … for a value the train step assigns",
                    "in": "inputs are given by the caller",
                }.get(d.role, f"declare {u.name}: buffer[…] = … for a value kept across steps")
                cx.error(
                    u.name_span,
                    f"'{u.name}' is {_ROLE_NOUNS[d.role]}; only a buffer can be assigned with '<-'",
                    [f"  help: {fix}"],
                )
            elif u.name in seen:
                line = seen[u.name].span.loc.line_col[0]
                cx.error(
                    u.name_span,
                    f"buffer '{u.name}' is already assigned on line {line}",
                    ["  help: combine the two into one assignment"],
                )
            else:
                seen[u.name] = u
            if not root.trains:
                cx.error(
                    u.span,
                    "'<-' assigns a buffer at the end of each train step, and this model has no "
                    "train",
                    ["  help: add a train … minimizing … using … declaration, or remove this"],
                )

    def optimizer_ref(self, t: ast.Train) -> tuple[ast.Function, Unit]:
        """The optimiser's def and the file that defines it (checked to exist before)."""
        root = self.cx.program.root
        if t.optimizer in root.functions:
            return root.functions[t.optimizer], root
        imp = self.resolve.imported(root, t.optimizer, t.optimizer_span)
        assert isinstance(imp, tuple) and isinstance(imp[1], ast.Function)
        return imp[1], imp[0]

    def optimizer(self, t: ast.Train) -> Optimiser:
        """The optimiser's state names, the type of its step argument, and the hyper-parameter
        values of `using OPT(…)`."""
        cx = self.cx
        fn, unit = self.optimizer_ref(t)
        ps = fn.parameters
        rest = _rest(ps[0].type) if ps else None
        if len(ps) < 2 or rest is None or _rest(ps[1].type) is None:
            cx.error(
                t.optimizer_span,
                f"'{t.optimizer}' is not an optimiser: it must start (w: [S...], g: [S...], …)",
            )
            raise Abort
        states = []
        hyper_params = []
        step_type: Type | None = None
        for p in ps[2:]:
            if _rest(p.type) == rest:
                states.append(p.name)
            elif p.name == "step":
                scope = Scope(unit, dtype_var=next(iter(cx.param_types.values())).dtype)
                step_type = self.resolve.resolve_type(p.type, scope)
                if step_type is not None and not is_step_type(step_type):
                    self.step_error(t, step_type)
            else:
                hyper_params.append(p)
        hypers: dict[str, TV] = {}
        names = [p.name for p in hyper_params]
        for a in t.arguments:
            if not isinstance(a, ast.Keyword):
                cx.error(
                    a.span,
                    f"give the hyper-parameters of '{t.optimizer}' by name ({', '.join(names)})",
                )
                raise Abort
            if a.name not in names:
                hint, helps = unknown_keyword(a.name, names, f"'{t.optimizer}'")
                cx.error(a.span, f"'{t.optimizer}' has no hyper-parameter '{a.name}'{hint}", helps)
                raise Abort
            fixed = compile_time(f"hyper-parameter {a.name}")
            v = self.exprs.lower_expr(a.value, Scope(cx.program.root, paramless=fixed))
            if not isinstance(v, TV):
                raise Abort  # already reported
            if v.const is None:
                cx.error(a.value.span, "a hyper-parameter must be a number known at compile time")
                raise Abort
            hypers[a.name] = v
        for p in hyper_params:
            if p.name not in hypers and p.default is None:
                cx.error(t.span, f"'{t.optimizer}' needs the hyper-parameter '{p.name}'")
                raise Abort
        return states, step_type, hypers

    def step_error(self, t: ast.Train, ty: Type) -> NoReturn:
        """Reports an optimiser whose `step` cannot be given the step count, at `using`."""
        if isinstance(ty, TensorType) and ty.shape == () and ty.dtype.text in ("f16", "bf16"):
            fix = "train the model in f32, or use an optimiser whose step is declared f32 or i64"
        else:
            fix = "declare the optimiser's argument step: [] or step: i64"
        self.cx.error(
            t.optimizer_span,
            f"optimiser '{t.optimizer}' takes the step count as {show(ty)}; a step count is a "
            f"scalar of {', '.join(STEP_DTYPES[:-1])} or {STEP_DTYPES[-1]}",
            [f"  help: {fix}"],
        )
        raise Abort

    def optimizer_args(
        self,
        fn: ast.Function,
        w: TV,
        g: TV,
        states: list[TV],
        step: TV | None,
        hypers: dict[str, TV],
        t: ast.Train,
    ) -> tuple[list[TV], list[ast.Span]]:
        """The arguments of one parameter's optimiser call, in the optimiser's order."""
        args, spans = [w, g], [t.optimizer_span, t.optimizer_span]
        it = iter(states)
        for p in fn.parameters[2:]:
            if p.name in hypers:
                args.append(hypers[p.name])
            elif p.name == "step" and step is not None:
                args.append(step)
            elif _rest(p.type) is not None:
                args.append(next(it))
            else:
                assert p.default is not None
                fixed = compile_time(f"the default of hyper-parameter {p.name}")
                d = self.exprs.lower_expr(p.default, Scope(self.cx.program.root, paramless=fixed))
                if not self.calls.check_argument(d, p.default.span) or not isinstance(d, TV):
                    raise Abort
                args.append(d)
            spans.append(t.optimizer_span)
        return args, spans


_ROLE_NOUNS = {"in": "an input", "param": "a parameter", "hidden": "a hidden value",
               "out": "an output"}  # fmt: skip


def _rest(spec: ast.TypeSpec) -> str | None:
    """S of a written `[S...]` type, else None."""
    return spec.shape.rest if isinstance(spec, ast.TensorType) else None
