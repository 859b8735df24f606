"""The stages `telc` can stop at, as functions: parse (ast), lower (ir), optimise (optimized),
each timed into an optional Timings; the optimisation levels -O0/-O1/-O2. Every failure is a
DiagnosticError carrying located diagnostics."""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from dlvm.codegen.gpus import DEFAULT_GPU
from dlvm.codegen.spec import EntrySpec, LibrarySpec, StateSpec, TensorSpec
from dlvm.diagnostics import Diagnostic, DiagnosticError
from dlvm.ir.types import DATA_TYPES, TensorType, Type
from dlvm.ir.values import Module, fresh_name
from dlvm.ir.verifier import verify
from dlvm.transforms.int8_products import QuantizedWeight, quantize_products, weights_function
from dlvm.transforms.mixed_precision import to_mixed_precision
from dlvm.transforms.pass_manager import PassManager, PassRun
from dlvm.transforms.pipelines import PIPELINES, Pipeline
from telc import __version__
from telc.limits import MAX_DIGITS, digits
from telc.lower import Entry, Interface, lower
from telc.program import Program, load

STAGES = ("tel", "ast", "ir", "optimized", "compute", "schedule", "llvm", "asm", "ptx", "obj", "so")
TARGETS = ("cpu", "cuda")
# What --precision names: the element type train steps compute in (docs/telc.md, "Mixed
# precision"); f32 leaves the module as lowered.
PRECISIONS = ("f32", "bf16")
QUANTIZE_SCHEMES = ("int8",)  # what --quantize accepts (docs/quantization.md)


@dataclass(frozen=True)
class OptLevel:
    """What `-ON` runs: differentiation (at every level: the gradients must exist), above -O0
    function inlining, then the DLVM pipeline of the same level (dlvm.transforms.pipelines);
    and the LLVM optimisation level of code generation (3 also vectorises)."""

    pipeline: Pipeline
    llvm: int
    summary: str

    @property
    def prefix(self) -> tuple[str, ...]:
        """What runs once before the pipeline."""
        # Inlining is with the optimisations because kernel fusion needs it: a callee's work
        # fuses with its caller's only once inlined.
        return ("differentiation",) + (("function-inlining",) if self.pipeline.passes else ())

    @property
    def passes(self) -> tuple[str, ...]:
        """The passes of the first round, in order."""
        return self.prefix + self.pipeline.passes


# The one place telc's levels are defined (docs/telc.md shows them).
OPT_LEVELS: dict[int, OptLevel] = {
    0: OptLevel(PIPELINES[0], 0, "differentiation only, LLVM unoptimised"),
    1: OptLevel(PIPELINES[1], 1, "inlining and clean-up, LLVM clean-up"),
    2: OptLevel(PIPELINES[2], 3, "everything, to a fixpoint, LLVM -O3"),
}
DEFAULT_OPT_LEVEL = 2


@dataclass
class Timings:
    """Each stage's wall time in seconds, in the order the stages ran; `started` (if any) hears
    a stage's name as it begins, which is how `telc build` shows progress. `passes` records
    each optimisation pass (`telc build --verbose`)."""

    stages: list[tuple[str, float]] = field(default_factory=list)
    started: Callable[[str], None] | None = None
    passes: list[PassRun] = field(default_factory=list)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Times the block as stage `name`; a stage that fails is not recorded."""
        if self.started:
            self.started(name)
        t0 = time.perf_counter()
        yield
        self.stages.append((name, time.perf_counter() - t0))


@dataclass(frozen=True)
class BuildOptions:
    """What a build depends on besides its sources (every field is part of the cache key)."""

    defines: tuple[tuple[str, int | float], ...] = ()
    level: int = DEFAULT_OPT_LEVEL
    target: str = "cpu"
    cpu: str = "native"
    gpu: str = DEFAULT_GPU  # the CUDA architecture of --target cuda and --emit ptx
    tf32: bool = False  # f32 products in TF32 on tensor cores (CUDA)
    distributed: bool = False  # each train entry also in halves (docs/distributed.md)
    fast_math: bool = False  # f32 exp, tanh, log of CPU kernels in fast math (docs/ir.md)
    precision: str = "f32"  # what train steps compute in (PRECISIONS)
    quantize: str | None = None  # "int8": infer entries' weight products in int8

    @property
    def values(self) -> dict[str, int | float]:
        return dict(self.defines)

    def flags(self) -> list[str]:
        """The options as canonical command-line flags (`-D B=4` and `-D B=4.0` differ)."""
        fixed = [f"-O{self.level}", f"--target={self.target}", f"--cpu={self.cpu}"]
        if self.target == "cuda":
            fixed.append(f"--gpu={self.gpu}")
        if self.tf32 and self.target == "cuda":  # --tf32 changes nothing on the CPU
            fixed.append("--tf32")
        if self.distributed:
            fixed.append("--distributed")
        if self.fast_math:
            fixed.append("--fast-math")
        if self.precision != "f32":
            fixed.append(f"--precision={self.precision}")
        if self.quantize is not None:
            fixed.append(f"--quantize={self.quantize}")
        return fixed + [f"-D {n}={v!r}" for n, v in sorted(self.defines)]


@dataclass
class Compiled:
    """A lowered program: its module and the interface of its entry points."""

    program: Program
    module: Module
    interface: Interface

    @functools.cached_property
    def spec(self) -> LibrarySpec:
        """The library's description (library_spec of the interface), made once."""
        return library_spec(self.interface)


def parse_defines(items: list[str]) -> dict[str, int | float]:
    """`-D NAME=VALUE` options as numbers; DiagnosticError for a malformed one."""
    out: dict[str, int | float] = {}
    diags = []
    for item in items:
        try:
            name, value = parse_define(item)
        except ValueError as e:
            diags.append(Diagnostic(f"-D {shown_define(item)}: {e}"))
            continue
        out[name] = value
    if diags:
        raise DiagnosticError(diags)
    return out


def parse_define(item: str) -> tuple[str, int | float]:
    """One `-D NAME=VALUE` as its name and number; ValueError saying what is wrong."""
    name, sep, text = item.partition("=")
    if sep and name.isidentifier():
        count = digits(text)
        if count > MAX_DIGITS:
            raise ValueError(f"the number has {count} digits, above the limit of {MAX_DIGITS}")
        try:
            return name, int(text)
        except ValueError:
            try:
                return name, float(text)
            except ValueError:
                pass
    raise ValueError("expected NAME=NUMBER, such as -D B=64")


def shown_define(item: str) -> str:
    """A -D option as a message shows it: a long one cut short."""
    return item if len(item) <= 40 else item[:40] + "…"


def compile_text(
    path: str,
    text: str,
    defines: dict[str, int | float] | None = None,
    timings: Timings | None = None,
    values: dict[str, str] | None = None,
    distributed: bool = False,
    precision: str = "f32",
) -> Compiled:
    """TEL source to verified raw IR and its interface; stages parse and lower (which checks
    shapes and element types in the same walk). `values` fixes inputs of the ONNX models the
    program uses (`--value`); `distributed` adds each train entry's halves (`--distributed`);
    `precision` is what train steps compute in (`--precision`)."""
    timings = timings if timings is not None else Timings()
    with timings.stage("parse"):
        program = load(path, text, defines, values)
    return lower_program(program, timings, distributed, precision)


def lower_program(
    program: Program,
    timings: Timings | None = None,
    distributed: bool = False,
    precision: str = "f32",
) -> Compiled:
    """A loaded program to verified raw IR and its interface (stage lower); with precision
    bf16, each train entry's objective computes in bf16 (dlvm.transforms.mixed_precision)."""
    assert precision in PRECISIONS, precision
    timings = timings if timings is not None else Timings()
    with timings.stage("lower"):
        module, interface = lower(program, distributed)
        if precision == "bf16":
            for name in objectives(interface):
                fn = module.function_named(name)
                assert fn is not None, f"the objective {name} is in the module"
                to_mixed_precision(fn)
        diags = verify(module)
    if diags:
        path = program.root.path
        head = Diagnostic(f"internal error: telc produced IR that does not verify for {path}")
        raise DiagnosticError([head, *diags])
    return Compiled(program, module, interface)


def objectives(interface: Interface) -> list[str]:
    """The objective function of each train entry, once each (entries may share one)."""
    return list(dict.fromkeys(e.objective for e in interface.entries if e.objective))


def optimize(
    module: Module, timings: Timings | None = None, level: int = DEFAULT_OPT_LEVEL
) -> Module:
    """Differentiation, then the optimisations of `level` (stages differentiation and, above
    -O0, optimization); the module ends at stage optimizable."""
    timings = timings if timings is not None else Timings()
    opt = OPT_LEVELS[level]
    manager = PassManager()
    prefix = PassManager.resolve(opt.prefix)
    with timings.stage("differentiation"):
        manager.run(module, prefix[:1])
    if opt.pipeline.passes:
        with timings.stage("optimization"):
            manager.run(module, prefix[1:])
            manager.run_pipeline(module, opt.pipeline)
    timings.passes.extend(manager.runs)
    return module


def quantize(compiled: Compiled, scheme: str, timings: Timings | None = None) -> int:
    """`--quantize int8` (docs/quantization.md): in each infer entry, the products whose
    right operand is a parameter in int8 (dlvm.transforms.int8_products), reading the weights'
    int8 copies, scales and shifts, which become derived states of the library computed by a
    function of the parameters (LibrarySpec.derive); then dead code removed. Stage
    quantization; compiled.spec changes with the module. Returns how many weights are read in
    int8."""
    assert scheme in QUANTIZE_SCHEMES, scheme
    timings = timings if timings is not None else Timings()
    spec = compiled.spec
    module = compiled.module
    functions = {f.name: f for f in module.functions}
    copies: dict[str, QuantizedWeight] = {}
    entries = []
    with timings.stage("quantization"):
        for entry in spec.entries:
            fn = functions.get(entry.host)
            if entry.kind != "infer" or fn is None or entry.states:
                entries.append(entry)
                continue
            first = len(entry.inputs)
            args = fn.arguments[first : first + len(entry.params)]
            found = quantize_products(fn, dict(zip(args, entry.params)))
            names = tuple(n for q in found for n in q.names())
            entries.append(dataclasses.replace(entry, states=names))
            copies.update((q.int8, q) for q in found)
        if not copies:
            return 0
        taken = {f.name for f in module.functions}
        name = fresh_name("quantize_weights", taken)
        params = [(p.name, TensorType(p.shape, DATA_TYPES[p.dtype])) for p in spec.params]
        module.add_function(weights_function(name, params, list(copies.values())))
        PassManager().run(module, PassManager.resolve(["DCE"]))
    derived = [
        StateSpec(n, q.weight, t.dtype.text, t.shape)
        for q in copies.values()
        for n, t in zip(q.names(), q.types())
    ]
    compiled.spec = dataclasses.replace(
        spec,
        states=(*spec.states, *derived),
        entries=tuple(entries),
        derived=len(derived),
        derive=name,
    )
    return len(copies)


def library_spec(interface: Interface) -> LibrarySpec:
    """The shipped library's description (docs/c-abi.md) from the lowering's interface."""

    def tensor(name: str, ty: Type) -> TensorSpec:
        assert isinstance(ty, TensorType), f"{name} has type {ty}; entries take tensors"
        return TensorSpec(name, ty.dtype.text, tuple(ty.shape))

    params = tuple(tensor(n, t) for n, t in interface.params)
    states: dict[str, StateSpec] = {}
    entries = []
    init = None

    def entry_spec(e: Entry) -> EntrySpec:
        inputs = tuple(tensor(n, t) for n, t in e.inputs)
        state_names = tuple(f"{p}_{s}" for p, s, _ in e.states)
        for (p, _, t), name in zip(e.states, state_names):
            st = tensor(name, t)
            states.setdefault(name, StateSpec(name, p, st.dtype, st.shape))
        outputs = e.outputs
        trains = e.kind in ("train", "apply")
        if trains:
            outputs = outputs[: len(outputs) - len(e.params) - len(e.states)]
        grads, apply = (entry_spec(p) for p in e.parts) if e.parts else (None, None)
        return EntrySpec(
            e.name,
            "train" if trains else "infer" if e.kind == "grads" else e.kind,
            e.name,
            inputs,
            tuple(tensor(n, t) for n, t in outputs),
            tuple(e.params),
            state_names,
            e.step is not None,
            tensor("step", e.step).dtype if e.step is not None else "f32",
            grads,
            apply,
        )

    for e in interface.entries:
        if e.kind == "init":
            init = e.name
        else:
            entries.append(entry_spec(e))
    return LibrarySpec(
        interface.name,
        f"telc {__version__}",
        params,
        tuple(states.values()),
        init,
        tuple(entries),
        buffers=len(interface.buffers),
    )
