"""bf16 products not taken in bf16 are taken in f32: before compute generation, each such `dot`
and `convolve` of bf16 tensors becomes the same product of its operands cast to f32, rounded
once to bf16. Its sums then accumulate in f32, as the interpreter's do (docs/ir.md,
"Reductions"), instead of rounding to bf16 after every step. The casts are elementwise kernels
that the product reads in place of its operands; the rounding fuses into the product's epilogue.

What stays bf16 is the caller's choice (`keep`; dlvm.codegen.build): on the CPU (kernel_takes),
a matrix product (`dot` of rank 2 or more) with sums at most LONGEST_SUM long: the tiled kernel
(dlvm.codegen.matmul) accumulates it in f32 registers over the whole sum, from operands packed
in pairs for `vdpbf16ps` (dlvm.codegen.bf16_pairs) or widened to f32 as they are read, and
rounds once; and a `convolve` that conv_gemm's product would compute in f32, by its shapes:
sums (a group's input channels × taps) at most LONGEST_SUM long, at least two input and two
output channels per group, an output at least as long as the kernel along the last axis and
at least conv_bf16.MIN_POSITIONS output positions an image, the patches of one output row
not too many for the thread's scratch buffer (dlvm.codegen.conv_bf16: the same
product over the whole sum, in pairs or widened); a `convolve` whose kernel is longer than its
output (a kernel's gradient, conv_kernel_grad.takes: its product in pairs,
dlvm.codegen.conv_kernel_grad_pairs, or widened to f32 as the operands are copied; f32 sums
over the whole sum, rounded once); and a depthwise `convolve` that conv_depthwise's loop takes
by its shapes (conv_depthwise.takes: widened as it loads, f32 sums, rounded once as it
stores). A build for CUDA keeps
those matrix products that run on tensor cores (dlvm.codegen.cuda_mma), which take bf16
operands and sum in f32 themselves, and no convolution. What is rewritten: a `dot` of two
vectors, a product with longer sums (whose packed operands would no longer fit the caches and
the stack, where the kernel slices its sums and would round between slices), and the other
convolutions: depthwise ones with long sums (a depthwise kernel's gradient: conv_long_sums'
loop), those with one output channel per group or few output positions (conv_rows,
conv_folded), and kernels' gradients that conv_kernel_grad does not take (groups, taps apart:
a strided convolution's), whose f32 code generators have no bf16 form.

f16 products are treated the same way, as the interpreter sums them in f32 too (NumPy's f16
`matmul`): a matrix product the kernel takes is kept (its f32 sums rounded once to f16 by
`vcvtps2ph`), every other one, and every f16 `convolve`, is rewritten; summed in f16 a long
product lost a few percent (2048 steps of values in [0, 1]: 3.9 %)."""

from __future__ import annotations

import math
from collections.abc import Callable

from dlvm.codegen import conv_depthwise, conv_kernel_grad
from dlvm.codegen.conv_bf16 import MIN_POSITIONS, row_fits
from dlvm.ir.builder import Builder
from dlvm.ir.types import DataType, as_tensor
from dlvm.ir.values import Instruction, Module, Value
from dlvm.transforms.rewrite import replace_and_remove

PRODUCTS = ("dot", "convolve")
NARROW = (DataType.BF16, DataType.F16)  # the float types whose products sum in f32
LONGEST_SUM = 4096  # steps of p a bf16 matrix product sums in one slice


def kernel_takes(inst: Instruction) -> bool:
    """Whether the CPU kernels compute the bf16 (or f16) product `inst` in its own type
    (above)."""
    a = as_tensor(inst.operands[0].type)
    t = as_tensor(inst.type)
    if inst.opcode == "convolve":
        return t is not None and t.dtype is DataType.BF16 and _conv_takes(inst)
    if inst.opcode != "dot" or a is None or t is None or t.rank < 2:
        return False
    return a.shape[-1] <= LONGEST_SUM


def _conv_takes(conv: Instruction) -> bool:
    """Whether dlvm.codegen.conv_bf16's product takes the bf16 `convolve` `conv`: by shapes,
    the convolutions that conv_gemm's product would take in f32 (above)."""
    x, k = conv.operands
    xt, kt, t = as_tensor(x.type), as_tensor(k.type), as_tensor(conv.type)
    if xt is None or kt is None or t is None or t.rank < 3:
        return False
    if conv_kernel_grad.takes(conv) or conv_depthwise.takes(conv):
        return True
    groups = conv.attrs.get("groups") or 1
    cin_g, cout_g = kt.shape[1], kt.shape[0] // groups
    return (
        cin_g * math.prod(kt.shape[2:]) <= LONGEST_SUM
        and cout_g >= 2
        and cin_g >= 2
        and t.shape[-1] >= kt.shape[-1]
        and math.prod(t.shape[2:]) >= MIN_POSITIONS
        and row_fits(cin_g * math.prod(kt.shape[2:]), t.shape[-1])
    )


def products_in_f32(module: Module, keep: Callable[[Instruction], bool] = kernel_takes) -> None:
    """Rewrites every bf16 and f16 `dot` and `convolve` of the module that `keep` does not
    accept, as described above."""
    for fn in module.functions:
        replacement: dict[Value, Value] = {}
        dead: set[Instruction] = set()
        for inst in list(fn.instructions()):  # a copy: new instructions go in as it runs
            t = as_tensor(inst.type)
            if inst.opcode not in PRODUCTS or t is None or t.dtype not in NARROW:
                continue
            if keep(inst):
                continue
            b = Builder().before(inst)
            wide = [b.dataTypeCast(v, dtype=DataType.F32) for v in inst.operands]
            product = b.build(inst.opcode, list(wide), **inst.attrs)
            rounded = b.dataTypeCast(product, dtype=t.dtype)
            for new in (*wide, product, rounded):
                new.loc = inst.loc
            replacement[inst] = rounded
            dead.add(inst)
        replace_and_remove(fn, replacement, dead)
