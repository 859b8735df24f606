"""A library's LLVM module compiled in parts side by side: LLVM optimises and compiles one
module on one core, and most of a build's time is spent there. The module is cut into parts of
about PART_SIZE instructions (a kernel's entry and body stay together), each part is optimised
and compiled to an object in a forked process, and the objects are linked as one. The parts
depend on the module only, never on the number of processes, so the library is the same
whatever machine builds it."""

from __future__ import annotations

import os
import pickle
import re
import signal
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import BinaryIO, NoReturn

from llvmlite import ir

from dlvm.codegen.errors import CodegenError

# Small parts balance best (each process takes the next part when it is done): a part costs
# little more than its functions, and a kernel's LLVM time is far from proportional to its size.
PART_SIZE = 1000  # llvmlite instructions
MAX_PARTS = 32

_REFERENCE = re.compile(r'@"[^"]*"')  # llvmlite quotes every global's name, escaping any '"'

Unit = Sequence[ir.Function]  # functions that go into one part together


def part_count(units: Sequence[Unit]) -> int:
    """How many parts a module of these units is cut into: one per PART_SIZE instructions, at
    most MAX_PARTS and one per unit."""
    size = sum(_size(f) for unit in units for f in unit)
    return max(1, min(MAX_PARTS, len(units), size // PART_SIZE))


def split(m: ir.Module, units: Sequence[Unit], count: int) -> list[str]:
    """The LLVM IR text of `count` parts of m. Every function of `units` is defined in one
    part, mutable globals in the first; other definitions (small helpers, constants) are
    copied into each part that uses them. What one part uses of another gets hidden
    visibility, so it stays inside the library. One part is m itself."""
    if count == 1:
        return [str(m)]
    values = list(m.globals.values())
    home = _assign(values, units, count)
    texts = {g: _text(g) for g in values if _defined(g)}
    copies = {g.get_reference(): g for g in values if g in texts and _local(g) and g not in home}
    owned = [[g for g in home if home[g] == part] for part in range(count)]
    used = [_used([texts[g] for g in own], texts, copies) for own in owned]
    for g, part in home.items():
        others = (refs for p, (_, refs) in enumerate(used) if p != part)
        if _local(g) and any(g.get_reference() in refs for refs in others):
            g.linkage = "hidden"  # llvmlite writes a visibility where the linkage goes
            texts[g] = _text(g)
    head = [f'target triple = "{m.triple}"', f'target datalayout = "{m.data_layout}"']
    head += [t.get_declaration() for t in m.get_identified_types().values()]
    parts = []
    for own, (copied, _) in zip(owned, used):
        lines = [*head, *(texts[g] for g in values if g in own or g in copied)]
        lines += [_declaration(g) for g in values if g not in own and not _local(g)]
        parts.append("\n".join(lines + _metadata(m)))
    return parts


def _assign(
    values: list[ir.GlobalValue], units: Sequence[Unit], count: int
) -> dict[ir.GlobalValue, int]:
    """Each unit's part, the largest first into the emptiest; the one copy of each mutable or
    external variable, and each external function no unit holds, into part 0."""
    loads = [0] * count
    home: dict[ir.GlobalValue, int] = {}
    for unit in sorted(units, key=lambda u: -sum(_size(f) for f in u)):
        part = loads.index(min(loads))
        loads[part] += sum(_size(f) for f in unit)
        home.update((f, part) for f in unit)
    for g in values:
        constant = isinstance(g, ir.GlobalVariable) and g.global_constant and _local(g)
        helper = isinstance(g, ir.Function) and _local(g)
        if _defined(g) and g not in home and not constant and not helper:
            home[g] = 0
    return home


def run_forked(jobs: Sequence[Callable[[], bytes]], workers: int) -> list[bytes]:
    """The results of `jobs`, in order, computed by `workers` processes: this one and forked
    children, each taking the next job not yet taken until none is left. One worker, or no
    fork, runs them all here."""
    workers = max(1, min(workers, len(jobs)))
    if workers == 1 or not hasattr(os, "fork"):
        return [job() for job in jobs]
    assert len(jobs) < 256, "a job is taken as one byte"
    tasks, queue = os.pipe()
    os.write(queue, bytes(range(len(jobs))))  # each read of one byte takes one job
    os.close(queue)
    children: list[tuple[int, BinaryIO]] = []
    try:
        for _ in range(workers - 1):
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: never returns into the caller
                os.close(read)
                _child(write, tasks, jobs)
            os.close(write)
            children.append((pid, os.fdopen(read, "rb")))
        results = dict(_take(tasks, jobs))
        for pid, pipe in children:
            results.update(_collect(pid, pipe))
    finally:
        os.close(tasks)
        for pid, pipe in children:
            pipe.close()
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
    return [results[i] for i in range(len(jobs))]


def _take(tasks: int, jobs: Sequence[Callable[[], bytes]]) -> Iterator[tuple[int, bytes]]:
    while taken := os.read(tasks, 1):
        yield taken[0], jobs[taken[0]]()


def _child(write: int, tasks: int, jobs: Sequence[Callable[[], bytes]]) -> NoReturn:
    """Sends back the results of the jobs it takes, or the exception of the first that fails
    (raised again in the parent as if it had run the job)."""
    status = 1
    try:
        with os.fdopen(write, "wb") as pipe:
            try:
                outcome: object = list(_take(tasks, jobs))
            except BaseException as e:  # noqa: BLE001 - every failure goes to the parent
                outcome = e
            try:
                pickle.dump(outcome, pipe)
            except Exception:  # noqa: BLE001 - an exception pickle cannot carry
                pickle.dump(CodegenError(traceback.format_exc()), pipe)
        status = 0
    finally:
        os._exit(status)


def _collect(pid: int, pipe: BinaryIO) -> list[tuple[int, bytes]]:
    try:
        outcome = pickle.load(pipe)
    except (EOFError, pickle.UnpicklingError):
        _, status = os.waitpid(pid, 0)
        raise CodegenError(f"a code generation process died (status {status})") from None
    os.waitpid(pid, 0)
    if isinstance(outcome, BaseException):
        raise outcome
    assert isinstance(outcome, list)
    return outcome


def _alive(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False  # already reaped
    return done == 0


def _text(g: ir.GlobalValue) -> str:
    """g's definition. A variable's is not str(g), which llvmlite keeps once made: linkages
    change in between."""
    if isinstance(g, ir.Function):
        return str(g)
    buf = [f"{g.get_reference()} = "]
    g.descr(buf)
    return "".join(buf).rstrip()


def _size(f: ir.Function) -> int:
    return sum(len(b.instructions) for b in f.blocks)


def _local(g: ir.GlobalValue) -> bool:
    return g.linkage in ("internal", "private")


def _defined(g: ir.GlobalValue) -> bool:
    if isinstance(g, ir.Function):
        return bool(g.blocks)
    return isinstance(g, ir.GlobalVariable) and g.initializer is not None


def _used(
    work: list[str], texts: dict[ir.GlobalValue, str], copies: dict[str, ir.GlobalValue]
) -> tuple[set[ir.GlobalValue], set[str]]:
    """What definitions `work` use: the copies they need, directly or not, and every global
    they name."""
    copied: set[ir.GlobalValue] = set()
    refs: set[str] = set()
    while work:
        for ref in _REFERENCE.findall(work.pop()):
            refs.add(ref)
            g = copies.get(ref)
            if g is not None and g not in copied:
                copied.add(g)
                work.append(texts[g])
    return copied, refs


def _declaration(g: ir.GlobalValue) -> str:
    """g as defined elsewhere (another part, the runtime, libc, LLVM)."""
    visibility = "hidden " if g.linkage == "hidden" else ""
    if isinstance(g, ir.Function):
        args = [str(t) for t in g.ftype.args] + (["..."] if g.ftype.var_arg else [])
        return f"declare {visibility}{g.ftype.return_type} {g.get_reference()}({', '.join(args)})"
    assert isinstance(g, ir.GlobalVariable)
    kind = "constant" if g.global_constant else "global"
    align = f", align {g.align}" if g.align is not None else ""
    return f"{g.get_reference()} = external {visibility}{kind} {g.value_type}{align}"


def _metadata(m: ir.Module) -> list[str]:
    """The module's metadata, as llvmlite writes it at the end of a module."""
    named = [
        f"!{name} = !{{ {', '.join(op.get_reference() for op in md.operands)} }}"
        for name, md in m.namedmetadata.items()
    ]
    return named + [str(md) for md in m.metadata]
