"""Copying function bodies: the differentiation pass copies a primal into its gradient function,
and inlining copies callees into callers."""

from __future__ import annotations

from typing import Any

from dlvm.ir.values import (
    Argument,
    Block,
    ElementKey,
    Function,
    Instruction,
    Successor,
    Value,
    map_value_deep,
)


class ValueMap(dict):
    """Old value -> new value; values not in the map (globals, functions, constants) stay."""

    def __call__(self, v: Value) -> Value:
        return map_value_deep(v, lambda x: self.get(x, x))


def clone_body(source: Function, target: Function, vmap: ValueMap | None = None) -> ValueMap:
    """Appends copies of source's blocks to target (names kept); returns the value map, which
    also maps source blocks to their copies. A given `vmap` also renames what it maps (the
    functions of another module, say)."""
    vmap = vmap if vmap is not None else ValueMap()
    blocks: dict[Block, Block] = {}
    for b in source.blocks:
        nb = Block(b.name, [Argument(a.name, a.type, a.loc) for a in b.arguments])
        nb.loc = b.loc
        for a, na in zip(b.arguments, nb.arguments):
            vmap[a] = na
        blocks[b] = nb
        target.add_block(nb)
    for b in source.blocks:
        nb = blocks[b]
        for inst in b.instructions:
            copy = Instruction(inst.op, [], {}, inst.type, inst.name, inst.loc)
            vmap[inst] = copy
            nb.append(copy)
    for b in source.blocks:
        for inst, copy in zip(b.instructions, blocks[b].instructions):
            copy.operands = [vmap(v) for v in inst.operands]
            copy.attrs = {k: _map_attr(a, vmap, blocks) for k, a in inst.attrs.items()}
    vmap.update(blocks)
    return vmap


def clone_instructions(insts: list[Instruction], vmap: ValueMap) -> list[Instruction]:
    """Detached copies of insts (names and locations kept), reading through vmap, which the
    copies are added to; successors keep their blocks unless vmap maps them."""
    copies = []
    for inst in insts:
        copy = Instruction(inst.op, [], {}, inst.type, inst.name, inst.loc)
        vmap[inst] = copy
        copies.append(copy)
    blocks = {k: v for k, v in vmap.items() if isinstance(k, Block)}
    for inst, copy in zip(insts, copies):
        copy.operands = [vmap(v) for v in inst.operands]
        copy.attrs = {k: _map_attr(a, vmap, blocks) for k, a in inst.attrs.items()}
    return copies


def _map_attr(attr: Any, vmap: ValueMap, blocks: dict[Block, Block]) -> Any:
    if isinstance(attr, Successor):
        return Successor(blocks.get(attr.block, attr.block), [vmap(v) for v in attr.args])
    if isinstance(attr, Value):
        return vmap(attr)
    if isinstance(attr, ElementKey):
        return ElementKey(value=vmap(attr.value)) if attr.value is not None else attr
    if isinstance(attr, tuple):
        return tuple(_map_attr(a, vmap, blocks) for a in attr)
    if isinstance(attr, list):
        return [_map_attr(a, vmap, blocks) for a in attr]
    if isinstance(attr, Block):
        return blocks.get(attr, attr)
    return attr
