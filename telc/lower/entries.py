"""The entry points of the shipped library as the rest of telc sees them (Entry, Interface),
and the start and end of an entry point's IR function."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from dlvm.ir.builder import Builder, new_function
from dlvm.ir.types import FunctionType, TensorType, TupleType, Type
from dlvm.ir.values import Argument, Function, fresh_name
from telc import ast
from telc.lower.context import Abort, Context, FnState, ftype
from telc.lower.tensor_ops import TensorOps
from telc.lower.values import TV, Elaborated


@dataclass
class Entry:
    """An entry point of the shipped library and how its IR function's arguments and results
    map onto the model: inputs, parameters, optimiser state, the step count, outputs."""

    name: str
    kind: str  # "init" | "infer" | "train" | "export", or "grads" | "apply" (parts)
    inputs: list[tuple[str, Type]] = field(default_factory=list)
    params: list[str] = field(default_factory=list)
    states: list[tuple[str, str, Type]] = field(default_factory=list)  # (param, state, type)
    step: Type | None = None
    outputs: list[tuple[str, Type]] = field(default_factory=list)
    # A train entry of a library built with --distributed: its halves E.grads and E.apply
    # (telc.lower.train_split), which the runtime calls with an all-reduce between them.
    parts: tuple[Entry, Entry] | None = None
    # A train entry's objective, the function its gradient declaration differentiates (what
    # --precision bf16 computes in bf16: telc.driver).
    objective: str | None = None


@dataclass
class Interface:
    """What `telc build` needs besides the IR: the model's parameters and buffers (`params`,
    the buffers last and named in `buffers` too) and entry points."""

    name: str
    params: list[tuple[str, Type]] = field(default_factory=list)
    buffers: list[str] = field(default_factory=list)
    entries: list[Entry] = field(default_factory=list)


# The element types a train entry's step count can be passed in: the runtime converts its int64
# count to each of them (dlvm.codegen.glue_layout.STEP_DTYPES; f16 and bf16 are not).
STEP_DTYPES = ("i8", "i16", "i32", "i64", "f32", "f64")


def is_step_type(ty: Type) -> bool:
    """Whether an optimiser's `step` argument of type `ty` can be given the step count."""
    return isinstance(ty, TensorType) and ty.shape == () and ty.dtype.text in STEP_DTYPES


def export_outputs(ty: Type) -> list[tuple[str, Type]] | None:
    """The outputs of an exported function returning `ty`: `result` for a tensor (a scalar
    included), `result0`, `result1`… for a tuple of tensors, as dlc names an IR function's
    (docs/c-abi.md section 1); None for what the C ABI gives no outputs for: a tuple of tuples,
    an empty tuple."""
    if isinstance(ty, TensorType):
        return [("result", ty)]
    elements = ty.elements if isinstance(ty, TupleType) else ()
    if elements and all(isinstance(e, TensorType) for e in elements):
        return [(f"result{i}", e) for i, e in enumerate(elements)]
    return None


def start_entry(
    cx: Context, name: str, args: Sequence[tuple[str, Type]]
) -> tuple[Function, list[Argument]]:
    """A new function taking args, with the insertion point at the end of its entry block;
    its result type is set by finish_entry."""
    taken: set[str] = set()
    names = [fresh_name(n, taken) for n, _ in args]
    ty = FunctionType(tuple(t for _, t in args), TupleType(()))
    fn = cx.module.add_function(new_function(name, ty, names))
    entry = fn.entry
    assert entry is not None
    cx.fn = FnState(fn, name, None, taken)
    cx.b = Builder(entry)
    return fn, entry.arguments


def finish_entry(
    cx: Context,
    ops: TensorOps,
    fn: Function,
    results: Sequence[Elaborated],
    span: ast.Span,
    always_tuple: bool,
) -> None:
    """Returns the results (one value, or a tuple) and gives fn its result type."""
    values = [r for r in results if isinstance(r, TV)]
    if len(values) != len(results):
        raise Abort  # a value it returns had an error, already reported
    if len(values) == 1 and not always_tuple:
        value = values[0].ir()
    else:
        value = ops.make_tuple(values, span).ir()
    cx.emit("return", [value], span)
    fn.type = FunctionType(ftype(fn).arguments, value.type)


def drop_unread_arguments(fn: Function, count: int) -> list[int]:
    """Removes those of fn's first `count` arguments that no instruction reads (an input read
    only in the branch of `if training` that this entry does not compile); returns the
    positions, among those `count`, of the arguments kept."""
    entry = fn.entry
    assert entry is not None
    read = {id(v) for block in fn.blocks for inst in block.instructions for v in inst.uses()}
    arguments = list(entry.arguments)
    kept = [i for i in range(count) if id(arguments[i]) in read]
    if len(kept) == count:
        return kept
    for i in range(count):
        if i not in kept:
            entry.remove_argument(arguments[i])
    ty = ftype(fn)
    remaining = [t for i, t in enumerate(ty.arguments) if i >= count or i in kept]
    fn.type = FunctionType(tuple(remaining), ty.result)
    return kept
