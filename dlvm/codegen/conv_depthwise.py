"""The CPU `convolve` of a depthwise convolution (one input channel per group: groups = channels,
perhaps a few output channels per group) as a direct vectorised loop, where a matrix product
would have a single row (dlvm.codegen.conv_gemm).

For each image, output channel and output row, the row's positions lie in vector lanes: each
vector of outputs is the sum over the taps (all unrolled) of the kernel weight, splatted, times
the input elements the lanes read at that tap, one vector load per tap (stride 1), or a load of
stride × lanes elements deinterleaved by a shuffle (strides up to MAX_DEINTERLEAVE; longer
strides build the vector from lane loads). The row is split statically: the interior, where no
tap of the vector reaches the padding along the last axis, in vectors (UNROLL of them at once,
independent chains of multiply-adds, and a last one that overlaps the one before rather than a
scalar remainder); and the borders, one element at a time with each tap checked. Rows of
the outer axes that a tap finds in the padding read zeros through a select on the whole vector.

Each output element sums its taps in the element loop's order (KernelGen.convolve_elements),
from 0, with fused multiply-adds. A left dilation (the input gradient of a strided convolution)
keeps the element loop: its taps land between input elements in a pattern that changes along
the row. Threads share the images, and blocks of their output rows, as in conv_gemm; a fused
elementwise epilogue rewrites each output row after it is computed.

A bf16 convolution (kept bf16 by dlvm.codegen.bf16_products) runs the same loop in f32: its
input and weights are widened as they are loaded, each output sums its taps in f32 vectors of
half the schedule's bf16 lanes and is rounded once as it is stored (vcvtneps2bf16 where the
CPU has AVX-512 BF16, schedule `pairs 1`; integer rounding to nearest even elsewhere)."""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

from llvmlite import ir

from dlvm.codegen.conv_gemm import image_blocks
from dlvm.codegen.llvm_types import I32, I64, memory_type, narrow, value_type
from dlvm.codegen.loops import counted_loop, unravel
from dlvm.codegen.matmul import bf16_rounded
from dlvm.ir.types import DataType, TensorType
from dlvm.ir.values import Argument, Instruction

if TYPE_CHECKING:
    from dlvm.codegen.kernel import KernelGen

MAX_MULTIPLIER = 4  # output channels per group: more share each load better as a product
MAX_TAPS = 64  # taps unrolled for each vector of outputs (an 8x8 kernel)
MAX_DEINTERLEAVE = 4  # strides read as one wide load and a shuffle
UNROLL = 4  # vectors of outputs computed together: independent multiply-add chains


def _c(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def suits(conv: Instruction, lanes: int) -> bool:
    """Whether the convolution runs as the direct loop: floats held in registers as in memory,
    in vectors (a bf16 one's f32 vectors half its lanes), operands in memory, and its shapes
    (takes)."""
    t = conv.type
    assert isinstance(t, TensorType)
    wide = t.dtype is DataType.BF16
    return direct(conv, lanes // 2 if wide else lanes) and takes(conv)


def takes(conv: Instruction) -> bool:
    """Whether the convolution's shapes and options are this loop's: one input channel per
    group and at most MAX_MULTIPLIER output channels, at most MAX_TAPS taps, no left
    dilation."""
    k = conv.operands[1]
    assert isinstance(k.type, TensorType)
    groups = conv.attrs.get("groups") or 1
    ld = conv.attrs.get("leftDilation") or ()
    return (
        k.type.shape[1] == 1
        and all(d == 1 for d in ld)
        and k.type.shape[0] // groups <= MAX_MULTIPLIER
        and math.prod(k.type.shape[2:]) <= MAX_TAPS
    )


def direct(conv: Instruction, lanes: int) -> bool:
    """What both direct loops (this one and conv_long_sums) need: floats held in registers as
    in memory, in vectors, both operands in memory, one input channel per group, no left
    dilation."""
    x, k = conv.operands
    t = conv.type
    assert isinstance(t, TensorType) and isinstance(k.type, TensorType)
    ld = conv.attrs.get("leftDilation") or ()
    return (
        t.dtype.is_float
        and value_type(t.dtype) == memory_type(t.dtype)
        and lanes > 1
        and isinstance(x, Argument)
        and isinstance(k, Argument)
        and k.type.shape[1] == 1
        and all(d == 1 for d in ld)
    )


class DirectConv:
    """A convolve of kg's kernel computed into `out` by a direct loop, one input channel per
    group (this module's and conv_long_sums's): its operands, shapes and options."""

    def __init__(self, kg: KernelGen, conv: Instruction, out: ir.Value, lanes: int) -> None:
        self.kg, self.b, self.out, self.lanes, self.conv = kg, kg.b, out, lanes, conv
        x, kernel = conv.operands
        xt, kt, t = x.type, kernel.type, conv.type
        assert isinstance(xt, TensorType) and isinstance(kt, TensorType)
        assert isinstance(t, TensorType)
        self.x, self.kernel, self.xt, self.t = x, kernel, xt, t
        # The operands' and the output's element type in memory (src_ty), and the sums' (dt):
        # a bf16 convolution sums in f32 vectors of half its lanes (the module docstring).
        self.src_ty = value_type(t.dtype)
        self.wide = t.dtype is DataType.BF16
        if self.wide:
            self.lanes = lanes = max(1, lanes // 2)
            sched = kg.fn.schedule
            self.converts = sched is not None and sched.get("pairs") == 1  # AVX-512 BF16
        self.dt = DataType.F32 if self.wide else t.dtype
        self.elem_ty = value_type(self.dt)
        self.vt = ir.VectorType(self.elem_ty, lanes)
        spatial = len(xt.shape) - 2
        a = conv.attrs
        self.strides = a.get("strides") or (1,) * spatial
        self.lows = tuple(lo for lo, _ in (a.get("padding") or ((0, 0),) * spatial))
        self.rd = a.get("rightDilation") or (1,) * spatial
        self.cout_g = kt.shape[0] // (a.get("groups") or 1)
        self.taps = kt.shape[2:]
        self.in_shape, self.out_shape = xt.shape[2:], t.shape[2:]

    def emit_images(self, begin: ir.Value, end: ir.Value, split: int = 1) -> None:
        """Shares [begin, end) of the images, each cut into `split` blocks of output rows
        (conv_gemm.image_blocks, compute-scheduling's `split`): every output channel of each."""
        b = self.b
        rows = math.prod(self.out_shape[:-1])

        def image(n: ir.Value, r0: ir.Value) -> None:
            counted_loop(b, 0, self.t.shape[1], lambda oc: self.channel(n, oc, r0, rows // split),
                         name="chan")  # fmt: skip

        image_blocks(b, begin, end, split, rows, image)

    def channel(self, n: ir.Value, oc: ir.Value, r0: ir.Value, rows: int) -> None:
        """Output rows [r0, r0 + rows) of channel oc of image n: the loop's own."""
        raise NotImplementedError


class DepthwiseConv(DirectConv):
    """The direct loop of one depthwise convolve of kg's kernel into `out`."""

    def __init__(self, kg: KernelGen, conv: Instruction, out: ir.Value, lanes: int) -> None:
        super().__init__(kg, conv, out, lanes)
        # The interior of the last axis: vectors of outputs from `first` whose every tap, read
        # as whole loads, stays inside the input row, up to `end`.
        s, lo, rd, width = self.strides[-1], self.lows[-1], self.rd[-1], self.in_shape[-1]
        self.first = max(0, -(-lo // s))
        span = s if s <= MAX_DEINTERLEAVE else 1  # elements a lane's load spans
        reach = (self.taps[-1] - 1) * rd - lo + span  # past o·s, what a lane's last tap reads
        self.end = min(self.out_shape[-1], (width - reach) // s + 1)
        self.end = max(self.end, self.first)

    def channel(self, n: ir.Value, oc: ir.Value, r0: ir.Value, rows: int) -> None:
        """Output rows [r0, r0 + rows) of channel oc of image n."""
        b = self.b
        count = math.prod(self.taps)
        kptr = self.kg.ptrs[self.kernel]
        weights = []
        for t in range(count):
            at = b.gep(kptr, [b.add(b.mul(oc, _c(count)), _c(t))], source_etype=self.src_ty)
            weights.append(self.widened(b.load(at, typ=self.src_ty)))
        splats = [self.splat(w) for w in weights]
        c = b.udiv(oc, _c(self.cout_g))
        plane = b.mul(b.add(b.mul(n, _c(self.xt.shape[1])), c), _c(math.prod(self.in_shape)))
        out_plane = b.mul(b.add(b.mul(n, _c(self.t.shape[1])), oc),
                          _c(math.prod(self.out_shape)))  # fmt: skip

        def row(i: ir.Value) -> None:
            r = unravel(b, b.add(r0, i), self.out_shape[:-1]) if self.out_shape[:-1] else []
            reads = self.input_rows(plane, r)
            dst = b.add(out_plane, _c(0))
            for d, o in enumerate(r):
                dst = b.add(dst, b.mul(o, _c(math.prod(self.out_shape[d + 1 :]))))
            self.out_row(reads, weights, splats, dst)
            if self.kg.root is not self.conv:
                self.epilogue([n, oc, *r])

        counted_loop(b, 0, rows, row, name="dwrow")

    def epilogue(self, at: list[ir.Value]) -> None:
        """out[idx] = root(idx) along the output row at `at` (its last index left out), the
        convolution read back from out while the row is in L1."""
        b, kg = self.b, self.kg

        def col(o: ir.Value) -> None:
            kg.memo.clear()
            idx = [*at, o]
            kg.store(self.out, idx, self.t, kg.elem(kg.root, idx))

        counted_loop(b, 0, self.out_shape[-1], col, name="dwepi")

    def input_rows(self, plane: ir.Value, r: list[ir.Value]) -> list[tuple[ir.Value, ir.Value]]:
        """For each tap of the outer axes (row-major): the offset of the input row it reads
        (clamped inside the input) and whether that row is inside."""
        b = self.b
        rows = []
        for outer in itertools.product(*(range(k) for k in self.taps[:-1])):
            inside: ir.Value = ir.Constant(ir.IntType(1), 1)
            at = plane
            for d, (o, tap) in enumerate(zip(r, outer)):
                q = b.add(b.mul(o, _c(self.strides[d])), _c(tap * self.rd[d] - self.lows[d]))
                ok = b.icmp_unsigned("<", q, _c(self.in_shape[d]))
                inside = b.and_(inside, ok)
                stride = math.prod(self.in_shape[d + 1 :])
                at = b.add(at, b.mul(b.select(ok, q, _c(0)), _c(stride)))
            rows.append((at, inside))
        return rows

    def out_row(
        self, rows: list[tuple[ir.Value, ir.Value]], weights: list[ir.Value],
        splats: list[ir.Value], dst: ir.Value,
    ) -> None:  # fmt: skip
        """One output row: the borders element by element, the interior in vectors."""
        b, lanes = self.b, self.lanes
        first, end, width = self.first, self.end, self.out_shape[-1]
        if end - first < lanes:
            counted_loop(b, 0, width, lambda o: self.element(rows, weights, dst, o), name="dwe")
            return
        counted_loop(b, 0, first, lambda o: self.element(rows, weights, dst, o), name="dwl")
        chunk = UNROLL * lanes
        chunks, rest = divmod(end - first, chunk)

        def block(q: ir.Value) -> None:
            o0 = b.add(_c(first), b.mul(q, _c(chunk)))
            self.vectors(rows, splats, dst, [b.add(o0, _c(u * lanes)) for u in range(UNROLL)])

        counted_loop(b, 0, chunks, block, name="dwv")
        at = first + chunks * chunk
        starts = [_c(at + u * lanes) for u in range(rest // lanes)]
        if rest % lanes:  # overlapping the vector before it: the same values written again
            starts.append(_c(end - lanes))
        if starts:
            self.vectors(rows, splats, dst, starts)
        counted_loop(b, end, width, lambda o: self.element(rows, weights, dst, o), name="dwr")

    def vectors(
        self, rows: list[tuple[ir.Value, ir.Value]], splats: list[ir.Value], dst: ir.Value,
        starts: list[ir.Value],
    ) -> None:  # fmt: skip
        """The output vectors at these positions of the row, their taps interleaved."""
        b = self.b
        zero = ir.Constant(self.vt, None)
        accs: list[ir.Value] = [zero] * len(starts)
        kw, s, rd, lo = self.taps[-1], self.strides[-1], self.rd[-1], self.lows[-1]
        padded = self.outer_padded()
        for i, (row, inside) in enumerate(rows):
            for j in range(kw):
                w = splats[i * kw + j]
                for u, o0 in enumerate(starts):
                    src = b.add(row, b.add(b.mul(o0, _c(s)), _c(j * rd - lo)))
                    v = self.load(src)
                    if padded:
                        v = b.select(inside, v, zero)
                    accs[u] = self.multiply_add(w, v, accs[u])
        out = self.out
        for o0, acc in zip(starts, accs):
            ptr = b.gep(out, [b.add(dst, o0)], source_etype=self.src_ty)
            b.store(self.rounded(acc), ptr, align=self.t.dtype.size)

    def load(self, src: ir.Value) -> ir.Value:
        """The lanes' input elements from offset src, `stride` apart."""
        b, lanes, s = self.b, self.lanes, self.strides[-1]
        x = self.kg.ptrs[self.x]
        ptr = b.gep(x, [src], source_etype=self.src_ty)
        size = self.t.dtype.size
        if s == 1:
            return self.widened(b.load(ptr, typ=ir.VectorType(self.src_ty, lanes), align=size))
        if s <= MAX_DEINTERLEAVE:
            wide = b.load(ptr, typ=ir.VectorType(self.src_ty, s * lanes), align=size)
            picks = ir.Constant(ir.VectorType(I32, lanes), [s * u for u in range(lanes)])
            return self.widened(b.shuffle_vector(wide, ir.Constant(wide.type, ir.Undefined), picks))
        v: ir.Value = ir.Constant(ir.VectorType(self.src_ty, lanes), ir.Undefined)
        for u in range(lanes):
            at = b.gep(x, [b.add(src, _c(s * u))], source_etype=self.src_ty)
            v = b.insert_element(v, b.load(at, typ=self.src_ty), ir.Constant(I32, u))
        return self.widened(v)

    def element(
        self, rows: list[tuple[ir.Value, ir.Value]], weights: list[ir.Value], dst: ir.Value,
        o: ir.Value,
    ) -> None:  # fmt: skip
        """One output element, each tap checked against the input row's bounds."""
        b = self.b
        x = self.kg.ptrs[self.x]
        zero = ir.Constant(self.elem_ty, 0)
        acc: ir.Value = zero
        kw, s, rd, lo = self.taps[-1], self.strides[-1], self.rd[-1], self.lows[-1]
        for i, (row, inside) in enumerate(rows):
            for j in range(kw):
                q = b.add(b.mul(o, _c(s)), _c(j * rd - lo))
                ok = b.and_(inside, b.icmp_unsigned("<", q, _c(self.in_shape[-1])))
                at = b.gep(x, [b.add(row, b.select(ok, q, _c(0)))], source_etype=self.src_ty)
                v = b.select(ok, self.widened(b.load(at, typ=self.src_ty)), zero)
                acc = self.multiply_add(weights[i * kw + j], v, acc)
        if self.wide:
            acc = narrow(b, acc, self.src_ty)
        b.store(acc, b.gep(self.out, [b.add(dst, o)], source_etype=self.src_ty))

    def outer_padded(self) -> bool:
        """Whether a tap of an outer axis can read a row of the padding."""
        for d in range(len(self.in_shape) - 1):
            reach = (self.out_shape[d] - 1) * self.strides[d] + (self.taps[d] - 1) * self.rd[d]
            if self.lows[d] > 0 or reach - self.lows[d] >= self.in_shape[d]:
                return True
        return False

    def widened(self, v: ir.Value) -> ir.Value:
        """Elements of src_ty (a value or a vector) in the sums' type: bf16 widened to f32."""
        if not self.wide:
            return v
        t = v.type
        to = ir.VectorType(self.elem_ty, t.count) if isinstance(t, ir.VectorType) else self.elem_ty
        return self.b.fpext(v, to)

    def rounded(self, acc: ir.Value) -> ir.Value:
        """A vector of sums as stored: a bf16 convolution's rounded once to bf16."""
        if not self.wide:
            return acc
        if self.converts:
            return narrow(self.b, acc, ir.VectorType(self.src_ty, self.lanes))
        return bf16_rounded(self.b, acc)

    def splat(self, x: ir.Value) -> ir.Value:
        b, vt = self.b, self.vt
        one = b.insert_element(ir.Constant(vt, ir.Undefined), x, ir.Constant(I32, 0))
        return b.shuffle_vector(one, ir.Constant(vt, ir.Undefined), ir.Constant(
            ir.VectorType(I32, vt.count), [0] * vt.count))  # fmt: skip

    def multiply_add(self, w: ir.Value, v: ir.Value, acc: ir.Value) -> ir.Value:
        """acc + w · v, fused where the CPU can."""
        ty = v.type
        suffix = {16: "f16", 32: "f32", 64: "f64"}[self.dt.bits]
        name = f"llvm.fmuladd.v{ty.count}{suffix}" if isinstance(ty, ir.VectorType) else (
            f"llvm.fmuladd.{suffix}")  # fmt: skip
        module = self.kg.module
        fn = module.globals.get(name)
        if fn is None:
            fn = ir.Function(module, ir.FunctionType(ty, [ty, ty, ty]), name)
        return self.b.call(fn, [w, v, acc])
