"""NNKit's just-in-time compiler: a staged module compiled into a shared library as telc builds
a model, in two tiers.

The first call of a new signature waits only for the first tier: LLVM at telc -O1's level
(dlvm.codegen.llgen: clean-up passes, compact kernels, code generation at -O1), linked with gold
where it is installed, into a private directory, loaded at once.
Meanwhile another Python process builds the second tier, the library at LLVM -O2, into the disk
cache ($DLVM_CACHE_DIR/nnkit, else ~/.cache/dlvm/nnkit, keyed by a hash of the IR and of the
compiler); when it is there, a thread of this process loads it and calls go to it from then on.
The optimised build runs in a process of its own, not a thread, so that it never shares LLVM's
state with this process nor holds its interpreter lock. A library already in the disk cache is
loaded straight away, once it matches its digest (a damaged one is built again).
DLVM_JIT_TIERS=1 builds the -O2 library on the first call instead."""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlvm import artifacts
from dlvm.ir.printer import module_text
from dlvm.ir.values import Module
from dlvm.library_check import Refused, check_library

LIBRARY = "nnkit.so"
FIRST_TIER, SECOND_TIER = 1, 2  # LLVM levels (dlvm.codegen.llgen.optimise)


class Compiled:
    """A staged module compiled into a library (memory and disk cached) and its entry."""

    # The best library loaded in this process for each IR, by key: each compiled once.
    loaded: dict[str, Any] = {}
    hits = 0  # disk cache hits, for tests

    def __init__(
        self, module: Module, entry: str, tuple_result: bool = False, cuda: bool = False
    ) -> None:
        from dlvm.transforms.differentiation import Differentiation

        self.tuple_result = tuple_result  # a gradient returns a tuple, as its IR type says
        self.cuda = cuda  # the library runs on CUDA GPUs too (in one tier: -O2)
        self.raw = module_text(module)
        Differentiation().run(module)
        self.module = module
        self.entry = entry
        # A changed compiler never reuses an old library.
        key = self.raw + artifacts.compiler_digest() + (" cuda" if cuda else "")
        self.key = hashlib.sha256(key.encode()).hexdigest()[:32]

    def cached(self) -> Path:
        """Where the disk cache keeps this IR's -O2 library."""
        return cache_dir() / self.key / LIBRARY

    def intact(self) -> Path | None:
        """The -O2 library in the disk cache when it is there and matches its digest; a damaged
        one is removed, so that it is built again."""
        path = self.cached()
        if not path.is_file():
            return None
        try:
            check_library(str(path), verify=True)
        except (Refused, OSError):
            doomed = path.parent.with_name(f".remove-{self.key}-{os.getpid()}")
            with contextlib.suppress(OSError):  # another process may have removed it first
                os.rename(path.parent, doomed)
            shutil.rmtree(doomed, ignore_errors=True)
            return None
        Compiled.hits += 1
        return path

    def library(self) -> Path:
        """The -O2 library, from the disk cache or built into it."""
        path = self.cached()
        if self.intact() is not None:
            return path
        # Built in a private directory renamed into place whole: concurrent builds of one key
        # never see half a library (the same key gives the same bytes, so either may win).
        path.parent.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(dir=path.parent.parent, prefix=".build-"))
        try:
            self.build(work / LIBRARY)
            try:
                os.replace(work, path.parent)
            except OSError:
                if not path.is_file():
                    raise
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return path

    def build(self, path: Path, opt: int = SECOND_TIER) -> None:
        """The library at `path` (and its header): the -O2 pipeline, compute stages, LLGen at
        LLVM level `opt`."""
        from dlvm.codegen.build import build_library
        from dlvm.codegen.spec import module_spec
        from dlvm.transforms.pass_manager import PassManager
        from dlvm.transforms.pipelines import PIPELINES

        module = copy.deepcopy(self.module)
        PassManager(True).run_pipeline(module, PIPELINES[2])
        # LLVM at -O2, where telc builds at -O3: -O2 took a quarter less time (138 vs 180 ms on
        # a 32x784x128 layer) for the same kernel speed.
        build_library(module, module_spec(module, "nnkit"), path, opt=opt, cuda=self.cuda,
                      quick_link=opt == FIRST_TIER)  # fmt: skip

    def model(self, device: str = "cpu") -> Any:
        """The best library loaded for this IR on `device`: from memory, from the disk cache,
        or built."""
        slot = self.key if device == "cpu" else f"{self.key}@{device}"
        model = Compiled.loaded.get(slot)
        if model is None:
            from dlvm.loader import load

            if self.cuda:
                model = load(self.library(), device=device)
            elif (path := self.intact()) is not None:
                model = load(path)
            elif os.environ.get("DLVM_JIT_TIERS", "2") == "1":
                model = load(self.library())
            else:
                with tempfile.TemporaryDirectory(prefix="dlvm-nnkit-") as tmp:
                    self.build(Path(tmp) / LIBRARY, FIRST_TIER)
                    model = load(Path(tmp) / LIBRARY)  # mapped: the file may go
                OptimisedBuild.start(self)
            Compiled.loaded[slot] = model
        return model

    def entry_call(self) -> Callable[..., Any]:
        """What a call with arrays comes down to: the library's entry point. Unchecked: the
        staged function's signature key (the one caller) matched each array's type, dtype and
        shape to this compilation's."""
        return self if self.tuple_result else self.model().entries[self.entry].unsafe_direct()

    def on_optimised(self, callback: Callable[[], None]) -> None:
        """Calls `callback` once the optimised library replaces the first tier's (at once if
        that has happened, or needs not)."""
        with OptimisedBuild.lock:
            build = OptimisedBuild.running.get(self.key)
            if build is not None:
                build.listeners.append(callback)
                return
        callback()

    def __call__(self, *args: Any, device: str = "cpu", out: Any = None) -> Any:
        entry = self.model(device).entries[self.entry]
        result = entry(*args) if out is None else entry(*args, out=out)
        return (result,) if self.tuple_result and not isinstance(result, tuple) else result

    def llvm(self) -> str:
        from dlvm.codegen.build import schedule
        from dlvm.codegen.llgen import compile_object

        return compile_object(schedule(copy.deepcopy(self.module)))[1]


class OptimisedBuild:
    """The second tier (the optimised build) of one IR, made by another process, and the
    thread that starts it, waits for it, loads the library and tells the listeners."""

    running: dict[str, OptimisedBuild] = {}
    lock = threading.Lock()
    # As many optimised builds at a time as there are CPUs: a loop over many new shapes
    # queues them rather than starting a process for each at once.
    slots = threading.BoundedSemaphore(
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    )

    def __init__(self, compiled: Compiled) -> None:
        self.key = compiled.key
        self.entry = compiled.entry
        # Fixed now, the environment included: it may change before the build starts.
        self.path = compiled.cached()
        self.job = json.dumps({"ir": compiled.raw, "entry": compiled.entry, "key": compiled.key})
        self.env = dict(os.environ, DLVM_CACHE_DIR=str(artifacts.cache_dir()))
        # The child imports this very dlvm, installed or not.
        root = str(Path(__file__).resolve().parents[2])
        self.env["PYTHONPATH"] = os.pathsep.join(filter(None, (root, os.environ.get("PYTHONPATH"))))
        self.listeners: list[Callable[[], None]] = []
        self.thread = threading.Thread(target=self.run, daemon=True)

    @classmethod
    def start(cls, compiled: Compiled) -> None:
        with cls.lock:
            if compiled.key in cls.running:
                return
            build = cls.running[compiled.key] = OptimisedBuild(compiled)
        build.thread.start()

    def run(self) -> None:
        model = None
        try:
            with OptimisedBuild.slots:
                process = subprocess.run(
                    [sys.executable, "-c", "from dlvm.nnkit.jit import main; main()"],
                    input=self.job, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                    text=True, env=self.env,
                )  # fmt: skip
            why = process.stderr.strip() or f"exit status {process.returncode}"
            if process.returncode == 0 and self.path.is_file():
                from dlvm.loader import load

                model = load(self.path)
        except Exception as e:  # whatever happens, the first tier goes on serving
            why = f"{type(e).__name__}: {e}"
        finally:
            if model is None:
                warnings.warn(
                    f"NNKit: the optimised build of @{self.entry} failed, so it keeps its "
                    f"first compilation: {why}",
                    RuntimeWarning,
                    stacklevel=1,
                )
            with OptimisedBuild.lock:
                if model is not None:
                    Compiled.loaded[self.key] = model
                del OptimisedBuild.running[self.key]
            for callback in self.listeners:
                callback()

    @classmethod
    def wait(cls) -> None:
        """Until every optimised build started so far is loaded (or has failed)."""
        while True:
            with cls.lock:
                threads = [build.thread for build in cls.running.values()]
            if not threads:
                return
            for t in threads:
                t.join()


def wait_optimised() -> None:
    """Waits until every staged function compiled so far runs its optimised (-O2) library."""
    OptimisedBuild.wait()


def main() -> None:
    """The second tier's process: the job (IR text, entry, key) on stdin; the library into the
    disk cache, or a message on stderr and exit status 1."""
    from dlvm.diagnostics import DiagnosticError
    from dlvm.ir.parser import parse_module

    job = json.load(sys.stdin)
    try:
        compiled = Compiled(parse_module(job["ir"], "<nnkit>"), job["entry"])
    except DiagnosticError as e:
        sys.exit(f"the staged IR does not parse again: {e}")
    if compiled.raw != job["ir"]:
        sys.exit("the staged IR prints differently once parsed again: not cached")
    if compiled.key != job["key"]:
        sys.exit("the compiler's files changed since the staging process started: not cached")
    try:
        compiled.library()
    except Exception as e:  # told to the staging process in one line, as its warning
        sys.exit(f"{type(e).__name__}: {e}")


def cache_dir() -> Path:
    """Where compiled staged functions are kept: the compiler's own cache, under nnkit/."""
    return artifacts.cache_dir() / "nnkit"
