"""The interpreter proper: frames, the block-by-block execution loop, calls and terminators.

`Interpreter(module).run("f", args)` runs one function; `run_function` is the one-shot form.
Each instruction is dispatched through `IMPLS` (filled by the other modules of this package);
its result is checked against the instruction's type, so ill-typed IR or a wrong
implementation fails at the instruction that caused it.
"""

from __future__ import annotations

import sys
from typing import Any, NamedTuple, cast

import numpy as np

# Importing the implementation modules fills IMPLS.
from dlvm.interp import aggregates, convolution, elementwise, memory, reductions, tensor  # noqa: F401
from dlvm.interp.aggregates import literal_value
from dlvm.interp.errors import InterpreterError
from dlvm.interp.objects import Buffer, EnumValue, Pointer, conform, np_dtype, zero_of
from dlvm.interp.registry import IMPLS, impl
from dlvm.ir.types import FunctionType, TensorType, Type, canonical
from dlvm.ir.values import (
    EXTERN,
    Argument,
    Block,
    Function,
    GlobalVariable,
    Instruction,
    LiteralValue,
    Module,
    Value,
)


class Jump(NamedTuple):
    """A terminator's decision: continue at `block` with `args` bound to its arguments."""

    block: Block
    args: list


class Return(NamedTuple):
    value: Any


class _Step(NamedTuple):
    """One instruction, ready to run: its implementation and the tensor shape and dtype its
    result must have (None for non-tensor results)."""

    inst: Instruction
    run: Any
    expected: tuple[tuple[int, ...], np.dtype] | None


class Frame:
    """The state of one function activation: its environment of computed values."""

    __slots__ = ("interp", "function", "env", "stack_buffers")

    def __init__(self, interp: Interpreter, function: Function) -> None:
        self.interp = interp
        self.function = function
        self.env: dict[Value, Any] = {}
        self.stack_buffers: list[Buffer] = []

    def value(self, v: Value) -> Any:
        """The runtime value of an operand (or of a value inside a literal or attribute)."""
        if isinstance(v, (Instruction, Argument)):
            try:
                return self.env[v]
            except KeyError:
                raise InterpreterError(f"{v.ref_text()} is used before it is defined") from None
        if isinstance(v, LiteralValue):
            return self.interp.literal(v, self)
        if isinstance(v, GlobalVariable):
            return self.interp.global_pointer(v)
        if isinstance(v, Function):
            return v
        raise InterpreterError(f"cannot evaluate {v!r}")  # pragma: no cover

    def dtype(self, ty: Type) -> np.dtype:
        return self.interp.dtype(ty)


class Interpreter:
    """Runs functions of one module. Global variables and the random generator live as long as
    the interpreter, so successive `run`s share them.

    float64: run every float tensor in float64 (inputs cast, literals and casts to floats give
    f64), for gradient checking. seed: seeds `random`. check: verify each result's shape and
    dtype against the instruction's type. max_depth: the call depth that counts as runaway
    recursion.
    """

    def __init__(
        self,
        module: Module,
        *,
        float64: bool = False,
        seed: int | None = None,
        check: bool = True,
        max_depth: int = 1000,
    ) -> None:
        self.module = module
        self.float64 = float64
        self.check = check
        self.max_depth = max_depth
        self.rng = np.random.default_rng(seed)
        self.depth = 0
        self._globals: dict[GlobalVariable, Pointer] = {}
        self._plans: dict[Function, tuple[int, dict[Block, list[_Step]]]] = {}
        self._dtypes: dict[Type, np.dtype] = {}
        self._literals: dict[LiteralValue, Any] = {}

    # Entry points ---------------------------------------------------------------------------

    def run(self, function: str | Function, args: list | tuple = ()) -> Any:
        """Calls a function with Python/NumPy arguments, checked and converted against its
        parameter types; returns its result (a tuple for tuple results, `()` for void)."""
        fn = self.module.function_named(function) if isinstance(function, str) else function
        if fn is None:
            raise InterpreterError(f"no function @{function} in module '{self.module.name}'")
        params = cast(FunctionType, fn.type).arguments
        if not isinstance(args, (list, tuple)):
            raise InterpreterError(f"arguments of @{fn.name} must be a list, got {type(args)}")
        if len(args) != len(params):
            raise InterpreterError(f"@{fn.name} takes {len(params)} arguments, {len(args)} given")
        values = [
            conform(ty, a, self.float64, True, f"argument {i} of @{fn.name}")
            for i, (ty, a) in enumerate(zip(params, args))
        ]
        old_limit = sys.getrecursionlimit()
        # A call nests a few Python frames; leave room for max_depth of them.
        sys.setrecursionlimit(max(old_limit, 8 * self.max_depth + 2000))
        try:
            with np.errstate(all="ignore"):
                result = self.call(fn, values)
        except RecursionError as e:
            raise InterpreterError(
                f"Python recursion limit reached while running @{fn.name}; "
                "lower max_depth or look for runaway recursion"
            ) from e
        finally:
            sys.setrecursionlimit(old_limit)
        return _export(result)

    def call(self, fn: Function, args: list) -> Any:
        """Calls a function on runtime values (no conversion)."""
        if fn.declaration == EXTERN:
            raise InterpreterError(f"cannot call @{fn.name}: it is an [extern] declaration")
        if fn.gradient is not None:
            raise InterpreterError(
                f"cannot call @{fn.name}: it is a gradient declaration without a body "
                "(run differentiation first)"
            )
        if not fn.blocks:
            raise InterpreterError(f"cannot call @{fn.name}: it has no body")
        if self.depth >= self.max_depth:
            raise InterpreterError(
                f"call depth limit {self.max_depth} exceeded calling @{fn.name} "
                "(runaway recursion?)"
            )
        self.depth += 1
        frame = Frame(self, fn)
        try:
            return self._execute(frame, self._plan(fn), args)
        finally:
            self.depth -= 1
            for buffer in frame.stack_buffers:
                buffer.freed = True  # stack memory dies with its function

    # The execution loop ---------------------------------------------------------------------

    def _execute(self, frame: Frame, plan: dict[Block, list[_Step]], args: list) -> Any:
        env = frame.env
        fn = frame.function
        block = fn.blocks[0]
        while True:
            if len(args) != len(block.arguments):
                raise InterpreterError(
                    f"block '{block.name} of @{fn.name} takes {len(block.arguments)} "
                    f"arguments, {len(args)} given"
                )
            for arg, v in zip(block.arguments, args):
                env[arg] = v
            for step in plan[block]:
                inst = step.inst
                try:
                    result = step.run(frame, inst, [frame.value(v) for v in inst.operands])
                    if step.expected is not None:
                        _check_tensor(result, step.expected)
                except InterpreterError as e:
                    e.locate(fn.name, inst.opcode, inst.loc)
                    raise
                except RecursionError:
                    raise
                except Exception as e:  # a failure inside NumPy on bad operands
                    err = InterpreterError(f"{type(e).__name__}: {e}")
                    err.locate(fn.name, inst.opcode, inst.loc)
                    raise err from e
                if isinstance(result, Jump):
                    block, args = result
                    break
                if isinstance(result, Return):
                    return result.value
                env[inst] = result
            else:
                raise InterpreterError(f"block '{block.name} of @{fn.name} has no terminator")

    def _plan(self, fn: Function) -> dict[Block, list[_Step]]:
        """The per-block instruction lists with their implementations, cached per revision."""
        cached = self._plans.get(fn)
        if cached is not None and cached[0] == fn.revision:
            return cached[1]
        plan: dict[Block, list[_Step]] = {}
        for block in fn.blocks:
            steps = []
            for inst in block.instructions:
                run = IMPLS.get(inst.opcode)
                if run is None:
                    raise InterpreterError(f"no implementation of '{inst.opcode}'")
                expected = None
                t = canonical(inst.type)
                if self.check and isinstance(t, TensorType):
                    expected = (t.shape, self.dtype(t))
                steps.append(_Step(inst, run, expected))
            plan[block] = steps
        self._plans[fn] = (fn.revision, plan)
        return plan

    # Values ---------------------------------------------------------------------------------

    def dtype(self, ty: Type) -> np.dtype:
        """The NumPy dtype of a tensor type in this run (f64 for floats in float64 mode)."""
        d = self._dtypes.get(ty)
        if d is None:
            t = canonical(ty)
            if not isinstance(t, TensorType):
                raise InterpreterError(f"expected a tensor type, found {ty}")
            d = self._dtypes[ty] = np_dtype(t.dtype, self.float64)
        return d

    def literal(self, use: LiteralValue, frame: Frame) -> Any:
        """A literal's value; literals without nested uses are built once and shared."""
        if use.literal.elements():
            return literal_value(frame, use)
        value = self._literals.get(use)
        if value is None:
            value = literal_value(frame, use)
            if isinstance(value, np.ndarray):
                value.flags.writeable = False  # shared: nobody may change it in place
            self._literals[use] = value
        return value

    def global_pointer(self, g: GlobalVariable) -> Pointer:
        p = self._globals.get(g)
        if p is None:
            p = self._globals[g] = Pointer(Buffer([zero_of(g.value_type, self.float64)], "global"))
        return p

    def global_value(self, name: str) -> Any:
        """The current value of global variable @name."""
        g = self.module.global_named(name)
        if g is None:
            raise InterpreterError(f"no global variable @{name}")
        return _export(self.global_pointer(g).load())


def run_function(
    module: Module, name: str, args: list | tuple = (), float64: bool = False, **options: Any
) -> Any:
    """Runs `@name` of `module` on `args` in a fresh interpreter (options as Interpreter's)."""
    return Interpreter(module, float64=float64, **options).run(name, args)


def _check_tensor(value: Any, expected: tuple[tuple[int, ...], np.dtype]) -> None:
    shape, dtype = expected
    if not isinstance(value, np.ndarray):
        raise InterpreterError(f"result is {type(value).__name__}, expected a tensor")
    if value.shape != shape or value.dtype != dtype:
        raise InterpreterError(
            f"result has shape {value.shape} and dtype {value.dtype}; the instruction's type "
            f"says {shape} and {dtype}"
        )


def _export(value: Any) -> Any:
    """A result safe to hand out: shared (read-only) arrays are copied."""
    if isinstance(value, np.ndarray):
        return value if value.flags.writeable else value.copy()
    if isinstance(value, EnumValue):
        return EnumValue(value.case, tuple(_export(v) for v in value.values))
    if isinstance(value, tuple):
        return tuple(_export(v) for v in value)
    if isinstance(value, list):
        return [_export(v) for v in value]
    if isinstance(value, dict):
        return {k: _export(v) for k, v in value.items()}
    return value


# Calls and terminators -------------------------------------------------------------------------


@impl("apply")
def _apply(frame: Frame, inst: Instruction, args: list) -> Any:
    """Calls `@f` or a function-typed value; errors inside the callee gain a `called from`."""
    callee, actuals = args[0], args[1:]
    if not isinstance(callee, Function):
        raise InterpreterError("call through a null function value")
    params = cast(FunctionType, callee.type).arguments
    if len(actuals) != len(params):
        raise InterpreterError(
            f"@{callee.name} takes {len(params)} arguments, {len(actuals)} given"
        )
    try:
        return frame.interp.call(callee, actuals)
    except InterpreterError as e:
        if e.located:
            where = f" at {inst.loc}" if inst.loc is not None else ""
            e.call_sites.append(f"  called from @{frame.function.name}{where}")
        raise


@impl("branch")
def _branch(frame: Frame, inst: Instruction, args: list) -> Jump:
    dest = inst.attrs["dest"]
    return Jump(dest.block, [frame.value(v) for v in dest.args])


@impl("conditional")
def _conditional(frame: Frame, inst: Instruction, args: list) -> Jump:
    dest = inst.attrs["then"] if bool(args[0]) else inst.attrs["else"]
    return Jump(dest.block, [frame.value(v) for v in dest.args])


@impl("branchEnum")
def _branch_enum(frame: Frame, inst: Instruction, args: list) -> Jump:
    """Jumps to the block of the value's case, passing the case's associated values."""
    value = args[0]
    for case, block in inst.attrs["cases"]:
        if case == value.case:
            return Jump(block, list(value.values))
    raise InterpreterError(f"branchEnum has no case for ?{value.case}")


@impl("return")
def _return(frame: Frame, inst: Instruction, args: list) -> Return:
    return Return(args[0] if args else ())
