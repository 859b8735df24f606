"""The `convolve` of a CUDA kernel scheduled `block 16 x 16 tile 64 x 64 x 16 grid X x Y x G`
(dlvm.transforms.compute_scheduling): the convolution as a matrix product (an implicit GEMM),
tiled through shared memory as dlvm.codegen.cuda_matmul tiles `dot`.

For group g (grid z) the product is K_g · X_g: K_g is the group's kernel as a matrix, its output
channels down (cout_g rows) and its (input channel, tap) pairs across (cin_g · taps columns);
X_g holds, for each such pair (row) and each output element of every batch element (column,
B · positions), the input element that tap reads, or 0 where it reads padding or falls between
dilated inputs (the interpreter's semantics, dlvm/interp/convolution.py, as in the CPU kernel).
Neither matrix exists in memory: the product's staging reads each element where it lies."""

from __future__ import annotations

import math

from llvmlite import ir

from dlvm.codegen.cuda_matmul import TiledProduct
from dlvm.codegen.llvm_types import I64, constant
from dlvm.codegen.loops import unravel
from dlvm.ir.types import TensorType


class ConvolutionTiles(TiledProduct):
    """TiledProduct over the convolution's implicit matrices."""

    def layout(self) -> None:
        x_t, k_t, t = self.a.type, self.b.type, self.t
        assert isinstance(x_t, TensorType) and isinstance(k_t, TensorType)
        attrs = self.kg.core.attrs
        spatial = len(x_t.shape) - 2
        self.x, self.kernel = self.a, self.b
        self.x_t, self.k_t = x_t, k_t
        self.strides = attrs.get("strides") or (1,) * spatial
        self.padding = attrs.get("padding") or ((0, 0),) * spatial
        self.left_dilation = attrs.get("leftDilation") or (1,) * spatial
        self.right_dilation = attrs.get("rightDilation") or (1,) * spatial
        groups = attrs.get("groups") or 1
        self.cin_g, self.cout_g = k_t.shape[1], k_t.shape[0] // groups
        self.taps = k_t.shape[2:]
        self.positions = t.shape[2:]
        self.m = self.cout_g
        self.n = t.shape[0] * math.prod(self.positions)
        self.k = self.cin_g * math.prod(self.taps)
        self.batch_shape = (groups,)

    def start(self, z: ir.Value) -> None:
        self.group = z
        self.batch = []

    def _c(self, v: int) -> ir.Constant:
        return ir.Constant(I64, v)

    def _pair(self, r: ir.Value) -> tuple[ir.Value, list[ir.Value]]:
        """The input channel (within the group) and the taps of reduction index r."""
        b, taps = self.kg.b, math.prod(self.taps)
        return b.udiv(r, self._c(taps)), unravel(b, b.urem(r, self._c(taps)), self.taps)

    def _column(self, j: ir.Value) -> tuple[ir.Value, list[ir.Value]]:
        """The batch element and the output position of column j."""
        b, count = self.kg.b, math.prod(self.positions)
        return b.udiv(j, self._c(count)), unravel(b, b.urem(j, self._c(count)), self.positions)

    def left(self, i: ir.Value, r: ir.Value) -> ir.Value:
        kg, b = self.kg, self.kg.b
        kg.memo.clear()
        c, taps = self._pair(r)
        oc = b.add(b.mul(self.group, self._c(self.cout_g)), i)
        inside, index = kg.clamp([oc, c, *taps], self.k_t.shape)
        inside = b.and_(inside, b.icmp_unsigned("<", i, self._c(self.m)))
        inside = b.and_(inside, b.icmp_unsigned("<", r, self._c(self.k)))
        return b.select(inside, kg.elem(self.kernel, index), constant(self.dt, 0))

    def right(self, r: ir.Value, j: ir.Value) -> ir.Value:
        kg, b, c_ = self.kg, self.kg.b, self._c
        kg.memo.clear()
        c, taps = self._pair(r)
        batch, position = self._column(j)
        ok: ir.Value = b.and_(b.icmp_unsigned("<", r, c_(self.k)),
                              b.icmp_unsigned("<", j, c_(self.n)))  # fmt: skip
        at = []
        for p, tap, s, rd, (lo, _), ld in zip(position, taps, self.strides, self.right_dilation,
                                              self.padding, self.left_dilation):  # fmt: skip
            q = b.sub(b.add(b.mul(p, c_(s)), b.mul(tap, c_(rd))), c_(lo))
            if ld > 1:  # between dilated inputs: reads 0
                ok = b.and_(ok, b.icmp_signed("==", b.srem(q, c_(ld)), c_(0)))
                q = b.sdiv(q, c_(ld))
            at.append(q)
        channel = b.add(b.mul(self.group, c_(self.cin_g)), c)
        inside, index = kg.clamp([batch, channel, *at], self.x_t.shape)
        return b.select(b.and_(ok, inside), kg.elem(self.x, index), constant(self.dt, 0))

    def output_index(self, i: ir.Value, j: ir.Value) -> list[ir.Value]:
        b = self.kg.b
        batch, position = self._column(j)
        return [batch, b.add(b.mul(self.group, self._c(self.cout_g)), i), *position]
