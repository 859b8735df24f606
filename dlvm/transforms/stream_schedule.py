"""Which CPU kernels store their output non-temporally under `--fast-math` (`stream 1` in their
schedule, added by compute-scheduling; code generation: dlvm.codegen.streaming; docs/ir.md,
"Non-temporal stores").

A plain store to a line that is not in the cache reads the line first (read for ownership), so
a pass that writes an output larger than the last-level cache moves its output twice and evicts
everything else on the way. A non-temporal store writes the line past the caches. That pays
only where the kernel waits on memory, not on arithmetic: measured on Zen 5, one thread,
`0.5 * x + 0.25` over 16M f32 takes about 0.8 of the time, while tanh(a·x + b)·sigmoid(x),
which computes for 0.3 ns an element in cache or not, gains nothing. So a kernel streams when:

- it is pointwise (no product, reduction, scan, gather or data movement beyond a shapeCast);
- it is memory-bound by a simple measure: at most MEMORY_BOUND_OPS elementwise operations per
  element, each one of CHEAP_OPS (no division, power or transcendental function);
- its output is larger than STREAM_BYTES, a fixed 32 MiB (an L3 of this class of server CPU):
  fixed rather than the building host's cache size so that a build's code, and the build
  cache's key, do not depend on the machine that built it;
- a row of its output's last axis, along which each vector is stored, is at least
  STREAM_ROW_BYTES long, so that the plain stores before the first aligned vector and after
  the last are few next to the vectors."""

from __future__ import annotations

import math

from dlvm.ir.types import TensorType
from dlvm.ir.values import Function

STREAM_BYTES = 32 << 20
STREAM_ROW_BYTES = 1024
MEMORY_BOUND_OPS = 8
# A few instructions each per vector (the casts between float widths included).
CHEAP_OPS = frozenset({
    "add", "subtract", "multiply", "min", "max", "negate", "square", "and", "or", "xor", "not",
    "lessThan", "lessThanOrEqual", "greaterThan", "greaterThanOrEqual", "equal", "notEqual",
    "select", "dataTypeCast", "convert", "bitCast",
})  # fmt: skip
# Views that cost nothing per element: the element is read where it lies.
FREE_OPS = frozenset({"shapeCast", "squeezeShape", "padShape", "literal"})


def streams(fn: Function) -> bool:
    """Whether the [compute] function `fn` stores its output non-temporally (module docstring)."""
    body = fn.blocks[0].instructions
    ret = body[-1]
    out = ret.operands[0].type if ret.operands else None
    if len(fn.blocks) != 1 or not isinstance(out, TensorType) or not out.shape:
        return False
    size = out.dtype.size
    if math.prod(out.shape) * size <= STREAM_BYTES or out.shape[-1] * size < STREAM_ROW_BYTES:
        return False
    work = 0
    for inst in body[:-1]:
        if inst.opcode in CHEAP_OPS:
            work += 1
        elif inst.opcode not in FREE_OPS:
            return False
    return work <= MEMORY_BOUND_OPS
