"""The textual form of modules, byte for byte as docs/ir.md ("Textual format") specifies.

Instructions print through their declaration's syntax template, so there is no per-instruction
printing code. Anonymous names `%B.I` are recomputed from positions at every print.
"""

from __future__ import annotations

from typing import Any

from dlvm.ir.literals import AggregateLiteral, EnumLiteral, StructLiteral
from dlvm.ir.ops import Piece
from dlvm.ir.types import AliasType, EnumType, StructType, Type, shape_text
from dlvm.ir.values import (
    Block,
    Function,
    Instruction,
    LiteralValue,
    Module,
    Successor,
    Value,
)

_NO_SPACE_BEFORE = frozenset([",", ")", ":", "("])


class _Names:
    """Positional names of a function's unnamed instructions, computed once per print."""

    def __init__(self, fn: Function | None) -> None:
        self.anon: dict[int, str] = {}
        if fn is None:
            return
        for b, block in enumerate(fn.blocks):
            for i, inst in enumerate(block.instructions):
                if inst.name is None:
                    self.anon[id(inst)] = f"%{b}.{i}"

    def ref(self, v: Value) -> str:
        if isinstance(v, Instruction) and v.name is None:
            return self.anon.get(id(v)) or v.ref_text()
        if isinstance(v, LiteralValue):
            return self.literal(v)
        return v.ref_text()

    def use(self, v: Value) -> str:
        return f"{self.ref(v)}: {v.type}"

    def literal(self, v: LiteralValue) -> str:
        lit = v.literal
        if not lit.elements():
            return str(lit)
        # Aggregates print their elements as uses; local names inside need positions.
        if isinstance(lit, AggregateLiteral):
            o, c = {"tensor": ("<", ">"), "tuple": ("(", ")"), "array": ("[", "]")}[lit.kind]
            return o + ", ".join(self.use(e) for e in lit.items) + c
        if isinstance(lit, StructLiteral):
            return "{" + ", ".join(f"#{k} = {self.use(e)}" for k, e in lit.fields) + "}"
        assert isinstance(lit, EnumLiteral)  # the only other literal with elements
        return f"?{lit.case}(" + ", ".join(self.use(e) for e in lit.items) + ")"

    def attr(self, kind: str, a: Any) -> str:
        if kind in ("int", "padmode"):
            return str(a)
        if kind == "ints":
            return ", ".join(map(str, a))
        if kind in ("dtype", "type"):
            return str(a)
        if kind == "shape":
            return shape_text(a)
        if kind == "comb":
            return a if isinstance(a, str) else self.use(a)
        if kind == "pairs":
            return ", ".join(f"({lo}, {hi})" for lo, hi in a)
        if kind == "keys":
            return ", ".join(self.use(k.value) if k.value is not None else str(k) for k in a)
        if kind == "successor":
            return self.successor(a)
        if kind == "cases":
            return " ".join(f"case ?{c} '{b.name}" for c, b in a)
        raise AssertionError(kind)

    def successor(self, s: Successor) -> str:
        return f"'{s.block.name}(" + ", ".join(self.use(v) for v in s.args) + ")"


def _pieces(pieces: tuple[Piece, ...], inst: Instruction, names: _Names, out: list[str]) -> None:
    ops = inst.operands
    for p in pieces:
        kind = p.kind
        if kind == "word":
            out.append(p.text)
        elif kind == "operand":
            v = ops[p.index]
            if p.text == "name":
                out.append(names.ref(v))
            elif p.text == "type":
                out.append(str(v.type))
            else:
                out.append(names.use(v))
        elif kind == "operands":
            rest = ops[inst.op.fixed_operands :]
            for j, v in enumerate(rest):
                if j:
                    out.append(",")
                out.append(names.use(v))
        elif kind == "attr":
            out.append(names.attr(p.text, inst.attrs[p.name]))
        elif _group_present(p.group, inst):
            _pieces(p.group, inst, names, out)


def _group_present(group: tuple[Piece, ...], inst: Instruction) -> bool:
    for p in group:
        if p.kind == "attr":
            return inst.attrs.get(p.name) is not None
        if p.kind == "operand":
            return p.index < len(inst.operands)
    return False


def _join(tokens: list[str]) -> str:
    parts: list[str] = []
    prev = ""
    for t in tokens:
        if parts and t not in _NO_SPACE_BEFORE and prev != "(":
            parts.append(" ")
        parts.append(t)
        prev = t
    return "".join(parts)


def instruction_text(inst: Instruction, names: _Names | None = None) -> str:
    """One instruction without indentation: `%0.1 = add %x: f32, 1: f32`."""
    if names is None:
        names = _Names(inst.function)
    op = inst.op
    syntax = op.syntax
    if syntax == "$0, $1":  # most instructions: skip the template walk
        ops = inst.operands
        body = f"{op.name} {names.use(ops[0])}, {names.use(ops[1])}"
    elif syntax == "$0":
        body = f"{op.name} {names.use(inst.operands[0])}"
    else:
        tokens: list[str] = [op.name]
        _pieces(op.pieces, inst, names, tokens)
        body = _join(tokens)
    if inst.name is not None:
        return f"%{inst.name} = {body}"
    if not inst.is_void:
        return f"{names.ref(inst)} = {body}"
    return body


def block_text(block: Block, names: _Names) -> str:
    args = ", ".join(f"%{a.name}: {a.type}" for a in block.arguments)
    lines = [f"'{block.name}({args}):"]
    lines.extend("    " + instruction_text(i, names) for i in block.instructions)
    return "\n".join(lines)


def function_text(fn: Function) -> str:
    lines = [f"!{a}" for a in fn.attributes]
    if fn.compute:
        lines.append("[compute]")
    if fn.schedule is not None:
        lines.append(str(fn.schedule))
    if fn.cuda_schedule is not None:
        lines.append(str(fn.cuda_schedule))
    if fn.declaration is not None:
        decl = fn.declaration
        lines.append(f"[{decl}]" if isinstance(decl, str) else str(decl))
    head = f"func @{fn.name}: {fn.type}"
    if fn.declaration is not None and not fn.blocks:
        lines.append(head)
        return "\n".join(lines)
    lines.append(head + " {")
    names = _Names(fn)
    lines.extend(block_text(b, names) for b in fn.blocks)
    lines.append("}")
    return "\n".join(lines)


def type_decl_text(ty: Type) -> str:
    if isinstance(ty, StructType):
        body = "".join(f"    #{n}: {t}\n" for n, t in ty.fields)
        return f"struct ${ty.name} {{\n{body}}}"
    if isinstance(ty, EnumType):
        body = "".join(f"    ?{c}(" + ", ".join(map(str, ts)) + ")\n" for c, ts in ty.cases)
        return f"enum ${ty.name} {{\n{body}}}"
    assert isinstance(ty, AliasType)
    return f"type ${ty.name} = " + ("opaque" if ty.target is None else str(ty.target))


def module_text(module: Module) -> str:
    """The whole module: header, then enums, structs, aliases, globals, functions."""
    out = [f'module "{_escape(module.name)}"\nstage {module.stage}\n']
    order = (EnumType, StructType, AliasType)
    for cls in order:
        for t in module.types:
            if type(t) is cls:
                out.append("\n" + type_decl_text(t) + "\n")
    for g in module.globals:
        out.append(f"\nvar @{g.name}: {g.value_type}\n")
    for f in module.functions:
        out.append("\n" + function_text(f) + "\n")
    return "".join(out)


def _escape(s: str) -> str:
    return (
        s.replace("\\", "\\\\")
        .replace('"', '\\"')
        .replace("\n", "\\n")
        .replace("\t", "\\t")
        .replace("\r", "\\r")
    )
