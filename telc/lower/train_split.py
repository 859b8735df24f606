"""The two halves of a train entry that a library built with `--distributed` also holds, so that
the runtime can sum across processes between them (docs/distributed.md):

- `E.grads` takes E's inputs, parameters and buffers and computes the loss, every parameter's
  gradient and the new value of each buffer the step updates;
- `E.apply` takes those values summed over the ranks and `scale` (1 / ranks), and gives what E
  gives: the mean loss, the parameters after the optimiser's step on the mean gradients, the
  buffers (a float buffer's new value averaged over the ranks, an integer one each rank's own)
  and the states. The scale is an f64 scalar, rounded to each sum's element type.

On one rank with scale 1, `E.apply(E.grads(…))` computes what E computes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlvm.ir.types import DataType, TensorType, Type
from dlvm.ir.values import ElementKey, Function, fresh_name
from telc import ast
from telc.lower.context import Context
from telc.lower.entries import Entry, finish_entry, start_entry
from telc.lower.values import TV

if TYPE_CHECKING:
    from telc.lower.train import Optimiser, TrainLowerer


def lower_split(
    train: TrainLowerer,
    entry: Entry,
    t: ast.Train,
    grad: Function,
    shapes: tuple[list[tuple[str, Type]], list[tuple[str, Type]], list[tuple[str, Type]]],
    updated: list[str],
    optimiser: Optimiser,
) -> tuple[Entry, Entry]:
    """E.grads and E.apply of the train entry `entry` (lowered already, by `train`), whose
    gradient declaration is `grad`; `shapes` holds its inputs, parameters and buffers."""
    cx: Context = train.cx
    in_types, p_types, b_types = shapes
    params = [n for n, _ in p_types]
    buffers = [n for n, _ in b_types]
    new_of = {b: ty for b, ty in b_types if b in updated}
    span = t.span
    taken = {f.name for f in cx.module.functions}

    # E.grads: (inputs, params, buffers) -> (loss, each gradient, each updated buffer).
    name = fresh_name(entry.name + ".grads", taken)
    fn, arguments = start_entry(cx, name, in_types + p_types + b_types)
    r = cx.emit("apply", [grad, *arguments], span)

    def part(index: int, label: str) -> TV:
        v = cx.emit("extract", [r], span, keys=(ElementKey(index=index),))
        cx.name_value(v, label)
        return TV(v.type, v)

    loss = part(len(params), "loss")
    grads = [part(i, "d" + p) for i, p in enumerate(params)]
    news = [part(len(params) + 1 + updated.index(b), b) for b in new_of]
    finish_entry(cx, train.exprs.ops, fn, [loss, *grads, *news], span, always_tuple=True)
    sums: list[tuple[str, Type]] = [("loss.sum", loss.ty)]
    sums += [(f"{p}.grad", ty) for p, ty in p_types]
    sums += [(f"{b}.new", ty) for b, ty in new_of.items()]
    grads_entry = Entry(name, "grads", inputs=in_types, params=params + buffers, outputs=sums)

    # E.apply: (sums, scale, params, buffers, states, step) -> what E returns.
    states, step_type, _ = optimiser
    state_args = [(f"{p}_{s}", ty) for p, ty in p_types for s in states]
    args = [*sums, ("scale", TensorType((), DataType.F64)), *p_types, *b_types, *state_args]
    if step_type is not None:
        args.append(("step", step_type))
    name = fresh_name(entry.name + ".apply", taken | {name})
    fn, arguments = start_entry(cx, name, args)
    given = [TV(ty, a) for (_, ty), a in zip(args, arguments)]
    scale = given[len(sums)]
    scales: dict[DataType, TV] = {DataType.F64: scale}

    def mean(v: TV) -> TV:
        """v (a sum over the ranks) times the scale, in v's element type."""
        ty = v.ty
        if not isinstance(ty, TensorType) or not ty.dtype.is_float:
            return v  # an integer buffer: each rank's own
        if ty.dtype not in scales:  # converted once per element type
            c = cx.emit("convert", [scale.ir()], span, dtype=ty.dtype)
            scales[ty.dtype] = TV(c.type, c)
        out = train.exprs.ops.elementwise("*", v, scales[ty.dtype], span)
        assert isinstance(out, TV), "a tensor times a scalar of its type"
        return out

    base = len(sums) + 1
    weights = given[base : base + len(params)]
    olds = given[base + len(params) : base + len(params) + len(buffers)]
    first_state = base + len(params) + len(buffers)
    state_tvs = given[first_state : first_state + len(state_args)]
    step_tv = given[-1] if step_type is not None else None
    new_params, new_states = train.update(
        t, p_types, weights, lambda i: mean(given[1 + i]), state_tvs, step_tv, optimiser
    )
    first_new = 1 + len(params)
    new_buffers = [
        mean(given[first_new + list(new_of).index(b)]) if b in new_of else old
        for b, old in zip(buffers, olds)
    ]
    results = [mean(given[0]), *new_params, *new_buffers, *new_states]
    finish_entry(cx, train.exprs.ops, fn, results, span, always_tuple=True)
    apply_entry = Entry(
        name,
        "apply",
        inputs=args[:base],
        params=params + buffers,
        states=entry.states,
        step=step_type,
        outputs=entry.outputs,
    )
    return grads_entry, apply_entry
