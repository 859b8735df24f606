"""Adjoint rules of the windowed instructions, `convolve` and `reduceWindow` (see adjoints.py).

Both are written with `convolve` itself, because the IR has no general axis permutation: the
input's adjoint is a transposed convolution (the output adjoint dilated by the strides, convolved
with the flipped, per-group transposed kernel), the kernel's is a convolution of the input by the
output adjoint with batch and channels exchanged. reduceWindow is a one-channel convolution: with
a ones kernel (add), or with one-hot kernels that gather each window's elements (max, min);
but windows that tile the input (stride = window, no padding: the usual pooling) need no
convolution, only reshapes, broadcasts and a reduce (`_tiled_adjoint`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from dlvm.ir.literals import AggregateLiteral, ScalarLiteral
from dlvm.ir.types import TensorType, canonical
from dlvm.ir.values import Instruction, LiteralValue, Value
from dlvm.ir.windows import window_padding

Pairs = list[tuple[Value, Value]]


# Geometry ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConvAxis:
    """The options of one spatial axis of an emitted `convolve`. A negative padding means
    cropping: `_conv` turns it into a slice of the input."""

    stride: int = 1
    lo: int = 0
    hi: int = 0
    ld: int = 1  # leftDilation
    rd: int = 1  # rightDilation


@dataclass(frozen=True)
class Axis:
    """One spatial axis of a primal convolution: input, kernel and output sizes and options."""

    n: int
    k: int
    out: int
    stride: int = 1
    lo: int = 0
    hi: int = 0
    ld: int = 1
    rd: int = 1

    def transposed(self) -> ConvAxis:
        """The axis of the convolution that maps the output's adjoint to the input's.

        The input (dilated and padded) position q receives d[p]·k[t] for every p·stride + t·rd
        = q: the adjoint dilated by the stride, padded by window - 1, correlated with the
        flipped kernel. Input element i sits at q = lo + i·ld, hence the low padding minus lo
        and the stride ld; the high padding makes exactly n outputs."""
        window = (self.k - 1) * self.rd + 1
        lo = window - 1 - self.lo
        hi = (self.n - 1) * self.ld + window - lo - ((self.out - 1) * self.stride + 1)
        return ConvAxis(stride=self.ld, lo=lo, hi=hi, ld=self.stride, rd=self.rd)

    def for_kernel(self) -> ConvAxis:
        """The axis of the convolution of the input by the output's adjoint that gives the
        kernel's adjoint: dk[t] = Σp x_padded[t·rd + p·stride]·d[p], so the adjoint acts as a
        kernel dilated by the stride, taps rd apart; the high padding makes exactly k outputs
        (it is negative when the primal never reached the end of its padded input)."""
        hi = (
            (self.k - 1) * self.rd + (self.out - 1) * self.stride - self.lo - (self.n - 1) * self.ld
        )
        return ConvAxis(stride=self.rd, lo=self.lo, hi=hi, ld=self.ld, rd=self.stride)


@dataclass(frozen=True)
class Convolution:
    """A `convolve` instruction's shapes and options, with defaults filled in. Channels past
    groups·(cin // groups) of the input and kernel rows past groups·(cout // groups) are
    unused (the division truncates)."""

    batch: int
    cin: int
    cout: int
    groups: int
    axes: tuple[Axis, ...]

    @property
    def cin_g(self) -> int:
        return self.cin // self.groups

    @property
    def cout_g(self) -> int:
        return self.cout // self.groups

    @property
    def kernel_window(self) -> tuple[int, ...]:
        return tuple(a.k for a in self.axes)

    @staticmethod
    def of(inst: Instruction) -> Convolution:
        x, k, y = (_shape(v) for v in (*inst.operands, inst))
        n = len(x) - 2
        a = inst.attrs
        strides = a.get("strides") or (1,) * n
        padding = a.get("padding") or ((0, 0),) * n
        ld = a.get("leftDilation") or (1,) * n
        rd = a.get("rightDilation") or (1,) * n
        axes = tuple(
            Axis(
                n=x[i + 2],
                k=k[i + 2],
                out=y[i + 2],
                stride=strides[i],
                lo=padding[i][0],
                hi=padding[i][1],
                ld=ld[i],
                rd=rd[i],
            )
            for i in range(n)
        )
        return Convolution(x[0], x[1], k[0], a.get("groups") or 1, axes)


# convolve ------------------------------------------------------------------------------------


def convolve(e: Any, inst: Instruction, d: Value) -> Pairs:
    """The input's and the kernel's adjoints, each a convolution (see the module docstring)."""
    x0, k0 = inst.operands
    geo = Convolution.of(inst)
    out: Pairs = []
    if e.wants(x0):
        dx = _input_adjoint(e, d, e.primal(k0), geo)
        if dx is not None:
            out.append((x0, dx))
    if e.wants(k0):
        dk = _kernel_adjoint(e, e.primal(x0), d, geo)
        if dk is not None:
            out.append((k0, dk))
    return out


def _input_adjoint(e: Any, d: Value, k: Value, geo: Convolution) -> Value | None:
    """The transposed convolution of d [b, cout, out…] by k [cout, cin/g, k…]: the kernel of
    each group is transposed to [cin/g, cout/g, k…] and flipped spatially. None if it is
    zero (every output only saw padding)."""
    g, cin_g, cout_g, window = geo.groups, geo.cin_g, geo.cout_g, geo.kernel_window
    k = _keep_first(e, k, 0, g * cout_g)
    # [g, cout/g, cin/g, k…] -> [g, cin/g, cout/g, k…]: within each group, rows become columns.
    per_group = _reverse_axes(e, _reshape(e, k, (g, cout_g, cin_g, *window)), 1, 3)
    kt = _reshape(e, per_group, (g * cin_g, cout_g, *window))
    flipped = e.op("reverse", kt, dims=tuple(range(2, 2 + len(window))))
    dx = _conv(e, d, flipped, [a.transposed() for a in geo.axes], g)
    return None if dx is None else _zero_extend(e, dx, 1, geo.cin)


def _kernel_adjoint(e: Any, x: Value, d: Value, geo: Convolution) -> Value | None:
    """The convolution of x by d with batch and channels exchanged: x becomes [cin/g, g·b, n…]
    (channels within a group as the batch, groups × batch as channels) and d [cout, b, out…],
    so that a convolution with `groups g` sums over the batch and the output positions and gives
    [cin/g, cout, k…], which is then transposed to the kernel's [cout, cin/g, k…]. The
    exchanges are views that the code generator reads in place where one stride per axis
    addresses them (with one group: compute generation's strided views), not copies."""
    g, b, cin_g = geo.groups, geo.batch, geo.cin_g
    spatial = tuple(a.n for a in geo.axes)
    x = _keep_first(e, x, 1, g * cin_g)
    if g == 1 and all(a.k == 1 and not (a.lo or a.hi) and a.ld == 1 for a in geo.axes):
        return _pointwise_kernel_adjoint(e, x, d, geo)
    if cin_g == 1 and all(a.ld == 1 for a in geo.axes):
        return _depthwise_kernel_adjoint(e, x, d, geo)
    xt = _reverse_axes(e, _reshape(e, x, (b, g, cin_g, *spatial)), 0, 3)
    xt = _reshape(e, xt, (cin_g, g * b, *spatial))
    dt = _reverse_axes(e, d, 0, 2)
    dk = _conv(e, xt, dt, [a.for_kernel() for a in geo.axes], g)
    if dk is None:
        return None
    return _zero_extend(e, _reverse_axes(e, dk, 0, 2), 0, geo.cout)


def _pointwise_kernel_adjoint(e: Any, x: Value, d: Value, geo: Convolution) -> Value:
    """A 1x1 kernel's adjoint (no groups, padding or left dilation) as a batched product:
    dk[o, c] = Σn Σp d[n, o, p] · x[n, c, p·stride], that is Σn d[n] · x[n]ᵀ with d viewed as
    [b, cout, P] and the strided input as [b, cin, P], instead of a convolution whose kernel is
    the whole output adjoint (a long sum for each of only cout·cin outputs). x[n]ᵀ is views of x
    that the product packs as it reads them (Emitter.dot_transposed); the sum over the batch is
    a reduce."""
    b, cin = geo.batch, geo.cin
    for i, a in enumerate(geo.axes):
        x = _every(e, x, i + 2, a.stride, a.out)
    positions = math.prod(a.out for a in geo.axes)
    d3, x3 = _reshape(e, d, (b, geo.cout_g, positions)), _reshape(e, x, (b, cin, positions))
    per_image = e.dot_transposed(d3, x3, False)
    dk = e.op("reduce", per_image, e.scalar(0, d), comb="add", dims=(0,))
    dk = _reshape(e, dk, (geo.cout_g, cin, *(1 for _ in geo.axes)))
    return _zero_extend(e, dk, 0, geo.cout)


def _depthwise_kernel_adjoint(e: Any, x: Value, d: Value, geo: Convolution) -> Value | None:
    """A depthwise kernel's adjoint (one input channel per group, no left dilation) without
    exchanging batch and channels: every image's channel is a group of its own, x viewed as
    [1, b·g, n…] and d as [b·g·m, 1, out…] (m = cout/g), so that one convolution with
    `groups b·g` gives each image's share [1, b·g·m, k…] (few outputs, long sums: what
    conv_depthwise's LongSums loop computes), summed over the batch by a reduce. The exchange
    would transpose both x and d, whole, before a convolution of the same sums."""
    g, b, m = geo.groups, geo.batch, geo.cout_g
    spatial, out = tuple(a.n for a in geo.axes), tuple(a.out for a in geo.axes)
    xv = _reshape(e, x, (1, b * g, *spatial))
    dv = _reshape(e, _keep_first(e, d, 1, g * m), (b * g * m, 1, *out))
    dk = _conv(e, xv, dv, [a.for_kernel() for a in geo.axes], b * g)
    if dk is None:
        return None
    window = geo.kernel_window
    dk = _reshape(e, dk, (b, g * m, *window))
    dk = e.op("reduce", dk, e.scalar(0, d), comb="add", dims=(0,))
    return _zero_extend(e, _reshape(e, dk, (g * m, 1, *window)), 0, geo.cout)


def _every(e: Any, v: Value, axis: int, step: int, count: int) -> Value:
    """Elements 0, step, …, (count − 1)·step of v along axis: the elements up to count·step
    (zeros past v's end), viewed as [count, step] and the first of each step kept."""
    if step == 1:
        return _keep_first(e, v, axis, count)
    shape = _shape(v)
    v = _keep_first(e, v, axis, min(shape[axis], count * step))
    v = _zero_extend(e, v, axis, count * step)
    v = _reshape(e, v, (*shape[:axis], count, step, *shape[axis + 1 :]))
    v = e.slice_along(v, axis + 1, 0, 0)
    return _reshape(e, v, (*shape[:axis], count, *shape[axis + 1 :]))


def _conv(e: Any, v: Value, kernel: Value, axes: list[ConvAxis], groups: int) -> Value | None:
    """`convolve v kernel kernel` with the options of `axes` (defaults left out). A negative
    padding crops v first: whole elements of the dilated input are sliced off and what is
    left over stays padding. None if the cropping leaves nothing (the result is zero)."""
    axes = list(axes)
    for i, a in enumerate(axes):
        n = _shape(v)[i + 2]
        drop_lo, drop_hi = _cropped(a.lo, a.ld), _cropped(a.hi, a.ld)
        if drop_lo + drop_hi >= n:
            return None
        if drop_lo or drop_hi:
            v = e.slice_along(v, i + 2, drop_lo, n - 1 - drop_hi)
            axes[i] = replace(a, lo=a.lo + drop_lo * a.ld, hi=a.hi + drop_hi * a.ld)
    attrs: dict[str, Any] = {}
    if any(a.stride != 1 for a in axes):
        attrs["strides"] = tuple(a.stride for a in axes)
    if any(a.lo or a.hi for a in axes):
        attrs["padding"] = tuple((a.lo, a.hi) for a in axes)
    if any(a.ld != 1 for a in axes):
        attrs["leftDilation"] = tuple(a.ld for a in axes)
    if any(a.rd != 1 for a in axes):
        attrs["rightDilation"] = tuple(a.rd for a in axes)
    if groups != 1:
        attrs["groups"] = groups
    return e.op("convolve", v, kernel, **attrs)


def _cropped(pad: int, dilation: int) -> int:
    """How many input elements a padding crops: none if it is not negative, else enough that
    `pad` dilated positions are gone (a partial step stays as padding)."""
    return -(pad // dilation) if pad < 0 else 0


# reduceWindow --------------------------------------------------------------------------------


@dataclass(frozen=True)
class WindowView:
    """A reduceWindow seen as a one-channel convolution [batch, 1, spatial…]: the leading axes
    that the window leaves alone (size 1, stride 1) are folded into the batch."""

    batch: int
    axes: tuple[Axis, ...]

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (self.batch, 1, *(a.n for a in self.axes))

    @property
    def output_shape(self) -> tuple[int, ...]:
        return (self.batch, 1, *(a.out for a in self.axes))

    @property
    def window(self) -> tuple[int, ...]:
        return tuple(a.k for a in self.axes)

    @property
    def padded(self) -> bool:
        return any(a.lo or a.hi for a in self.axes)

    @property
    def tiled(self) -> bool:
        """Whether the windows tile the input: each axis strided by its window, no padding,
        at least one window (elements past the last one are never read)."""
        return not self.padded and all(a.stride == a.k and a.out > 0 for a in self.axes)

    def gather_axes(self) -> list[ConvAxis]:
        """The primal's own options: a convolution reading each window."""
        return [ConvAxis(stride=a.stride, lo=a.lo, hi=a.hi) for a in self.axes]

    @staticmethod
    def of(inst: Instruction) -> WindowView:
        x, y = _shape(inst.operands[0]), _shape(inst)
        dims, strides, mode = inst.attrs["dims"], inst.attrs["strides"], inst.attrs["padding"]
        lead = 0
        while lead < len(x) - 1 and dims[lead] == 1 and strides[lead] == 1:
            lead += 1
        axes = []
        for i in range(lead, len(x)):
            lo, hi = window_padding(x[i], dims[i], strides[i], y[i], mode)
            axes.append(Axis(n=x[i], k=dims[i], out=y[i], stride=strides[i], lo=lo, hi=hi))
        return WindowView(math.prod(x[:lead]), tuple(axes))


def reduce_window(e: Any, inst: Instruction, d: Value) -> Pairs:
    """add: every element receives the adjoints of the windows holding it. max, min: each
    window's adjoint goes to its elements equal to the result, shared equally among ties (the
    init value, also what the padding holds, receives nothing)."""
    from dlvm.ir.adjoints import AdjointError

    x0, init = inst.operands
    if e.wants(init):
        raise AdjointError("cannot differentiate with respect to a reduceWindow's initial value")
    comb = inst.attrs["comb"]
    if comb not in ("add", "max", "min"):
        shown = f"'{comb}'" if isinstance(comb, str) else "a function"
        raise AdjointError(
            f"cannot differentiate a reduceWindow by {shown}; only by add, max or min"
        )
    if not _shape(x0):  # a scalar is its own only window (built, not parsed: `dims` is empty)
        if comb == "add":
            return [(x0, d)]
        return [
            (x0, e.op("select", d, e.scalar(0, d), e.op("equal", e.primal(x0), e.primal(inst))))
        ]
    view = WindowView.of(inst)
    dx: Value | None
    if view.tiled:
        dx = _tiled_adjoint(e, d, e.primal(x0), e.primal(inst), comb, view)
    elif comb == "add":
        ones = e.constant(1, TensorType((1, 1, *view.window), _dtype(d)))
        dv = _reshape(e, d, view.output_shape)
        dx = _conv(e, dv, ones, [a.transposed() for a in view.axes], 1)
    else:
        dv = _reshape(e, d, view.output_shape)
        dx = _extreme_adjoint(e, dv, e.primal(x0), e.primal(inst), view)
    assert dx is not None, "a window adjoint never crops everything"
    return [(x0, _reshape(e, dx, _shape(x0)))]


def _tiled_adjoint(e: Any, d: Value, x: Value, f: Value, comb: str, view: WindowView) -> Value:
    """Windows that tile the input need no convolution: the part of x they cover, viewed as
    [b, out₁, k₁, out₂, k₂, …] (a reshape), meets d and the result viewed as
    [b, out₁, 1, out₂, 1, …] and broadcast. add: every element receives its window's adjoint;
    max, min: the elements equal to the result share it, counted by a reduce over the k axes.
    Elements past the last window receive zeros."""
    axes = view.axes
    xs = _reshape(e, x, view.input_shape)
    for i, a in enumerate(axes):
        xs = _keep_first(e, xs, i + 2, a.out * a.k)
    split = (view.batch, *(m for a in axes for m in (a.out, a.k)))
    unit = (view.batch, *(m for a in axes for m in (a.out, 1)))
    dv = _reshape(e, d, unit)
    if comb == "add":
        dx = e.broadcast(dv, TensorType(split, _dtype(d)))
    else:
        hit = e.op("equal", _reshape(e, xs, split), _reshape(e, f, unit))
        ones = e.op("select", e.scalar(1, d), e.scalar(0, d), hit)
        taps = tuple(range(2, len(split), 2))
        count = e.op("reduce", ones, e.scalar(0, d), comb="add", dims=taps)
        # A window of NaNs hits nothing: dividing by 1 avoids 0/0 there. The division comes
        # after the select, so that LLVM vectorises it rather than branching around it.
        count = e.op("max", _reshape(e, count, unit), e.scalar(1, d))
        dx = e.op("divide", e.op("select", dv, e.scalar(0, d), hit), count)
    dx = _reshape(e, dx, (view.batch, 1, *(a.out * a.k for a in axes)))
    for i, a in enumerate(axes):
        dx = _zero_extend(e, dx, i + 2, a.n)
    return dx


def _extreme_adjoint(e: Any, d: Value, x: Value, f: Value, view: WindowView) -> Value | None:
    """max/min: one-hot kernels gather every window's elements as channels [b, T, out…]
    (T = window size); those equal to the result share the window's adjoint, and the
    transposed convolution by the same one-hot kernels scatters the shares back."""
    gather = _one_hot_kernels(e, view.window, d, flipped=False)
    # A one-hot kernel multiplies all of a window's elements but one by 0, so a single infinity
    # (such as -inf padding around a max pooling) would make every tap NaN: the finite values
    # and the infinities' signs are gathered apart, and a tap hits when both equal the result's.
    values, signs = _without_infinities(e, _reshape(e, x, view.input_shape))
    taps = _conv(e, values, gather, view.gather_axes(), 1)
    tap_signs = _conv(e, signs, gather, view.gather_axes(), 1)
    assert taps is not None and tap_signs is not None
    f_values, f_signs = _without_infinities(e, _reshape(e, f, view.output_shape))
    hit = e.op("and", e.op("equal", taps, f_values), e.op("equal", tap_signs, f_signs))
    if view.padded:
        # The convolution pads with zeros, which would tie with a zero result: only taps on
        # real elements count (init values in the padding get no gradient).
        ones = e.constant(1, TensorType(view.input_shape, _dtype(d)))
        inside = _conv(e, ones, gather, view.gather_axes(), 1)
        assert inside is not None
        hit = e.op("and", hit, e.op("greaterThan", inside, e.scalar(0.5, d)))
    count = e.op(
        "reduce",
        e.op("select", e.scalar(1, d), e.scalar(0, d), hit),
        e.scalar(0, d),
        comb="add",
        dims=(1,),
    )
    # A window whose result is its init value hits nothing; dividing by 1 avoids 0/0 there.
    count = e.op("max", _reshape(e, count, view.output_shape), e.scalar(1, d))
    share = e.op("select", e.op("divide", d, count), e.scalar(0, d), hit)
    scatter = _one_hot_kernels(e, view.window, d, flipped=True)
    return _conv(e, share, scatter, [a.transposed() for a in view.axes], 1)


def _without_infinities(e: Any, v: Value) -> tuple[Value, Value]:
    """v with its infinities replaced by 0, and their signs (1 for +inf, -1 for -inf, else 0):
    two finite tensors that together tell every non-NaN value of v apart."""
    pos = e.op("equal", v, e.scalar(math.inf, v))
    neg = e.op("equal", v, e.scalar(-math.inf, v))
    zero = e.scalar(0, v)
    signs = e.op("select", e.scalar(1, v), e.op("select", e.scalar(-1, v), zero, neg), pos)
    return e.op("select", zero, v, e.op("or", pos, neg)), signs


def _one_hot_kernels(e: Any, window: tuple[int, ...], like: Value, flipped: bool) -> Value:
    """One kernel per window position t (row-major), 1 at t and 0 elsewhere: [T, 1, window…]
    gathers position t as channel t. Flipped, [1, T, window…], is its transpose with every
    kernel reversed (1 at T-1-t), which scatters channel t back."""
    dt = _dtype(like)
    size = math.prod(window)

    def row(hot: int) -> LiteralValue:
        items = tuple(
            LiteralValue(ScalarLiteral(int(j == hot)), TensorType((), dt)) for j in range(size)
        )
        return LiteralValue(AggregateLiteral("tensor", items), TensorType((size,), dt))

    rows = tuple(row(size - 1 - t if flipped else t) for t in range(size))
    eye = e.op(
        "literal", LiteralValue(AggregateLiteral("tensor", rows), TensorType((size, size), dt))
    )
    return _reshape(e, eye, ((1, size) if flipped else (size, 1)) + window)


# Shapes --------------------------------------------------------------------------------------


def _shape(v: Value) -> tuple[int, ...]:
    t = canonical(v.type)
    assert isinstance(t, TensorType), v.type
    return t.shape


def _dtype(v: Value) -> Any:
    t = canonical(v.type)
    assert isinstance(t, TensorType), v.type
    return t.dtype


def _reshape(e: Any, v: Value, shape: tuple[int, ...]) -> Value:
    return v if _shape(v) == tuple(shape) else e.op("shapeCast", v, shape=tuple(shape))


def _reverse_axes(e: Any, v: Value, start: int, stop: int) -> Value:
    """v with the order of its axes start…stop-1 reversed. Viewed as [P, m…, R], `transpose`
    gives [R, …m, P]; merged to [R, M, P] and transposed again it is [P, M, R], with the m
    axes still reversed inside M."""
    shape = _shape(v)
    block = shape[start:stop]
    target = shape[:start] + block[::-1] + shape[stop:]
    if sum(m != 1 for m in block) <= 1:  # the order of the elements does not change
        return _reshape(e, v, target)
    p, r = math.prod(shape[:start]), math.prod(shape[stop:])
    t = e.op("transpose", _reshape(e, v, (p, *block, r)))
    t = e.op("transpose", _reshape(e, t, (r, math.prod(block), p)))
    return _reshape(e, t, target)


def _keep_first(e: Any, v: Value, axis: int, count: int) -> Value:
    """The first `count` entries of v along axis (the unused channels dropped)."""
    return v if _shape(v)[axis] == count else e.slice_along(v, axis, 0, count - 1)


def _zero_extend(e: Any, v: Value, axis: int, size: int) -> Value:
    """v followed by zeros along axis up to `size` entries (the unused channels' adjoint)."""
    shape = _shape(v)
    if shape[axis] == size:
        return v
    rest = shape[:axis] + (size - shape[axis],) + shape[axis + 1 :]
    return e.op("concatenate", v, e.zeros(TensorType(rest, _dtype(v))), axis=axis)
