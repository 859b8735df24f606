"""Memory and AD-stack instructions: allocation, boxes and reference counts, load/store,
element pointers, copies, the AD tape (push/pop), and trap.

Memory is never shared with NumPy: a cell holds an immutable runtime value. Stack allocations
die when their function returns; any later access through a pointer to them is an error.
"""

from __future__ import annotations

from dlvm.interp.aggregates import runtime_key
from dlvm.interp.errors import InterpreterError
from dlvm.interp.objects import ADStack, Box, Buffer, Pointer, conform, zero_of
from dlvm.interp.registry import impl


def _pointer(value, what: str = "pointer") -> Pointer:
    if value is None:
        raise InterpreterError(f"null {what}")
    return value


def _box(value) -> Box:
    if value is None:
        raise InterpreterError("null box")
    return value


def _stack(value) -> ADStack:
    if value is None:
        raise InterpreterError("null AD stack")
    value.check_live()
    return value


@impl("allocateStack")
def _allocate_stack(frame, inst, args):
    cells = [zero_of(inst.attrs["type"], frame.interp.float64)] * inst.attrs["count"]
    buffer = Buffer(cells, "stack")
    frame.stack_buffers.append(buffer)
    return Pointer(buffer)


@impl("allocateHeap")
def _allocate_heap(frame, inst, args):
    count = int(args[0][()])
    if count <= 0:
        raise InterpreterError(f"heap allocation of {count} elements (must be positive)")
    return Pointer(Buffer([zero_of(inst.attrs["type"], frame.interp.float64)] * count, "heap"))


@impl("allocateBox")
def _allocate_box(frame, inst, args):
    return Box(zero_of(inst.attrs["type"], frame.interp.float64))


@impl("projectBox")
def _project_box(frame, inst, args):
    box = _box(args[0])
    box.buffer.check_live()
    return Pointer(box.buffer)


@impl("retain")
def _retain(frame, inst, args):
    _box(args[0]).retain()
    return ()


@impl("release")
def _release(frame, inst, args):
    _box(args[0]).release()
    return ()


@impl("deallocate")
def _deallocate(frame, inst, args):
    target = args[0]
    if isinstance(target, Box):
        target.buffer.free()
        return ()
    p = _pointer(target)
    if p.index or p.path:
        raise InterpreterError("deallocate needs the pointer an allocation returned")
    p.buffer.free()
    return ()


@impl("load")
def _load(frame, inst, args):
    return _pointer(args[0]).load()


@impl("store")
def _store(frame, inst, args):
    _pointer(args[1]).store(args[0])
    return ()


@impl("elementPointer")
def _element_pointer(frame, inst, args):
    """The first key moves the pointer by whole elements (like LLVM's GEP); the rest index into
    the pointee."""
    keys = tuple(runtime_key(frame, k) for k in inst.attrs["keys"])
    if isinstance(keys[0], str):
        raise InterpreterError(f"the first key of elementPointer must be an index, not #{keys[0]}")
    return _pointer(args[0]).element(keys)


@impl("copy")
def _copy(frame, inst, args):
    """Copies `count` elements; overlapping ranges behave like memmove."""
    src, dst = _pointer(args[0], "source pointer"), _pointer(args[1], "destination pointer")
    count = int(args[2][()])
    if count < 0:
        raise InterpreterError(f"negative copy count {count}")
    values = [src.offset(i).load() for i in range(count)]
    for i, v in enumerate(values):
        dst.offset(i).store(v)
    return ()


@impl("trap")
def _trap(frame, inst, args):
    raise InterpreterError("trap", trap=True)


@impl("createStack")
def _create_stack(frame, inst, args):
    return ADStack()


@impl("destroyStack")
def _destroy_stack(frame, inst, args):
    _stack(args[0]).destroyed = True
    return ()


@impl("push")
def _push(frame, inst, args):
    _stack(args[1]).items.append(args[0])
    return ()


@impl("pop")
def _pop(frame, inst, args):
    stack = _stack(args[0])
    if not stack.items:
        raise InterpreterError("pop from an empty AD stack")
    value = stack.items.pop()
    # The tape is untyped: check that what comes off is what the pop expects.
    return conform(inst.attrs["type"], value, frame.interp.float64, False, "popped value")
