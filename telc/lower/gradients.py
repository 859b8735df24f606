"""`export def NAME = grad(LOSS, wrt: (W1, b1))`: an entry point giving the gradients of a
scalar declaration of the model with respect to some of its parameters (docs/tel.md, "Gradients
as entry points"). Its inputs are the `in` declarations LOSS needs and its outputs the gradients,
in the order of `wrt:` (the loss last with `keeping: true`). LOSS is lowered as the train entry's
objective (TrainLowerer.objective), and differentiated by a gradient declaration of it."""

from __future__ import annotations

from typing import NoReturn

from dlvm.ir.builder import gradient_declaration
from dlvm.ir.values import ElementKey, fresh_name
from telc import ast
from telc.lower.context import Abort, Context, Scope, ftype
from telc.lower.entries import Entry, export_outputs, finish_entry, start_entry
from telc.lower.exprs import ExprLowerer
from telc.lower.train import TrainLowerer
from telc.lower.values import TV
from telc.program import suggest

# What a declaration of each role is called in errors.
ROLE_NAMES = {"in": "an input", "hidden": "a hidden", "out": "an output", "param": "a parameter",
              "buffer": "a buffer"}  # fmt: skip

FORM = "export def NAME = grad(LOSS, wrt: (W1, b1))"


class GradsLowerer:
    """The entry points of the defs written without a parameter list."""

    def __init__(self, cx: Context, exprs: ExprLowerer, train: TrainLowerer) -> None:
        self.cx = cx
        self.exprs = exprs
        self.train = train

    def check_form(self, fn: ast.Function) -> tuple[ast.Name, list[ast.Name] | None, bool, bool]:
        """LOSS, the names of `wrt:` (None: every parameter), whether `wrt:` is one name rather
        than a tuple, and `keeping:`, of a def written without a parameter list; a located
        error (Abort) for any other such def."""
        cx = self.cx
        root = cx.program.root
        body = fn.body
        if not (
            isinstance(body, ast.Call)
            and isinstance(body.callee, ast.Name)
            and body.callee.id == "grad"
            and fn.export
            and fn.result is None
        ):
            fix = f"write `def {fn.name}(…)`, with its parameters (or `()` for none)"
            if isinstance(body, ast.Call) and not fn.export:
                fix = f"export it: `export def {fn.name} = …`, or {fix[0].lower()}{fix[1:]}"
            cx.error(
                fn.name_span,
                f"'{fn.name}' has no parameter list; only `{FORM}` is written without one",
                [f"  help: {fix}"],
            )
            raise Abort
        positional = body.positional
        if len(positional) != 1:
            cx.error(body.span, "grad takes one loss: grad(LOSS, wrt: …)")
            raise Abort
        loss = positional[0]
        if not (isinstance(loss, ast.Name) and loss.id in root.declarations):
            self.not_a_loss(fn, loss)
        role = root.declarations[loss.id].role
        if role in ("in", "param"):
            cx.error(
                loss.span,
                f"'{loss.id}' is {ROLE_NAMES[role]} of the model; grad differentiates a loss "
                "computed from the parameters (a hidden or an out)",
            )
            raise Abort
        wrt: list[ast.Name] | None = None
        single = keeping = False
        for kw in body.keywords:
            if kw.name == "wrt":
                single = not isinstance(kw.value, ast.Tuple)
                items = kw.value.elements if isinstance(kw.value, ast.Tuple) else (kw.value,)
                wrt = [self.param_name(w, loss.id) for w in items]
                seen = [w.id for w in wrt]
                for i, w in enumerate(wrt):
                    if w.id in seen[:i]:
                        cx.error(w.span, "this is already in 'wrt'")
                        raise Abort
            elif kw.name == "keeping":
                k = self.exprs.lower_expr(kw.value, Scope(root))
                if not isinstance(k, TV) or not isinstance(k.const, bool):
                    cx.error(kw.value.span, "keeping: takes true or false")
                    raise Abort
                keeping = bool(k.const)
            else:
                fix = f"differentiate a def: `export def {fn.name}(…) = grad(f, {kw.name}: …)(…)`"
                hint = suggest(kw.name, ["wrt", "keeping"]) if kw.name != "seed" else ""
                cx.error(
                    kw.span,
                    f"grad of the declaration '{loss.id}' has no option '{kw.name}'{hint}",
                    [f"  help: {fix}"] if kw.name == "seed" else [],
                )
                raise Abort
        return loss, wrt, single, keeping

    def not_a_loss(self, fn: ast.Function, loss: ast.Expr) -> NoReturn:
        """Reports a LOSS that is not a declaration of the model."""
        root = self.cx.program.root
        if isinstance(loss, ast.Name) and loss.id in root.functions:
            fix = (
                f"give the entry point its arguments: `export def {fn.name}(x: …) = "
                f"grad({loss.id}, wrt: …)(x)`"
            )
            what = f"'{loss.id}' is a function"
        else:
            names = [d.name for d in root.declarations.values() if d.role in ("hidden", "out")]
            hint = suggest(loss.id, names) if isinstance(loss, ast.Name) else ""
            fix = "declare the loss, such as `loss: out[] = mean(…)`, and name it here"
            what = f"unknown declaration '{loss.id}'{hint}" if isinstance(loss, ast.Name) else ""
            what = what or "this is not a declaration"
        self.cx.error(
            loss.span,
            f"{what}; without a parameter list, grad takes a declaration of the model",
            [f"  help: {fix}"],
        )
        raise Abort

    def param_name(self, w: ast.Expr, loss: str) -> ast.Name:
        """An element of `wrt:`, checked to name a parameter of the model."""
        cx = self.cx
        root = cx.program.root
        params = [n for n in cx.param_types if n not in cx.buffers]
        fix = "differentiate a def, which takes the input as an argument: `export def g(x: …) = "
        fix += "grad(f, wrt: x)(x)`"
        if isinstance(w, ast.Name) and w.id in params:
            return w
        if isinstance(w, ast.Name) and w.id in root.declarations:
            role = root.declarations[w.id].role
            cx.error(
                w.span,
                f"'{w.id}' is {ROLE_NAMES.get(role, 'a declaration')} of the model, not a "
                f"parameter; grad of '{loss}' is taken with respect to parameters",
                [f"  help: {fix}"] if role == "in" else [],
            )
        elif isinstance(w, ast.Name):
            known = f"  help: the parameters are {', '.join(params)}" if params else "  help: "
            known += "" if params else "declare one, such as `W: param[3 x 2] = glorot()`"
            cx.error(w.span, f"unknown parameter '{w.id}'{suggest(w.id, params)}", [known])
        else:
            cx.error(w.span, "wrt: takes the names of parameters here")
        raise Abort

    def lower_grads(self, entry: Entry, fn: ast.Function, order: list[str]) -> None:
        cx = self.cx
        loss, wrt, single, keeping = self.check_form(fn)
        helps = [
            "  help: reduce it to a scalar (sum(…), mean(…)), or differentiate a def with "
            f"seed: …, as in `export def {fn.name}(x: …) = grad(f, wrt: …, seed: s)(x)`"
        ]
        obj, in_types, p_types, b_types, _ = self.train.objective(
            entry.name, loss, order, f"the loss '{loss.id}' of grad", helps
        )
        params = [n for n, _ in p_types]
        names = params if wrt is None else [w.id for w in wrt]
        n_in = len(in_types)
        indices = tuple(n_in + params.index(n) for n in names)
        name = fresh_name(obj.name + "_grad", {f.name for f in cx.module.functions})
        grad = cx.module.add_function(
            gradient_declaration(name, obj, indices, (0,) if keeping else ())
        )
        ir, arguments = start_entry(cx, entry.name, in_types + p_types + b_types)
        entry.inputs = in_types
        entry.params = params + [n for n, _ in b_types]
        r = cx.emit("apply", [grad, *arguments], fn.span)
        results = []
        for i, n in enumerate(names + (["loss"] if keeping else [])):
            v = cx.emit("extract", [r], fn.span, keys=(ElementKey(index=i),))
            cx.name_value(v, "d" + n if i < len(names) else n)
            results.append(TV(v.type, v))
        one = single and not keeping
        finish_entry(cx, self.exprs.ops, ir, results, fn.span, always_tuple=not one)
        outputs = export_outputs(ftype(ir).result)
        assert outputs is not None  # gradients of parameters and a scalar loss are tensors
        entry.outputs = outputs
