"""The device plan of a host function: what a library built for CUDA runs on the GPU for an
entry point (docs/c-abi.md section 7): the kernel launches of its body in order, host functions it
calls inlined, each tensor in a slot of device memory.

A plan exists when the host function, and every host function it calls, is one block of kernel
calls, tuples built and taken apart with `literal` and `extract`, and `return`: the form
compute generation leaves a model's infer and train functions in. Anything else (control flow,
`random`, stacks, the tensor work no kernel does) runs only on the CPU, and the glue runs such
an entry there, with the parameters copied across (dlvm.codegen.glue).

Slots: the function's arguments (the model's parameters, resident in device memory, or the
caller's inputs, uploaded), then one per kernel result. Uploaded arguments and kernel results
are placed in one scratch block of device memory (offsets 256-byte aligned, a value's bytes
reused once it is dead). A result that is only a kernel's output is written by that kernel
straight into its destination when the destination is device memory (a train step's new
parameters)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dlvm.codegen.gather import ids_operand
from dlvm.codegen.host_values import flat_types, nbytes
from dlvm.ir.literals import AggregateLiteral
from dlvm.ir.types import FunctionType, TensorType, TupleType, canonical
from dlvm.ir.values import Function, Instruction, LiteralValue, Value

ALIGN = 256  # what cudaMalloc gives, enough for any vector access


class NotPlannable(Exception):
    """Why a host function cannot run as a device plan (said in --verbose and the manifest)."""


@dataclass
class Slot:
    """A tensor in device memory: argument `argument` of the host function, or bytes at `offset`
    of the scratch block. `result` is set when only a kernel's output is that result: the glue
    may then bind the slot to the result's destination, when that is device memory (a resident
    result always is; an output is when the caller passes device memory), so that the kernel
    writes it in place."""

    bytes: int
    argument: int | None = None
    offset: int = 0
    result: int | None = None


@dataclass
class DevicePlan:
    """`steps`: (kernel index, slot of each pointer); `results`: the slot of each result of the
    host function (flattened); `scratch`: bytes of device memory the uploaded arguments and
    the temporaries need."""

    slots: list[Slot] = field(default_factory=list)
    steps: list[tuple[int, list[int]]] = field(default_factory=list)
    results: list[int] = field(default_factory=list)
    uploads: list[int] = field(default_factory=list)  # the slot of each non-resident argument
    scratch: int = 0


def device_plan(
    fn: Function,
    kernels: dict[Function, int],
    resident_arguments: range = range(0),
    resident_results: range = range(0),
) -> DevicePlan:
    """The plan of host function fn; `kernels` numbers the [compute] functions (their launch
    table). The arguments in `resident_arguments` (flattened positions) already are in device
    memory (the model's parameters); the others are uploaded into the scratch block. The
    results in `resident_results` stay in device memory (new parameters); the others are
    downloaded from it. NotPlannable says why there is no plan."""
    plan = DevicePlan()
    ty = fn.type
    assert isinstance(ty, FunctionType)
    args: list[Any] = []
    for i, t in enumerate(flat_types_of(ty.arguments)):
        if not isinstance(t, TensorType):
            raise NotPlannable(f"@{fn.name} takes a {t}")
        resident = i in resident_arguments
        plan.slots.append(Slot(max(1, nbytes(t)), argument=i if resident else None))
        args.append(len(plan.slots) - 1)
    nested = _Walk(plan, kernels).call(fn, _group(fn, args))
    plan.results = _flatten(nested)
    plan.uploads = [s for s in args if plan.slots[s].argument is None]
    _bind_results(plan)
    _place(plan, resident_results)
    return plan


def flat_types_of(types: tuple) -> list:
    return [x for t in types for x in flat_types(t)]


def _group(fn: Function, flat: list[int]) -> list[Any]:
    """Flat argument slots grouped per argument (a tuple argument as a nested list)."""
    ty = fn.type
    assert isinstance(ty, FunctionType)
    return _nest(TupleType(tuple(ty.arguments)), flat)


def _nest(t: Any, flat: list[int]) -> Any:
    """The slots of a value of type t from its flattened slots (a tuple as a list)."""
    if isinstance(t, TupleType):
        parts, k = [], 0
        for e in t.elements:
            n = len(flat_types(e))
            parts.append(_nest(canonical(e), flat[k : k + n]))
            k += n
        return parts
    return flat[0]


def _flatten(v: Any) -> list[int]:
    return [s for x in v for s in _flatten(x)] if isinstance(v, list) else [v]


class _Walk:
    def __init__(self, plan: DevicePlan, kernels: dict[Function, int]) -> None:
        self.plan = plan
        self.kernels = kernels
        self.depth = 0

    def call(self, fn: Function, args: list[Any]) -> Any:
        if len(fn.blocks) != 1:
            raise NotPlannable(f"@{fn.name} has control flow")
        self.depth += 1
        if self.depth > 64:
            raise NotPlannable(f"@{fn.name} is recursive")
        env: dict[Value, Any] = dict(zip(fn.blocks[0].arguments, args))
        for inst in fn.blocks[0].instructions:
            if inst.opcode == "return":
                self.depth -= 1
                return self.value(env, inst.operands[0], fn) if inst.operands else []
            env[inst] = self.instruction(env, inst, fn)
        raise NotPlannable(f"@{fn.name} does not return")

    def value(self, env: dict[Value, Any], v: Value, fn: Function) -> Any:
        if v in env:
            return env[v]
        if isinstance(v, LiteralValue):
            raise NotPlannable(f"@{fn.name} passes a literal {v.type} to a kernel")
        raise NotPlannable(f"@{fn.name}: {v.use_text()} is not computed on the device")

    def instruction(self, env: dict[Value, Any], inst: Instruction, fn: Function) -> Any:
        op = inst.opcode
        if op == "apply" and isinstance(inst.operands[0], Function):
            callee = inst.operands[0]
            args = [self.value(env, a, fn) for a in inst.operands[1:]]
            if not callee.compute:
                return self.call(callee, args)
            t = inst.type
            if not isinstance(t, TensorType) or any(isinstance(a, list) for a in args):
                raise NotPlannable(f"@{callee.name} is not a kernel of tensors")
            indexed = ids_operand(callee)
            if indexed is not None:  # its ids are checked before it runs (dlvm.codegen.gather)
                raise NotPlannable(
                    f"@{callee.name}: the ids of {indexed[0].opcode} are checked on the CPU"
                )
            self.plan.slots.append(Slot(max(1, nbytes(t))))
            out = len(self.plan.slots) - 1
            self.plan.steps.append((self.kernels[callee], [*args, out]))
            return out
        if op == "literal":
            lit = inst.operands[0]
            if isinstance(lit, LiteralValue) and isinstance(lit.literal, AggregateLiteral) and (
                    lit.literal.kind == "tuple"):  # fmt: skip
                return [self.value(env, item, fn) for item in lit.literal.items]
        if op == "extract":
            keys = inst.attrs["keys"]
            v = self.value(env, inst.operands[0], fn)
            for key in keys:
                if key.index is None or not isinstance(v, list):
                    raise NotPlannable(f"@{fn.name}: extract {inst.operands[0].type}")
                v = v[key.index]
            return v
        raise NotPlannable(f"@{fn.name}: '{op}' runs on the CPU")


def _bind_results(plan: DevicePlan) -> None:
    """Marks each result slot that is a kernel's output, and no other result's, as one the
    kernel may write straight into that result's destination when it is device memory."""
    produced = {step[1][-1] for step in plan.steps}
    for position, s in enumerate(plan.results):
        slot = plan.slots[s]
        if s in produced and plan.results.count(s) == 1:
            slot.result = position


def _place(plan: DevicePlan, resident: range) -> None:
    """Offsets in the scratch block: first fit among the slots whose lifetimes (first write to
    last read, in steps) overlap; none for arguments and resident results."""
    last: dict[int, int] = {}
    first: dict[int, int] = {s: -1 for s in plan.uploads}  # written before the first step
    for k, (_, slots) in enumerate(plan.steps):
        for s in slots[:-1]:
            last[s] = k
        first[slots[-1]] = k
    end = len(plan.steps)
    for s in plan.results:
        last[s] = end  # read by the glue after the last step
    placed: list[tuple[int, int, int, int]] = []  # (offset, bytes, first, last)
    for s, slot in enumerate(plan.slots):
        if slot.argument is not None or slot.result in resident:
            continue
        lo = first.get(s, 0)
        hi = max(last.get(s, lo), lo)
        size = -(-slot.bytes // ALIGN) * ALIGN
        offset = 0
        for o, b, f, la in sorted(placed):
            if f <= hi and lo <= la and offset < o + b and o < offset + size:
                offset = -(-(o + b) // ALIGN) * ALIGN
        slot.offset = offset
        placed.append((offset, size, lo, hi))
        plan.scratch = max(plan.scratch, offset + size)
