"""A `[compute]` function as a CUDA kernel: the CPU kernel's body (dlvm.codegen.kernel, the same
element code) run by a grid-stride loop over the output's elements, or, as its `[schedule cuda
…]` line says, a tiled matrix product (dlvm.codegen.cuda_matmul) or a reduction by whole blocks
(dlvm.codegen.cuda_reduce).

The entry `dlk_<name>(ptr in…, ptr out)` stores its pointers in a local array laid out as the
body's `args`, so the body reads them as on the CPU; once the body is inlined, LLVM forwards
them straight from the parameters. Thread g of G (G = grid × block) computes elements g, g + G,
g + 2G…: consecutive threads touch consecutive elements, so loads and stores coalesce."""

from __future__ import annotations

from llvmlite import ir

from dlvm.codegen.cuda_conv import ConvolutionTiles
from dlvm.codegen.cuda_matmul import TiledProduct, tiled
from dlvm.codegen.cuda_mma import MmaProduct, tensor_cores
from dlvm.codegen.cuda_reduce import BlockReduce, cooperative
from dlvm.codegen.kernel import KernelGen
from dlvm.codegen.llvm_types import I64, PTR
from dlvm.codegen.loops import strided_loop
from dlvm.codegen.nvptx import kernel_symbol, mark_kernel, special_register
from dlvm.ir.values import Function


class CudaKernelGen(KernelGen):
    """Lowers one [compute] function into an NVPTX module; `entry` is the PTX entry."""

    def __init__(self, module: ir.Module, fn: Function) -> None:
        super().__init__(module, fn, kernel_symbol(fn), None)
        self.flat = True
        self.fast_math = False  # `fastmath` is the CPU schedule's: GPU kernels stay accurate
        self.body.attributes.add("alwaysinline")

    def declare_entry(self, symbol: str) -> ir.Function:
        pointers = [PTR] * (len(self.fn.arguments) + 1)
        entry = ir.Function(self.module, ir.FunctionType(ir.VoidType(), pointers), symbol)
        mark_kernel(entry)
        return entry

    def emit(self) -> ir.Function:
        whole_blocks = tiled(self.fn) or cooperative(self.fn)  # the body uses the block's threads
        if tensor_cores(self.fn):
            MmaProduct(self).emit()
        elif tiled(self.fn) and self.core.opcode == "convolve":
            ConvolutionTiles(self).emit()
        elif tiled(self.fn):
            TiledProduct(self).emit()
        elif cooperative(self.fn):
            BlockReduce(self).emit()
        else:
            self.emit_body()
        b = ir.IRBuilder(self.entry.append_basic_block("entry"))
        n = len(self.entry.args)
        args = b.alloca(PTR, size=ir.Constant(I64, n))
        for i, p in enumerate(self.entry.args):
            b.store(p, b.gep(args, [ir.Constant(I64, i)], source_etype=PTR))
        if whole_blocks:
            b.call(self.body, [args, ir.Constant(I64, 0), ir.Constant(I64, 0)])
            b.ret_void()
            return self.entry

        def wide(name: str) -> ir.Value:
            return b.zext(special_register(b, name), I64)

        first = b.add(b.mul(wide("ctaid.x"), wide("ntid.x")), wide("tid.x"))
        stride = b.mul(wide("nctaid.x"), wide("ntid.x"))
        extent = ir.Constant(I64, self.outer_extent())
        strided_loop(b, first, extent, stride,
                     lambda i: b.call(self.body, [args, i, b.add(i, ir.Constant(I64, 1))]),
                     name="grid")  # fmt: skip
        b.ret_void()
        return self.entry
