"""bf16 products in f32: before compute generation, each `dot` and `convolve` of bf16 tensors
becomes the same product of its operands cast to f32, rounded once to bf16. Its sums then
accumulate in f32, as the interpreter's do (docs/ir.md, "Reductions"), instead of rounding to
bf16 after every step. The casts are elementwise kernels that the product reads in place of its
operands (the conversion a packing step would do); the rounding fuses into the product's
epilogue. The products `keep` accepts stay bf16: those a build for CUDA runs on tensor cores
(dlvm.codegen.cuda_mma), which take bf16 operands and sum in f32 themselves."""

from __future__ import annotations

from collections.abc import Callable

from dlvm.ir.builder import Builder
from dlvm.ir.types import DataType, as_tensor
from dlvm.ir.values import Instruction, Module, Value
from dlvm.transforms.rewrite import replace_and_remove

PRODUCTS = ("dot", "convolve")


def products_in_f32(module: Module, keep: Callable[[Instruction], bool] | None = None) -> None:
    """Rewrites every bf16 `dot` and `convolve` of the module that `keep` does not accept as
    described above."""
    for fn in module.functions:
        replacement: dict[Value, Value] = {}
        dead: set[Instruction] = set()
        for inst in list(fn.instructions()):  # a copy: new instructions go in as it runs
            t = as_tensor(inst.type)
            if inst.opcode not in PRODUCTS or t is None or t.dtype is not DataType.BF16:
                continue
            if keep is not None and keep(inst):
                continue
            b = Builder().before(inst)
            wide = [b.dataTypeCast(v, dtype=DataType.F32) for v in inst.operands]
            product = b.build(inst.opcode, list(wide), **inst.attrs)
            rounded = b.dataTypeCast(product, dtype=DataType.BF16)
            for new in (*wide, product, rounded):
                new.loc = inst.loc
            replacement[inst] = rounded
            dead.add(inst)
        replace_and_remove(fn, replacement, dead)
