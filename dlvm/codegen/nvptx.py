"""NVPTX primitives a CUDA kernel is built from: PTX entry names and the `.entry` calling
convention, special registers (thread and block indices), the block barrier, and arrays in a
block's shared memory. The kernel generators (cuda_*.py) use them; dlvm.codegen.cuda assembles
their module."""

from __future__ import annotations

import re

from llvmlite import ir

from dlvm.codegen.llvm_types import I32
from dlvm.ir.values import Function

_SREG = "llvm.nvvm.read.ptx.sreg."

SHARED = 3  # NVPTX's address space of a block's shared memory


def kernel_symbol(fn: Function) -> str:
    """The PTX entry of a [compute] function: a C identifier (PTX allows no '.')."""
    return "dlk_" + re.sub(r"[^A-Za-z0-9_]", "_", fn.name)


def mark_kernel(fn: ir.Function) -> None:
    """Makes fn a PTX entry (`.entry`), callable by cuLaunchKernel."""
    fn.calling_convention = "ptx_kernel"


def special_register(b: ir.IRBuilder, name: str) -> ir.Value:
    """A PTX special register as i32: `tid.x`, `ntid.y`, `ctaid.z`, `nctaid.x`…"""
    fname = _SREG + name
    fn = b.module.globals.get(fname) or ir.Function(b.module, ir.FunctionType(I32, []), fname)
    return b.call(fn, [])


def barrier(b: ir.IRBuilder) -> None:
    """`bar.sync 0`: every thread of the block waits until all have arrived."""
    fname = "llvm.nvvm.barrier0"
    fn = b.module.globals.get(fname) or ir.Function(
        b.module, ir.FunctionType(ir.VoidType(), []), fname
    )
    b.call(fn, [])


def shared_array(b: ir.IRBuilder, name: str, element: ir.Type, count: int) -> ir.Value:
    """A block's shared-memory array of `count` elements (a module global), as a generic
    pointer."""
    ty = ir.ArrayType(element, count)
    g = ir.GlobalVariable(b.module, ty, name, addrspace=SHARED)
    g.linkage = "internal"
    g.initializer = ir.Constant(ty, ir.Undefined)
    g.align = 16
    return b.addrspacecast(g, ir.PointerType())
