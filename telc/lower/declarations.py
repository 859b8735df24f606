"""The model's declarations: their roles and written types checked, and their values lowered
into a scope in dependency order, a recurrent block as a loop whose arguments carry each
member's previous step (and, for `h[*]`, the stack of every step)."""

from __future__ import annotations

from collections.abc import Mapping

from dlvm.ir.types import DataType, TensorType, TupleType, Type
from dlvm.ir.values import ElementKey, Successor, Value
from telc import ast
from telc.lower.context import Abort, Context, Scope
from telc.lower.dependencies import DeclarationGraph
from telc.lower.exprs import ExprLowerer
from telc.lower.resolve import Resolver
from telc.lower.values import POISON, TV, Elaborated, _Poison, describe, show
from telc.program import suggest
from telc.types import shape_str


def _one_per_element(role: str, name: str) -> str:
    """How to give a model a tuple in place of `role` `name`: the C ABI passes tensors
    (docs/c-abi.md section 1); a hidden value may be a tuple when its type is left out."""
    if role == "in":
        return f"declare one input per element, such as {name}0: in[…] and {name}1: in[…]"
    fix = f"declare one per element, such as {name}0: {role} = …[0] and {name}1: {role} = …[1]"
    return f"leave the type out ({name}: hidden = …), or {fix}" if role == "hidden" else fix


class DeclarationLowerer:
    """The types and values of the root file's declarations."""

    def __init__(
        self, cx: Context, exprs: ExprLowerer, resolve: Resolver, graph: DeclarationGraph
    ) -> None:
        self.cx = cx
        self.exprs = exprs
        self.resolve = resolve
        self.graph = graph
        self.decl_types: dict[str, Type | None] = {}

    def check_declarations(self) -> None:
        """Reports misused roles and resolves each declaration's written type; the float
        tensors of the parameters go to the context's param_types."""
        cx = self.cx
        root = cx.program.root
        scope = Scope(root)
        for d in root.declarations.values():
            if d.role not in ast.ROLES:
                hint = suggest(d.role, ast.ROLES)
                cx.error(
                    d.role_span,
                    f"unknown role '{d.role}'{hint}; a declaration is in, param, buffer, hidden "
                    "or out",
                )
                continue
            in_block = d.name in root.recurrent_of
            if d.role == "in" and d.value is not None:
                cx.error(
                    d.value.span,
                    f"input '{d.name}' cannot have a value; inputs are given by the caller",
                )
            if d.role in ("param", "buffer", "hidden", "out") and d.value is None:
                what = "an initialiser" if d.role in ("param", "buffer") else "a value"
                cx.error(d.span, f"{d.role} '{d.name}' needs {what}: {d.name}: {d.role}[…] = …")
            if d.init is not None and not in_block:
                cx.error(
                    d.init.span, "'init' gives the value before the first step of a recurrent block"
                )
            if in_block and d.role != "hidden":
                cx.error(
                    d.span, f"only hidden declarations can be in a recurrent block, not {d.role}"
                )
            if d.role in ("in", "param", "buffer") and d.type is None:
                cx.error(d.span, f"{d.role} '{d.name}' needs a type: {d.name}: {d.role}[…]")
                continue
            if in_block and d.type is None:
                cx.error(
                    d.span,
                    f"'{d.name}' is in a recurrent block and needs a shape: {d.name}: hidden[…]",
                )
                continue
            ty = self.resolve.resolve_type(d.type, scope) if d.type is not None else None
            self.decl_types[d.name] = ty
            if isinstance(ty, TupleType) and d.role not in ("param", "buffer"):
                assert d.type is not None
                cx.error(
                    d.type.span,
                    f"{d.role} '{d.name}' is declared {show(ty)}; a declaration is a tensor",
                    [f"  help: {_one_per_element(d.role, d.name)}"],
                )
                self.decl_types[d.name] = None
            elif d.role in ("param", "buffer") and ty is not None:
                if not isinstance(ty, TensorType) or not ty.dtype.is_float:
                    span = d.type.span if d.type is not None else d.span
                    what = "parameter" if d.role == "param" else "buffer"
                    cx.error(span, f"{what} '{d.name}' must be a float tensor, found {show(ty)}")
                else:
                    cx.param_types[d.name] = ty
                    if d.role == "buffer":
                        cx.buffers.add(d.name)
        # Buffers after the parameters: the library's tensors are in that order (c-abi.md).
        cx.param_types = {n: t for n, t in cx.param_types.items() if n not in cx.buffers} | {
            n: t for n, t in cx.param_types.items() if n in cx.buffers
        }

    def declared_type(self, name: str) -> Type:
        """The written type of an input or parameter (entry points are lowered only once all
        of them have resolved)."""
        ty = self.decl_types[name]
        assert ty is not None, f"'{name}' has no resolved type"
        return ty

    def decl_sym(self, name: str) -> tuple[int | str, ...] | None:
        """The shape a declaration was written with, for messages."""
        d = self.cx.program.root.declarations[name]
        if isinstance(d.type, ast.TensorType) and d.type.shape.rest is None:
            return tuple(x.value for x in d.type.shape.dims)
        return None

    def model_scope(
        self, order: list[str], needed: set[str], args: Mapping[str, Elaborated], training: bool
    ) -> Scope:
        """Lowers the needed declarations (inputs and parameters given, or POISON where their
        types failed) into a scope."""
        root = self.cx.program.root
        scope = Scope(root, training=training)
        for name, tv in args.items():
            scope.values[name] = tv
            d = root.declarations.get(name)  # None for `h[*]`
            if d is not None and d.role in ("param", "buffer") and isinstance(tv, TV):
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
        tv = self.exprs.lower_expr(d.value, scope)
        if isinstance(tv, _Poison):
            raise Abort
        if not isinstance(tv, TV):
            self.cx.error(d.value.span, f"'{d.name}' must be a tensor, found {describe(tv)}")
            raise Abort
        if d.role == "out" and isinstance(tv.ty, TupleType):
            self.cx.error(
                d.value.span,
                f"output '{d.name}' is the tuple {show(tv.ty)}; an output is a tensor",
                [f"  help: {_one_per_element(d.role, d.name)}"],
            )
            raise Abort
        declared = self.decl_types.get(d.name)
        if declared is not None:
            tv = self.check_declared(d, tv, declared)
        elif tv.weak or tv.value is None:
            tv = TV(tv.ty, tv.ir(), sym=tv.sym)
        self.cx.name_value(tv.value, d.name)
        scope.values[d.name] = tv
        return tv

    def check_declared(self, d: ast.Declaration, tv: TV, declared: Type) -> TV:
        """tv as the declared type of d (a shape or element type that differs is an error)."""
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
                self.cx.error(
                    d.value.span,
                    f"'{d.name}' is declared {shape_str(sym or declared.shape)} but its value "
                    f"has shape {shape_str(tv.ty.shape)}",
                    details,
                )
                raise Abort
            if tv.ty.dtype is not declared.dtype:
                self.cx.error(
                    d.value.span,
                    f"'{d.name}' is declared {show(declared)} but its value is {show(tv.ty)}",
                )
                raise Abort
        v = self.cx.coerce(tv, declared, d.value.span, f"'{d.name}'")
        if isinstance(v, _Poison):
            raise Abort
        return TV(declared, v, sym=sym)

    # Recurrence -----------------------------------------------------------------------------

    def lower_recurrent(self, block: ast.Recurrent, scope: Scope) -> None:
        cx = self.cx
        lo_c = self.resolve.constant_of(block.lo, scope)
        hi_c = self.resolve.constant_of(block.hi, scope)
        if lo_c is None or hi_c is None:
            raise Abort
        if (
            not all(isinstance(c, int) and not isinstance(c, bool) for c in (lo_c, hi_c))
            or hi_c <= lo_c
        ):
            cx.error(
                block.lo.span.to(block.hi.span),
                f"a recurrent block needs integer steps lo..hi with lo < hi, found {lo_c}..{hi_c}",
            )
            raise Abort
        lo, hi = int(lo_c), int(hi_c)
        members = self.graph.block_order(block)
        assert members is not None
        stacked = [m.name for m in block.declarations if self.graph.stacked(m.name)]
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
            if m.init is not None:
                tv = self.exprs.lower_expr(m.init, scope)
                if not isinstance(tv, TV):
                    raise Abort
                v = cx.coerce(tv, ty, m.init.span, f"the init of '{m.name}'")
                if isinstance(v, _Poison):
                    raise Abort
                inits.append(v)
            else:
                inits.append(cx.splat(0, ty, span))
        stack_types = [TensorType((hi - lo,) + types[n].shape, types[n].dtype) for n in stacked]
        stacks = [cx.splat(0, t, span) for t in stack_types]
        counter = TensorType((), DataType.I64)
        header_args: list[tuple[str, Type]] = [(block.var, counter)]
        header_args += [(m.name + "_prev", types[m.name]) for m in block.declarations]
        header_args += [(n + "_steps", t) for n, t in zip(stacked, stack_types)]
        header = cx.new_block("recurrent_" + block.var, header_args)
        body, exit_ = cx.new_block(block.var + "_step"), cx.new_block(block.var + "_done")
        const = TV(counter, weak=True, const=lo).ir(DataType.I64)
        cx.emit("branch", [], span, dest=Successor(header, [const, *inits, *stacks]))
        cx.b.at_end(header)
        t = header.arguments[0]
        n_members = len(block.declarations)
        prevs = header.arguments[1 : 1 + n_members]
        stack_args = header.arguments[1 + n_members :]
        more = cx.emit("lessThan", [t, TV(counter, weak=True, const=hi).ir(DataType.I64)], span)
        cx.emit("conditional", [more], span, then_=Successor(body, []), else_=Successor(exit_, []))
        cx.b.at_end(body)
        inner = scope.child()
        inner.values[block.var] = TV(counter, t)
        for m, p in zip(block.declarations, prevs):
            inner.values[f"{m.name}[{block.var}-1]"] = TV(p.type, p, sym=self.decl_sym(m.name))
        for m in members:
            self.lower_declaration(m, inner)
        step: Value = t
        if lo:
            step = cx.emit("subtract", [t, TV(counter, weak=True, const=lo).ir(DataType.I64)], span)
        new_stacks = []
        for n, s in zip(stacked, stack_args):
            new_stacks.append(
                cx.emit("insert", [_value(inner, n).ir(), s], span, keys=(ElementKey(value=step),))
            )
        nxt = cx.emit("add", [t, TV(counter, weak=True, const=1).ir(DataType.I64)], span)
        values = [_value(inner, m.name).ir() for m in block.declarations]
        cx.emit("branch", [], span, dest=Successor(header, [nxt, *values, *new_stacks]))
        cx.b.at_end(exit_)
        for m, p in zip(block.declarations, prevs):
            scope.values[m.name] = TV(p.type, p, sym=self.decl_sym(m.name))
        for n, s in zip(stacked, stack_args):
            scope.values[f"{n}[*]"] = TV(s.type, s)


def _value(scope: Scope, name: str) -> TV:
    """A declaration lowered into scope (lower_declaration stores a TV or raises Abort)."""
    tv = scope.values[name]
    assert isinstance(tv, TV)
    return tv
