"""Control flow that stays in the IR: `cond` and `loop` stage blocks and branches, where Python's
own `if` and `for` on concrete values are simply run (unrolled) while staging."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dlvm.ir.types import TensorType
from dlvm.ir.values import Argument, Block, Successor
from dlvm.nnkit.staging import Staging, current
from dlvm.nnkit.tensor import Tensor, staging_error


def _staging(what: str) -> Staging:
    staging = current()
    if staging is None:
        raise staging_error(f"dlvm.{what} is for staged functions (@dlvm.stage)")
    return staging


def _tensors(values: Any, what: str) -> tuple[Tensor, ...]:
    items = values if isinstance(values, tuple) else (values,)
    for v in items:
        if not isinstance(v, Tensor):
            raise staging_error(f"{what} must be staged tensors, got {type(v).__name__}")
    return items


def _block(staging: Staging, name: str, types: list[TensorType]) -> Block:
    fn = staging.fn
    taken = {b.name for b in fn.blocks}
    k = 0
    while f"{name}{k}" in taken:
        k += 1
    block = Block(f"{name}{k}", [Argument(f"{name}{k}_{i}", t) for i, t in enumerate(types)])
    fn.add_block(block)
    return block


def cond(pred: Tensor, then: Callable[[], Any], else_: Callable[[], Any]) -> Any:
    """`then()` if the scalar bool `pred` holds at run time, else `else_()`: both are staged, in
    blocks of their own, and must give tensors of the same types (one, or a tuple)."""
    staging = _staging("cond")
    if not isinstance(pred, Tensor) or pred.type != TensorType((), pred.dtype) or (
            not pred.dtype.is_bool):  # fmt: skip
        raise staging_error("dlvm.cond needs a scalar bool tensor as its condition")
    b = staging.builder
    then_block, else_block = _block(staging, "then", []), _block(staging, "else", [])
    staging.emit("conditional", [pred.value], then_=Successor(then_block, []),
                 else_=Successor(else_block, []))  # fmt: skip
    results: list[tuple[tuple[Tensor, ...], Block]] = []
    for block, side in ((then_block, then), (else_block, else_)):
        b.at_end(block)
        values = _tensors(side(), "dlvm.cond's branches")
        assert b.block is not None
        results.append((values, b.block))  # where the side ended (it may have branched)
    (a, a_end), (c, c_end) = results
    if [t.type for t in a] != [t.type for t in c]:
        raise staging_error(
            "dlvm.cond's branches give different types: "
            + ", ".join(str(t.type) for t in a) + " and " + ", ".join(str(t.type) for t in c)
        )  # fmt: skip
    join = _block(staging, "join", [t.type for t in a])
    for values, end in ((a, a_end), (c, c_end)):
        b.at_end(end)
        staging.emit("branch", [], dest=Successor(join, [t.value for t in values]))
    b.at_end(join)
    out = tuple(Tensor(arg, staging) for arg in join.arguments)
    return out if len(out) != 1 else out[0]


def loop(state: Any, test: Callable[..., Tensor], body: Callable[..., Any]) -> Any:
    """While `test(*state)` (a scalar bool) holds, `state = body(*state)`: a loop in the IR,
    whose state (a tensor or a tuple of them) keeps its types; the final state."""
    staging = _staging("loop")
    start = _tensors(state, "dlvm.loop's state")
    types = [t.type for t in start]
    b = staging.builder
    head = _block(staging, "head", types)
    staging.emit("branch", [], dest=Successor(head, [t.value for t in start]))
    b.at_end(head)
    current_state = [Tensor(a, staging) for a in head.arguments]
    go = test(*current_state)
    if not isinstance(go, Tensor) or go.type != TensorType((), go.dtype) or not go.dtype.is_bool:
        raise staging_error("dlvm.loop's test must give a scalar bool tensor")
    step, done = _block(staging, "body", []), _block(staging, "exit", [])
    staging.emit("conditional", [go.value], then_=Successor(step, []),
                 else_=Successor(done, []))  # fmt: skip
    b.at_end(step)
    new = _tensors(body(*current_state), "dlvm.loop's body")
    if [t.type for t in new] != types:
        raise staging_error("dlvm.loop's body must keep the state's types: " + ", ".join(map(
            str, types)) + " became " + ", ".join(str(t.type) for t in new))  # fmt: skip
    staging.emit("branch", [], dest=Successor(head, [t.value for t in new]))
    b.at_end(done)
    return tuple(current_state) if isinstance(state, tuple) else current_state[0]
