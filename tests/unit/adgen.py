"""A deterministic random generator of straight-line, differentiable DLVM functions (as text)
for the AD property test: float32 tensors of rank 0-2 with dims 1-3, built only from
operations whose derivative exists and is smooth on the whole real line, so that finite
differences at any random point agree with the adjoint code.

`ADGen(seed, size).function()` returns a `Generated`: the module text of `@f` (one float
result) and the argument shapes. Operand shapes are chosen to exercise broadcasting: scalars
against tensors, `<1 x n>` rows and `<m x 1>` columns against matrices. When no value of a
needed shape exists yet, the generator adds an argument or writes a literal constant.

Finite differences need moderate values: the generator keeps a bound on every value (for
arguments in [-1.5, 1.5]) and passes an operand through `tanh` before using it when its bound
exceeds LIMIT, so that products and powers cannot blow up along a chain.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

Shape = tuple[int, ...]
Value = tuple[str, Shape]

# Safe compositions: smooth everywhere and defined for every real operand.
UNARY = ("tanh", "sin", "cos", "negate", "square", "exp_tanh", "log_1p_sq", "sqrt_1p_sq")
BINARY = ("add", "subtract", "multiply", "divide_safe", "max", "min")
# (generator method, weight)
MIX = (
    ("unary", 24),
    ("binary", 30),
    ("dot", 10),
    ("transpose", 6),
    ("reduce", 8),
    ("shape_cast", 6),
    ("pad_or_squeeze", 6),
    ("literal", 4),
)
MAX_ARGS = 4
ARGUMENT_BOUND = 1.5  # the property test draws arguments from [-1.5, 1.5]
LIMIT = 6.0
CONSTANTS = ("0.5", "-1.25", "2.0", "0.75", "3")
ELEMENTS = ("0.5", "-1.5", "1.0", "0.25", "2")


def type_text(shape: Shape) -> str:
    return "f32" if not shape else "<" + " x ".join(map(str, shape)) + " x f32>"


def broadcast(a: Shape, b: Shape) -> Shape | None:
    """Broadcasting (docs/ir.md): a scalar fits anything, otherwise equal ranks, dims equal or 1."""
    if not a:
        return b
    if not b:
        return a
    if len(a) != len(b) or any(x != y and 1 not in (x, y) for x, y in zip(a, b)):
        return None
    return tuple(max(x, y) for x, y in zip(a, b))


@dataclass
class Generated:
    text: str
    shapes: list[Shape]


class ADGen:
    def __init__(self, seed: int, size: int = 8) -> None:
        self.r = random.Random(seed)
        self.size = size
        self.args: list[Shape] = []
        self.values: list[Value] = []  # every float value defined so far
        self.bound: dict[str, float] = {}  # an upper bound of |value|
        self.used: set[str] = set()
        self.lines: list[str] = []
        self.counter = 0

    # Values -------------------------------------------------------------------------------

    def shape(self) -> Shape:
        rank = self.r.choice((0, 1, 1, 2, 2, 2))
        return tuple(self.r.randint(1, 3) for _ in range(rank))

    def new_argument(self, shape: Shape) -> Value:
        name = f"%a{len(self.args)}"
        self.args.append(shape)
        self.values.append((name, shape))
        self.bound[name] = ARGUMENT_BOUND
        return name, shape

    def use(self, v: Value) -> str:
        self.used.add(v[0])
        return f"{v[0]}: {type_text(v[1])}"

    def emit(self, shape: Shape, bound: float, text: str) -> Value:
        name = f"%v{self.counter}"
        self.counter += 1
        self.lines.append(f"    {name} = {text}")
        self.values.append((name, shape))
        self.bound[name] = bound
        return name, shape

    def tame(self, v: Value) -> Value:
        """v itself, or tanh v when v may be large."""
        if self.bound[v[0]] <= LIMIT:
            return v
        return self.emit(v[1], 1.0, f"tanh {self.use(v)}")

    def pick(self) -> Value:
        """A value, favouring recent ones so that chains get deep."""
        n = len(self.values)
        i = n - 1 - min(int(self.r.expovariate(0.5)), n - 1)
        return self.tame(self.values[i])

    def of_shape(self, shape: Shape) -> Value:
        """A value of exactly `shape`: an existing one, a new argument or a literal."""
        found = [v for v in self.values if v[1] == shape]
        if found and self.r.random() < 0.7:
            return self.tame(self.r.choice(found))
        if len(self.args) < MAX_ARGS and self.r.random() < 0.6:
            return self.new_argument(shape)
        return self.literal_of(shape)

    def literal_of(self, shape: Shape) -> Value:
        if not shape or self.r.random() < 0.3:  # a splat
            c = self.r.choice(CONSTANTS)
            return self.emit(shape, abs(float(c)), f"literal {c}: {type_text(shape)}")

        def elements(s: Shape) -> str:
            if not s:
                return f"{self.r.choice(ELEMENTS)}: f32"
            inner = ", ".join(elements(s[1:]) for _ in range(s[0]))
            return f"<{inner}>: {type_text(s)}"

        return self.emit(shape, 2.0, f"literal {elements(shape)}")

    def compatible(self, shape: Shape) -> Value | str:
        """A second operand for an elementwise op with an operand of `shape`: a value whose
        shape broadcasts with it (often to exactly `shape`), or a scalar literal operand."""
        roll = self.r.random()
        if roll < 0.15:
            return self.r.choice(CONSTANTS)
        if roll < 0.35 and shape:
            # A row, a column or a scalar value that broadcasts against `shape`.
            variants: list[Shape] = [()]
            if len(shape) == 2:
                variants += [(1, shape[1]), (shape[0], 1)]
            if len(shape) == 1:
                variants += [(1,)]
            return self.of_shape(self.r.choice(variants))
        fits = [v for v in self.values if broadcast(shape, v[1]) is not None]
        if fits and roll < 0.8:
            return self.tame(self.r.choice(fits))
        return self.of_shape(shape)

    # Instructions -----------------------------------------------------------------------

    def unary(self) -> None:
        x = self.pick()
        s, b = x[1], self.bound[x[0]]
        op = self.r.choice(UNARY)
        if op == "exp_tanh":
            h = self.emit(s, 1.0, f"tanh {self.use(x)}")
            self.emit(s, math.e, f"exp {self.use(h)}")
        elif op in ("log_1p_sq", "sqrt_1p_sq"):
            sq = self.emit(s, b * b, f"multiply {self.use(x)}, {self.use(x)}")
            one = self.emit(s, 1 + b * b, f"add 1: f32, {self.use(sq)}")
            if op == "log_1p_sq":
                self.emit(s, math.log(1 + b * b), f"log {self.use(one)}")
            else:
                self.emit(s, math.sqrt(1 + b * b), f"sqrt {self.use(one)}")
        else:
            bound = {"tanh": 1.0, "sin": 1.0, "cos": 1.0, "negate": b, "square": b * b}[op]
            self.emit(s, bound, f"{op} {self.use(x)}")

    def binary(self) -> None:
        x = self.pick()
        y = self.compatible(x[1])
        if isinstance(y, str):  # a scalar literal operand
            yt, ys, yb = f"{y}: f32", (), abs(float(y))
        else:
            yt, ys, yb = self.use(y), y[1], self.bound[y[0]]
        out = broadcast(x[1], ys)
        assert out is not None
        xb = self.bound[x[0]]
        op = self.r.choice(BINARY)
        if op == "divide_safe":
            if isinstance(y, str):
                self.emit(out, xb / abs(float(y)), f"divide {self.use(x)}, {yt}")
                return
            sq = self.emit(ys, yb * yb, f"multiply {yt}, {yt}")
            d = self.emit(ys, 1.5 + yb * yb, f"add 1.5: f32, {self.use(sq)}")
            self.emit(out, xb / 1.5, f"divide {self.use(x)}, {self.use(d)}")
            return
        a, b = self.use(x), yt
        if self.r.random() < 0.3:
            a, b = b, a
        bound = {"add": xb + yb, "subtract": xb + yb, "multiply": xb * yb}.get(op, max(xb, yb))
        self.emit(out, bound, f"{op} {a}, {b}")

    def dot(self) -> None:
        x = self.pick()
        s = x[1]
        if len(s) == 1 and self.r.random() < 0.4:  # two vectors give a scalar
            y = self.of_shape(s)
            bound = s[0] * self.bound[x[0]] * self.bound[y[0]]
            self.emit((), bound, f"dot {self.use(x)}, {self.use(y)}")
            return
        if len(s) != 2:
            x = self.of_shape((self.r.randint(1, 3), self.r.randint(1, 3)))
            s = x[1]
        n = self.r.randint(1, 3)
        if self.r.random() < 0.5:
            y = self.of_shape((s[1], n))
        else:  # through a transpose
            z = self.of_shape((n, s[1]))
            y = self.emit((s[1], n), self.bound[z[0]], f"transpose {self.use(z)}")
        bound = s[1] * self.bound[x[0]] * self.bound[y[0]]
        self.emit((s[0], n), bound, f"dot {self.use(x)}, {self.use(y)}")

    def transpose(self) -> None:
        x = self.pick()
        self.emit(tuple(reversed(x[1])), self.bound[x[0]], f"transpose {self.use(x)}")

    def reduce(self) -> None:
        x = self.pick()
        if not x[1]:
            x = self.of_shape(self.r.choice(((3,), (2, 3), (3, 1))))
        s = x[1]
        dims = sorted(self.r.sample(range(len(s)), self.r.randint(1, len(s))))
        self.emit(*self.summed(x, dims))

    def summed(self, x: Value, dims: list[int]) -> tuple[Shape, float, str]:
        s = x[1]
        out = tuple(d for i, d in enumerate(s) if i not in dims)
        bound = self.bound[x[0]] * math.prod(s[i] for i in dims)
        along = ", ".join(map(str, dims))
        return out, bound, f"reduce {self.use(x)} by add init 0: f32 along {along}"

    def shape_cast(self) -> None:
        x = self.pick()
        s = x[1]
        n = math.prod(s)
        options: list[Shape] = [(a, b) for a in (1, 2, 3) for b in (1, 2, 3) if a * b == n]
        options += [(n,)] if n <= 3 else []
        options += [()] if n == 1 else []
        options = [o for o in options if o != s] or [s]
        to = self.r.choice(options)
        text = "scalar" if not to else " x ".join(map(str, to))
        self.emit(to, self.bound[x[0]], f"shapeCast {self.use(x)} to {text}")

    def pad_or_squeeze(self) -> None:
        x = self.pick()
        s, b = x[1], self.bound[x[0]]
        ones = [i for i, d in enumerate(s) if d == 1]
        if ones and (len(s) == 2 or self.r.random() < 0.5):
            i = self.r.choice(ones)
            self.emit(s[:i] + s[i + 1 :], b, f"squeezeShape {self.use(x)} at {i}")
        elif len(s) < 2:
            i = self.r.randint(0, len(s))
            self.emit(s[:i] + (1,) + s[i:], b, f"padShape {self.use(x)} at {i}")
        else:
            self.emit(tuple(reversed(s)), b, f"transpose {self.use(x)}")

    def literal(self) -> None:
        x = self.pick()
        c = self.literal_of(x[1])
        bound = self.bound[x[0]] * self.bound[c[0]]
        self.emit(x[1], bound, f"multiply {self.use(x)}, {self.use(c)}")

    # The function ---------------------------------------------------------------------

    def function(self) -> Generated:
        self.new_argument(self.shape())
        methods = [m for m, _ in MIX]
        weights = [w for _, w in MIX]
        for _ in range(self.size):
            getattr(self, self.r.choices(methods, weights)[0])()
        result = self.values[-1]
        rs = result[1]
        # Every value nobody uses joins the result, so that every argument matters: summed
        # to a scalar first when its shape does not broadcast to the result's.
        for v in list(self.values[:-1]):
            if v[0] in self.used:
                continue
            if broadcast(rs, v[1]) != rs:
                v = self.emit(*self.summed(v, list(range(len(v[1])))))
            bound = self.bound[result[0]] + self.bound[v[0]]
            result = self.emit(rs, bound, f"add {self.use(result)}, {self.use(v)}")
        types = ", ".join(type_text(s) for s in self.args)
        params = ", ".join(f"%a{i}: {type_text(s)}" for i, s in enumerate(self.args))
        rt = type_text(rs)
        body = "\n".join(self.lines)
        text = (
            f'module "generated"\nstage raw\n\nfunc @f: ({types}) -> {rt} {{\n'
            f"'entry({params}):\n{body}\n    return {result[0]}: {rt}\n}}\n"
        )
        return Generated(text, list(self.args))


def random_function(seed: int, size: int = 8) -> Generated:
    return ADGen(seed, size).function()
