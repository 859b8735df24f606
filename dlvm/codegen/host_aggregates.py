"""Aggregates in host code: `literal` (tuples, structs, arrays, enum cases, tensors of values),
`extract` and `insert` through tuples, structs, arrays and tensors (dlvm/interp/aggregates.py).

An element of a tuple, struct or array is borrowed (its address inside the aggregate); keys that
reach into a tensor copy the sub-tensor, and `insert` copies the aggregate, then the element."""

from __future__ import annotations

from dlvm.codegen.frame import indexes_tensor
from dlvm.codegen.host_values import HostBase
from dlvm.ir.values import Instruction, LiteralValue


class AggregateOps(HostBase):
    def i_literal(self, inst: Instruction) -> None:
        lit = inst.operands[0]
        assert isinstance(lit, LiteralValue)
        self.values[inst] = self.literal(lit, inst)

    def i_extract(self, inst: Instruction) -> None:
        src = inst.operands[0]
        v, t = self.element(self.value(src), src.type, list(inst.attrs["keys"]))
        if indexes_tensor(inst):
            out = self.new_value(t, inst)
            self.copy_value(out, v, t)
            v = out
        self.values[inst] = v

    def i_insert(self, inst: Instruction) -> None:
        """`insert v to dest at k…`: a copy of dest with the element at k… replaced."""
        v, dest = inst.operands
        out = self.new_value(dest.type, inst)
        self.values[inst] = out
        self.copy_value(out, self.value(dest), dest.type)
        place, t = self.element(out, dest.type, list(inst.attrs["keys"]))
        self.copy_value(place, self.value(v), t)
