"""The limits telc puts on a program, each a located error (docs/tel.md, "Limits"): how deeply
expressions and statements nest, how many digits a number has, how deeply modules use each
other and compiling recurses, how large a tensor is; and `deep_stack`, which runs the front end
on a thread whose stack holds the deepest recursion those limits allow."""

from __future__ import annotations

import functools
import math
import sys
import threading
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar, cast

from lark import Tree

from dlvm.diagnostics import Diagnostic, Location, Source
from dlvm.ir.types import MAX_TENSOR_BYTES

# The bytes of a TEL file. Parsing takes about 8 µs and 250 bytes of memory per byte of TEL, so
# a file at the limit takes half a minute and a GiB; a model is a few KiB. (Any source file,
# IR included, is at most dlvm.sources.MAX_SOURCE_BYTES.)
MAX_TEL_BYTES = 4 * 1024 * 1024
# How deeply one item's expressions and statements may nest: what a person writes stays far
# below (clang's default bracket depth is 256 too), and every walk of the syntax tree stays
# well within deep_stack. A chain of one operator (`a + b + c + …`) is one level, however long.
MAX_NESTING = 256
# The digits of a number literal: more than any number TEL holds would ever need (an i64 has
# 19, the largest f64 309 before its point, and 17 significant digits name any f64).
MAX_DIGITS = 400
# How many modules deep `use` may go (a uses b, which uses c…).
MAX_USE_DEPTH = 256
# How deeply compiling may recurse: nested expressions and blocks, counted on through the
# functions they call and the dims and consts they name (each a body compiled inside the call).
MAX_DEPTH = 2048

# The parse-tree nodes that make one level of nesting (grammar.lark's rule names): of an
# expression, operators, postfix forms, calls, aggregates and conditionals; of statements, those
# that open a block; of a type, tuples. Each counts on its own: an expression inside 200 nested
# `if`s may still nest 256 levels.
EXPRESSIONS = frozenset(
    {
        "binary", "unary", "transpose", "index", "call", "reshape", "conditional", "tuple",
        "concat", "dim_binary",
    }
)  # fmt: skip
STATEMENTS = frozenset({"if_statement", "for_statement"})
TYPES = frozenset({"tuple_type"})  # `((f32, f32), f32)`


def digits(number: str) -> int:
    """The significant digits of a number's text (`007.50e3`: 3), exponent aside."""
    mantissa = number.strip().lower().lstrip("+-").partition("e")[0]
    return sum(c.isdigit() for c in mantissa.lstrip("0._"))


def too_large(dtype_bytes: int, shape: tuple[int, ...], shown: Callable[[], str]) -> str | None:
    """Why a tensor of this shape and element size is larger than a tensor may be (`shown()`
    writes its type as a message does), or None when it is not."""
    size = math.prod(shape) * dtype_bytes
    if size <= MAX_TENSOR_BYTES:  # the IR's limit, dlvm.ir.types: fewer than 2**62 bytes
        return None
    return (
        f"{shown()} is too large: {size} bytes (2**{math.log2(size):.4g}); "
        "a tensor must take fewer than 2**62 bytes"
    )


def size_error(source: Source) -> Diagnostic | None:
    """The error for a TEL file of more than MAX_TEL_BYTES, at its start; None if it is not."""
    text = source.text
    if len(text) * 4 <= MAX_TEL_BYTES:  # fewer bytes than that, whatever the characters
        return None
    size = len(text.encode("utf-8", "surrogatepass"))
    if size <= MAX_TEL_BYTES:
        return None
    mib = MAX_TEL_BYTES // (1024 * 1024)
    return Diagnostic(
        f"this file has {size} bytes of TEL; telc reads at most {MAX_TEL_BYTES} ({mib} MiB)",
        Location(source, 0),
        notes=(help_line("split it into modules that `use` each other"),),
    )


def help_line(text: str) -> Diagnostic:
    """A `help:` line under a diagnostic, saying how to fix it."""
    return Diagnostic(f"  help: {text}", None, "detail")


def nesting_errors(tree: Tree, source: Source) -> list[Diagnostic]:
    """One diagnostic for each item of the parse tree whose expressions or statements nest
    deeper than MAX_NESTING, at the node one level too deep. The walk keeps its own stack, so it
    holds for any depth, before anything that recurses sees the tree."""
    diags = []
    for item in tree.children:
        if not isinstance(item, Tree):
            continue
        # Each node with the depths of expressions, statements and types it is in.
        stack: list[tuple[Tree, int, int, int]] = [(item, 0, 0, 0)]
        while stack:
            node, expr, stmt, typ = stack.pop()
            if node.data in STATEMENTS:
                expr, stmt = 0, stmt + 1
            elif node.data in EXPRESSIONS:
                expr += 1
            elif node.data in TYPES:
                typ += 1
            if max(expr, stmt, typ) > MAX_NESTING:
                diags.append(_too_deep(node, source))
                break
            children = reversed(node.children)
            stack.extend((c, expr, stmt, typ) for c in children if isinstance(c, Tree))
    return diags


# What is nested too deeply, by the kind of node one level too deep, and how to fix it.
_WHAT = {**{n: "statements" for n in STATEMENTS}, **{n: "type" for n in TYPES}}
_FIXES = {
    "statements": "move the inner statements into a function",
    "type": "make the tuple type flatter",
    "expression": "give a part of it a name: `let` in a function, a `hidden` declaration in "
    "a model",
}


def _too_deep(node: Tree, source: Source) -> Diagnostic:
    what = _WHAT.get(node.data, "expression")
    start = node.meta.start_pos if not node.meta.empty else 0
    fix = _FIXES[what]
    return Diagnostic(
        f"{what} nested deeper than {MAX_NESTING} levels",
        Location(source, start),
        notes=(help_line(fix),),
    )


# deep_stack ------------------------------------------------------------------------------

# The most Python frames one level of MAX_DEPTH takes is 7 (a call of a built-in: the call, the
# registry's check and match, the evaluation of an argument); tests/unit/test_tel_limits.py
# measures the deepest programs. Twice that, and what the driver and a test runner need below
# the front end, make the recursion limit.
FRAMES_PER_LEVEL = 16
FRAMES_BELOW = 1000
RECURSION_LIMIT = MAX_DEPTH * FRAMES_PER_LEVEL + FRAMES_BELOW
# The thread's stack: Python 3.11 and later keep Python frames on the heap, and a program at
# MAX_DEPTH then needs under 2 MiB of C stack; 3.10 puts each Python call on the C stack too (a
# few hundred bytes each, some 10 MiB at RECURSION_LIMIT). Only the pages used are committed.
STACK_BYTES = 64 * 1024 * 1024

P = ParamSpec("P")
T = TypeVar("T")
_lock = threading.Lock()
_running = 0  # deep_stack calls in progress
_saved_limit = 0  # the recursion limit before the first of them


def deep_stack(work: Callable[P, T]) -> Callable[P, T]:
    """`work` run on a thread with a STACK_BYTES stack, under a recursion limit of at least
    RECURSION_LIMIT (restored when the last such call ends), so that the recursion the limits
    allow always fits: Python's defaults (1000 frames, 8 MiB of stack) hold about 100 nested
    calls. Its result or exception is the caller's; a thread that is already deep_stack's runs
    `work` in place."""

    @functools.wraps(work)
    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        if getattr(_here, "deep", False):
            return work(*args, **kwargs)
        outcome: list[Any] = []

        def body() -> None:
            _here.deep = True
            try:
                outcome.append((True, work(*args, **kwargs)))
            except BaseException as e:  # noqa: BLE001 - raised again on the caller's thread
                outcome.append((False, e))
            finally:
                _here.deep = False

        _enter()
        try:
            thread = _start(body)
            if thread is None:  # no thread to be had: in place, within the raised limit
                body()
            else:
                thread.join()
        finally:
            _leave()
        ok, value = outcome[0]
        if not ok:
            raise value
        return cast(T, value)

    return run


_here = threading.local()


def _start(body: Callable[[], None]) -> threading.Thread | None:
    """A thread running body with a STACK_BYTES stack, or None if the system refuses one."""
    with _lock:
        try:
            size = threading.stack_size(STACK_BYTES)
        except (ValueError, RuntimeError):
            return None
        try:
            thread = threading.Thread(target=body, name="telc-front-end", daemon=True)
            thread.start()
        except RuntimeError:  # "can't start new thread": no memory for the stack
            return None
        finally:
            threading.stack_size(size)
    return thread


def _enter() -> None:
    global _running, _saved_limit
    with _lock:
        if _running == 0:
            _saved_limit = sys.getrecursionlimit()
        _running += 1
        if sys.getrecursionlimit() < RECURSION_LIMIT:
            sys.setrecursionlimit(RECURSION_LIMIT)


def _leave() -> None:
    global _running
    with _lock:
        _running -= 1
        if _running == 0 and sys.getrecursionlimit() == max(_saved_limit, RECURSION_LIMIT):
            sys.setrecursionlimit(_saved_limit)
