"""How DLVM elements are represented in LLVM: the register and memory type of each data type,
constants of them, and loads and stores of one element; and the integer and pointer types code
generation uses throughout.

Values in registers: floats as half/float/double, bf16 as LLVM's bfloat, integers as iN, bools as
i1 (stored as i8). llvmlite's builder has no bfloat type: BFloatType is one, written `bfloat` in
the module's text, which LLVM parses; elementwise code (dlvm.codegen.elementwise) computes bf16
in f32 and rounds once, so LLVM sees bfloat only in loads, stores, fpext, fptrunc and selects."""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from llvmlite.ir.types import _BaseFloatType

from dlvm.ir import literals
from dlvm.ir.types import DataType

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()


def bf16_bits(value: float) -> int:
    """The bits of the bf16 nearest to value (dlvm.ir.literals.bf16_bits, for one number)."""
    return int(literals.bf16_bits(np.array([float(value)]))[0])


class BFloatType(_BaseFloatType):
    """LLVM's `bfloat`, which llvmlite lacks; constants in LLVM's bfloat form `0xRXXXX`."""

    null = "0.0"
    intrinsic_name = "bf16"

    def __str__(self) -> str:
        return "bfloat"

    def format_constant(self, value: float) -> str:
        return f"0xR{bf16_bits(value):04X}"


BFloatType._create_instance()
BFLOAT = BFloatType()

_FLOAT_TYPES = {
    DataType.F16: ir.HalfType(),
    DataType.F32: ir.FloatType(),
    DataType.F64: ir.DoubleType(),
    DataType.BF16: BFLOAT,
}


def value_type(dt: DataType) -> ir.Type:
    """The register type of one element."""
    if dt.is_bool:
        return I1
    if dt.is_float:
        return _FLOAT_TYPES[dt]
    return ir.IntType(dt.bits)


def narrow(b: ir.IRBuilder, x: ir.Value, to: ir.Type) -> ir.Value:
    """x (a wider float) rounded to the float type `to`. To bfloat from f64 through f32, as
    ml_dtypes rounds (and x86-64 has no f64 to bfloat instruction: LLVM would call
    compiler-rt's __truncdfbf2, which the library is not linked with)."""
    if isinstance(to, BFloatType) and isinstance(x.type, ir.DoubleType):
        x = b.fptrunc(x, ir.FloatType())
    return b.fptrunc(x, to)


def memory_type(dt: DataType) -> ir.Type:
    """The in-memory type of one element (bools are bytes)."""
    return I8 if dt.is_bool else value_type(dt)


def load_element(b: ir.IRBuilder, ptr: ir.Value, dt: DataType) -> ir.Value:
    v = b.load(ptr, typ=memory_type(dt))
    return b.trunc(v, I1) if dt.is_bool else v


def store_element(b: ir.IRBuilder, v: ir.Value, ptr: ir.Value, dt: DataType) -> None:
    b.store(b.zext(v, I8) if dt.is_bool else v, ptr)


def byte_array(data: bytes) -> ir.Constant:
    """The constant `[N x i8] c"\\00\\01…"` holding data, every byte escaped: llvmlite's own
    escaping takes a Python step per byte (4 s for 100 MB), this a few passes in C."""
    n = len(data)
    text = np.empty((n, 3), np.uint8)
    text[:, 0] = ord("\\")
    text[:, 1:] = np.frombuffer(data.hex().encode("ascii"), np.uint8).reshape(n, 2)
    return ir.FormattedConstant(ir.ArrayType(I8, n), f'c"{text.tobytes().decode("ascii")}"')


# The least magnitude an f16 rounds to infinity (65504 and half its last step): llvmlite packs an
# f16 constant with struct, which refuses it rather than round it.
_F16_INFINITE = 65520.0


def constant(dt: DataType, value: int | float | bool) -> ir.Constant:
    """A literal's value as a constant of dt's register type; past a float type's range,
    infinity (docs/ir.md, "Literals and uses")."""
    if dt.is_bool:
        return ir.Constant(I1, int(bool(value)))
    if dt.is_float:
        x = float(value)
        if dt is DataType.F16 and abs(x) >= _F16_INFINITE:
            x = math.copysign(math.inf, x)
        return ir.Constant(value_type(dt), x)
    return ir.Constant(value_type(dt), int(value))
